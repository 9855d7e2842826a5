// What the CPU candidate of causal_conv1d (causal_conv1d.cpp) shares with the fused decode layer's
// (kda_decode_fused.cpp): one output of the width-W conv, and SiLU, in f32.
#pragma once

#include <cmath>
#include <cstdint>

namespace dg::causal_conv1d_cpu {

inline float silu(float z) { return z / (1.0f + std::exp(-z)); }

// One conv output from a history row h[0 .. W-1] (oldest first) and the channel's W weights.
inline float conv_tap(const float* w, const float* h, int64_t W) {
  float z = 0.0f;
  for (int64_t k = 0; k < W; ++k) z = std::fma(w[k], h[k], z);
  return z;
}

}  // namespace dg::causal_conv1d_cpu
