// The swiglu reference (reference/swiglu.h): hand-derived values and the clamp's sides, every tier
// against MPFR at 256 bits computed here, and bad input.
#include "reference/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

Tensor row(const std::vector<double>& v) {
  Tensor t(DType::f64, {1, static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), v[i]);
  return t;
}
double silu(double g) { return g / (1 + std::exp(-g)); }

// [gate | up] = [0, 2, 20, -30 | 5, 3, 25, -40] with L = 10: the gate 20 is cut to 10, the gate -30
// is kept (the gate is clamped from above only), the ups 25 and -40 are cut to 10 and -10.
TEST(SwigluReference, TheClampIsAsymmetric) {
  const Tensor x = row({0, 2, 20, -30, 5, 3, 25, -40});
  for (Tier tier : kTiers) {
    const SwigluReferenceResult r = swiglu_reference(tier, {1, 4, 10.0}, x);
    ASSERT_EQ(r.y.size(), 4u);
    EXPECT_EQ(r.y[0], 0.0) << tier_name(tier);
    EXPECT_NEAR(r.y[1], silu(2) * 3, 1e-15) << tier_name(tier);
    EXPECT_NEAR(r.y[2], silu(10) * 10, 1e-13) << tier_name(tier);
    EXPECT_NEAR(r.y[3], silu(-30) * -10, 1e-25) << tier_name(tier);
    EXPECT_GT(r.y[3], 0.0);   // -30 e^-30 * -10: tiny and positive, not a clamped -10 * silu(-10)
    const SwigluReferenceResult open = swiglu_reference(tier, {1, 4, 0.0}, x);
    EXPECT_NEAR(open.y[2], silu(20) * 25, 1e-12) << tier_name(tier);
    EXPECT_NEAR(open.y[3], silu(-30) * -40, 1e-24) << tier_name(tier);
  }
}

// Every tier against silu(g) * u computed by MPFR at 256 bits: dd and MPFR within one ulp (rounded
// to odd), f64 within 4 (an exp, a division and two products).
TEST(SwigluReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const int64_t I = 257;
  std::mt19937_64 gen(3);
  std::normal_distribution<double> nd(0.0, 8.0);
  std::vector<double> v(static_cast<size_t>(2 * I));
  for (double& x : v) x = nd(gen);
  const Tensor x = row(v);
  std::vector<double> exact(static_cast<size_t>(I));
  mpfr_t g, e, t;
  mpfr_inits2(256, g, e, t, static_cast<mpfr_ptr>(nullptr));
  for (int64_t i = 0; i < I; ++i) {
    mpfr_set_d(g, v[static_cast<size_t>(i)], MPFR_RNDN);
    mpfr_neg(e, g, MPFR_RNDN);
    mpfr_exp(e, e, MPFR_RNDN);
    mpfr_add_ui(e, e, 1, MPFR_RNDN);
    mpfr_div(t, g, e, MPFR_RNDN);
    mpfr_mul_d(t, t, v[static_cast<size_t>(I + i)], MPFR_RNDN);
    exact[static_cast<size_t>(i)] = mpfr_get_d(t, MPFR_RNDN);
  }
  mpfr_clears(g, e, t, static_cast<mpfr_ptr>(nullptr));
  for (Tier tier : kTiers) {
    const SwigluReferenceResult r = swiglu_reference(tier, {1, I, 0.0}, x);
    const double tol = tier == Tier::f64 ? 4.0 : 1.0;
    for (size_t i = 0; i < exact.size(); ++i)
      ASSERT_LE(std::fabs(r.y[i] - exact[i]), tol * ulp(DType::f64, exact[i])) << tier_name(tier) << " element " << i;
  }
}

TEST(SwigluReference, BadInputIsRefused) {
  EXPECT_THROW(swiglu_reference(Tier::f64, {1, 3, 0.0}, row({1, 2, 3, 4})), InputError);   // not [1, 6]
  EXPECT_THROW(swiglu_reference(Tier::f64, {1, 2, -1.0}, row({1, 2, 3, 4})), InputError);  // negative limit
  EXPECT_THROW(swiglu_reference(Tier::f64, {1, 2, 0.0}, row({1, std::nan(""), 3, 4})), InputError);
  EXPECT_THROW(swiglu_reference(Tier::f64, {1, 2, 0.0}, row({1, INFINITY, 3, 4})), InputError);
}

}  // namespace
}  // namespace dg
