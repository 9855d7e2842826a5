// Reference of the MoE router of DeepSeek-V3, GLM-4.5 ... GLM-5.3-Flash and Kimi Linear (notes/model-ops.md
// sections 1.7 and 5), written once over a scalar Real and run in the tiers of reference/real/tier.h.
// Per token t of logits z [T,E] (the router GEMM's fp32 output) with the fp32 correction bias b [E]:
//
//   s_e   = sigmoid(z_e)                                   the unbiased scores
//   sel_e = s_e + b_e                                      the selection scores (the bias selects only)
//   G     = E / n_group experts per group; group score of g = the sum of its two largest sel
//           (DeepSeek-V3's noaux_tc); with n_group = 1 the group step keeps everything
//   kept  = the topk_group groups of largest group score; experts of the other groups are never
//           selected (production's -inf mask)
//   ids   = the k experts of the kept groups of largest sel
//   w_j   = s_{ids_j}  (the UNBIASED score);  renorm: w_j <- w_j / (sum_j w_j + 1e-20),
//           the sum over the k slots in slot order;  then w_j <- w_j * rsf
//
// Tie rule (the op's definition where scores are exactly equal): among equal selection scores the
// lower expert index ranks first, among equal group scores the lower group index. Every comparison
// is made in the tier's arithmetic; inputs that tie exactly (the same logit and bias) tie in every
// tier, so the rule decides them the same way everywhere.
//
// Output order: slot j holds the expert of rank j (largest sel first, the tie rule between equals);
// ids are exact doubles, weights doubles rounded to odd from the tier's value, with optional
// two-double tails for certification. Candidates may order their k slots freely (production calls
// torch.topk(sorted=False)); the op's measures match slots by expert id (harness/ops/moe_router.h).
// Cost: O(T * E * k) comparisons, O(T * E) sigmoids.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct MoeRouterParams {
  int64_t T = 1, E = 256, k = 8, n_group = 1, topk_group = 1;
  bool renorm = true;
  double rsf = 1.0;   // routed_scaling_factor
};
inline constexpr double kMoeRouterRenormEps = 1e-20;

struct MoeRouterReferenceResult {
  std::vector<double> ids;                  // [T,k] expert ids in rank order
  std::vector<double> weights, weights_tail;   // [T,k] slot j the weight of ids[j]; tails: 2 per element
};

// Throws InputError on bad parameters (names the constraint), mis-shaped tensors or non-finite inputs.
MoeRouterReferenceResult moe_router_reference(Tier tier, const MoeRouterParams& p, const Tensor& logits,
                                              const Tensor& bias, bool tails = false);

// The constraints every moe_router case satisfies; throws InputError naming the one broken.
void moe_router_check_params(const MoeRouterParams& p);

}  // namespace dg
