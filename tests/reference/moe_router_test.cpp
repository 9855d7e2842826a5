// The moe_router reference (reference/moe_router.h): hand-derived routes (the bias selects, the
// unbiased scores weigh, groups by their top-2 sums), the tie rule, the renorm epsilon, every tier
// against MPFR at 256 bits computed here, and bad parameters and input.
#include "reference/moe_router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

double sig(double z) { return 1 / (1 + std::exp(-z)); }
MoeRouterParams params(int64_t T, int64_t E, int64_t k, int64_t ng, int64_t tg, bool renorm, double rsf) {
  MoeRouterParams p;
  p.T = T, p.E = E, p.k = k, p.n_group = ng, p.topk_group = tg, p.renorm = renorm, p.rsf = rsf;
  return p;
}

// z = [2, 1, 0, -1], b = [0, 0, 1.5, 0]: the selection scores are s + b = [.881, .731, 2.0, .269], so
// experts 2 and 0 are selected (the bias lifts 2 above 1), and weighed by their UNBIASED s.
TEST(MoeRouterReference, TheBiasSelectsAndTheUnbiasedScoresWeigh) {
  const Tensor z = f64({1, 4}, {2, 1, 0, -1}), b = f64({4}, {0, 0, 1.5, 0});
  for (Tier tier : kTiers) {
    const MoeRouterReferenceResult plain = moe_router_reference(tier, params(1, 4, 2, 1, 1, false, 2.5), z, b);
    EXPECT_EQ(plain.ids, (std::vector<double>{2, 0})) << tier_name(tier);
    EXPECT_NEAR(plain.weights[0], 2.5 * 0.5, 1e-15);
    EXPECT_NEAR(plain.weights[1], 2.5 * sig(2), 1e-15);
    const MoeRouterReferenceResult norm = moe_router_reference(tier, params(1, 4, 2, 1, 1, true, 1.8), z, b);
    EXPECT_NEAR(norm.weights[0], 1.8 * 0.5 / (0.5 + sig(2)), 1e-15) << tier_name(tier);
    EXPECT_NEAR(norm.weights[1], 1.8 * sig(2) / (0.5 + sig(2)), 1e-15) << tier_name(tier);
  }
}

// 4 groups of 2: group scores (sums of both) rank groups 3 and 1 first although expert 0 has the
// largest single score; with k = 2 the best two experts of groups 1 and 3 are chosen.
TEST(MoeRouterReference, GroupsRankByTheSumOfTheirTopTwo) {
  const Tensor z = f64({1, 8}, {3, -3, 1, 1.2, -2, -2, 0.9, 0.8}), b = f64({8}, std::vector<double>(8, 0.0));
  for (Tier tier : kTiers) {
    const MoeRouterReferenceResult r = moe_router_reference(tier, params(1, 8, 2, 4, 2, true, 1.0), z, b);
    EXPECT_EQ(r.ids, (std::vector<double>{3, 2})) << tier_name(tier);   // groups 1 (1.50) and 3 (1.40) beat 0 (1.00)
    const MoeRouterReferenceResult one = moe_router_reference(tier, params(1, 8, 2, 4, 4, true, 1.0), z, b);
    EXPECT_EQ(one.ids, (std::vector<double>{0, 3})) << tier_name(tier);  // every group kept: the plain top-2
  }
}

// Equal selection scores: the lower expert index ranks first; equal group scores: the lower group.
TEST(MoeRouterReference, TiesGoToTheLowerIndex) {
  for (Tier tier : kTiers) {
    const Tensor z = f64({1, 6}, {0.5, 1, 0.2, 1, 0.5, 1}), b = f64({6}, std::vector<double>(6, 0.0));
    EXPECT_EQ(moe_router_reference(tier, params(1, 6, 2, 1, 1, true, 1.0), z, b).ids, (std::vector<double>{1, 3}))
        << tier_name(tier);
    // groups {0,1} {2,3} {4,5}: groups 1 and 2 are copies of each other and beat group 0.
    const Tensor zg = f64({1, 6}, {0, 0, 1, 2, 1, 2});
    EXPECT_EQ(moe_router_reference(tier, params(1, 6, 2, 3, 1, true, 1.0), zg, b).ids, (std::vector<double>{3, 2}))
        << tier_name(tier);
  }
}

// Scores far below 1e-20 in sum: the epsilon dominates the denominator, w = s / (sum + 1e-20) * rsf.
TEST(MoeRouterReference, TheRenormEpsilonIsInTheDenominator) {
  const Tensor z = f64({1, 3}, {-70, -72, -80}), b = f64({3}, {0, 0, 0});
  const double s0 = sig(-70), s1 = sig(-72);
  for (Tier tier : kTiers) {
    const MoeRouterReferenceResult r = moe_router_reference(tier, params(1, 3, 2, 1, 1, true, 2.5), z, b);
    EXPECT_NEAR(r.weights[0] / (2.5 * s0 / (s0 + s1 + 1e-20)), 1.0, 1e-14) << tier_name(tier);
    EXPECT_LT(r.weights[0], 1e-9);   // not the 2.5 * 0.88 of a sum without the epsilon
  }
}

