// The dsa_indexer reference (reference/dsa_indexer.h): a hand-derived selection (ReLU per head, the
// weights outside it, the causal context, -1 beyond it), the tie rule, every tier against MPFR at
// 256 bits computed here, and bad parameters and input.
#include "reference/dsa_indexer.h"

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

DsaIndexerParams params(int64_t B, int64_t L, int64_t H, int64_t D, int64_t topk) {
  DsaIndexerParams p;
  p.B = B, p.L = L, p.H = H, p.D = D, p.topk = topk;
  return p;
}

// H = 2, D = 2 (scale 1/2), q_0 = (1, 0), q_1 = (0, 1), w = (2, -1): I_s = ReLU(k_s0) - ReLU(k_s1) / 2.
// keys (3, 0) -> 3, (1, 4) -> -1, (-5, -5) -> 0 (both heads clipped), (2, 2) -> 1, (9, 0) future.
TEST(DsaIndexerReference, TheWeightsMultiplyEachHeadsReLU) {
  const Tensor q = f64({1, 2, 2}, {1, 0, 0, 1}), w = f64({1, 2}, {2, -1});
  const Tensor k = f64({5, 2}, {3, 0, 1, 4, -5, -5, 2, 2, 9, 0});
  for (Tier tier : kTiers) {
    const DsaIndexerReferenceResult r = dsa_indexer_reference(tier, params(1, 5, 2, 2, 3), q, k, w, {4});
    EXPECT_EQ(r.indices, (std::vector<double>{0, 3, 2})) << tier_name(tier);
    EXPECT_EQ(r.scores, (std::vector<double>{3, 1, 0})) << tier_name(tier);
    const DsaIndexerReferenceResult short_ctx = dsa_indexer_reference(tier, params(1, 5, 2, 2, 3), q, k, w, {2});
    EXPECT_EQ(short_ctx.indices, (std::vector<double>{0, 1, -1})) << tier_name(tier);   // -1 beyond the context
    EXPECT_EQ(short_ctx.scores, (std::vector<double>{3, -1, 0})) << tier_name(tier);
  }
}

// Equal scores: the lower key index ranks first (keys 1 and 3 are copies; topk = 2 keeps 0 and 1).
TEST(DsaIndexerReference, TiesGoToTheLowerIndex) {
  const Tensor q = f64({1, 1, 2}, {1, 1}), w = f64({1, 1}, {1});
  const Tensor k = f64({4, 2}, {5, 5, 1, 2, 0, 0, 1, 2});
  for (Tier tier : kTiers)
    EXPECT_EQ(dsa_indexer_reference(tier, params(1, 4, 1, 2, 2), q, k, w, {4}).indices, (std::vector<double>{0, 1}))
        << tier_name(tier);
}

