// The rope reference (reference/rope.h) and the double-double sin/cos under it
// (reference/real/dd_trig.h): hand-derived rotations, the pairings and partial rotary, every tier
// against MPFR at 256 bits computed here at positions past 2^20 and near 2^24, and bad input.
#include "reference/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"
#include "reference/real/dd_trig.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256, Tier::f128};

Tensor positions(const std::vector<int64_t>& p) {
  Tensor t(DType::i64, {static_cast<int64_t>(p.size())});
  for (size_t i = 0; i < p.size(); ++i) t.data<int64_t>()[i] = p[i];
  return t;
}

// One head of D = 6 with d_rope = 4 at position 1, theta 1e4: pair 0 turns by 1 rad, pair 1 by
// 1e4^(-1/2) = 0.01 rad; dims 4 and 5 pass through. NeoX pairs (0,2), (1,3); GPT-J (0,1), (2,3).
TEST(RopeReference, PairingsAndPartialRotaryByHand) {
  const Tensor x = f64({1, 1, 6}, {1, 2, 3, 4, 5, -7});
  for (Tier tier : kTiers) {
    const RopeReferenceResult n = rope_reference(tier, {1, 1, 6, 4, RopeStyle::neox, 1e4}, x, positions({1}));
    EXPECT_NEAR(n.y[0], 1 * std::cos(1.0) - 3 * std::sin(1.0), 1e-15) << tier_name(tier);
    EXPECT_NEAR(n.y[2], 3 * std::cos(1.0) + 1 * std::sin(1.0), 1e-15) << tier_name(tier);
    EXPECT_NEAR(n.y[1], 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-15) << tier_name(tier);
    EXPECT_NEAR(n.y[3], 4 * std::cos(0.01) + 2 * std::sin(0.01), 1e-15) << tier_name(tier);
    EXPECT_EQ(n.y[4], 5.0);
    EXPECT_EQ(n.y[5], -7.0);
    const RopeReferenceResult j = rope_reference(tier, {1, 1, 6, 4, RopeStyle::gptj, 1e4}, x, positions({1}));
    EXPECT_NEAR(j.y[0], 1 * std::cos(1.0) - 2 * std::sin(1.0), 1e-15) << tier_name(tier);
    EXPECT_NEAR(j.y[1], 2 * std::cos(1.0) + 1 * std::sin(1.0), 1e-15) << tier_name(tier);
    EXPECT_NEAR(j.y[2], 3 * std::cos(0.01) - 4 * std::sin(0.01), 1e-15) << tier_name(tier);
    EXPECT_NEAR(j.y[3], 4 * std::cos(0.01) + 3 * std::sin(0.01), 1e-15) << tier_name(tier);
    EXPECT_EQ(j.y[5], -7.0);
    // position 0 is the identity, exactly
    const RopeReferenceResult z = rope_reference(tier, {1, 1, 6, 4, RopeStyle::gptj, 8e6}, x, positions({0}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(z.y[static_cast<size_t>(i)], x.get(i)) << tier_name(tier);
  }
}

// y by MPFR at 256 bits: inv_freq = theta^(-2i/d_rope), the angle, sin and cos (MPFR reduces exactly).
std::vector<double> mpfr_rope(const RopeParams& p, const std::vector<double>& x, const std::vector<int64_t>& pos) {
  std::vector<double> y(x);
  mpfr_t e, inv, phi, s, c, ya, t;
  mpfr_inits2(256, e, inv, phi, s, c, ya, t, static_cast<mpfr_ptr>(nullptr));
  for (int64_t tok = 0; tok < p.T; ++tok)
    for (int64_t i = 0; i < p.d_rope / 2; ++i) {
      mpfr_set_si(e, -2 * i, MPFR_RNDN);
      mpfr_div_si(e, e, p.d_rope, MPFR_RNDN);
      mpfr_set_d(inv, p.theta, MPFR_RNDN);
      mpfr_pow(inv, inv, e, MPFR_RNDN);
      mpfr_mul_si(phi, inv, pos[static_cast<size_t>(tok)], MPFR_RNDN);
      mpfr_sin_cos(s, c, phi, MPFR_RNDN);
      for (int64_t h = 0; h < p.H; ++h) {
        int64_t a = 0, b = 0;
        rope_pair_dims(p.style, i, p.d_rope, a, b);
        const size_t base = static_cast<size_t>((tok * p.H + h) * p.D);
        const double xa = x[base + static_cast<size_t>(a)], xb = x[base + static_cast<size_t>(b)];
        mpfr_mul_d(ya, c, xa, MPFR_RNDN);
        mpfr_mul_d(t, s, xb, MPFR_RNDN);
        mpfr_sub(ya, ya, t, MPFR_RNDN);
        y[base + static_cast<size_t>(a)] = mpfr_get_d(ya, MPFR_RNDN);
        mpfr_mul_d(ya, c, xb, MPFR_RNDN);
        mpfr_mul_d(t, s, xa, MPFR_RNDN);
        mpfr_add(ya, ya, t, MPFR_RNDN);
        y[base + static_cast<size_t>(b)] = mpfr_get_d(ya, MPFR_RNDN);
      }
    }
  mpfr_clears(e, inv, phi, s, c, ya, t, static_cast<mpfr_ptr>(nullptr));
  return y;
}

// Positions past 2^20 and up to 2^24, theta 1e4 and 8e6, both pairings, partial rotary with a
// d_rope whose exponents 2i/d_rope are not binary fractions (d_rope = 6 of D = 10). Per element the
// error is judged against the pair's size |x_a| + |x_b| (a rotation's output can cancel to ~0):
// f64 within 4 * 2^-53 of it (a double angle would be off by up to 2^-29 rad here), the other tiers
// within an ulp of the exact value (rounded to odd) plus 2^-75 of it (dd's angle at 2^24 is off by
// about 2^-82 rad).
TEST(RopeReference, TiersAgreeWithMpfrAtLongPositions) {
  const std::vector<int64_t> pos = {0, 1, 3, 65535, 65536, 1048576, 1048576 + 4093, 8388609, 16777215, 16777216};
  std::mt19937_64 gen(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
    for (double theta : {1e4, 8e6}) {
      const RopeParams p{static_cast<int64_t>(pos.size()), 2, 10, 6, style, theta};
      std::vector<double> xv(static_cast<size_t>(p.T * p.H * p.D));
      for (double& v : xv) v = nd(gen);
      const Tensor x = f64({p.T, p.H, p.D}, xv);
      const std::vector<double> exact = mpfr_rope(p, xv, pos);
      for (Tier tier : kTiers) {
        const RopeReferenceResult r = rope_reference(tier, p, x, positions(pos));
        for (size_t k = 0; k < exact.size(); ++k) {
          const size_t head = k / static_cast<size_t>(p.D) * static_cast<size_t>(p.D);
          double size = 0;   // |x_a| + |x_b| of k's pair, or |x_k| for a pass-through dim
          for (size_t d = 0; d < static_cast<size_t>(p.D); ++d) size = std::max(size, std::fabs(xv[head + d]));
          const double tol = tier == Tier::f64 ? 8 * 0x1p-53 * size : ulp(DType::f64, exact[k]) + 0x1p-75 * size;
          ASSERT_LE(std::fabs(r.y[k] - exact[k]), tol) << tier_name(tier) << " element " << k << " position "
                                                        << pos[k / static_cast<size_t>(p.H * p.D)] << " theta " << theta;
        }
      }
    }
}

// dd_sin_cos against MPFR on arguments from 2^-35 to 2^25: sin within 2^-100 of min(1, |x|) (relative
// for a tiny angle, absolute once a reduction has happened), cos within 2^-100 absolute.
TEST(RopeReference, DoubleDoubleSinCosAgreesWithMpfr) {
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  mpfr_t a, s, c, d;
  mpfr_inits2(320, a, s, c, d, static_cast<mpfr_ptr>(nullptr));
  double worst = 0;
  for (int n = 0; n < 4000; ++n) {
    const double hi = std::ldexp(u(gen), static_cast<int>(u(gen) * 60) - 35) * (n % 2 ? -1 : 1);
    const DD x = two_sum(hi, hi * 0x1p-60 * u(gen));
    DD sd, cd;
    dd_sin_cos(x, sd, cd);
    mpfr_set_d(a, x.hi, MPFR_RNDN);
    mpfr_add_d(a, a, x.lo, MPFR_RNDN);
    mpfr_sin_cos(s, c, a, MPFR_RNDN);
    for (int which = 0; which < 2; ++which) {   // sin relative to min(1, |x|), cos to 1
      const DD got = which == 0 ? sd : cd;
      mpfr_sub_d(d, which == 0 ? s : c, got.hi, MPFR_RNDN);
      mpfr_sub_d(d, d, got.lo, MPFR_RNDN);
      const double err = std::fabs(mpfr_get_d(d, MPFR_RNDN)) / (which == 0 ? std::min(1.0, std::fabs(x.hi)) : 1.0);
      worst = std::max(worst, err);
    }
  }
  mpfr_clears(a, s, c, d, static_cast<mpfr_ptr>(nullptr));
  EXPECT_LT(worst, 0x1p-100) << "worst error " << std::log2(worst);
}

TEST(RopeReference, BadInputIsRefused) {
  const Tensor x = f64({1, 1, 4}, {1, 2, 3, 4});
  const RopeParams ok{1, 1, 4, 4, RopeStyle::neox, 1e4};
  EXPECT_NO_THROW(rope_reference(Tier::f64, ok, x, positions({5})));
  for (RopeParams bad : {RopeParams{1, 1, 4, 3, RopeStyle::neox, 1e4}, RopeParams{1, 1, 4, 6, RopeStyle::neox, 1e4},
                         RopeParams{1, 1, 4, 0, RopeStyle::neox, 1e4}, RopeParams{1, 1, 4, 4, RopeStyle::neox, 1.0},
                         RopeParams{1, 1, 4, 4, RopeStyle::neox, NAN}})
    EXPECT_THROW(rope_reference(Tier::f64, bad, x, positions({5})), InputError);
  EXPECT_THROW(rope_reference(Tier::f64, ok, x, positions({-1})), InputError);
  EXPECT_THROW(rope_reference(Tier::f64, ok, x, positions({kRopeMaxPosition + 1})), InputError);
  EXPECT_THROW(rope_reference(Tier::f64, ok, x, f64({1}, {2.5})), InputError);   // not an integer
  EXPECT_THROW(rope_reference(Tier::f64, ok, x, positions({1, 2})), InputError);   // not [T]
  EXPECT_THROW(rope_reference(Tier::f64, ok, f64({1, 1, 3}, {1, 2, 3}), positions({1})), InputError);
  EXPECT_THROW(rope_reference(Tier::f64, ok, f64({1, 1, 4}, {1, NAN, 3, 4}), positions({1})), InputError);
}

}  // namespace
}  // namespace dg
