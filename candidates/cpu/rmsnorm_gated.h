// What the CPU candidate of rmsnorm_gated (rmsnorm_gated.cpp) shares with the fused decode layer's
// (kda_decode_fused.cpp): the gated norm of f32 rows.
#pragma once

#include <cstdint>

namespace dg::rmsnorm_gated_cpu {

// rows [0, N) of x, g -> y
void gated_norm_rows(const float* x, const float* g, const float* w, int64_t N, int64_t D, float eps, float* y);

}  // namespace dg::rmsnorm_gated_cpu
