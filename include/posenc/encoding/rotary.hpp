#pragma once
/// \file
/// Rotary position embeddings (RoPE): the module header.
///
/// - rotary/frequencies.hpp  pairings and the effective frequencies (the contract)
/// - rotary/scaling.hpp      rope_config: every long-context scaling, validation
/// - rotary/hf_config.hpp    rope_config from Hugging Face config.json / GGUF parameters
/// - rotary/cache.hpp        cos/sin rows, precision modes, the grow-on-demand cache
/// - rotary/rotary.hpp       rotary_embedding: apply to q/k, one head to batched views
/// - rotary/convert.hpp      checkpoint conversion between half and interleaved pairing
/// - rotary/multi_axis.hpp   M-RoPE (Qwen2-VL) and 2D axial RoPE
///
/// See docs/rotary.md and docs/rope-scaling.md.

#include "rotary/cache.hpp"
#include "rotary/convert.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/multi_axis.hpp"
#include "rotary/rotary.hpp"
#include "rotary/scaling.hpp"
