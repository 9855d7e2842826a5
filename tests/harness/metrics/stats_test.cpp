// Tests for harness/stats: summaries on small known samples, Mann-Whitney p-values on textbook
// examples with hand-computed U, Hodges-Lehmann shift recovery and exact-interval order
// statistics, bootstrap coverage on synthetic lognormal samples, determinism, the verdict rule
// branch by branch, and the stopping rule.
#include "harness/metrics/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <vector>

#include "harness/core/rng.h"

namespace dg {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// --- summaries ---------------------------------------------------------------------------------

TEST(Stats, MedianOddAndEven) {
  EXPECT_EQ(median(std::vector<double>{3, 1, 2}), 2);
  EXPECT_EQ(median(std::vector<double>{4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median(std::vector<double>{7}), 7);
  EXPECT_THROW(median(std::vector<double>{}), std::invalid_argument);
}

TEST(Stats, QuantilesType7) {
  const std::vector<double> x{50, 10, 40, 20, 30};
  EXPECT_EQ(quantile(x, 0.0), 10);
  EXPECT_EQ(quantile(x, 1.0), 50);
  EXPECT_EQ(quantile(x, 0.25), 20);                  // h = 1
  EXPECT_DOUBLE_EQ(quantile(x, 0.9), 46);            // h = 3.6: 40 + 0.6 * 10 (NumPy gives 46)
  EXPECT_DOUBLE_EQ(quantile(std::vector<double>{1, 2, 3, 4}, 0.25), 1.75);   // h = 0.75
  const std::vector<double> qs{0.25, 0.5, 0.75};
  EXPECT_EQ(quantiles(x, qs), (std::vector<double>{20, 30, 40}));
  EXPECT_THROW(quantile(x, 1.5), std::invalid_argument);
}

TEST(Stats, MadAndNoise) {
  // median 2, absolute deviations {1, 1, 0, 0, 2, 4, 7}, their median 1
  const std::vector<double> x{1, 1, 2, 2, 4, 6, 9};
  EXPECT_EQ(mad(x), 1);
  EXPECT_DOUBLE_EQ(relative_noise(x), 1.4826 / 2);
  EXPECT_DOUBLE_EQ(relative_iqr(std::vector<double>{1, 2, 3, 4, 5}), 2.0 / 3.0);   // (4 - 2) / 3
  const SampleSummary s = summarize(x);
  EXPECT_EQ(s.n, 7);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.median, 2);
  EXPECT_EQ(s.max, 9);
  EXPECT_DOUBLE_EQ(s.q25, 1.5);   // h = 1.5
  EXPECT_DOUBLE_EQ(s.q75, 5);     // h = 4.5
}

// --- Mann-Whitney U ------------------------------------------------------------------------------

// SciPy's mannwhitneyu documentation example. U(males) counts the pairs male > female:
// 19 > {11, 17, 12}: 3, 22: 4, 16 > {11, 12}: 2, 29: 4, 24: 4, so U = 17 of mn = 20.
const std::vector<double> kMales{19, 22, 16, 29, 24};
const std::vector<double> kFemales{20, 11, 17, 12};

TEST(MannWhitney, TextbookExact) {
  // P(U >= 17) = P(U <= 3): [9 choose 4]_q starts 1, 1, 2, 3, so 7 of the C(9, 4) = 126 arrangements.
  EXPECT_NEAR(mann_whitney_p(kMales, kFemales, MannWhitneyMethod::EXACT), 14.0 / 126.0, 1e-15);
  EXPECT_NEAR(mann_whitney_p(kMales, kFemales), 14.0 / 126.0, 1e-15);   // AUTO: small, no ties
  EXPECT_NEAR(mann_whitney_p(kFemales, kMales), 14.0 / 126.0, 1e-15);   // two-sided: symmetric
  // {1, 2, 3} vs {4, 5, 6}: U = 0, the most extreme of C(6, 3) = 20 arrangements.
  const std::vector<double> lo{1, 2, 3}, hi{4, 5, 6};
  EXPECT_NEAR(mann_whitney_p(lo, hi, MannWhitneyMethod::EXACT), 0.1, 1e-15);
}

TEST(MannWhitney, TextbookNormal) {
  // mu = 10, sigma^2 = 5 * 4 * 10 / 12, z = (17 - 10 - 0.5) / sigma; SciPy (method='asymptotic')
  // prints 0.11134688653314041.
  EXPECT_NEAR(mann_whitney_p(kMales, kFemales, MannWhitneyMethod::NORMAL), 0.11134688653314041, 1e-12);
  // {1, 2, 3} vs {4, 5, 6}: z = (4.5 - 0.5) / sqrt(9 * 7 / 12)
  const std::vector<double> lo{1, 2, 3}, hi{4, 5, 6};
  const double z = 4.0 / std::sqrt(63.0 / 12.0);
  EXPECT_NEAR(mann_whitney_p(lo, hi, MannWhitneyMethod::NORMAL), std::erfc(z / std::sqrt(2.0)), 1e-14);
}

TEST(MannWhitney, TiesUseNormalWithTieCorrection) {
  // pooled: 1b 2b 2b 2p 3b 3p 4p 5p; midranks 1, 3, 3, 3, 5.5, 5.5, 7, 8
  // rank sum(base) = 1 + 3 + 3 + 5.5 = 12.5, U = 12.5 - 4 * 5 / 2 = 2.5, mu = 8
  // tie groups t = 3 (the 2s) and t = 2 (the 3s): sum t^3 - t = 24 + 6 = 30, N = 8
  // sigma^2 = 16 / 12 * (9 - 30 / 56), z = (|2.5 - 8| - 0.5) / sigma
  const std::vector<double> base{1, 2, 2, 3}, patch{2, 3, 4, 5};
  const double z = 5.0 / std::sqrt(16.0 / 12.0 * (9.0 - 30.0 / 56.0));
  const double expect = std::erfc(z / std::sqrt(2.0));   // 2 Q(z)
  EXPECT_NEAR(mann_whitney_p(base, patch), expect, 1e-14);   // AUTO goes NORMAL on ties
  EXPECT_NEAR(mann_whitney_p(base, patch, MannWhitneyMethod::NORMAL), expect, 1e-14);
  EXPECT_NEAR(expect, 0.1367, 5e-4);
}

TEST(MannWhitney, NoDifference) {
  const std::vector<double> same{1, 1, 1}, also{1, 1};
  EXPECT_EQ(mann_whitney_p(same, also), 1.0);   // every value tied
  const std::vector<double> a{1, 3, 5, 7}, b{2, 4, 6, 8};
  EXPECT_GT(mann_whitney_p(a, b), 0.5);
  EXPECT_THROW(mann_whitney_p(std::vector<double>(40, 1.0), std::vector<double>(30, 2.0), MannWhitneyMethod::EXACT),
               std::invalid_argument);
}

// --- synthetic timing samples ------------------------------------------------------------------

// n lognormal times with median `median_s` and log-sd `sigma`, from a counter-based stream.
std::vector<double> lognormal(uint64_t seed, const char* name, int n, double median_s, double sigma) {
  const TensorRng rng(seed, "stats_test", name);
  std::vector<double> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = median_s * std::exp(sigma * rng.normal(static_cast<uint64_t>(i)));
  return x;
}

// --- Hodges-Lehmann ------------------------------------------------------------------------------

TEST(HodgesLehmann, ExactShiftIsRecovered) {
  const std::vector<double> patch = lognormal(7, "patch", 41, 1e-3, 0.1);
  std::vector<double> base = patch;
  for (double& t : base) t *= 1.25;
  const RatioInterval r = hodges_lehmann_ratio(base, patch);
  EXPECT_NEAR(r.estimate, 1.25, 1e-12);
  EXPECT_LT(r.lo, 1.25);
  EXPECT_GT(r.hi, 1.25);
}

TEST(HodgesLehmann, ExactIntervalOrderStatistics) {
  // D = 0.1 i - 0.01 j (i, j = 1..5): 25 distinct differences, grouped by i. m = n = 5 at 95%:
  // P(U <= 2) = 4/252 <= 0.025 < P(U <= 3) = 7/252, so k = 3 (Hollander-Wolfe's table, coverage
  // 0.968): lo = D_(3) = 0.1 - 0.03, hi = D_(23) = 0.5 - 0.03, estimate = D_(13) = 0.3 - 0.03.
  std::vector<double> base, patch;
  for (int i = 1; i <= 5; ++i) base.push_back(std::exp(0.1 * i));
  for (int j = 1; j <= 5; ++j) patch.push_back(std::exp(0.01 * j));
  const RatioInterval r = hodges_lehmann_ratio(base, patch, 0.95);
  EXPECT_NEAR(std::log(r.estimate), 0.27, 1e-12);
  EXPECT_NEAR(std::log(r.lo), 0.07, 1e-12);
  EXPECT_NEAR(std::log(r.hi), 0.47, 1e-12);
}

TEST(HodgesLehmann, NoisyShiftLargeSample) {
  const std::vector<double> base = lognormal(3, "base", 200, 1.1e-3, 0.05);
  const std::vector<double> patch = lognormal(3, "patch", 200, 1.0e-3, 0.05);
  const RatioInterval r = hodges_lehmann_ratio(base, patch);   // normal approximation
  // The shift's standard error is about 0.05 sqrt(2 / 200) = 0.005 in log: allow 4 of them (whether
  // one draw's interval covers 1.1 is a matter of chance; Bootstrap.CoversTrueRatio counts it).
  EXPECT_NEAR(std::log(r.estimate), std::log(1.1), 0.02);
  EXPECT_LE(r.lo, r.estimate);
  EXPECT_GE(r.hi, r.estimate);
  EXPECT_LT(relative_halfwidth(r), 0.015);
}

TEST(HodgesLehmann, TooFewSamplesGiveUnboundedInterval) {
  const std::vector<double> base{2, 3}, patch{1, 1.5};
  const RatioInterval r = hodges_lehmann_ratio(base, patch, 0.95);   // P(U <= 0) = 1/6 > 0.025
  EXPECT_EQ(r.lo, 0);
  EXPECT_EQ(r.hi, kInf);
  EXPECT_THROW(hodges_lehmann_ratio(std::vector<double>{1, -1}, patch), std::invalid_argument);
}

// --- bootstrap -----------------------------------------------------------------------------------

TEST(Bootstrap, CoversTrueRatio) {
  // 200 seeded trials: 30 base and 30 patch lognormal times whose medians differ by 1.05.
  constexpr double kTrue = 1.05;
  int covered_boot = 0, covered_hl = 0;
  for (uint64_t trial = 0; trial < 200; ++trial) {
    const auto base = lognormal(1000 + trial, "base", 30, 1.05e-3, 0.05);
    const auto patch = lognormal(1000 + trial, "patch", 30, 1.0e-3, 0.05);
    const RatioInterval b = bootstrap_ratio_ci(base, patch, 0.95, 2000, trial + 1);
    covered_boot += (b.lo <= kTrue && kTrue <= b.hi);
    const RatioInterval h = hodges_lehmann_ratio(base, patch, 0.95);
    covered_hl += (h.lo <= kTrue && kTrue <= h.hi);
  }
  EXPECT_GE(covered_boot, 176);   // 88% .. 99% of 200
  EXPECT_LE(covered_boot, 198);
  EXPECT_GE(covered_hl, 176);
  EXPECT_LE(covered_hl, 198);
  RecordProperty("bootstrap_coverage_of_200", covered_boot);
  RecordProperty("hodges_lehmann_coverage_of_200", covered_hl);
}

TEST(Bootstrap, DeterministicForASeed) {
  const auto base = lognormal(11, "base", 25, 2e-3, 0.1);
  const auto patch = lognormal(11, "patch", 27, 1.8e-3, 0.1);
  const RatioInterval a = bootstrap_ratio_ci(base, patch, 0.95, 2000, 42);
  const RatioInterval b = bootstrap_ratio_ci(base, patch, 0.95, 2000, 42);
  EXPECT_EQ(a.estimate, b.estimate);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  const RatioInterval c = bootstrap_ratio_ci(base, patch, 0.95, 2000, 43);
  EXPECT_TRUE(a.lo != c.lo || a.hi != c.hi);
  EXPECT_EQ(a.estimate, median(base) / median(patch));
  EXPECT_LE(a.lo, a.estimate);
  EXPECT_GE(a.hi, a.estimate);
}

TEST(Bootstrap, RejectsBadInput) {
  const std::vector<double> ok{1, 2, 3}, empty{}, zero{1, 0};
  EXPECT_THROW(bootstrap_ratio_ci(empty, ok), std::invalid_argument);
  EXPECT_THROW(bootstrap_ratio_ci(ok, zero), std::invalid_argument);
  EXPECT_THROW(bootstrap_ratio_ci(ok, ok, 1.0), std::invalid_argument);
  EXPECT_THROW(bootstrap_ratio_ci(ok, ok, 0.95, 1), std::invalid_argument);
}

// --- verdict and stopping ----------------------------------------------------------------------

TEST(Verdict, EachBranch) {
  constexpr double e = 0.02;
  EXPECT_EQ(speed_verdict({1.05, 1.02, 1.08}, e), SpeedVerdict::FASTER);
  EXPECT_EQ(speed_verdict({0.95, 0.92, 0.98}, e), SpeedVerdict::SLOWER);
  EXPECT_EQ(speed_verdict({1.00, 0.99, 1.01}, e), SpeedVerdict::SAME);
  // significant but negligible: SAME, not SLOWER
  EXPECT_EQ(speed_verdict({0.995, 0.99, 0.999}, e), SpeedVerdict::SAME);
  // the band's edges are inside: [1 / 1.02, 1.02]
  EXPECT_EQ(speed_verdict({1.0, 1 / (1 + e), 1 + e}, e), SpeedVerdict::SAME);
  // too noisy to tell
  EXPECT_EQ(speed_verdict({1.0, 0.9, 1.1}, e), SpeedVerdict::AMBIGUOUS);
  // significant, but the size is undecided (estimate below 1 + e, interval beyond it)
  EXPECT_EQ(speed_verdict({1.01, 1.001, 1.03}, e), SpeedVerdict::AMBIGUOUS);
  EXPECT_EQ(speed_verdict({0.99, 0.97, 0.999}, e), SpeedVerdict::AMBIGUOUS);
  // large estimate, not significant
  EXPECT_EQ(speed_verdict({1.10, 0.98, 1.25}, e), SpeedVerdict::AMBIGUOUS);
  // broken intervals
  EXPECT_EQ(speed_verdict({1.05, 0, kInf}, e), SpeedVerdict::AMBIGUOUS);
  EXPECT_EQ(speed_verdict({std::nan(""), 1.02, 1.08}, e), SpeedVerdict::AMBIGUOUS);
  EXPECT_EQ(speed_verdict({1.05, 1.06, 1.08}, e), SpeedVerdict::AMBIGUOUS);   // lo > estimate
  EXPECT_THROW(speed_verdict({1, 1, 1}, -0.1), std::invalid_argument);
  // min_effect 0: any significant change counts
  EXPECT_EQ(speed_verdict({1.001, 1.0005, 1.002}, 0), SpeedVerdict::FASTER);
}

TEST(Verdict, Names) {
  EXPECT_EQ(verdict_name(SpeedVerdict::FASTER), "FASTER");
  EXPECT_EQ(verdict_name(SpeedVerdict::SAME), "SAME");
  EXPECT_EQ(verdict_name(SpeedVerdict::SLOWER), "SLOWER");
  EXPECT_EQ(verdict_name(SpeedVerdict::AMBIGUOUS), "AMBIGUOUS");
}

// FASTER and SLOWER stand only where the rank test agrees at the same level; SAME and AMBIGUOUS
// pass through whatever its p.
TEST(SpeedVerdicts, FasterAndSlowerNeedTheRankTest) {
  for (SpeedVerdict v : {SpeedVerdict::FASTER, SpeedVerdict::SLOWER}) {
    EXPECT_EQ(rank_checked(v, 0.01, 0.95), v);
    EXPECT_EQ(rank_checked(v, 0.55, 0.95), SpeedVerdict::AMBIGUOUS);
    EXPECT_EQ(rank_checked(v, 0.06, 0.95), SpeedVerdict::AMBIGUOUS);
    EXPECT_EQ(rank_checked(v, 0.0005, 0.999), v);
    EXPECT_EQ(rank_checked(v, 0.002, 0.999), SpeedVerdict::AMBIGUOUS);
    EXPECT_EQ(rank_checked(v, std::nan(""), 0.95), SpeedVerdict::AMBIGUOUS);
  }
  EXPECT_EQ(rank_checked(SpeedVerdict::SAME, 0.9, 0.95), SpeedVerdict::SAME);
  EXPECT_EQ(rank_checked(SpeedVerdict::AMBIGUOUS, 0.0, 0.95), SpeedVerdict::AMBIGUOUS);
}

TEST(Stopping, Rule) {
  const RatioInterval narrow{1.0, 0.995, 1.005}, wide{1.0, 0.9, 1.1}, unbounded{1.0, 0, kInf};
  EXPECT_NEAR(relative_halfwidth(narrow), 0.005, 1e-15);
  EXPECT_EQ(relative_halfwidth(unbounded), kInf);
  EXPECT_TRUE(should_stop(narrow, 0.01, 1.0, 10.0, 20, 10));    // narrow enough
  EXPECT_FALSE(should_stop(wide, 0.01, 1.0, 10.0, 20, 10));     // keep going
  EXPECT_FALSE(should_stop(narrow, 0.01, 1.0, 10.0, 5, 10));    // below min_n
  EXPECT_TRUE(should_stop(wide, 0.01, 10.0, 10.0, 20, 10));     // budget spent
  EXPECT_TRUE(should_stop(wide, 0.01, 12.0, 10.0, 3, 10));      // budget is a hard cap
  EXPECT_FALSE(should_stop(unbounded, 0.01, 1.0, 10.0, 20, 10));
}

// The adaptive loop on synthetic data: an interval from the bootstrap narrows as samples come in
// and the rule stops before the sample cap, with the right verdict.
TEST(Stopping, AdaptiveLoopConverges) {
  const auto base = lognormal(5, "base", 400, 1.10e-3, 0.03);
  const auto patch = lognormal(5, "patch", 400, 1.00e-3, 0.03);
  int n = 10;
  RatioInterval ci;
  for (; n <= 400; n += 10) {
    ci = bootstrap_ratio_ci(std::span(base).first(static_cast<size_t>(n)),
                            std::span(patch).first(static_cast<size_t>(n)), 0.95, 1000, 1);
    if (should_stop(ci, 0.01, 0.0, 30.0, n, 20)) break;
  }
  EXPECT_LT(n, 400);
  EXPECT_EQ(speed_verdict(ci, 0.02), SpeedVerdict::FASTER);
}

TEST(Wilson, KnownIntervals) {
  // Wilson 95% intervals: 0 of 100 is [0, 3.70%]; 94 of 100 is [87.5%, 97.2%]; 50 of 100 is symmetric.
  auto [lo0, hi0] = wilson_interval(0, 100);
  EXPECT_DOUBLE_EQ(lo0, 0.0);
  EXPECT_NEAR(hi0, 0.0370, 5e-4);
  auto [lo94, hi94] = wilson_interval(94, 100);
  EXPECT_NEAR(lo94, 0.8752, 5e-4);
  EXPECT_NEAR(hi94, 0.9722, 5e-4);
  auto [lo50, hi50] = wilson_interval(50, 100);
  EXPECT_NEAR(lo50 + hi50, 1.0, 1e-12);
  auto [lon, hin] = wilson_interval(0, 0);
  EXPECT_EQ(lon, 0.0);
  EXPECT_EQ(hin, 1.0);
}

// The decided early stop (speed_should_stop): a clear 20% speedup stops at an early look, well
// before the budget, with the final verdict FASTER; interim_confidence 1 turns it off.
TEST(Stopping, AClearDifferenceStopsAtAnEarlyLook) {
  const auto base = lognormal(11, "base", 400, 1.2e-3, 0.05);
  const auto patch = lognormal(11, "patch", 400, 1.0e-3, 0.05);
  StopRule rule;
  rule.target_halfwidth = 0.001;   // never narrow enough: only the decision can stop it
  int n = rule.min_n, looks = 0;
  for (; n <= 400; ++n)
    if (speed_should_stop(std::span(base).first(n), std::span(patch).first(n), 0.0, rule, looks)) break;
  EXPECT_LE(n, 20);
  EXPECT_EQ(speed_verdict(bootstrap_ratio_ci(std::span(base).first(n), std::span(patch).first(n), 0.95), 0.03),
            SpeedVerdict::FASTER);
  rule.interim_confidence = 1;
  looks = 0;
  for (int m = rule.min_n; m <= 400; ++m)
    EXPECT_FALSE(speed_should_stop(std::span(base).first(m), std::span(patch).first(m), 0.0, rule, looks)) << m;
  EXPECT_TRUE(speed_should_stop(base, patch, 20.0, rule, looks));   // the budget still ends it
}

// The rule's two error rates on simulated comparisons (lognormal times, 3% noise, up to 400
// pairs each), asked as the timing loop asks: after rounds of min_n, then half the pairs so far
// (7, 10, 15, 22, 33, ...), or after every pair. A against A must end FASTER or SLOWER in at most
// 1% of 250 comparisons (the early looks must not inflate the false alarms), and a true 5% slowdown
// must end SLOWER in at least 95% of them. Looks are taken where a round reaches a point of the
// schedule (a rule that looked only at exact points met the runner's rounds at n = 7 and 33, then
// never again: no decided stop after 33 pairs).
TEST(Stopping, EarlyLooksKeepFalseAlarmsUnderOnePercentAndDetectAFivePercentSlowdown) {
  StopRule rule;
  constexpr int kMax = 400;
  for (bool every_pair : {false, true}) {
    auto run = [&](int trial, double slowdown) {
      const auto base = lognormal(1000 + trial, "base", kMax, 1e-3, 0.03);
      const auto patch = lognormal(5000 + trial, "patch", kMax, 1e-3 * (1 + slowdown), 0.03);
      int n = rule.min_n, looks = 0;
      while (n < kMax && !speed_should_stop(std::span(base).first(n), std::span(patch).first(n), 0.0, rule, looks))
        n = std::min(kMax, n + (every_pair ? 1 : std::max(1, n / 2)));
      return speed_verdict(bootstrap_ratio_ci(std::span(base).first(n), std::span(patch).first(n), 0.95, 500), 0.03);
    };
    int alarms = 0, detections = 0;
    const int trials = 250;
    for (int t = 0; t < trials; ++t) {
      const SpeedVerdict same = run(t, 0.0), slow = run(t, 0.05);
      alarms += same == SpeedVerdict::FASTER || same == SpeedVerdict::SLOWER;
      detections += slow == SpeedVerdict::SLOWER;
    }
    const char* how = every_pair ? "asked after every pair" : "asked after the runner's rounds";
    EXPECT_LE(alarms, trials / 100) << alarms << " false alarms in " << trials << ", " << how;
    EXPECT_GE(detections, trials * 95 / 100) << detections << " detections in " << trials << ", " << how;
    std::printf("%s: false alarms %d, detections %d of %d\n", how, alarms, detections, trials);
  }
}

// Every round that reaches a new point of the look schedule takes a look, whatever its size.
TEST(Stopping, EachRoundThatPassesASchedulePointLooks) {
  StopRule rule;
  rule.target_halfwidth = 0;       // never narrow enough
  rule.interim_confidence = 1;     // no decision: every look answers false, and counts
  const auto x = lognormal(3, "x", 2000, 1e-3, 0.03);
  int looks = 0;
  EXPECT_FALSE(speed_should_stop(std::span(x).first(6), std::span(x).first(6), 0.0, rule, looks));
  EXPECT_EQ(looks, 0);                                    // below n0 = 7
  EXPECT_FALSE(speed_should_stop(std::span(x).first(7), std::span(x).first(7), 0.0, rule, looks));
  EXPECT_EQ(looks, 1);                                    // 7
  EXPECT_FALSE(speed_should_stop(std::span(x).first(8), std::span(x).first(8), 0.0, rule, looks));
  EXPECT_EQ(looks, 1);                                    // no point in (7, 8]
  EXPECT_FALSE(speed_should_stop(std::span(x).first(10), std::span(x).first(10), 0.0, rule, looks));
  EXPECT_EQ(looks, 2);                                    // 8.75
  EXPECT_FALSE(speed_should_stop(std::span(x).first(1000), std::span(x).first(1000), 0.0, rule, looks));
  EXPECT_EQ(looks, 23);                                   // 7 1.25^22 = 949 <= 1000 < 1186
  EXPECT_FALSE(speed_should_stop(std::span(x).first(1100), std::span(x).first(1100), 0.0, rule, looks));
  EXPECT_EQ(looks, 23);
}

}  // namespace
}  // namespace dg
