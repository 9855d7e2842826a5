// The moe_combine reference (reference/moe_combine.h): hand-derived values of both rsf placements
// (the f32 rounding of rsf * w where rsf scales the weights), every tier against MPFR at 256 bits
// computed here, bad input.
#include "reference/moe_combine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

// T = 1, k = 2, H = 2: E = [[1, 2], [4, -8]], w = [0.5, 0.25], S = [10, 20], rsf = 2:
//   y = [2 (0.5 + 1) + 10, 2 (1 - 2) + 20] = [13, 18] on either side, exact in every tier; no shared:
//   [3, -2]. rsf = 0.1 on the weights: a_j = fl32(fl32(0.1) w_j), which differs from 0.1 w_j.
TEST(MoeCombineReference, HandDerivedValues) {
  const Tensor e = f64({1, 2, 2}, {1, 2, 4, -8}), w = tensor(DType::f32, {1, 2}, {0.5, 0.25}), s = f64({1, 2}, {10, 20});
  for (Tier tier : kTiers)
    for (bool on_output : {false, true}) {
      const MoeCombineReferenceResult r = moe_combine_reference(tier, {1, 2, 2, 2.0, on_output, true}, e, w, &s);
      EXPECT_EQ(r.y[0], 13.0) << tier_name(tier);
      EXPECT_EQ(r.y[1], 18.0) << tier_name(tier);
      const MoeCombineReferenceResult n = moe_combine_reference(tier, {1, 2, 2, 2.0, on_output, false}, e, w, nullptr);
      EXPECT_EQ(n.y[0], 3.0) << tier_name(tier);
      EXPECT_EQ(n.y[1], -2.0) << tier_name(tier);
    }
  const float r32 = 0.1f;
  const double a0 = static_cast<float>(static_cast<double>(r32) * 0.5), a1 = static_cast<float>(static_cast<double>(r32) * 0.25);
  const MoeCombineReferenceResult on_w = moe_combine_reference(Tier::dd, {1, 2, 2, 0.1, false, false}, e, w, nullptr);
  EXPECT_EQ(on_w.y[0], a0 * 1 + a1 * 4);
  const MoeCombineReferenceResult on_o = moe_combine_reference(Tier::dd, {1, 2, 2, 0.1, true, false}, e, w, nullptr);
  EXPECT_EQ(on_o.y[0], static_cast<double>(r32) * 1.5);
}

// Random bf16-like outputs, f32 weights and a shared row against the sum computed by MPFR at 256 bits
// (exact at these sizes): dd and MPFR within one ulp (rounded to odd), f64 (Dot2) within 2.
TEST(MoeCombineReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const int64_t T = 3, k = 8, H = 37;
  std::mt19937_64 gen(3);
  std::normal_distribution<double> nd;
  std::vector<double> ev(static_cast<size_t>(T * k * H)), wv(static_cast<size_t>(T * k)), sv(static_cast<size_t>(T * H));
  for (double& v : ev) v = round_to(DType::bf16, 3 * nd(gen));
  for (double& v : wv) v = static_cast<float>(std::fabs(nd(gen)) / 4);
  for (double& v : sv) v = round_to(DType::bf16, 50 * nd(gen));
  const Tensor e = f64({T, k, H}, ev), w = tensor(DType::f32, {T, k}, wv), s = f64({T, H}, sv);
  for (bool on_output : {false, true}) {
    const MoeCombineParams p{T, k, H, 2.446, on_output, true};
    std::vector<double> exact(static_cast<size_t>(T * H));
    mpfr_t acc, t;
    mpfr_inits2(256, acc, t, static_cast<mpfr_ptr>(nullptr));
    for (int64_t tt = 0; tt < T; ++tt)
      for (int64_t h = 0; h < H; ++h) {
        mpfr_set_zero(acc, 1);
        for (int64_t j = 0; j < k; ++j) {
          const double wj = wv[static_cast<size_t>(tt * k + j)];
          mpfr_set_d(t, on_output ? wj : static_cast<float>(static_cast<double>(2.446f) * wj), MPFR_RNDN);
          mpfr_mul_d(t, t, ev[static_cast<size_t>((tt * k + j) * H + h)], MPFR_RNDN);
          mpfr_add(acc, acc, t, MPFR_RNDN);
        }
        if (on_output) mpfr_mul_d(acc, acc, static_cast<double>(2.446f), MPFR_RNDN);
        mpfr_add_d(acc, acc, sv[static_cast<size_t>(tt * H + h)], MPFR_RNDN);
        exact[static_cast<size_t>(tt * H + h)] = mpfr_get_d(acc, MPFR_RNDN);
      }
    mpfr_clears(acc, t, static_cast<mpfr_ptr>(nullptr));
    for (Tier tier : kTiers) {
      const MoeCombineReferenceResult r = moe_combine_reference(tier, p, e, w, &s);
      const double tol = tier == Tier::f64 ? 2.0 : 1.0;
      for (size_t i = 0; i < exact.size(); ++i)
        ASSERT_LE(std::fabs(r.y[i] - exact[i]), tol * ulp(DType::f64, exact[i]))
            << tier_name(tier) << " on_output " << on_output << " element " << i << ": " << r.y[i] << " vs " << exact[i];
    }
  }
}

TEST(MoeCombineReference, BadInputIsRefused) {
  const Tensor e = f64({1, 2, 2}, {1, 2, 3, 4}), w = tensor(DType::f32, {1, 2}, {0.5, 0.5}), s = f64({1, 2}, {0, 0});
  EXPECT_THROW(moe_combine_reference(Tier::f64, {1, 3, 2, 1.0, false, true}, e, w, &s), InputError);    // k: shapes
  EXPECT_THROW(moe_combine_reference(Tier::f64, {1, 2, 2, 1.0, false, true}, e, w, nullptr), InputError);   // shared missing
  EXPECT_THROW(moe_combine_reference(Tier::f64, {1, 2, 2, NAN, false, true}, e, w, &s), InputError);     // rsf
  const Tensor nan_e = f64({1, 2, 2}, {1, 2, std::nan(""), 4});
  try {
    moe_combine_reference(Tier::dd, {1, 2, 2, 1.0, false, true}, nan_e, w, &s);
    FAIL() << "a NaN expert output was accepted";
  } catch (const InputError& ex) {
    EXPECT_NE(std::string(ex.what()).find("'expert_out' has a non-finite value at element 2"), std::string::npos) << ex.what();
  }
}

}  // namespace
}  // namespace dg
