// Reference of the DSA lightning indexer (DeepSeek-V3.2, GLM-5.x; notes/model-ops.md sections 1.4,
// 5 and 6), from the indexer's inputs after its projections, written once over a scalar Real and
// run in the tiers of reference/real/tier.h. Shapes:
//
//   q    [B,H,D]  the indexer queries of B rows (prefill tokens or decode sequences), H = 32, D = 128,
//                 after RoPE (upstream of this op)
//   k    [L,D]    the indexer key cache (LayerNormed, RoPE'd upstream), shared by the rows
//   w    [B,H]    the weights projection's raw output W_w h (f32); the op scales it by
//                 (H D)^-0.5 (= 1/64 exactly at 32 x 128), as vLLM's weights * n_heads^-0.5 * softmax_scale
//   ctx  [B]      row b sees keys [0, ctx_b) (its causal context, the token itself included)
//
//   I_{b,s} = sum_h (w_{b,h} (H D)^-0.5) ReLU(sum_d q_{b,h,d} k_{s,d}),   s < ctx_b
//   indices_b = the min(topk, ctx_b) keys of largest I_{b,s}; slots beyond: -1
//
// Order of the reductions: the dot product over d ascending, then the heads h ascending; the scaled
// weight w (H D)^-0.5 is formed first. Tie rule (the op's definition where scores are exactly equal):
// the lower key index ranks first, as a stable sort by decreasing score does. Scores that tie are
// in practice identical key rows, which tie in every tier and every arithmetic.
//
// Outputs: indices [B,topk] slot j the key of rank j (exact doubles), -1 in slots >= min(topk,
// ctx_b); scores [B,topk] slot j the score of indices[j] rounded to odd (0 where the index is -1),
// with optional two-double tails. Candidates may order their slots freely (the op's measures in
// harness/ops/dsa_indexer.h judge sets). Cost: B * L * H * (2 D + 2) operations and one sort per row.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct DsaIndexerParams {
  int64_t B = 1, L = 4096, H = 32, D = 128, topk = 2048;
};

struct DsaIndexerReferenceResult {
  std::vector<double> indices;                  // [rows,topk]
  std::vector<double> scores, scores_tail;      // [rows,topk]; tails: 2 per element
};

// The reference of rows [0, rows) (rows < 0: all B). Throws InputError on bad parameters, mis-shaped
// tensors, non-finite inputs or a context outside [0, L].
DsaIndexerReferenceResult dsa_indexer_reference(Tier tier, const DsaIndexerParams& p, const Tensor& q,
                                                const Tensor& k, const Tensor& w, const std::vector<int64_t>& ctx,
                                                bool tails = false, int64_t rows = -1);

// The scores of keys [0, n) of row 0 (n <= L), rounded to odd with tails, for certification.
void dsa_indexer_row_scores(Tier tier, const DsaIndexerParams& p, const Tensor& q, const Tensor& k, const Tensor& w,
                            int64_t n, std::vector<double>& y, std::vector<double>& y_tail);

// The constraints every dsa_indexer case satisfies; throws InputError naming the one broken.
void dsa_indexer_check_params(const DsaIndexerParams& p);

}  // namespace dg
