// sampler (reference/sampler.h): a case's parameters, the decision analysis of a row, and the op's
// measures, for the OpSpec, the regimes, candidates, mutants and tests.
//
// The output is one token id per row, so bits are the wrong metric: the measures compare tokens, and
// tell a legitimate rounding flip from a bug by the reference's decision margin. The analysis of a
// row reads the stored inputs in double (s_i = fl32(l_i / fl32(T)), x_i = s_i - max s, E_i = -log u_i)
// and sorts every token into kept, dropped or undecided, where an f32 kernel may legitimately decide
// either way:
//
//   min-p     undecided when |x_i - log min_p| <= 16 u (4 + |x_i|) (p_i / max p against min_p in f32)
//   top-k     decided exactly on the f32 values s (every honest kernel holds the same s)
//   top-p     run on the min-p-sure set and again with the min-p-undecided tokens kept; a token is
//             undecided when the two runs disagree, when its cumsum lies within tol_p = (3 n + 16) u of
//             1 - top_p (n the tokens summed: a sequential f32 softmax and cumsum err by less), or when
//             it belongs to a group of equal s straddling the cut (the tie rule, reference/sampler.h)
//   race      r_i = x_i - log E_i (log of p_i / E_i up to the common log Z)
//
//   margin of a row     r_w - max r_j over the other kept or undecided tokens j (w: the reference's
//                       token), 0 when w itself is undecided, +inf when no other token can win;
//                       greedy rows (T < 1e-5) are decided exactly (argmax of the stored logits, lower
//                       index on ties): margin +inf
//   wide                every rival j trails by more than 16 u (4 + |x_w| + |x_j| + |log E_w| + |log E_j|)
//                       (the f32 errors of exp(x), -log(u) and the division), and w is not undecided
//   flips_wide          rows whose token differs from the reference's although the row is wide (limit 0)
//   invalid_ids         rows whose token is not an integer in [0, V), or (sampling rows) a token dropped
//                       for sure by the filters (limit 0)
//   token_agreement     fraction of rows with the reference's token (report only)
//   flip_rate.margin<2^-20, <2^-16, <2^-12, >=2^-12
//                       fraction of the rows of each margin bucket whose token differs (report only)
// u is the unit roundoff of f32 (2^-24): the sampler runs in f32 whatever the logits' dtype.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "harness/cases/case.h"
#include "harness/cases/registry.h"
#include "reference/sampler.h"

