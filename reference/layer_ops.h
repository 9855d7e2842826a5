// References of the small ops around KDA in the Kimi Linear / GLM-5.3-Flash layer (notes/model-ops.md
// section 1.5), written once over a scalar Real and run in the tiers of reference/real/tier.h:
//
//   causal_conv1d   the short convolution before q, k, v (FLA ShortConvolution): depthwise, causal,
//                   width W (4 in production), no bias, then SiLU. Per channel d, with the history
//                   h = [state0[d][0 .. W-2], x_0[d], x_1[d], ...] (state0 oldest first; zeros when
//                   absent):
//                     y_t[d] = silu(sum_{w=0}^{W-1} weight[d][w] h[t + w])      w increasing
//                     silu(z) = z * sigmoid(z)
//                   and the final state is the last W-1 entries of h (the inputs, copied exactly).
//                   Shapes: x [B,T,D], weight [D,W], state0 / state [B,D,W-1].
//   rmsnorm_gated   the output norm (FLA FusedRMSNormGated, activation sigmoid), per row of D:
//                     y_i = (x_i * r) * w_i * sigmoid(g_i),   r = 1 / sqrt(sum_i x_i^2 / D + eps)
//                   sum in increasing i; eps 1e-5 in production. Shapes: x, g [N,D], w [D].
//
// Outputs are doubles rounded to odd from the tier's value, with optional two-double tails (as
// kda.h), so certification compares tiers below a double's precision.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct ConvParams {
  int64_t B = 1, T = 1, D = 1, W = 4;
  bool silu = true;
};
struct ConvReferenceResult {
  std::vector<double> y, state;           // [B,T,D], [B,D,W-1]
  std::vector<double> y_tail, state_tail; // with tails: 2 per element
};
// state0 may be null (zeros). Throws InputError on NaN/Inf inputs or mis-shaped tensors.
ConvReferenceResult causal_conv1d_reference(Tier tier, const ConvParams& p, const Tensor& x, const Tensor& weight,
                                            const Tensor* state0, bool tails = false);

struct NormParams {
  int64_t N = 1, D = 1;
  double eps = 1e-5;
};
struct NormReferenceResult {
  std::vector<double> y, y_tail;
};
// x and g are read as doubles: pass f64 tensors to feed values beyond a stored dtype (the fused
// decode reference passes the KDA reference's output this way).
NormReferenceResult rmsnorm_gated_reference(Tier tier, const NormParams& p, const Tensor& x, const Tensor& g,
                                            const Tensor& weight, bool tails = false);

}  // namespace dg