// Every tier against the scores computed with MPFR at 256 bits: the same indices (the random scores'
// gaps are far above every tier's error), scores within one ulp (dd, MPFR; rounded to odd) or 64 (f64).
TEST(DsaIndexerReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const int64_t B = 2, L = 40, H = 4, D = 16, topk = 16;
  std::mt19937_64 gen(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> q(static_cast<size_t>(B * H * D)), k(static_cast<size_t>(L * D)), w(static_cast<size_t>(B * H));
  for (auto* v : {&q, &k, &w})
    for (double& x : *v) x = nd(gen);
  const std::vector<int64_t> ctx = {40, 25};
  std::vector<double> ids(static_cast<size_t>(B * topk), -1.0), sc(ids.size(), 0.0);
  mpfr_t acc, dot, t, scale;
  mpfr_inits2(256, acc, dot, t, scale, static_cast<mpfr_ptr>(nullptr));
  mpfr_set_ui(scale, static_cast<unsigned long>(H * D), MPFR_RNDN);
  mpfr_rec_sqrt(scale, scale, MPFR_RNDN);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> s(static_cast<size_t>(ctx[static_cast<size_t>(b)]));
    for (size_t j = 0; j < s.size(); ++j) {
      mpfr_set_ui(acc, 0, MPFR_RNDN);
      for (int64_t h = 0; h < H; ++h) {
        mpfr_set_ui(dot, 0, MPFR_RNDN);
        for (int64_t d = 0; d < D; ++d) {
          mpfr_set_d(t, q[static_cast<size_t>((b * H + h) * D + d)], MPFR_RNDN);
          mpfr_mul_d(t, t, k[j * D + static_cast<size_t>(d)], MPFR_RNDN);
          mpfr_add(dot, dot, t, MPFR_RNDN);
        }
        if (mpfr_sgn(dot) <= 0) continue;
        mpfr_mul_d(dot, dot, w[static_cast<size_t>(b * H + h)], MPFR_RNDN);
        mpfr_mul(dot, dot, scale, MPFR_RNDN);
        mpfr_add(acc, acc, dot, MPFR_RNDN);
      }
      s[j] = mpfr_get_d(acc, MPFR_RNDN);
    }
    std::vector<int64_t> order(s.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return s[static_cast<size_t>(a)] > s[static_cast<size_t>(c)]; });
    for (int64_t j = 0; j < std::min<int64_t>(topk, static_cast<int64_t>(s.size())); ++j) {
      ids[static_cast<size_t>(b * topk + j)] = static_cast<double>(order[static_cast<size_t>(j)]);
      sc[static_cast<size_t>(b * topk + j)] = s[static_cast<size_t>(order[static_cast<size_t>(j)])];
    }
  }
  mpfr_clears(acc, dot, t, scale, static_cast<mpfr_ptr>(nullptr));
  for (Tier tier : kTiers) {
    const DsaIndexerReferenceResult r =
        dsa_indexer_reference(tier, params(B, L, H, D, topk), f64({B, H, D}, q), f64({L, D}, k), f64({B, H}, w), ctx);
    EXPECT_EQ(r.indices, ids) << tier_name(tier);
    const double tol = tier == Tier::f64 ? 64.0 : 1.0;
    for (size_t i = 0; i < sc.size(); ++i)
      ASSERT_LE(std::fabs(r.scores[i] - sc[i]), tol * ulp(DType::f64, sc[i])) << tier_name(tier) << " " << i;
  }
}

TEST(DsaIndexerReference, BadParametersAndInputAreRefused) {
  const Tensor q = f64({1, 2, 2}, std::vector<double>(4, 0.5)), w = f64({1, 2}, {1, 1});
  const Tensor k = f64({3, 2}, std::vector<double>(6, 0.25));
  EXPECT_THROW(dsa_indexer_reference(Tier::f64, params(1, 3, 2, 2, 0), q, k, w, {3}), InputError);   // topk 0
  EXPECT_THROW(dsa_indexer_reference(Tier::f64, params(1, 3, 2, 2, 2), q, k, w, {4}), InputError);   // ctx > L
  EXPECT_THROW(dsa_indexer_reference(Tier::f64, params(1, 3, 2, 2, 2), q, k, w, {-1}), InputError);
  EXPECT_THROW(dsa_indexer_reference(Tier::f64, params(1, 3, 2, 2, 2), q, k, w, {3, 3}), InputError);   // ctx not [B]
  EXPECT_THROW(dsa_indexer_reference(Tier::f64, params(1, 4, 2, 2, 2), q, k, w, {3}), InputError);   // k not [L,D]
  EXPECT_THROW(dsa_indexer_reference(Tier::f64, params(1, 3, 2, 2, 2), q, k, f64({1, 1}, {1}), {3}), InputError);
  std::vector<double> bad(6, 0.25);
  bad[4] = std::nan("");
  EXPECT_THROW(dsa_indexer_reference(Tier::f64, params(1, 3, 2, 2, 2), q, f64({3, 2}, bad), w, {3}), InputError);
  EXPECT_THROW(dsa_indexer_reference(Tier::f64, params(1, 3, 2, 2, 2), q, k, f64({1, 2}, {1, INFINITY}), {3}), InputError);
}

}  // namespace
}  // namespace dg
