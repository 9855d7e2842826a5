// Reference of moe_combine, the last step of an MoE layer (notes/model-ops.md sections 1.7, 2 and 5):
// the routed experts' outputs weighted by the router's top-k weights, times the routed scaling
// factor rsf, plus the shared expert's output. Written once over a scalar Real and run in the tiers
// of reference/real/tier.h. Per token t and channel h, with rsf as the kernels hold it (rounded to
// f32, as PyTorch multiplies an f32 tensor by a Python float):
//   rsf_on = weights:  a_j = fl32(rsf * w[t][j])    the router scales its f32 weights (DeepSeek-V3,
//                      y = sum_j a_j E[t][j][h] + S[t][h]       GLM: topk_weights *= rsf, stored f32)
//   rsf_on = output:   y = rsf * sum_j w[t][j] E[t][j][h] + S[t][h]     (applied to the routed sum)
// j in increasing slot order; S = 0 without the shared expert. The fl32 of the first form is the one
// rounding inside the op's definition (a stored f32 tensor); everything else is exact up to the
// tier, and the output is rounded once: production's fused combine (vLLM's moe_sum and the fused
// MoE kernels' epilogue) accumulates in f32 and rounds once to the activation dtype.
// Shapes: expert_out [T,k,H], weights [T,k] f32, shared [T,H], y [T,H]. Every product a_j E is
// exact in dd and MPFR (at most 48 + 53 bits); the f64 tier sums by Dot2 (reference/real/f64.h) on
// the exact double products' factors (rsf * w is exact in a double), the shared term by one more
// TwoSum step. Outputs are doubles rounded to odd, with optional two-double tails for certification.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct MoeCombineParams {
  int64_t T = 1, k = 8, H = 1;
  double rsf = 1.0;
  bool rsf_on_output = false;   // false: rsf scales the weights (rounded to f32); true: the routed sum
  bool shared = true;
};
struct MoeCombineReferenceResult {
  std::vector<double> y, y_tail;   // [T,H]; tails: 2 per element
};

// The slot factors a_j of token t's row of weights (k values): fl32(fl32(rsf) w_j) when rsf scales
// the weights, fl32(rsf) w_j (exact in a double) when it scales the routed sum.
std::vector<double> moe_combine_factors(const MoeCombineParams& p, const double* w);

// `shared` null when p.shared is false. Throws InputError on non-finite inputs or a mis-shaped tensor.
MoeCombineReferenceResult moe_combine_reference(Tier tier, const MoeCombineParams& p, const Tensor& expert_out,
                                                const Tensor& weights, const Tensor* shared, bool tails = false);

}  // namespace dg
