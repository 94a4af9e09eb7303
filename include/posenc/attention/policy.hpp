#pragma once
/// \file
/// The position-policy interface (attention_shape, policy_base, head_base, the
/// position_bias traits, no_position_policy, materialize_bias / materialize_score). It
/// lives in core/policy.hpp, below the kernels that read it; this header keeps the path
/// that code written for posenc 0.1 includes.

#include "../core/policy.hpp"
