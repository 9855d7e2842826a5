// Reference of mhc, GLM-5.3-Flash's manifold-constrained hyper-connection mix at one site (attention
// or FFN; notes/model-ops.md sections 1.6 and 5), written once over a scalar Real and run in the
// tiers of reference/real/tier.h. The residual is n = 4 streams X [T,4,H]; per token t, with the
// streams flattened to x_i, i = j H + h over 4H dims:
//   r      = 1 / sqrt(sum_i x_i^2 / (4H) + 1e-5)                 unweighted RMSNorm, eps inside the root
//   a_m    = (sum_i F[m,i] x_i) r,   m = 0 .. 23                 = F f with f = x r (24 = 4 | 4 | 16)
//   pre_j  = sigmoid(a_j s0 + b_j) + 1e-6
//   post_k = 2 sigmoid(a_{4+k} s1 + b_{4+k})
//   C[j,k] = softmax_k(a_{8+4j+k} s2 + b_{8+4j+k}) + 1e-6        (max subtracted first)
//   C     /= (column sums + 1e-6);  then iters - 1 times: C /= (row sums + 1e-6), C /= (column sums + 1e-6)
//   x_in_h   = sum_j pre_j X_j,h                                  the sublayer input
//   X'_k,h   = bf(post_k) Fo_h + sum_j bf(C[j,k]) X_j,h           the new streams: C applied TRANSPOSED
// with F [24,4H], s = (s0, s1, s2) and b [24] the site's f32 parameters and Fo [T,H] the sublayer's
// output (an input here: the op does not run the sublayer). Every sum runs in increasing index
// order (i; m; k along a row; j down a column; j in the mixes, after the post term); a row or column
// is divided by its sum + 1e-6 after that sum is complete. iters = 20 in the model (1 column
// normalization + 19 row+column passes).
//
// bf(v) is the cast of post and C to the streams' dtype before the mix (bf16 in production) that
// the model's definition performs (its kernels hand the mix bf16 coefficients): the reference does
// it too, exactly, as round-to-nearest-even of the tier's value (rounded to odd into a double, then
// one RNE: correct for any format of at most 51 bits). Everything else is in the tier. Outputs are
// doubles rounded to odd, with optional two-double tails for certification; C is reported before
// the cast (its doubly-stochastic residual is the op's measure).
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/dtype.h"
#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

inline constexpr int64_t kMhcStreams = 4;      // n, the hyper-connection's expansion rate
inline constexpr int64_t kMhcMaps = 24;        // 4 pre | 4 post | 16 comb
inline constexpr double kMhcNormEps = 1e-5;    // the RMSNorm's, inside the square root
inline constexpr double kMhcEps = 1e-6;        // hc_eps: pre, C, and every Sinkhorn denominator

struct MhcParams {
  int64_t T = 1, H = 1, iters = 20;
  DType dtype = DType::bf16;   // the streams' dtype, to which post and C are cast before the mix
};
struct MhcReferenceResult {
  std::vector<double> x_in, x_in_tail;     // [T,H]; tails: 2 per element
  std::vector<double> x_out, x_out_tail;   // [T,4,H]
  std::vector<double> C, C_tail;           // [T,4,4], before the cast
};

// x [T,4,H], f_out [T,H], phi [24,4H], scale [3], bias [24]. Throws InputError on non-finite
// inputs, mis-shaped tensors or bad parameters (H < 1, iters < 1).
MhcReferenceResult mhc_reference(Tier tier, const MhcParams& p, const Tensor& x, const Tensor& f_out, const Tensor& phi,
                                 const Tensor& scale, const Tensor& bias, bool tails = false);

}  // namespace dg
