// Reference of causal_conv1d, the short convolution before q, k, v in the Kimi Linear / GLM-5.3-Flash
// KDA layer (notes/model-ops.md section 1.5; FLA ShortConvolution), written once over a scalar Real
// and run in the tiers of reference/real/tier.h: depthwise, causal, width W (4 in production), no
// bias, then SiLU. Per channel d, with the history h = [state0[d][0 .. W-2], x_0[d], x_1[d], ...]
// (state0 oldest first; zeros when absent):
//   y_t[d] = silu(sum_{w=0}^{W-1} weight[d][w] h[t + w])      w increasing
//   silu(z) = z * sigmoid(z)
// and the final state is the last W-1 entries of h (the inputs, copied exactly).
// Shapes: x [B,T,D], weight [D,W], state0 / state [B,D,W-1].
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

}  // namespace dg
