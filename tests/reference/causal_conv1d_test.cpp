// The reference of causal_conv1d (reference/causal_conv1d.h): hand-derived values, the tiers against
// each other, the tails, and input errors.
#include "reference/causal_conv1d.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "harness/cases/case.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

double silu(double z) { return z / (1 + std::exp(-z)); }

// D = 1, W = 2, weight [0.5, -0.25], state0 [2], x = [1, 3]:
//   h = [2, 1, 3];  z0 = 0.5*2 - 0.25*1 = 0.75;  z1 = 0.5*1 - 0.25*3 = -0.25;  state = [3].
TEST(CausalConv1dReference, HandDerivedCase) {
  ConvParams p{1, 2, 1, 2, false};
  Tensor x = f64({1, 2, 1}, {1, 3}), w = f64({1, 2}, {0.5, -0.25}), s0 = f64({1, 1, 1}, {2});
  for (Tier tier : kTiers) {
    ConvReferenceResult r = causal_conv1d_reference(tier, p, x, w, &s0);
    ASSERT_EQ(r.y.size(), 2u);
    EXPECT_EQ(r.y[0], 0.75) << tier_name(tier);
    EXPECT_EQ(r.y[1], -0.25) << tier_name(tier);
    ASSERT_EQ(r.state.size(), 1u);
    EXPECT_EQ(r.state[0], 3.0);
    p.silu = true;
    r = causal_conv1d_reference(tier, p, x, w, &s0);
    EXPECT_NEAR(r.y[0], silu(0.75), 4e-16) << tier_name(tier);
    EXPECT_NEAR(r.y[1], silu(-0.25), 4e-16) << tier_name(tier);
    p.silu = false;
  }
}

// Without a state the history starts with zeros; W - 1 > T keeps part of the old state.
TEST(CausalConv1dReference, ZeroStateAndShortSequences) {
  ConvParams p{1, 1, 2, 3, false};
  Tensor x = f64({1, 1, 2}, {5, 7}), w = f64({2, 3}, {1, 2, 4, 1, 1, 1});
  ConvReferenceResult r = causal_conv1d_reference(Tier::f64, p, x, w, nullptr);
  EXPECT_EQ(r.y[0], 4 * 5.0);   // channel 0: h = [0, 0, 5]
  EXPECT_EQ(r.y[1], 7.0);       // channel 1: h = [0, 0, 7]
  // state [B,D,W-1] = per channel the last two of h
  EXPECT_EQ(r.state, (std::vector<double>{0, 5, 0, 7}));
  Tensor s0 = f64({1, 2, 2}, {1, 2, 3, 4});
  r = causal_conv1d_reference(Tier::f64, p, x, w, &s0);
  EXPECT_EQ(r.y[0], 1 * 1 + 2 * 2 + 4 * 5.0);
  EXPECT_EQ(r.y[1], 3 + 4 + 7.0);
  EXPECT_EQ(r.state, (std::vector<double>{2, 5, 4, 7}));
}

// Each channel's weights summing to zero on a near-constant input: the f64 tier loses what the
// cancellation costs, the higher tiers agree with each other far below a double.
TEST(CausalConv1dReference, TiersAgreeUnderCancellation) {
  const int64_t T = 40, D = 8, W = 4;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> n(0, 1);
  Tensor x(DType::f64, {1, T, D}), w(DType::f64, {D, W});
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, 1 + 1e-6 * n(rng));
  for (int64_t d = 0; d < D; ++d) {
    double s = 0;
    for (int64_t k = 0; k + 1 < W; ++k) {
      w.set(d * W + k, n(rng));
      s += w.get(d * W + k);
    }
    w.set(d * W + W - 1, -s);
  }
  ConvParams p{1, T, D, W, true};
  ConvReferenceResult hi = causal_conv1d_reference(Tier::mpfr256, p, x, w, nullptr, true);
  ConvReferenceResult dd = causal_conv1d_reference(Tier::dd, p, x, w, nullptr, true);
  ConvReferenceResult lo = causal_conv1d_reference(Tier::f64, p, x, w, nullptr);
  double worst_dd = 0, worst_f64 = 0;
  for (size_t i = 0; i < hi.y.size(); ++i) {
    const double exact = hi.y[i] + hi.y_tail[2 * i] + hi.y_tail[2 * i + 1];
    const double dd_v = dd.y[i] + dd.y_tail[2 * i] + dd.y_tail[2 * i + 1];
    worst_dd = std::max(worst_dd, std::abs(dd_v - exact) / std::abs(exact));
    worst_f64 = std::max(worst_f64, std::abs(lo.y[i] - exact) / std::abs(exact));
    EXPECT_EQ(hi.y[i], dd.y[i]) << i;   // both round (to odd) to the same double
  }
  EXPECT_LT(worst_dd, 1e-20);
  EXPECT_LT(worst_f64, 1e-8);
  EXPECT_GT(worst_f64, 1e-16);   // the cancellation does cost f64 (the test would be blind otherwise)
}

TEST(CausalConv1dReference, InputErrors) {
  ConvParams p{1, 2, 1, 2, true};
  Tensor x = f64({1, 2, 1}, {1, NAN}), w = f64({1, 2}, {0.5, -0.25});
  EXPECT_THROW(causal_conv1d_reference(Tier::f64, p, x, w, nullptr), InputError);
  Tensor bad_w = f64({1, 3}, {1, 2, 3});
  x.set(1, 1.0);
  EXPECT_THROW(causal_conv1d_reference(Tier::f64, p, x, bad_w, nullptr), InputError);
}

}  // namespace
}  // namespace dg
