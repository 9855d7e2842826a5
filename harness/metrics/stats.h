// Speedup statistics for timing samples: robust summaries, confidence intervals on the speedup
// ratio, the Mann-Whitney U test, the FASTER / SAME / SLOWER / AMBIGUOUS verdict and the adaptive
// stopping rule. Every function is deterministic: the bootstrap draws from a counter-based RNG
// (Philox4x32-10) keyed by an explicit seed, so the same samples and seed give the same interval on
// any machine and any thread count.
//
// Conventions:
//   - samples are times (seconds per call, or any positive unit), one value per repetition;
//   - `base` is the reference candidate, `patch` the one under test;
//   - a speedup ratio is time(base) / time(patch): above 1 means the patch is faster.
// Inputs must be non-empty; the ratio functions also need positive, finite times. Bad input throws
// std::invalid_argument naming the problem.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace dg {

// --- summaries ---------------------------------------------------------------------------------

double median(std::span<const double> x);

// Quantile q in [0, 1] by linear interpolation between order statistics (Hyndman and Fan's type 7,
// the default of R and NumPy): with x sorted and h = (n - 1) q,
//   quantile = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]).
double quantile(std::span<const double> x, double q);
std::vector<double> quantiles(std::span<const double> x, std::span<const double> qs);

// Median absolute deviation from the median, unscaled: median |x_i - median(x)|.
double mad(std::span<const double> x);

// Relative noise, the harness's one noise figure: 1.4826 MAD / median. The factor makes it a robust
// estimate of the coefficient of variation (stdev / mean) for normal data, so it reads like
// nvbench's "Noise" and Google Benchmark's cv, while one slow outlier (a preemption, a page fault)
// barely moves it.
double relative_noise(std::span<const double> x);

// Interquartile range over the median, (Q3 - Q1) / median: a second, coarser noise figure
// (for normal data ~1.35 times the coefficient of variation).
double relative_iqr(std::span<const double> x);

struct SampleSummary {
  int n = 0;
  double min = 0, q25 = 0, median = 0, q75 = 0, max = 0;
  double noise = 0;   // relative_noise
};
SampleSummary summarize(std::span<const double> x);

// --- speedup ratio -----------------------------------------------------------------------------

// A speedup ratio time(base) / time(patch) with its confidence interval [lo, hi].
struct RatioInterval {
  double estimate = 0, lo = 0, hi = 0;
};

// Percentile bootstrap of median(base) / median(patch). Each of `resamples` rounds draws n_base
// values from base and n_patch values from patch with replacement (independently: the two samples
// are not paired) and takes the ratio of the two medians; lo and hi are the (1 - c)/2 and (1 + c)/2
// type-7 quantiles of those ratios, estimate is the ratio of the full-sample medians.
// Draw i of resample r from sample s (0 = base, 1 = patch) uses the Philox4x32-10 block
//   philox({ i / 2, r, s, 0 }, { lo32(seed), hi32(seed) }), 64-bit word (i % 2) (w1:w0 or w3:w2),
// mapped to an index by (bits * n) >> 64 (bias below n / 2^64). Cost: resamples x (n_base +
// n_patch) draws and median selections, ~10 ms for 2000 resamples of 2 x 100 samples.
RatioInterval bootstrap_ratio_ci(std::span<const double> base, std::span<const double> patch,
                                 double confidence = 0.95, int resamples = 2000, uint64_t seed = 1);

// Hodges-Lehmann estimate of the shift between log(base) and log(patch), returned as a ratio:
// with the m n differences D = log(base_i) - log(patch_j) sorted, estimate = exp(median D) and
// the distribution-free interval [exp(D_(k)), exp(D_(mn + 1 - k))] (1-based order statistics),
// where k is the largest integer with P(U <= k - 1) <= (1 - c) / 2 under the null distribution of
// the Mann-Whitney U count (Lehmann 1963; Hollander and Wolfe, ch. 4.3). The interval covers the
// true ratio with probability >= c when the two log-time distributions differ by a shift only.
//   - exact null distribution when both samples have <= 10 values and no value is tied across the
//     pooled sample (see mann_whitney_p);
//   - otherwise the normal approximation with continuity correction:
//     P(U <= k - 1) ~ Phi((k - 1/2 - mn/2) / sigma), sigma^2 = mn (m + n + 1) / 12, hence
//     k = floor(mn/2 - z_{(1+c)/2} sigma + 1/2)
//     (sigma without the tie correction: with ties the interval comes out slightly wider, i.e.
//     conservative).
// When the samples are too small for the requested confidence (k < 1), lo = 0 and hi = +inf.
// Cost O(mn log mn) time and O(mn) memory.
RatioInterval hodges_lehmann_ratio(std::span<const double> base, std::span<const double> patch,
                                   double confidence = 0.95);

// --- Mann-Whitney U ------------------------------------------------------------------------------

enum class MannWhitneyMethod {
  AUTO,     // EXACT when both samples have <= 10 values and there are no ties, else NORMAL
  EXACT,    // the permutation distribution of U (no ties assumed); needs n_base + n_patch <= 60
  NORMAL,   // normal approximation with tie and continuity correction
};

