// The register-blocked f32 micro-kernel of the GEMM candidates (candidates/cpu/gemm.cpp,
// candidates/cpu/gemm_fp8_block.cpp): kRows rows x kCols output columns of f32 accumulators over a
// block of weights packed [k][kCols].
#pragma once

#include <cmath>
#include <cstdint>

namespace dg::gemm_cpu {

constexpr int64_t kCols = 32;   // output columns per block: two AVX-512 vectors of f32
constexpr int64_t kRows = 4;    // rows per micro-kernel call: 8 independent FMA chains

// acc[r][l] = sum_{k < K} x[r*ldx + k] wt[k*kCols + l] for R rows, one FMA chain per output in
// increasing k from 0.
template <int R> void micro(const float* x, int64_t ldx, int64_t K, const float* wt, float (&acc)[kRows][kCols]) {
  for (int r = 0; r < R; ++r)
    for (int64_t l = 0; l < kCols; ++l) acc[r][l] = 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float* wk = wt + k * kCols;
    for (int r = 0; r < R; ++r) {
      const float a = x[r * ldx + k];
      for (int64_t l = 0; l < kCols; ++l) acc[r][l] = std::fma(a, wk[l], acc[r][l]);
    }
  }
}

}  // namespace dg::gemm_cpu
