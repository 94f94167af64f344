#pragma once
// The contenders built into gpumem_compare: gpumem's resources (linked statically),
// the CUDA driver's own pool (cudaMallocAsync) and plain cudaMalloc as the reference.
// RMM and PyTorch come as plugins (rmm_contenders.cpp, torch/torch_contender.cpp).

#include "contender.hpp"

#include <vector>

namespace gpumem_compare {

/// gpumem pool, gpumem binning, gpumem default chain, cudaMallocAsync, cudaMalloc.
[[nodiscard]] std::vector<contender_kind> builtin_contender_kinds();

/// The name of the reference contender (plain cudaMalloc/cudaFree): slow enough that
/// the scaling and multi-stream measurements leave it out.
inline constexpr char const* reference_contender = "cudaMalloc";

}  // namespace gpumem_compare
