// References of RMSNorm and the fused residual add + RMSNorm (notes/model-ops.md sections 1.2, 1.3
// and 5), written once over a scalar Real and run in the tiers of reference/real/tier.h:
//
//   rmsnorm       per row of D:  y_i = (x_i * r) * w_i,   r = 1 / sqrt(sum_i x_i^2 / D + eps)
//                 sum in increasing i. The input norms, the final norm and, with D = head_dim and
//                 N = tokens x heads, QK-norm (one weight of head_dim shared by every head).
//   add_rmsnorm   production's fused_add_rms_norm: the residual stream first takes the sublayer
//                 output and is ROUNDED to the activation dtype, then normalized:
//                   s_i = round_dtype(x_i + residual_i)            (the new residual, an output)
//                   y_i = (s_i * r) * w_i,   r = 1 / sqrt(sum_i s_i^2 / D + eps)
//                 The rounding is part of the op (the residual stream is stored in that dtype and
//                 the norm squares the stored value), so the reference rounds there too, exactly:
//                 x_i + residual_i is formed in double and rounded once to the dtype. For bf16, f16
//                 and f32 the double sum may itself be rounded, but rounding twice through a format
//                 of 53 >= 2p + 2 bits gives the correctly rounded sum (double rounding is innocuous
//                 for addition then); for f64 the double sum is the dtype's sum.
//
// Shapes: x (and residual) [N,D], weight [D]. eps is 1e-5 for the text norms, 1e-6 elsewhere.
// Outputs are doubles rounded to odd from the tier's value, with optional two-double tails (as
// kda.h), so certification compares tiers below a double's precision.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/dtype.h"
#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct RmsNormParams {
  int64_t N = 1, D = 1;
  double eps = 1e-5;
  DType dtype = DType::bf16;   // add_rmsnorm: the dtype the residual stream is rounded to
};
struct RmsNormReferenceResult {
  std::vector<double> y, y_tail;   // [N,D]; tails: 2 per element
  std::vector<double> residual;    // add_rmsnorm only: [N,D], exact values of the dtype
};

// `residual` null: rmsnorm; otherwise add_rmsnorm. Throws InputError on non-finite inputs,
// mis-shaped tensors, or a residual sum that overflows the dtype.
RmsNormReferenceResult rmsnorm_reference(Tier tier, const RmsNormParams& p, const Tensor& x, const Tensor* residual,
                                         const Tensor& weight, bool tails = false);

}  // namespace dg
