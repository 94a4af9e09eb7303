#pragma once
/// \file
/// Attention masks and the per-call semantics (attention_mask, bool_mask,
/// attention_config). They live in core/attention_config.hpp, below the kernels that read
/// them; this header keeps the path that code written for posenc 0.1 includes.

#include "../core/attention_config.hpp"
