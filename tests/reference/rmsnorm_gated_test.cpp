// The reference of rmsnorm_gated (reference/rmsnorm_gated.h): hand-derived values, the tiers against
// each other, and input errors.
#include "reference/rmsnorm_gated.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "harness/cases/case.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

// D = 2, x = [3, 4], eps = 0.5: mean x^2 + eps = 13; gate 0 -> sigmoid 1/2; weight [1, 2].
TEST(RmsnormGatedReference, HandDerivedCase) {
  NormParams p{1, 2, 0.5};
  Tensor x = f64({1, 2}, {3, 4}), g = f64({1, 2}, {0, 0}), w = f64({2}, {1, 2});
  const double r = 1 / std::sqrt(13.0);
  for (Tier tier : kTiers) {
    NormReferenceResult y = rmsnorm_gated_reference(tier, p, x, g, w);
    EXPECT_NEAR(y.y[0], 3 * r * 0.5, 4e-16) << tier_name(tier);
    EXPECT_NEAR(y.y[1], 4 * r * 2 * 0.5, 4e-16) << tier_name(tier);
  }
  // eps dominates a tiny row: y = x / sqrt(eps) * w * sigmoid(g)
  NormParams pe{1, 2, 1e-2};
  Tensor tiny = f64({1, 2}, {1e-6, -1e-6}), big_gate = f64({1, 2}, {800, -800});
  NormReferenceResult y = rmsnorm_gated_reference(Tier::mpfr127, pe, tiny, big_gate, w);
  EXPECT_NEAR(y.y[0], 1e-6 / std::sqrt(1e-2 + 1e-12), 1e-20);
  // sigmoid(-800) = e^-800 underflows a double: the correctly rounded result is 0 (or a subnormal)
  EXPECT_LE(std::abs(y.y[1]), 1e-300);
}

TEST(RmsnormGatedReference, TiersAgree) {
  const int64_t N = 16, D = 64;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> n(0, 1);
  Tensor x(DType::f64, {N, D}), g(DType::f64, {N, D}), w(DType::f64, {D});
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.05 * n(rng));
  for (int64_t i = 0; i < g.numel(); ++i) g.set(i, n(rng));
  for (int64_t i = 0; i < D; ++i) w.set(i, 1 + 0.1 * n(rng));
  NormParams p{N, D, 1e-5};
  NormReferenceResult hi = rmsnorm_gated_reference(Tier::mpfr256, p, x, g, w, true);
  for (Tier tier : {Tier::f64, Tier::dd, Tier::mpfr127}) {
    NormReferenceResult lo = rmsnorm_gated_reference(tier, p, x, g, w);
    double worst = 0;
    for (size_t i = 0; i < hi.y.size(); ++i) worst = std::max(worst, std::abs(lo.y[i] - hi.y[i]) / std::abs(hi.y[i]));
    EXPECT_LT(worst, tier == Tier::f64 ? 1e-14 : 4.5e-16) << tier_name(tier);
  }
}

TEST(RmsnormGatedReference, InputErrors) {
  NormParams p{1, 2, 1e-5};
  Tensor x = f64({1, 2}, {3, INFINITY}), g = f64({1, 2}, {0, 0}), w = f64({2}, {1, 2});
  EXPECT_THROW(rmsnorm_gated_reference(Tier::f64, p, x, g, w), InputError);
  Tensor x_ok = f64({1, 2}, {3, 4}), short_w = f64({1}, {1});
  EXPECT_THROW(rmsnorm_gated_reference(Tier::f64, p, x_ok, g, short_w), InputError);
}

}  // namespace
}  // namespace dg
