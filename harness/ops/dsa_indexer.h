// dsa_indexer (reference/dsa_indexer.h): a case's parameters and context lengths, the double-precision
// scores the measures read, and the op's measures, for the OpSpec, the regimes, candidates, mutants
// and tests.
//
// The output is a set of key indices per row, so bits are the wrong metric; the measures, per case,
// over its B rows (the per-item rule is harness/ops/topk_set.h's):
//
//   A_s          (H D)^-0.5 sum_h |w_h| sum_d |q_hd k_sd|: the scale of every rounding error in the
//                score of key s
//   t_s          ((D + H + 3) u + 2 u_in) A_s, u the unit roundoff the candidate computes in (its
//                state dtype): D roundings of a dot product, the weight scaling and product, H of the
//                head sum, first order; u_in the unit roundoff of its input dtype when it reads q and k
//                narrower than they are stored (FP8: each product q k off by <= 2 u_in |q k|), else 0
//   misses_wide  keys in the symmetric difference of the candidate's and the reference's sets that
//                no score error within t explains (topk_set.h; limit 0: a bug, never rounding)
//   tie_breaks   rows selecting key j over a visible i < j with a bitwise-identical key row (the tie
//                rule: lower index first; limit 0)
//   invalid_ids  rows whose ids are not distinct integers in [0, ctx_b) followed, in any slots, by
//                exactly topk - min(topk, ctx_b) sentinels -1 (out of range, future keys, duplicates,
//                a sentinel too many or too few; limit 0)
//   score_err    max over the candidate's valid slots of |score - I_s| / A_s, I in double (relative,
//                floor 16 u; limit 2 ((D + H + 3) u + 2 u_in))
//   recall, jaccard   means over the rows of |C n R| / |R| and |C n R| / |C u R| (report only)
//   misses       keys in the symmetric differences, all rows (report only)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "harness/cases/registry.h"
#include "reference/dsa_indexer.h"

namespace dg {

DsaIndexerParams dsa_indexer_params(const Case& c);

// The context length of every row: `lens` when given; in regime `ragged` the cycle L, 1, topk,
// topk + 1, L / 2 + 3, L - 1 (each at most L); else the last B tokens of one prefill of L tokens,
// ctx_b = L - (B - 1 - b) (at least 1).
std::vector<int64_t> dsa_indexer_lens(const Case& c);

// The scores of keys [0, n) of row b in double, in the reference's order, and each key's error scale
// (H D)^-0.5 sum_h |w_h| sum_d |q_hd k_sd| when `scale` is given. q [B,H,D], k [L,D], w [B,H].
std::vector<double> dsa_indexer_scores(const DsaIndexerParams& p, const double* q, const double* k, const double* w,
                                       int64_t b, int64_t n, std::vector<double>* scale = nullptr);

// The op's measures (see above) of a candidate's indices and scores [B,topk] (doubles); u and u_in
// the candidate's unit roundoffs (t_s = ((D + H + 3) u + 2 u_in) A_s).
std::vector<OpMeasure> dsa_indexer_measure(const DsaIndexerParams& p, const std::vector<int64_t>& ctx,
                                           const std::vector<double>& q, const std::vector<double>& k,
                                           const std::vector<double>& w, const std::vector<double>& ref_ids,
                                           const std::vector<double>& ids, const std::vector<double>& scores, double u,
                                           double u_in = 0.0);

// The unit roundoffs of a candidate on a case whose inputs are stored in `stored`: u of its state
// dtype (f32 when not a float), and u_in of its input dtype when narrower than `stored` (else 0).
double indexer_unit_roundoff(const CandidateInfo& cand);
double indexer_input_roundoff(const CandidateInfo& cand, DType stored);

// The indexers' (dsa_indexer, kpool_indexer) case checks, each throwing InputError prefixed by `op`:
// B, L, H, D and topk >= 1; then `lens` (one per row, each in [1, L]) and the products B*H*D and L*D.
void indexer_check_positive(const char* op, const Case& c);
void indexer_check_lens_and_sizes(const char* op, const Case& c);

}  // namespace dg
