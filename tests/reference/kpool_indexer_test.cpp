// The kpool_indexer reference (reference/kpool_indexer.h): a hand-derived selection (the gated
// softmax per channel with ape, pools from the first valid token, the tail appended unscored, -1 in
// the rest), the tie rule, every tier against MPFR at 256 bits computed here, and bad input.
#include "reference/kpool_indexer.h"

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


// H = 1, D = 1 (scale 1), q = 1, w = 1: a pool's score is sum_j softmax_j(gate_j + ape_j) k_j (if > 0).
struct Tiny {
  KpoolIndexerParams p;
  std::vector<double> k, gate, ape = {0, 0, 0, 0};
  Tiny(int64_t L, int64_t topk) : k(static_cast<size_t>(L), 0.0), gate(static_cast<size_t>(L), 0.0) {
    p.B = 1, p.L = L, p.H = 1, p.D = 1, p.topk = topk;
  }
  std::vector<double> run(Tier tier, int64_t start, int64_t ctx) const {
    const KpoolInputs in = kpool_indexer_inputs(p, f64({1, 1, 1}, {1}), f64({1, 1}, {1}), f64({p.L, 1}, k), f64({p.L, 1}, gate),
                                                f64({4, 1}, ape), {ctx}, {start});
    return kpool_indexer_reference(tier, p, in).indices;
  }
};

// 11 tokens from start 1: pools {1..4} (mean of keys 1 = 1) and {5..8} (gate 50 on token 6: its key 3
// alone), tail {9, 10}. topk = 1 keeps pool {5..8}; then the tail; then -1 (4 + 3 slots).
TEST(KpoolIndexerReference, PoolsFromTheFirstValidTokenAndTheTailAppended) {
  Tiny t(12, 1);
  for (int i = 1; i <= 4; ++i) t.k[static_cast<size_t>(i)] = 1;
  t.k[6] = 3, t.gate[6] = 50, t.k[5] = -20;
  t.k[11] = 100;   // beyond the context: never read
  for (Tier tier : kTiers) {
    EXPECT_EQ(t.run(tier, 1, 11), (std::vector<double>{5, 6, 7, 8, 9, 10, -1})) << tier_name(tier);
    EXPECT_EQ(t.run(tier, 1, 4), (std::vector<double>{1, 2, 3, -1, -1, -1, -1})) << tier_name(tier);   // no pool, a tail of 3
  }
  // ape decides: with ape_0 = 60 the pool {5..8} weighs token 5 (key -20) and scores 0 < pool {1..4}.
  t.ape[0] = 60;
  EXPECT_EQ(t.run(Tier::dd, 1, 11), (std::vector<double>{1, 2, 3, 4, 9, 10, -1}));
}

// Two identical pools tie: the lower pool ranks first.
TEST(KpoolIndexerReference, TiesGoToTheLowerPool) {
  Tiny t(12, 1);
  for (int i = 0; i < 4; ++i) t.k[static_cast<size_t>(4 + i)] = t.k[static_cast<size_t>(8 + i)] = 2.0 + i;
  for (Tier tier : kTiers) EXPECT_EQ(t.run(tier, 0, 12), (std::vector<double>{4, 5, 6, 7, -1, -1, -1})) << tier_name(tier);
}

