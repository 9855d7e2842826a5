// kpool_indexer (reference/kpool_indexer.h): a case's parameters and row ranges, the double-precision
// pool scores the measures read, and the op's measures, for the OpSpec, the regimes, candidates,
// mutants and tests.
//
// The output is a set of token indices per row: whole pools of 4, the ragged tail, -1 sentinels. The
// measures, per case, over its B rows (the per-pool rule is harness/ops/topk_set.h's):
//
//   A_p          D^-0.5 sum_h |w_h| sum_c |q_hc| sum_j alpha_jc |k_jc|: the scale of every rounding
//                error in pool p's score
//   t_p          (D + H + 24) u A_p, u the unit roundoff of the candidate's state dtype (every
//                candidate reads the inputs at their stored precision; a narrower read of the gate
//                would move alpha by an absolute error this relative bound does not hold):
//                the dot product, head sum and scaling (D + H + 2) and the softmax and pooling of a
//                channel (about 20 roundings: an add, a subtract, exp, the sum, a divide, 4 products)
//   misses_wide  pools in the symmetric difference of the candidate's and the reference's pool sets
//                that no score error within t explains (limit 0)
//   tie_breaks   rows selecting pool j over pool i < j whose 4 tokens' k and gate rows are identical
//                (the tie rule: lower pool first; limit 0)
//   invalid_ids  rows whose ids are not: distinct tokens in [start, ctx), whole pools of 4, every
//                token of the ragged tail, and -1 in the remaining slots (limit 0)
//   recall, jaccard   means over the rows of the pool sets' |C n R| / |R| and |C n R| / |C u R|
//   misses       pools in the symmetric differences, all rows (report only)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "harness/cases/registry.h"
#include "reference/kpool_indexer.h"

namespace dg {

KpoolIndexerParams kpool_indexer_params(const Case& c);

// Each row's [start, ctx): `lens` when given (start 0); in regime `ragged` ctx cycles L, 2051, 2054,
// 2053 + 2 topk, 9, L - 3 and start 0, 1, 2, 3, 6, 0 (clipped into the cache; at L = 8192, topk = 512:
// tails 0, 2, 0, 2, 3, 1 and 2048, 512, 513, 768, 0, 2047 pools); else the last B tokens of one prefill
// of L, ctx_b = L - (B - 1 - b), start 0.
void kpool_indexer_ranges(const Case& c, std::vector<int64_t>& ctx, std::vector<int64_t>& start);

// The scores of row b's P complete pools in double, in the reference's order, and each pool's error
// scale A_p when `scale` is given.
std::vector<double> kpool_indexer_scores(const KpoolIndexerParams& p, const KpoolInputs& in, int64_t b,
                                         std::vector<double>* scale = nullptr);

// The op's measures (see above) of a candidate's indices [B, slots] (doubles); u its unit roundoff term.
std::vector<OpMeasure> kpool_indexer_measure(const KpoolIndexerParams& p, const KpoolInputs& in,
                                             const std::vector<double>& ref_ids, const std::vector<double>& ids, double u);

}  // namespace dg
