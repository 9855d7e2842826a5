// Reference of gemm_fp8_block, the FP8 linear layers of DeepSeek-V3-style checkpoints (GLM-4.5-FP8,
// GLM-5.3-Flash-FP8; notes/model-ops.md sections 2 and 5): e4m3 operands with block scales stored as
// multipliers (the checkpoints' `weight_scale_inv`), 128 x 128 blocks for the weight [N,K] and 1 x 128
// blocks for the activations [M,K] (quantized per token and 128 channels at run time):
//   p[m][n][b] = sum_{k in [128b, 128b+128)} x[m][k] w[n][k]                    (block b's partial)
//   y[m][n]    = sum_b p[m][n][b] * x_scale[m][b] * w_scale[n/128][b]            in increasing b
// Shapes: x [M,K] e4m3, x_scale [M,K/128] f32, w [N,K] e4m3, w_scale [ceil(N/128),K/128] f32, y [M,N].
// K is a multiple of 128 (every production kernel, DeepGEMM's included, requires it); N is any
// length (the last weight-scale row covers a partial block).
//
// The partials are exact in a double in every tier: an e4m3 value is a multiple of 2^-9 of magnitude
// at most 448, so a product is a multiple of 2^-18 below 2^17.7 and a sum of 128 of them is a
// multiple of 2^-18 below 2^24.7: 43 bits. The partial is therefore summed in plain double (8 lanes,
// exact in any order) and the tiers differ only in the sum over blocks: the f64 tier by Dot2
// (reference/real/f64.h) on the exact terms p and x_scale * w_scale (a product of two f32, exact in
// a double), dd and MPFR at their precision (p * x_scale * w_scale exact at 106 bits). Outputs are
// doubles rounded to odd from the tier's value, with optional two-double tails for certification.
// Work is split over the output columns with parallel_for; each output's sums run in one thread in
// the stated order, so results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

constexpr int64_t kFp8Block = 128;   // the scale blocks' side: 1 x 128 for x, 128 x 128 for w

struct GemmFp8BlockParams {
  int64_t M = 1, N = 1, K = kFp8Block;
  int64_t kb() const { return K / kFp8Block; }                       // scale blocks along K
  int64_t nb() const { return (N + kFp8Block - 1) / kFp8Block; }     // weight-scale rows
};
struct GemmFp8BlockReferenceResult {
  std::vector<double> y, y_tail;   // [M,N]; tails: 2 per element
};

// x and w must be e4m3 tensors, the scales finite. Throws InputError on a bad shape, dtype or value.
GemmFp8BlockReferenceResult gemm_fp8_block_reference(Tier tier, const GemmFp8BlockParams& p, const Tensor& x,
                                                     const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
                                                     bool tails = false);

// One block's partial sum_{k < 128} x[k] w[k] of e4m3 values held in doubles, and (abs = true) the
// sum of |x[k] w[k]| that the op's error bound needs (harness/ops/gemm_fp8_block.cpp). 8 lanes, exact.
template <bool abs = false> inline double fp8_block_partial(const double* x, const double* w) {
  double lane[8] = {};
  for (int64_t k = 0; k < kFp8Block; k += 8)
    for (int64_t l = 0; l < 8; ++l) {
      const double t = x[k + l] * w[k + l];
      lane[l] += abs ? (t < 0 ? -t : t) : t;
    }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace dg
