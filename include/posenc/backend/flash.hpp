#pragma once
/// \file
/// The tiled attention kernels of every backend, from one include: begin_block,
/// accumulate and finish_block of the portable kernel (backend/scalar/flash.hpp, Eigen
/// GEMMs, every tag and call) and of the lane kernel (backend/simd/flash.hpp, float
/// packets, the calls it takes), with the shared vocabulary of both (head contexts, key
/// and value blocks, workspaces).

#include "flash_sources.hpp"
#include "scalar/flash.hpp"
#include "simd/flash.hpp"
