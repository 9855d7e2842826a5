// Mpfr<Bits>: every operation is the MPFR call at Bits bits rounding to nearest, values are
// independent on copy, conversions out round to odd, and worker threads free their caches.
#include "reference/real/mpfr_real.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dg {
namespace {

// The same operation done directly with MPFR at `bits` bits; true when bitwise equal.
template <int B>
bool same(const Mpfr<B>& got, int (*ref)(mpfr_ptr, mpfr_srcptr, mpfr_srcptr, mpfr_rnd_t), const Mpfr<B>& a,
          const Mpfr<B>& b) {
  mpfr_t r;
  mpfr_init2(r, B);
  ref(r, a.get(), b.get(), MPFR_RNDN);
  bool eq = mpfr_equal_p(r, got.get()) != 0;
  mpfr_clear(r);
  return eq;
}
template <int B>
bool same1(const Mpfr<B>& got, int (*ref)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t), const Mpfr<B>& a) {
  mpfr_t r;
  mpfr_init2(r, B);
  ref(r, a.get(), MPFR_RNDN);
  bool eq = mpfr_equal_p(r, got.get()) != 0;
  mpfr_clear(r);
  return eq;
}

template <int B>
void check_ops() {
  std::mt19937_64 rng(B);
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  for (int i = 0; i < 2000; ++i) {
    // operands with more than 53 bits: a double divided by 3 at B bits
    const Mpfr<B> a = Mpfr<B>(u(rng)) / 3.0, b = Mpfr<B>(u(rng)) / 7.0;
    ASSERT_TRUE(same(a + b, mpfr_add, a, b));
    ASSERT_TRUE(same(a - b, mpfr_sub, a, b));
    ASSERT_TRUE(same(a * b, mpfr_mul, a, b));
    ASSERT_TRUE(same(a / b, mpfr_div, a, b));
    ASSERT_TRUE(same1(exp(a), mpfr_exp, a));
    ASSERT_TRUE(same1(expm1(a), mpfr_expm1, a));
    ASSERT_TRUE(same1(sqrt(abs(a)), mpfr_sqrt, abs(a)));
    ASSERT_TRUE(same1(log1p(abs(a)), mpfr_log1p, abs(a)));
    ASSERT_TRUE(same1(log(abs(a)), mpfr_log, abs(a)));
    // a product and a sum are two roundings, never one fma
    Mpfr<B> acc = a;
    acc += a * b;
    Mpfr<B> two_roundings = a * b;
    two_roundings = two_roundings + a;
    ASSERT_TRUE(acc == two_roundings);
    // mixed with doubles
    const double d = u(rng);
    ASSERT_TRUE((a + d) == (a + Mpfr<B>(d)));
    ASSERT_TRUE((d - a) == (Mpfr<B>(d) - a));
    ASSERT_TRUE((a * d) == (a * Mpfr<B>(d)));
    ASSERT_TRUE((d / a) == (Mpfr<B>(d) / a));
  }
}

TEST(Mpfr, OperationsAreOneRoundingAtBits) {
  check_ops<127>();
  check_ops<256>();
}

TEST(Mpfr, PrecisionIsBits) {
  const Mpfr127 one(1.0);
  Mpfr127 x = one + std::ldexp(1.0, -126);  // one ulp above 1 at 127 bits
  EXPECT_TRUE(x - one == std::ldexp(1.0, -126));
  EXPECT_TRUE(one + std::ldexp(1.0, -128) == one);  // below half an ulp
  Mpfr256 y = Mpfr256(1.0) + std::ldexp(1.0, -255);
  EXPECT_TRUE(y - 1.0 == std::ldexp(1.0, -255));
  EXPECT_EQ(mpfr_get_prec(x.get()), 127);
  EXPECT_EQ(mpfr_get_prec(y.get()), 256);
}

TEST(Mpfr, CopiesAreIndependentValues) {
  Mpfr127 a = Mpfr127(1.0) / 3.0;
  Mpfr127 b = a;
  b += 1.0;
  EXPECT_TRUE(b - a == 1.0);
  std::vector<Mpfr127> v;
  for (int i = 0; i < 100; ++i) v.push_back(Mpfr127(i) / 3.0);  // reallocations copy the values
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(v[static_cast<size_t>(i)] * 3.0 == static_cast<double>(i));
  Mpfr127 c;
  EXPECT_TRUE(c == 0.0);
  c = v[4];
  EXPECT_TRUE(c == v[4]);
  EXPECT_NE(c.get()->_mpfr_d, v[4].get()->_mpfr_d);  // own significand
}

TEST(Mpfr, ComparisonsLikeDouble) {
  const Mpfr127 a(1.5), b(2.5), nan = Mpfr127(0.0) / 0.0;
  EXPECT_TRUE(a < b);
  EXPECT_TRUE(b > a);
  EXPECT_TRUE(a <= 1.5);
  EXPECT_TRUE(a >= 1.5);
  EXPECT_TRUE(a > 0.0);
  EXPECT_TRUE(-a < 0.0);
  EXPECT_FALSE(nan == nan);
  EXPECT_FALSE(nan < 0.0);
  EXPECT_FALSE(nan >= 0.0);
  EXPECT_FALSE(isfinite(nan));
  EXPECT_TRUE(isfinite(a));
  EXPECT_EQ(to_double(a), 1.5);
}

TEST(Mpfr, ConversionsOut) {
  // 1 + 2^-60: round to odd gives 1 + 2^-52 (the sticky bit), nearest gives 1.
  const Mpfr127 x = Mpfr127(1.0) + std::ldexp(1.0, -60);
  EXPECT_EQ(to_double_odd(x), 1.0 + std::ldexp(1.0, -52));
  EXPECT_EQ(to_double(x), 1.0);
  EXPECT_EQ(to_double_odd(Mpfr127(0.75)), 0.75);  // exact values stay
  // x0 + t1 + t2 carries a 127-bit value exactly.
  const Mpfr127 third = Mpfr127(1.0) / 3.0;
  const double x0 = to_double_odd(third);
  double t1 = 0.0, t2 = 0.0;
  tail_parts(third, x0, t1, t2);
  Mpfr127 back = (Mpfr127(x0) + t1) + t2;
  EXPECT_TRUE(back == third);
  EXPECT_NE(t1, 0.0);
  EXPECT_EQ(to_string(Mpfr127(0.5), 5), "0.5");
}

TEST(Mpfr, WorkerThreadsFreeTheirCaches) {
  std::vector<double> out(4);
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.push_back(mpfr_thread([&out](int i) {
      Mpfr256 e = exp(Mpfr256(1.0 + i));  // fills this thread's constant caches
      out[static_cast<size_t>(i)] = to_double(log(e));
    }, t));
  }
  for (std::thread& th : pool) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(out[static_cast<size_t>(t)], 1.0 + t);
  { MpfrThreadCacheGuard guard; }  // usable on its own too
}

}  // namespace
}  // namespace dg