// Two-sided p-value of the Mann-Whitney U (Wilcoxon rank-sum) test that base and patch come from
// the same distribution. U counts the pairs with base_i > patch_j (a tie counts 1/2).
//   NORMAL: mu = mn/2, sigma^2 = mn/12 ((N + 1) - sum_t (t^3 - t) / (N (N - 1))) over the tie
//           groups t of the pooled sample (N = m + n), p = min(1, 2 Q((|U - mu| - 1/2) / sigma));
//           all values tied gives p = 1. This is SciPy's mannwhitneyu(..., 'two-sided',
//           method='asymptotic'), the rule of Google Benchmark's tools/compare.py (alpha 0.05).
//   EXACT:  p = min(1, 2 min(P(U' <= U), P(U' >= U))) with the null distribution of U' counted
//           exactly from the Gaussian binomial coefficient [m+n choose m]_q.
double mann_whitney_p(std::span<const double> base, std::span<const double> patch,
                      MannWhitneyMethod method = MannWhitneyMethod::AUTO);

// --- verdict and stopping ----------------------------------------------------------------------

enum class SpeedVerdict { FASTER, SAME, SLOWER, AMBIGUOUS };

// The throughput verdict from a speedup interval and a minimum effect size e (0.02 = 2%), with
// the equivalence band B = [1/(1+e), 1+e] (symmetric in log space: 2% faster and 2% slower are the
// same distance from 1):
//   FASTER     ci.lo > 1 and estimate >= 1 + e        significant and large enough to matter
//   SLOWER     ci.hi < 1 and estimate <= 1 / (1 + e)  the mirror image
//   SAME       ci inside B (lo >= 1/(1+e), hi <= 1+e) any difference is provably below e
//   AMBIGUOUS  anything else: too noisy to tell, or significant but with its size undecided
// Checked in that order. Why not "FASTER only when the whole interval is above 1 + e": that needs
// far more samples for a real e-sized gain and turns most real gains into AMBIGUOUS; the rule
// above is the usual significance-plus-effect-size rule, and SAME is a two one-sided tests
// (TOST) equivalence decision, so a significant but negligible change (a 0.5% slowdown at e = 2%)
// is SAME, never SLOWER. A non-finite interval, or one with lo > estimate or estimate > hi, is
// AMBIGUOUS. min_effect must be >= 0.
SpeedVerdict speed_verdict(const RatioInterval& ci, double min_effect);

// A FASTER or SLOWER verdict stands only where the Mann-Whitney test agrees at the same level
// (rank_p < 1 - level); otherwise AMBIGUOUS. Where times are bimodal (an exec program whose process
// start-up takes one of two durations) the medians sit in the modes and their bootstrap interval
// reads tight over samples that overlap: 1.06x [1.02, 1.10] FASTER at p = 0.55, and 1.14x [1.11,
// 1.16] at 44 pairs and p = 0.10. SAME and AMBIGUOUS pass through.
SpeedVerdict rank_checked(SpeedVerdict v, double rank_p, double level);

std::string_view verdict_name(SpeedVerdict v);   // "FASTER", "SAME", "SLOWER", "AMBIGUOUS"

// Relative half-width of an interval, (hi - lo) / (2 estimate); +inf when it is not finite or the
// estimate is not positive.
double relative_halfwidth(const RatioInterval& ci);

// The adaptive stopping rule, asked after each new pair of samples: stop when the time budget is
// spent (a hard cap, even below min_n), otherwise keep going until n >= min_n and then stop once
// relative_halfwidth(ci) <= target_halfwidth (0.01: the speedup is known to +-1%).
bool should_stop(const RatioInterval& ci, double target_halfwidth, double elapsed_s, double budget_s,
                 int n, int min_n);

// The Wilson score interval (95%, z = 1.959964) of a rate of k successes in n trials: [lo, hi] in
// [0, 1]; {0, 1} when n = 0. calibrate prints its rates with it.
std::pair<double, double> wilson_interval(int k, int n);

// The stop of one speed comparison (base and patch timed interleaved), asked after each round:
//   - the budget is spent (a hard cap);
//   - otherwise only at a look: the first time n (pairs so far) reaches a point of the schedule
//     n0 1.25^k, n0 = max(min_n, 5); `looks` counts the points passed (the caller keeps it, 0 at
//     the start), so rounds of any size (the runner's grow by half) each take the look they reach;
//   - there, the interval at `confidence` is narrower than target_halfwidth (should_stop), or
//   - the decision is already made: the interval at interim_confidence (0.999; at least
//     `confidence`) gives FASTER, SAME or SLOWER (speed_verdict at min_effect; the final verdict's
//     rank test, rank_checked, can still turn it AMBIGUOUS). An early look must clear this stricter bar (the
//     Haybittle-Peto rule of group-sequential trials: interim looks at p < 0.001, the final one at
//     the nominal level), so looking after every round adds next to nothing to the false alarms of
//     the final verdict; interim_confidence >= 1 turns the early decision off.
// Nothing else ends an undecided comparison: the timing loop's cap on pairs is kMaxTimedPairs
// there, so a short kernel on a noisy machine keeps sampling for the whole budget (with a cap of
// 200 pairs, a 3 ms kernel stopped undecided after about 1 s of its 20).
// The final verdict is always speed_verdict of the interval at `confidence` over all samples, which
// after a decided stop agrees with the interim one (its interval lies inside).
struct StopRule {
  double confidence = 0.95, interim_confidence = 0.999, target_halfwidth = 0.01, min_effect = 0.03;
  double budget_s = 20;
  int min_n = 7;
};
bool speed_should_stop(std::span<const double> base, std::span<const double> patch, double elapsed_s,
                       const StopRule& rule, int& looks);

// The cap on timed pairs of a comparison with a stop rule: a bound on memory and on the bootstrap's
// cost (2,000 resamples of 2 x 20,000 samples take about 0.3 s), far above what a kernel of a
// millisecond reaches in the budget.
inline constexpr int kMaxTimedPairs = 20000;

}  // namespace dg
