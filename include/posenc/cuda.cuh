#pragma once
/// \file
/// The CUDA backend in one include, for translation units compiled by nvcc (with the CPU
/// classes it specialises; add <posenc/posenc.hpp> for the rest). The tag
/// posenc::backend::cuda selects the device
/// specialisations of the CPU classes; their views hold device pointers and every entry
/// point takes a trailing cudaStream_t. See docs/backends.md.
///
///     #include <posenc/cuda.cuh>
///     posenc::rotary_embedding<float, posenc::backend::cuda> rope(config, seq_len);
///     rope.apply_qk(posenc::view_bshd(q, B, L, Hq, D), posenc::view_bshd(k, B, L, Hk, D), 0);
///     posenc::cuda::flash_multi_head_attention(q_view, k_view, v_view, out_view, config);

#if !defined(__CUDACC__)
#error "<posenc/cuda.cuh>: compile this translation unit with nvcc (the CUDA backend)"
#endif

#include "attention/cuda/flash.cuh"
#include "backend/cuda/runtime.cuh"
#include "encoding/cuda/bias.cuh"
#include "encoding/cuda/learned.cuh"
#include "encoding/cuda/rotary.cuh"
#include "encoding/cuda/sinusoidal.cuh"