// Every tier against the route computed with MPFR at 256 bits: the same ids (margins here are far
// above any tier's error), weights within one ulp (dd, MPFR; rounded to odd) or 8 (f64).
TEST(MoeRouterReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const int64_t T = 16, E = 64, k = 8;
  std::mt19937_64 gen(5);
  std::normal_distribution<double> nd(0.0, 2.0);
  std::vector<double> z(static_cast<size_t>(T * E)), b(static_cast<size_t>(E));
  for (double& x : z) x = nd(gen);
  for (double& x : b) x = 0.05 * nd(gen);
  std::vector<double> ids, w;
  mpfr_t s[64], sum, t;
  for (auto& x : s) mpfr_init2(x, 256);
  mpfr_inits2(256, sum, t, static_cast<mpfr_ptr>(nullptr));
  for (int64_t r = 0; r < T; ++r) {
    std::vector<double> sel(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {   // s = 1 / (1 + exp(-z)), sel = s + b
      mpfr_set_d(s[e], -z[static_cast<size_t>(r * E + e)], MPFR_RNDN);
      mpfr_exp(s[e], s[e], MPFR_RNDN);
      mpfr_add_ui(s[e], s[e], 1, MPFR_RNDN);
      mpfr_ui_div(s[e], 1, s[e], MPFR_RNDN);
      mpfr_add_d(t, s[e], b[static_cast<size_t>(e)], MPFR_RNDN);
      sel[static_cast<size_t>(e)] = mpfr_get_d(t, MPFR_RNDN);
    }
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return sel[static_cast<size_t>(a)] > sel[static_cast<size_t>(c)]; });
    mpfr_set_ui(sum, 0, MPFR_RNDN);
    for (int64_t j = 0; j < k; ++j) mpfr_add(sum, sum, s[order[static_cast<size_t>(j)]], MPFR_RNDN);
    mpfr_add_d(sum, sum, 1e-20, MPFR_RNDN);
    for (int64_t j = 0; j < k; ++j) {
      ids.push_back(static_cast<double>(order[static_cast<size_t>(j)]));
      mpfr_div(t, s[order[static_cast<size_t>(j)]], sum, MPFR_RNDN);
      mpfr_mul_d(t, t, 2.5, MPFR_RNDN);
      w.push_back(mpfr_get_d(t, MPFR_RNDN));
    }
  }
  for (auto& x : s) mpfr_clear(x);
  mpfr_clears(sum, t, static_cast<mpfr_ptr>(nullptr));
  for (Tier tier : kTiers) {
    const MoeRouterReferenceResult r = moe_router_reference(tier, params(T, E, k, 1, 1, true, 2.5), f64({T, E}, z), f64({E}, b));
    EXPECT_EQ(r.ids, ids) << tier_name(tier);
    const double tol = tier == Tier::f64 ? 8.0 : 1.0;
    for (size_t i = 0; i < w.size(); ++i) ASSERT_LE(std::fabs(r.weights[i] - w[i]), tol * ulp(DType::f64, w[i])) << tier_name(tier) << " " << i;
  }
}

TEST(MoeRouterReference, BadParametersAndInputAreRefused) {
  const Tensor z = f64({1, 8}, std::vector<double>(8, 0.5)), b = f64({8}, std::vector<double>(8, 0.0));
  EXPECT_THROW(moe_router_reference(Tier::f64, params(1, 8, 2, 3, 1, true, 1.0), z, b), InputError);   // 3 does not divide 8
  EXPECT_THROW(moe_router_reference(Tier::f64, params(1, 8, 2, 4, 5, true, 1.0), z, b), InputError);   // topk_group > n_group
  EXPECT_THROW(moe_router_reference(Tier::f64, params(1, 8, 5, 4, 2, true, 1.0), z, b), InputError);   // k > 2 groups x 2
  EXPECT_THROW(moe_router_reference(Tier::f64, params(1, 8, 1, 8, 1, true, 1.0), z, b), InputError);   // groups of 1
  EXPECT_THROW(moe_router_reference(Tier::f64, params(1, 8, 2, 1, 1, true, 0.0), z, b), InputError);   // rsf 0
  EXPECT_THROW(moe_router_reference(Tier::f64, params(2, 8, 2, 1, 1, true, 1.0), z, b), InputError);   // logits not [2,8]
  EXPECT_THROW(moe_router_reference(Tier::f64, params(1, 8, 2, 1, 1, true, 1.0), z, f64({2}, {0, 0})), InputError);
  std::vector<double> bad(8, 0.5);
  bad[3] = std::nan("");
  EXPECT_THROW(moe_router_reference(Tier::f64, params(1, 8, 2, 1, 1, true, 1.0), f64({1, 8}, bad), b), InputError);
  EXPECT_THROW(moe_router_reference(Tier::f64, params(1, 8, 2, 1, 1, true, 1.0), z, f64({8}, {0, 0, 0, INFINITY, 0, 0, 0, 0})), InputError);
}

}  // namespace
}  // namespace dg
