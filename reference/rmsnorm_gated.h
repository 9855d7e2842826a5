// Reference of rmsnorm_gated, the output norm of the Kimi Linear / GLM-5.3-Flash KDA layer
// (notes/model-ops.md section 1.5; FLA FusedRMSNormGated, activation sigmoid), written once over a
// scalar Real and run in the tiers of reference/real/tier.h. Per row of D:
//   y_i = (x_i * r) * w_i * sigmoid(g_i),   r = 1 / sqrt(sum_i x_i^2 / D + eps)
// sum in increasing i; eps 1e-5 in production. Shapes: x, g [N,D], w [D].
//
// Outputs are doubles rounded to odd from the tier's value, with optional two-double tails (as
// kda.h), so certification compares tiers below a double's precision.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

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
