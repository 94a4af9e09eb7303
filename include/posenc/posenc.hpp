#pragma once
/// \file
/// posenc: transformer positional encodings and self-attention on Eigen.
/// The umbrella header: includes every public module.

// The shared vocabulary: configuration, types, views, errors, backend tags, the policy
// interface (docs/architecture.md).
#include "config.hpp"
#include "core/attention_config.hpp"
#include "core/backend.hpp"
#include "core/cpu.hpp"
#include "core/error.hpp"
#include "core/policy.hpp"
#include "core/random.hpp"
#include "core/thread_pool.hpp"
#include "core/types.hpp"
#include "core/view.hpp"
#include "version.hpp"

// File formats.
#include "io/gguf.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "io/tensor.hpp"

// Encodings.
#include "encoding/embedding.hpp"
#include "encoding/learned.hpp"
#include "encoding/properties.hpp"
#include "encoding/rotary.hpp"
#include "encoding/rotary/model_config.hpp"
#include "encoding/shaw.hpp"
#include "encoding/sinusoidal.hpp"
#include "encoding/transformer_xl.hpp"

// Attention (the reference and tiled kernels' entry points, KV cache, backward, and the
// ALiBi/T5/rotary/absolute policies).
#include "attention.hpp"
#include "attention/flash.hpp"