namespace dg {

SamplerParams sampler_params(const Case& c);

// Rows per group of identical logits (the case's `draws`, 1: every row its own): B is a multiple of
// it, and rows [g draws, (g + 1) draws) hold the same logits with their own uniforms.
int64_t sampler_draws(const Case& c);

enum class SamplerStatus : uint8_t { dropped, kept, undecided };

// One row's analysis (see the head comment) for the reference's token w.
struct SamplerRow {
  std::vector<SamplerStatus> status;    // [V] (greedy rows: every token kept)
  double margin = std::numeric_limits<double>::infinity();
  bool wide = true;
  int64_t undecided = 0;                // tokens the filters leave undecided
};
SamplerRow sampler_analyze(const SamplerParams& p, const double* logits, const double* uniforms, int64_t w);

struct SamplerMeasures {
  int64_t rows = 0, agree = 0, flips = 0, flips_wide = 0, invalid_ids = 0, undecided_rows = 0;
  double widest_flip_margin = 0;
  static constexpr int kBuckets = 4;  // margin < 2^-20, < 2^-16, < 2^-12, >= 2^-12
  int64_t bucket_rows[kBuckets] = {}, bucket_flips[kBuckets] = {};
  static const char* bucket_name(int i);
};
// The analyses of every row [B] for the reference's tokens ref_ids [B]; logits and uniforms [B,V].
std::vector<SamplerRow> sampler_analyze_rows(const SamplerParams& p, const std::vector<double>& logits,
                                             const std::vector<double>& uniforms, const std::vector<double>& ref_ids);
SamplerMeasures sampler_measure(const SamplerParams& p, const std::vector<SamplerRow>& rows,
                                const std::vector<double>& ref_ids, const std::vector<double>& ids);
inline SamplerMeasures sampler_measure(const SamplerParams& p, const std::vector<double>& logits,
                                       const std::vector<double>& uniforms, const std::vector<double>& ref_ids,
                                       const std::vector<double>& ids) {
  return sampler_measure(p, sampler_analyze_rows(p, logits, uniforms, ref_ids), ref_ids, ids);
}

// Distribution test for a sampler that draws differently from the race (sort-free rejection sampling,
// as FlashInfer's): the same seed gives other tokens, so tokens cannot be compared; their histogram
// over N draws of one row is compared with the reference's probabilities p (sampler_probabilities) by
// the total-variation distance TV = 1/2 sum_i |n_i / N - p_i|. One draw moves TV by at most 1/N, so
// (McDiarmid) P(TV - E TV >= t) <= exp(-2 N t^2), and E TV <= 1/2 sum_i sqrt(p_i / N) <= 1/2 sqrt(K / N)
// over a support of K tokens. The plan:
//   threshold  tau = 1/2 sqrt(K / N) + sqrt(ln(100) / (2 N)): an honest sampler exceeds it with
//              probability < 1% (false alarm)
//   power      a sampler whose distribution q is at TV(p, q) >= delta has an empirical TV against p
//              of at least delta - TV(q_N, q) >= delta - 1/2 sqrt(K / N) - sqrt(ln(20) / (2 N)) with
//              probability >= 95%, which exceeds tau when
//              N >= ((sqrt(K) + sqrt(ln(100) / 2) + sqrt(ln(20) / 2)) / delta)^2
// e.g. K = 50 kept tokens and delta = 0.05: N = 38.5K draws, tau = 0.026.
struct SamplerTvPlan {
  int64_t draws = 0;
  double threshold = 0;
};
SamplerTvPlan sampler_tv_plan(int64_t support, double distortion);

// The same test at a given number of draws N (the case's `draws`): a row's histogram `counts` [V]
// against its probabilities `probs` [V] over a support of K tokens (the row's kept and undecided
// tokens: an honest sampler and any sampler with no invalid id draw inside it), at a false-alarm rate
// alpha (the case's rows tested together share it: alpha / groups each):
//   threshold   tau = 1/2 sqrt(K / N) + sqrt(ln(1 / alpha) / (2 N))
//   detectable  tau + 1/2 sqrt(K / N) + sqrt(ln(20) / (2 N)): a sampler at TV >= it from p exceeds
//               tau with probability >= 95% (the power)
struct SamplerTvTest {
  double tv = 0, threshold = 0, detectable = 0;
  int64_t draws = 0, support = 0;
};
SamplerTvTest sampler_tv_test(const std::vector<double>& probs, const std::vector<int64_t>& counts, int64_t support,
                              double false_alarm);

// Whether a candidate draws its tokens differently from the op's race (CandidateInfo::judged_by ==
// "distribution": rejection sampling, an inverse CDF): the same uniforms give it other tokens, so the
// op judges the distribution of its tokens over each group of `draws` rows with the same logits
// (measure "distribution_tv": max over the groups of TV / tau, limit 1) and that it draws no token the
// filters drop for sure (invalid_ids), never token by token. On a case with draws = 1 nothing of the
// distribution can be judged: its distribution_tv is reported as NaN with no limit (`verify` and `gate`
// then judge it by invalid_ids alone; the suites with draws > 1 judge its distribution).
bool sampler_judged_by_distribution(const CandidateInfo& info);
// TV between the histogram `counts` [V] (of sum N) and `probs` [V].
double sampler_tv(const std::vector<double>& probs, const std::vector<int64_t>& counts);

}  // namespace dg