// Every tier's pool scores against MPFR at 256 bits on random inputs: within one ulp (dd, MPFR;
// rounded to odd) or 64 (f64); the selected pools agree with MPFR's ranking.
TEST(KpoolIndexerReference, TiersAgreeWithAnIndependentMpfrComputation) {
  KpoolIndexerParams p;
  p.B = 1, p.L = 64, p.H = 3, p.D = 8, p.topk = 5;
  std::mt19937_64 gen(3);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> q(static_cast<size_t>(p.H * p.D)), w(static_cast<size_t>(p.H)), k(static_cast<size_t>(p.L * p.D)),
      g(k.size()), ape(static_cast<size_t>(4 * p.D));
  for (auto* v : {&q, &w, &k, &g, &ape})
    for (double& x : *v) x = nd(gen);
  const int64_t start = 2, ctx = 63, P = (ctx - start) / 4;
  std::vector<double> want(static_cast<size_t>(P));
  mpfr_t e[4], sum, key, dot, acc, t;
  for (auto& x : e) mpfr_init2(x, 256);
  mpfr_inits2(256, sum, key, dot, acc, t, static_cast<mpfr_ptr>(nullptr));
  std::vector<mpfr_t> keys(static_cast<size_t>(p.D));
  for (auto& x : keys) mpfr_init2(x, 256);
  for (int64_t pool = 0; pool < P; ++pool) {
    const int64_t t0 = start + 4 * pool;
    for (int64_t c = 0; c < p.D; ++c) {
      mpfr_set_ui(sum, 0, MPFR_RNDN);
      for (int j = 0; j < 4; ++j) {
        mpfr_set_d(e[j], g[static_cast<size_t>((t0 + j) * p.D + c)], MPFR_RNDN);
        mpfr_add_d(e[j], e[j], ape[static_cast<size_t>(j * p.D + c)], MPFR_RNDN);
        mpfr_exp(e[j], e[j], MPFR_RNDN);
        mpfr_add(sum, sum, e[j], MPFR_RNDN);
      }
      mpfr_set_ui(keys[static_cast<size_t>(c)], 0, MPFR_RNDN);
      for (int j = 0; j < 4; ++j) {
        mpfr_div(t, e[j], sum, MPFR_RNDN);
        mpfr_mul_d(t, t, k[static_cast<size_t>((t0 + j) * p.D + c)], MPFR_RNDN);
        mpfr_add(keys[static_cast<size_t>(c)], keys[static_cast<size_t>(c)], t, MPFR_RNDN);
      }
    }
    mpfr_set_ui(acc, 0, MPFR_RNDN);
    for (int64_t h = 0; h < p.H; ++h) {
      mpfr_set_ui(dot, 0, MPFR_RNDN);
      for (int64_t c = 0; c < p.D; ++c) {
        mpfr_mul_d(t, keys[static_cast<size_t>(c)], q[static_cast<size_t>(h * p.D + c)], MPFR_RNDN);
        mpfr_add(dot, dot, t, MPFR_RNDN);
      }
      mpfr_set_ui(t, static_cast<unsigned long>(p.D), MPFR_RNDN);
      mpfr_rec_sqrt(t, t, MPFR_RNDN);
      mpfr_mul(dot, dot, t, MPFR_RNDN);
      if (mpfr_sgn(dot) <= 0) continue;
      mpfr_mul_d(dot, dot, w[static_cast<size_t>(h)], MPFR_RNDN);
      mpfr_add(acc, acc, dot, MPFR_RNDN);
    }
    want[static_cast<size_t>(pool)] = mpfr_get_d(acc, MPFR_RNDN);
  }
  for (auto& x : e) mpfr_clear(x);
  for (auto& x : keys) mpfr_clear(x);
  mpfr_clears(sum, key, dot, acc, t, static_cast<mpfr_ptr>(nullptr));
  std::vector<int64_t> order(static_cast<size_t>(P));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return want[static_cast<size_t>(a)] > want[static_cast<size_t>(c)]; });
  const KpoolInputs in = kpool_indexer_inputs(p, f64({1, p.H, p.D}, q), f64({1, p.H}, w), f64({p.L, p.D}, k), f64({p.L, p.D}, g),
                                              f64({4, p.D}, ape), {ctx}, {start});
  for (Tier tier : kTiers) {
    std::vector<double> y, tail;
    kpool_indexer_pool_scores(tier, p, in, P, y, tail);
    const double tol = tier == Tier::f64 ? 64.0 : 1.0;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_LE(std::fabs(y[i] - want[i]), tol * ulp(DType::f64, want[i])) << tier_name(tier) << " " << i;
    const std::vector<double> ids = kpool_indexer_reference(tier, p, in).indices;
    for (int64_t j = 0; j < p.topk; ++j)
      EXPECT_EQ(ids[static_cast<size_t>(4 * j)], static_cast<double>(start + 4 * order[static_cast<size_t>(j)])) << tier_name(tier);
    EXPECT_EQ(ids[20], 62.0) << tier_name(tier);   // the tail: token 62
  }
}

TEST(KpoolIndexerReference, BadParametersAndInputAreRefused) {
  Tiny t(12, 1);
  EXPECT_THROW(t.run(Tier::f64, 5, 5), InputError);    // start == ctx
  EXPECT_THROW(t.run(Tier::f64, -1, 5), InputError);
  EXPECT_THROW(t.run(Tier::f64, 0, 13), InputError);   // ctx > L
  t.p.topk = 0;
  EXPECT_THROW(t.run(Tier::f64, 0, 12), InputError);
  Tiny bad(12, 1);
  bad.gate[3] = std::nan("");
  EXPECT_THROW(bad.run(Tier::f64, 0, 12), InputError);
  Tiny inf(12, 1);
  inf.ape[1] = INFINITY;
  EXPECT_THROW(inf.run(Tier::f64, 0, 12), InputError);
}

}  // namespace
}  // namespace dg
