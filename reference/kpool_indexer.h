// Reference of the k-pool indexer of GLM-5.3-Flash (notes/model-ops.md section 1.4, transcribing HF
// Glm5NextTextIndexer with the checkpoint's index_kpool = 4), from the indexer's inputs after its
// projections, written once over a scalar Real and run in the tiers of reference/real/tier.h. Shapes:
//
//   q     [B,H,D]  indexer queries (H = 32, D = 128; no RoPE in GLM-5.3-Flash)
//   w     [B,H]    head weights (f32), used as given
//   k     [L,D]    per-token keys LN(W_k h);  gate [L,D] per-token gates W_g h
//   ape   [4,D]    the pool's learned position embedding (f32)
//   ctx   [B]      row b sees tokens [start_b, ctx_b);  start [B]: its first valid token
//
// Pools: pool p of row b is tokens start_b + 4p .. start_b + 4p + 3, for the P_b = (ctx_b - start_b) / 4
// complete pools; the ragged tail, the last (ctx_b - start_b) mod 4 <= 3 tokens, is never scored.
//
//   alpha_{p,j,c} = softmax_j(gate[start + 4p + j, c] + ape[j, c])   (over the pool's 4 tokens, per channel)
//   pool_key_{p,c} = sum_j alpha_{p,j,c} k[start + 4p + j, c]
//   S_p = sum_h w_h ReLU((q_h . pool_key_p) D^-0.5)
//   indices_b = the 4 tokens of each of the min(topk, P_b) pools of largest S_p, then the tail's
//               tokens; -1 in the remaining slots (4 topk + 3 slots: 2051 at topk = 512)
//
// Production computes the softmax in fp32 with nan_to_num and masks invalid entries (past the
// context, in its padded last pool) with finfo.min rather than -inf; the complete pools scored here
// hold no invalid entry, so the mask never reaches a score (a -inf mask would turn a fully masked
// padded pool into NaN, which is why production avoids it).
//
// Order of the reductions: the softmax per channel with the max subtracted, the sum over j ascending;
// pool_key's sum over j ascending; the dot product over c ascending; the heads h ascending. Tie rule:
// equal pool scores rank the lower pool first (identical pools tie in every arithmetic).
//
// Output: indices [B, 4 topk + 3] exact doubles in that order (slots of candidates in any order; the
// measures in harness/ops/kpool_indexer.h judge the pool set, the tail and the sentinels).
// Cost: per row and pool ~ 4 D exponentials and H (2 D + 2) operations; one sort per row.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

inline constexpr int64_t kKpoolSize = 4;   // index_kpool of the GLM-5.3-Flash checkpoint

struct KpoolIndexerParams {
  int64_t B = 1, L = 8192, H = 32, D = 128, topk = 512;   // topk: pools
  int64_t slots() const { return kKpoolSize * topk + kKpoolSize - 1; }
};

// The tensors of a case, read as doubles (inputs checked finite), for the reference and the measures.
struct KpoolInputs {
  std::vector<double> q, w, k, gate, ape;
  std::vector<int64_t> ctx, start;
};

// Throws InputError on bad parameters, mis-shaped tensors, non-finite inputs, or a row whose range is
// not 0 <= start < ctx <= L.
KpoolInputs kpool_indexer_inputs(const KpoolIndexerParams& p, const Tensor& q, const Tensor& w, const Tensor& k,
                                 const Tensor& gate, const Tensor& ape, const std::vector<int64_t>& ctx,
                                 const std::vector<int64_t>& start);

struct KpoolIndexerReferenceResult {
  std::vector<double> indices;   // [rows, slots]
};
KpoolIndexerReferenceResult kpool_indexer_reference(Tier tier, const KpoolIndexerParams& p, const KpoolInputs& in,
                                                    int64_t rows = -1);

// The scores of pools [0, n) of row 0, rounded to odd with tails, for certification.
void kpool_indexer_pool_scores(Tier tier, const KpoolIndexerParams& p, const KpoolInputs& in, int64_t n,
                               std::vector<double>& y, std::vector<double>& y_tail);

// The constraints every kpool_indexer case satisfies; throws InputError naming the one broken.
void kpool_indexer_check_params(const KpoolIndexerParams& p);

}  // namespace dg
