// The rmsnorm and add_rmsnorm references (reference/rmsnorm.h): hand-derived values, the residual
// rounded once to the dtype (ties to even), MPFR at 256 bits as an independent oracle of the tiers,
// and bad input.
#include "reference/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

// x = [3, 4], w = [1, 2], eps chosen so that mean(x^2) + eps = 12.5 + 3.5 = 16: r = 1/4 exactly,
// y = [0.75, 2].
TEST(RmsNormReference, HandDerivedRow) {
  const RmsNormParams p{1, 2, 3.5, DType::f64};
  const Tensor x = tensor(DType::f64, {1, 2}, {3, 4}), w = tensor(DType::f64, {2}, {1, 2});
  for (Tier tier : kTiers) {
    const RmsNormReferenceResult r = rmsnorm_reference(tier, p, x, nullptr, w);
    ASSERT_EQ(r.y.size(), 2u);
    EXPECT_EQ(r.y[0], 0.75) << tier_name(tier);
    EXPECT_EQ(r.y[1], 2.0) << tier_name(tier);
    EXPECT_TRUE(r.residual.empty());
  }
}

// The residual is rounded to the dtype before the norm squares it. In bf16 (8 significand bits) the
// values near 1 are 2^-7 apart: 1 + 2^-8 is a tie and goes to the even 1, 1 + 3 * 2^-8 is a tie and
// goes to the even 1 + 2^-6. With both entries of the row equal, y = s / sqrt(s^2 + eps) * w.
TEST(RmsNormReference, TheResidualSumIsRoundedOnceToTheDtypeTiesToEven) {
  const double eps = 1e-5;
  const RmsNormParams p{2, 2, eps, DType::bf16};
  const Tensor x = tensor(DType::bf16, {2, 2}, {1, 1, 1, 1});
  const Tensor res = tensor(DType::f64, {2, 2}, {0x1p-8, 0x1p-8, 3 * 0x1p-8, 3 * 0x1p-8});
  const Tensor w = tensor(DType::bf16, {2}, {1, 1});
  for (Tier tier : kTiers) {
    const RmsNormReferenceResult r = rmsnorm_reference(tier, p, x, &res, w);
    ASSERT_EQ(r.residual.size(), 4u);
    EXPECT_EQ(r.residual[0], 1.0) << tier_name(tier);
    EXPECT_EQ(r.residual[2], 1.0 + 0x1p-6) << tier_name(tier);
    for (int row = 0; row < 2; ++row) {
      const double s = r.residual[static_cast<size_t>(2 * row)];
      EXPECT_NEAR(r.y[static_cast<size_t>(2 * row)], s / std::sqrt(s * s + eps), 1e-15) << tier_name(tier);
    }
  }
  // The same sums in f32 are exact: nothing is rounded away.
  const RmsNormReferenceResult f = rmsnorm_reference(Tier::dd, {2, 2, eps, DType::f32}, x, &res, w);
  EXPECT_EQ(f.residual[0], 1.0 + 0x1p-8);
  EXPECT_EQ(f.residual[2], 1.0 + 3 * 0x1p-8);
}

// Every tier against MPFR at 512 bits computed here, independently, on random rows with a massive
// channel: the dd and MPFR tiers agree to the last bit of the double (rounded to odd, so at most one
// ulp apart from the correctly rounded value), f64 (a Dot2 sum, then a few roundings) to 8 ulps.
TEST(RmsNormReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const int64_t N = 3, D = 333;
  std::mt19937_64 gen(7);
  std::normal_distribution<double> nd;
  std::vector<double> xv(static_cast<size_t>(N * D)), wv(static_cast<size_t>(D));
  for (double& v : xv) v = nd(gen);
  xv[5] = 300.0;
  for (double& v : wv) v = 1 + 0.2 * nd(gen);
  const Tensor x = tensor(DType::f64, {N, D}, xv), w = tensor(DType::f64, {D}, wv);
  const RmsNormParams p{N, D, 1e-6, DType::f64};
  std::vector<double> exact(xv.size());
  mpfr_t ss, t, r;
  mpfr_inits2(512, ss, t, r, static_cast<mpfr_ptr>(nullptr));
  for (int64_t n = 0; n < N; ++n) {
    mpfr_set_zero(ss, 1);
    for (int64_t i = 0; i < D; ++i) {
      mpfr_set_d(t, xv[static_cast<size_t>(n * D + i)], MPFR_RNDN);
      mpfr_fma(ss, t, t, ss, MPFR_RNDN);
    }
    mpfr_div_si(ss, ss, D, MPFR_RNDN);
    mpfr_add_d(ss, ss, 1e-6, MPFR_RNDN);
    mpfr_rec_sqrt(r, ss, MPFR_RNDN);
    for (int64_t i = 0; i < D; ++i) {
      mpfr_mul_d(t, r, xv[static_cast<size_t>(n * D + i)], MPFR_RNDN);
      mpfr_mul_d(t, t, wv[static_cast<size_t>(i)], MPFR_RNDN);
      exact[static_cast<size_t>(n * D + i)] = mpfr_get_d(t, MPFR_RNDN);
    }
  }
  mpfr_clears(ss, t, r, static_cast<mpfr_ptr>(nullptr));
  for (Tier tier : kTiers) {
    const RmsNormReferenceResult got = rmsnorm_reference(tier, p, x, nullptr, w);
    const double tol_ulps = tier == Tier::f64 ? 8.0 : 1.0;
    for (size_t i = 0; i < exact.size(); ++i)
      ASSERT_LE(std::fabs(got.y[i] - exact[i]), tol_ulps * ulp(DType::f64, exact[i]))
          << tier_name(tier) << " element " << i << ": " << got.y[i] << " vs " << exact[i];
  }
}

TEST(RmsNormReference, BadInputIsRefused) {
  const Tensor x = tensor(DType::f32, {1, 2}, {1, 2}), w = tensor(DType::f32, {2}, {1, 1});
  EXPECT_THROW(rmsnorm_reference(Tier::f64, {1, 2, 0.0, DType::f32}, x, nullptr, w), InputError);   // eps = 0
  EXPECT_THROW(rmsnorm_reference(Tier::f64, {1, 3, 1e-5, DType::f32}, x, nullptr, w), InputError);  // shape
  const Tensor nan = tensor(DType::f32, {1, 2}, {1, std::nan("")});
  EXPECT_THROW(rmsnorm_reference(Tier::f64, {1, 2, 1e-5, DType::f32}, nan, nullptr, w), InputError);
  // An f16 residual stream overflows past 65504: refused, not normalized as Inf.
  const Tensor big = tensor(DType::f16, {1, 2}, {60000, 1}), res = tensor(DType::f16, {1, 2}, {60000, 1});
  try {
    rmsnorm_reference(Tier::f64, {1, 2, 1e-5, DType::f16}, big, &res, tensor(DType::f16, {2}, {1, 1}));
    FAIL() << "an overflowing residual sum was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("overflows f16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dg
