// The gemm reference (reference/gemm.h): hand-derived values, the f64 tier's Dot2 on a sum a plain
// double loop gets wrong, every tier against MPFR at 256 bits computed here, results independent of
// the thread count, and bad input.
#include "reference/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"
#include "harness/core/threads.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

// x = [[1, 2, 3], [4, 5, 6]], w = [[1, 0, -1], [0.5, 0.5, 0.5]] (nn.Linear's [N,K]), bias [10, -1]:
// y = [[1 - 3 + 10, 3 - 1], [4 - 6 + 10, 7.5 - 1]] = [[8, 2], [8, 6.5]], exact in every tier.
TEST(GemmReference, HandDerivedValues) {
  const Tensor x = f64({2, 3}, {1, 2, 3, 4, 5, 6}), w = f64({2, 3}, {1, 0, -1, 0.5, 0.5, 0.5}), b = f64({2}, {10, -1});
  for (Tier tier : kTiers) {
    const GemmReferenceResult r = gemm_reference(tier, {2, 2, 3, true}, x, w, &b);
    ASSERT_EQ(r.y.size(), 4u);
    EXPECT_EQ(r.y[0], 8.0) << tier_name(tier);
    EXPECT_EQ(r.y[1], 2.0) << tier_name(tier);
    EXPECT_EQ(r.y[2], 8.0) << tier_name(tier);
    EXPECT_EQ(r.y[3], 6.5) << tier_name(tier);
    const GemmReferenceResult nb = gemm_reference(tier, {2, 2, 3, false}, x, w, nullptr);
    EXPECT_EQ(nb.y[0], -2.0) << tier_name(tier);
    EXPECT_EQ(nb.y[3], 7.5) << tier_name(tier);
  }
}

// 1e16 + 1 - 1e16 in increasing k: a plain double sum gives 0 (1e16 + 1 rounds to 1e16); every tier
// gives the exact 1, the f64 tier by Dot2's compensation.
TEST(GemmReference, TheF64TierSumsByDot2) {
  const Tensor x = f64({1, 3}, {1e16, 1, -1e16}), w = f64({1, 3}, {1, 1, 1});
  for (Tier tier : kTiers) EXPECT_EQ(gemm_reference(tier, {1, 1, 3, false}, x, w, nullptr).y[0], 1.0) << tier_name(tier);
}

// Every tier against sum_k x w (+ b) computed by MPFR at 256 bits here (every product and sum exact
// at these sizes), on rows with a massive channel and a partial column block (N = 37): dd and MPFR
// within one ulp (rounded to odd), f64 (Dot2 plus one TwoSum for the bias) within 2.
TEST(GemmReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const int64_t M = 3, N = 37, K = 333;
  std::mt19937_64 gen(11);
  std::normal_distribution<double> nd;
  std::vector<double> xv(static_cast<size_t>(M * K)), wv(static_cast<size_t>(N * K)), bv(static_cast<size_t>(N));
  for (double& v : xv) v = nd(gen);
  xv[5] = 300.0;
  for (double& v : wv) v = nd(gen) / 18;
  for (double& v : bv) v = 0.1 * nd(gen);
  const Tensor x = f64({M, K}, xv), w = f64({N, K}, wv), b = f64({N}, bv);
  std::vector<double> exact(static_cast<size_t>(M * N));
  mpfr_t acc, t;
  mpfr_inits2(256, acc, t, static_cast<mpfr_ptr>(nullptr));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      mpfr_set_d(acc, bv[static_cast<size_t>(n)], MPFR_RNDN);
      for (int64_t k = 0; k < K; ++k) {
        mpfr_set_d(t, xv[static_cast<size_t>(m * K + k)], MPFR_RNDN);
        mpfr_mul_d(t, t, wv[static_cast<size_t>(n * K + k)], MPFR_RNDN);
        mpfr_add(acc, acc, t, MPFR_RNDN);
      }
      exact[static_cast<size_t>(m * N + n)] = mpfr_get_d(acc, MPFR_RNDN);
    }
  mpfr_clears(acc, t, static_cast<mpfr_ptr>(nullptr));
  for (Tier tier : kTiers) {
    const GemmReferenceResult r = gemm_reference(tier, {M, N, K, true}, x, w, &b);
    const double tol = tier == Tier::f64 ? 2.0 : 1.0;
    for (size_t i = 0; i < exact.size(); ++i)
      ASSERT_LE(std::fabs(r.y[i] - exact[i]), tol * ulp(DType::f64, exact[i]))
          << tier_name(tier) << " element " << i << ": " << r.y[i] << " vs " << exact[i];
  }
}

// Each output's k-loop runs in one thread in increasing k: one thread and two give the same bits.
TEST(GemmReference, ResultsDoNotDependOnTheThreadCount) {
  const int64_t M = 2, N = 45, K = 100;
  std::mt19937_64 gen(5);
  std::normal_distribution<double> nd;
  std::vector<double> xv(static_cast<size_t>(M * K)), wv(static_cast<size_t>(N * K));
  for (double& v : xv) v = nd(gen);
  for (double& v : wv) v = nd(gen);
  const Tensor x = f64({M, K}, xv), w = f64({N, K}, wv);
  for (Tier tier : {Tier::f64, Tier::dd}) {
    set_num_threads(1);
    const GemmReferenceResult one = gemm_reference(tier, {M, N, K, false}, x, w, nullptr, true);
    set_num_threads(2);
    const GemmReferenceResult two = gemm_reference(tier, {M, N, K, false}, x, w, nullptr, true);
    set_num_threads(0);
    EXPECT_EQ(one.y, two.y) << tier_name(tier);
    EXPECT_EQ(one.y_tail, two.y_tail) << tier_name(tier);
  }
}

TEST(GemmReference, BadInputIsRefused) {
  const Tensor x = f64({1, 2}, {1, 2}), w = f64({2, 2}, {1, 1, 1, 1}), bad_b = f64({3}, {0, 0, 0});
  EXPECT_THROW(gemm_reference(Tier::f64, {1, 2, 3, false}, x, w, nullptr), InputError);   // K: shapes
  EXPECT_THROW(gemm_reference(Tier::f64, {1, 0, 2, false}, x, w, nullptr), InputError);   // N = 0
  EXPECT_THROW(gemm_reference(Tier::f64, {1, 2, 2, true}, x, w, nullptr), InputError);    // bias missing
  EXPECT_THROW(gemm_reference(Tier::f64, {1, 2, 2, true}, x, w, &bad_b), InputError);     // bias [3]
  const Tensor nan_x = f64({1, 2}, {1, std::nan("")});
  EXPECT_THROW(gemm_reference(Tier::dd, {1, 2, 2, false}, nan_x, w, nullptr), InputError);
  const Tensor inf_w = f64({2, 2}, {1, 1, 1, INFINITY});
  try {
    gemm_reference(Tier::f64, {1, 2, 2, false}, x, inf_w, nullptr);
    FAIL() << "a non-finite weight was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'w' has a non-finite value at element 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dg
