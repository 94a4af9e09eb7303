#pragma once
/// \file
/// The attention module: the reference scaled dot-product attention kernel, masks,
/// multi-head / grouped-query attention over strided views, the KV cache, the backward
/// pass, the position-policy interface, and the policies posenc ships for it
/// (ALiBi, T5 relative bias, rotary and absolute encodings applied inside the call).
/// See docs/attention.md.

#include "attention/absolute_policy.hpp"
#include "attention/attention.hpp"
#include "attention/backward.hpp"
#include "attention/kv_cache.hpp"
#include "attention/merge.hpp"
#include "attention/multi_head.hpp"
#include "attention/rotary_policy.hpp"
#include "core/attention_config.hpp"
#include "core/policy.hpp"
#include "encoding/alibi.hpp"
#include "encoding/t5_bias.hpp"
