// Double-double arithmetic against MPFR at 200 bits on random operands. Errors are relative, in
// units of 2^-104 (four times the dd unit roundoff u^2 = 2^-106); the asserted bounds are the
// published ones (reference/real/dd.h) rounded up, and 4 units for the elementary functions.
#include "reference/real/dd.h"

#include <gtest/gtest.h>
#include <mpfr.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "reference/real/f64.h"

namespace dg {
namespace {

constexpr mpfr_prec_t kPrec = 200;

class M {  // a 200-bit MPFR scratch value
 public:
  M() { mpfr_init2(v, kPrec); }
  explicit M(const DD& x) : M() { set(x); }
  ~M() { mpfr_clear(v); }
  M(const M&) = delete;
  M& operator=(const M&) = delete;
  void set(const DD& x) {
    mpfr_set_d(v, x.hi, MPFR_RNDN);
    mpfr_add_d(v, v, x.lo, MPFR_RNDN);  // exact for a normalized pair
  }
  mpfr_t v;
};

// |got - exact| / |exact| in units of 2^-104 (exact computed at 200 bits).
double err_units(const DD& got, mpfr_srcptr exact) {
  M g(got), d;
  mpfr_sub(d.v, g.v, exact, MPFR_RNDN);
  if (mpfr_zero_p(exact)) return mpfr_zero_p(d.v) ? 0.0 : INFINITY;
  mpfr_div(d.v, d.v, exact, MPFR_RNDN);
  mpfr_abs(d.v, d.v, MPFR_RNDN);
  mpfr_mul_2si(d.v, d.v, 104, MPFR_RNDN);
  return mpfr_get_d(d.v, MPFR_RNDU);
}

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  // A normalized dd with random sign, exponent in [emin, emax] and a full random low word.
  DD dd(int emin, int emax, bool any_sign = true) {
    int e = std::uniform_int_distribution<int>(emin, emax)(rng_);
    double hi = std::ldexp(uniform(1.0, 2.0), e);
    if (any_sign && (rng_() & 1)) hi = -hi;
    double lo = std::ldexp(uniform(-1.0, 1.0), e - 53);
    return fast_two_sum(hi, lo);
  }
  DD dd_in(double lo_v, double hi_v) {
    double h = uniform(lo_v, hi_v);
    double l = std::ldexp(uniform(-1.0, 1.0), std::ilogb(h == 0.0 ? 1.0 : h) - 53);
    return fast_two_sum(h, l);
  }

 private:
  std::mt19937_64 rng_;
};

bool normalized(const DD& x) {
  return x.hi + x.lo == x.hi && (x.lo == 0.0 || std::fabs(x.lo) <= std::ldexp(1.0, std::ilogb(x.hi) - 52));
}

TEST(Dd, ErrorFreeTransformsAreExact) {
  Gen g(1);
  for (int i = 0; i < 20000; ++i) {
    double a = std::ldexp(g.uniform(-1, 1), static_cast<int>(g.uniform(-60, 60)));
    double b = std::ldexp(g.uniform(-1, 1), static_cast<int>(g.uniform(-60, 60)));
    M exact, got;
    mpfr_set_d(exact.v, a, MPFR_RNDN);
    mpfr_add_d(exact.v, exact.v, b, MPFR_RNDN);
    got.set(two_sum(a, b));
    ASSERT_TRUE(mpfr_equal_p(exact.v, got.v)) << a << " + " << b;
    mpfr_set_d(exact.v, a, MPFR_RNDN);
    mpfr_mul_d(exact.v, exact.v, b, MPFR_RNDN);
    got.set(two_prod(a, b));
    ASSERT_TRUE(mpfr_equal_p(exact.v, got.v)) << a << " * " << b;
    if (std::fabs(a) >= std::fabs(b)) {
      mpfr_set_d(exact.v, a, MPFR_RNDN);
      mpfr_add_d(exact.v, exact.v, b, MPFR_RNDN);
      got.set(fast_two_sum(a, b));
      ASSERT_TRUE(mpfr_equal_p(exact.v, got.v));
    }
  }
}

// One binary operation on random dd operands against MPFR.
void check_binary(const char* name, std::function<DD(const DD&, const DD&)> op,
                  std::function<int(mpfr_ptr, mpfr_srcptr, mpfr_srcptr, mpfr_rnd_t)> ref, double bound,
                  bool cancel = false) {
  Gen g(7);
  double worst = 0.0;
  for (int i = 0; i < 50000; ++i) {
    DD a = g.dd(-30, 30);
    DD b = g.dd(-30, 30);
    if (cancel && i % 2 == 0) {  // b close to -a: the add must stay accurate relative to the result
      b = DD(-a.hi, std::ldexp(g.uniform(-1, 1), std::ilogb(a.hi) - 53 - (i % 40)));
      b = fast_two_sum(b.hi, b.lo);
    }
    DD r = op(a, b);
    ASSERT_TRUE(normalized(r)) << name;
    M ma(a), mb(b), exact;
    ref(exact.v, ma.v, mb.v, MPFR_RNDN);
    worst = std::max(worst, err_units(r, exact.v));
  }
  EXPECT_LE(worst, bound) << name;
  ::testing::Test::RecordProperty(name, std::to_string(worst));
  std::printf("  %-12s worst %.3f units of 2^-104\n", name, worst);
}

TEST(Dd, AddSubMulDivWithinPublishedBounds) {
  // 3u^2 = 0.75, 4u^2 = 1, 9.8u^2 = 2.45 units of 2^-104.
  check_binary("add", [](const DD& a, const DD& b) { return a + b; }, mpfr_add, 0.75, true);
  check_binary("sub", [](const DD& a, const DD& b) { return a - b; }, mpfr_sub, 0.75);
  check_binary("mul", [](const DD& a, const DD& b) { return a * b; }, mpfr_mul, 1.0);
  check_binary("div", [](const DD& a, const DD& b) { return a / b; }, mpfr_div, 2.45);
  // DD op double: 2u^2 (DWPlusFP, DWTimesFP), 3u^2 (DWDivFP).
  check_binary("add_fp", [](const DD& a, const DD& b) { return a + b.hi; },
               [](mpfr_ptr r, mpfr_srcptr x, mpfr_srcptr y, mpfr_rnd_t m) {
                 return mpfr_add_d(r, x, mpfr_get_d(y, MPFR_RNDN), m);
               }, 0.5);
  check_binary("mul_fp", [](const DD& a, const DD& b) { return a * b.hi; },
               [](mpfr_ptr r, mpfr_srcptr x, mpfr_srcptr y, mpfr_rnd_t m) {
                 return mpfr_mul_d(r, x, mpfr_get_d(y, MPFR_RNDN), m);
               }, 0.5);
  check_binary("div_fp", [](const DD& a, const DD& b) { return a / b.hi; },
               [](mpfr_ptr r, mpfr_srcptr x, mpfr_srcptr y, mpfr_rnd_t m) {
                 return mpfr_div_d(r, x, mpfr_get_d(y, MPFR_RNDN), m);
               }, 0.75);
}

// One function on random operands from `gen` against MPFR.
void check_unary(const char* name, DD (*fn)(const DD&), int (*ref)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t),
                 std::function<DD(Gen&)> gen, double bound, int n = 40000) {
  Gen g(11);
  double worst = 0.0;
  DD worst_x;
  for (int i = 0; i < n; ++i) {
    DD x = gen(g);
    DD r = fn(x);
    ASSERT_TRUE(normalized(r)) << name << "(" << x.hi << ")";
    M mx(x), exact;
    ref(exact.v, mx.v, MPFR_RNDN);
    double e = err_units(r, exact.v);
    if (e > worst) { worst = e; worst_x = x; }
  }
  EXPECT_LE(worst, bound) << name << " worst at x = " << worst_x.hi << " + " << worst_x.lo;
  ::testing::Test::RecordProperty(name, std::to_string(worst));
  std::printf("  %-12s worst %.3f units of 2^-104\n", name, worst);
}

DD sqrt_fn(const DD& x) { return sqrt(x); }
DD exp_fn(const DD& x) { return exp(x); }
DD expm1_fn(const DD& x) { return expm1(x); }
DD log1p_fn(const DD& x) { return log1p(x); }
DD log_fn(const DD& x) { return log(x); }

TEST(Dd, SqrtWithinBound) {  // 25/8 u^2 = 0.79 units
  check_unary("sqrt", sqrt_fn, mpfr_sqrt, [](Gen& g) { return g.dd(-200, 200, false); }, 0.8);
}

TEST(Dd, ExpAccurateOverTheRange) {
  check_unary("exp_small", exp_fn, mpfr_exp, [](Gen& g) { return g.dd_in(-1.0, 1.0); }, 4.0);
  check_unary("exp_gate", exp_fn, mpfr_exp, [](Gen& g) { return g.dd_in(-30.0, 0.0); }, 4.0);
  check_unary("exp_wide", exp_fn, mpfr_exp, [](Gen& g) { return g.dd_in(-660.0, 700.0); }, 4.0);
  check_unary("exp_tiny", exp_fn, mpfr_exp, [](Gen& g) { return g.dd(-80, -10); }, 4.0);
  check_unary("exp_top", exp_fn, mpfr_exp, [](Gen& g) { return g.dd_in(700.0, 709.78); }, 4.0, 5000);
}

TEST(Dd, ExpNearUnderflowIsTheDoubleResult) {
  // Results near and below 2^-1022 lose the low word (and then bits of the high one): the pair must
  // still be within an ulp of the correctly rounded double (a subnormal ulp below 2^-1022).
  Gen g(5);
  for (int i = 0; i < 5000; ++i) {
    const DD x = g.dd_in(-745.0, -700.0);
    M mx(x), exact;
    mpfr_exp(exact.v, mx.v, MPFR_RNDN);
    const double want = mpfr_get_d(exact.v, MPFR_RNDN);
    const DD got = exp(x);
    const double ulp = std::max(0x1p-1074, std::ldexp(1.0, std::ilogb(want) - 52));
    ASSERT_LE(std::fabs(got.hi + got.lo - want), ulp) << x.hi;
  }
}

TEST(Dd, Expm1AccurateNearZero) {
  check_unary("expm1_small", expm1_fn, mpfr_expm1, [](Gen& g) { return g.dd_in(-0.34, 0.34); }, 4.0);
  check_unary("expm1_tiny", expm1_fn, mpfr_expm1, [](Gen& g) { return g.dd(-300, -8); }, 4.0);
  check_unary("expm1_wide", expm1_fn, mpfr_expm1, [](Gen& g) { return g.dd_in(-40.0, 40.0); }, 4.0);
}

TEST(Dd, Log1pAndLogAccurate) {
  check_unary("log1p_small", log1p_fn, mpfr_log1p, [](Gen& g) { return g.dd(-300, -2); }, 4.0);
  check_unary("log1p_mid", log1p_fn, mpfr_log1p, [](Gen& g) { return g.dd_in(-0.999, 3.0); }, 4.0);
  check_unary("log1p_large", log1p_fn, mpfr_log1p, [](Gen& g) { return g.dd(2, 1000, false); }, 4.0);
  check_unary("log_near1", log_fn, mpfr_log, [](Gen& g) { return g.dd_in(0.5, 2.0); }, 4.0);
  check_unary("log_wide", log_fn, mpfr_log, [](Gen& g) { return g.dd(-1000, 1000, false); }, 4.0);
}

TEST(Dd, SoftplusBuildingBlocksMatchMpfr) {
  // softplus(x) = log1p(exp(x)): the composition the KDA gate uses, over the gate range.
  check_unary("softplus", [](const DD& x) { return log1p(exp(x)); },
              [](mpfr_ptr r, mpfr_srcptr x, mpfr_rnd_t m) {
                mpfr_exp(r, x, m);
                return mpfr_log1p(r, r, m);
              },
              [](Gen& g) { return g.dd_in(-40.0, 0.0); }, 4.0, 20000);
}

TEST(Dd, SpecialValues) {
  const double inf = INFINITY;
  EXPECT_EQ(exp(DD(0.0)).hi, 1.0);
  EXPECT_EQ(exp(DD(0.0)).lo, 0.0);
  EXPECT_EQ(exp(DD(-800.0)).hi, 0.0);
  EXPECT_EQ(exp(DD(710.0)).hi, inf);
  EXPECT_TRUE(std::isnan(exp(DD(NAN)).hi));
  EXPECT_EQ(expm1(DD(0.0)).hi, 0.0);
  EXPECT_EQ(expm1(DD(-100.0)).hi, -1.0);
  EXPECT_EQ(log1p(DD(0.0)).hi, 0.0);
  EXPECT_EQ(log1p(DD(-1.0)).hi, -inf);
  EXPECT_TRUE(std::isnan(log1p(DD(-2.0)).hi));
  EXPECT_EQ(log(DD(1.0)).hi, 0.0);
  EXPECT_EQ(log(DD(0.0)).hi, -inf);
  EXPECT_EQ(sqrt(DD(0.0)).hi, 0.0);
  EXPECT_EQ(sqrt(DD(4.0)).hi, 2.0);
  EXPECT_TRUE(std::isnan(sqrt(DD(-1.0)).hi));
  EXPECT_TRUE(std::isfinite(exp(DD(709.7)).hi));
  EXPECT_GT(exp(DD(-744.0)).hi, 0.0);  // subnormal, not flushed
  EXPECT_GT(log(DD(1e-310)).hi, -714.0);
  EXPECT_LT(log(DD(1e-310)).hi, -713.0);
}

TEST(Dd, OperatorsForGenericCode) {
  DD a(1.0, 0x1p-60);
  DD b = 0.5;  // implicit from double
  EXPECT_TRUE(a > b);
  EXPECT_TRUE(b < a);
  EXPECT_TRUE(a > 1.0);
  EXPECT_TRUE(a != DD(1.0));
  EXPECT_TRUE(DD(1.0) == 1.0);
  EXPECT_TRUE(-a < 0.0);
  DD c = 1.0 - a;
  EXPECT_EQ(c.hi, -0x1p-60);
  DD t = a;
  t += 1.0;
  t -= a;
  EXPECT_EQ(t.hi, 1.0);
  EXPECT_EQ(t.lo, 0.0);
  t *= 3.0;
  t /= DD(3.0);
  EXPECT_EQ(t.hi, 1.0);
  EXPECT_EQ((2.0 / DD(4.0)).hi, 0.5);
  EXPECT_EQ(abs(DD(-2.0, -0x1p-60)).lo, 0x1p-60);
  EXPECT_EQ(to_double(DD(3.0, 0x1p-60)), 3.0);
  // 1/3 in dd is 1/3 to 106 bits: 3 * (1/3) - 1 is below 2^-104.
  DD third = DD(1.0) / 3.0;
  EXPECT_LT(std::fabs((third * 3.0 - 1.0).hi), 0x1p-104);
}

TEST(F64, CompensatedSumsBeatNaive) {
  // sum of 1, 1e100, 1, -1e100 is 2; naive summation gives 0.
  std::vector<double> x = {1.0, 1e100, 1.0, -1e100};
  EXPECT_EQ(neumaier_sum(x), 2.0);
  // Dot2 of an ill-conditioned pair: x^T y with exact value 1.
  std::vector<double> a = {1e16, 1.0, -1e16}, b = {1.0, 1.0, 1.0};
  EXPECT_EQ(dot2(a, b), 1.0);
  // Dot2 on random data agrees with the exact dot product to a double's precision.
  Gen g(3);
  std::vector<double> u(1000), v(1000);
  M exact, t;
  mpfr_set_zero(exact.v, 1);
  for (size_t i = 0; i < u.size(); ++i) {
    u[i] = g.uniform(-1, 1);
    v[i] = g.uniform(-1, 1);
    mpfr_set_d(t.v, u[i], MPFR_RNDN);
    mpfr_mul_d(t.v, t.v, v[i], MPFR_RNDN);
    mpfr_add(exact.v, exact.v, t.v, MPFR_RNDN);
  }
  EXPECT_EQ(dot2(u, v), mpfr_get_d(exact.v, MPFR_RNDN));
}

// The f64 tier's exp against MPFR's correctly rounded one: within 0.501 ulp over the range the
// table path takes, and std::exp's values outside it (underflow, overflow, non-finite).
TEST(F64, VectorExpWithinHalfAnUlpAndExactFallback) {
  Gen g(11);
  constexpr int64_t n = 1 << 16;
  std::vector<double> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = i < n / 2 ? g.uniform(-700, 700) : g.uniform(-12, 0.1);
  y = x;
  exp_all_f64(y.data(), n);
  double worst = 0;
  M e, d;
  for (int64_t i = 0; i < n; ++i) {
    mpfr_set_d(e.v, x[i], MPFR_RNDN);
    mpfr_exp(e.v, e.v, MPFR_RNDN);   // 200-bit exp
    const double rn = mpfr_get_d(e.v, MPFR_RNDN);
    const double ulp = std::nextafter(rn, INFINITY) - rn;
    mpfr_sub_d(d.v, e.v, y[i], MPFR_RNDN);
    const double err = std::fabs(mpfr_get_d(d.v, MPFR_RNDN)) / ulp;
    worst = std::max(worst, err);
  }
  EXPECT_LT(worst, 0.501);
  EXPECT_GT(worst, 0.4);   // the test sees the final rounding
  std::vector<double> edge = {-1000, -745.5, -701, 701, 709.7, 710, 0.0, -0.0, INFINITY, -INFINITY, NAN};
  while (edge.size() < 40) edge.push_back(-1.0);   // whole blocks, each holding an out-of-range value
  std::vector<double> z = edge;
  exp_all_f64(z.data(), static_cast<int64_t>(z.size()));
  for (size_t i = 0; i < edge.size(); ++i) {
    if (std::isnan(edge[i])) EXPECT_TRUE(std::isnan(z[i]));
    else EXPECT_EQ(z[i], std::exp(edge[i])) << edge[i];
  }
}

// The f64 tier's log1p on [0, 1] (softplus's log1p(exp(-|z|))) against MPFR's: within 0.501 ulp over
// the whole interval (log-uniform below 2^-10, where the result is about x; uniform above, where the
// table does the work; every table point and its neighbours), and std::log1p's values outside it.
TEST(F64, VectorLog1pOnTheUnitIntervalWithinHalfAnUlpAndExactFallback) {
  Gen g(13);
  constexpr int64_t n = 1 << 16;
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = i % 4 == 0 ? std::exp2(g.uniform(-1000, -10)) : g.uniform(0, 1);
  for (int j = 0; j <= 128; ++j) {
    const double c = static_cast<double>(j) / 128.0;
    for (double v : {c, std::nextafter(c, 2.0), std::nextafter(c, -1.0), c + 1.0 / 256, c - 1.0 / 256})
      if (v >= 0 && v <= 1) x.push_back(v);
  }
  while (x.size() % 16 != 0) x.push_back(0.5);
  std::vector<double> y = x;
  log1p_unit_f64(y.data(), static_cast<int64_t>(y.size()));
  double worst = 0;
  M e, d;
  for (size_t i = 0; i < x.size(); ++i) {
    mpfr_set_d(e.v, x[i], MPFR_RNDN);
    mpfr_log1p(e.v, e.v, MPFR_RNDN);   // 200-bit log1p
    const double rn = mpfr_get_d(e.v, MPFR_RNDN);
    if (rn == 0) {
      EXPECT_EQ(y[i], 0.0);
      continue;
    }
    const double ulp = std::nextafter(rn, INFINITY) - rn;
    mpfr_sub_d(d.v, e.v, y[i], MPFR_RNDN);
    worst = std::max(worst, std::fabs(mpfr_get_d(d.v, MPFR_RNDN)) / ulp);
  }
  EXPECT_LT(worst, 0.501);
  EXPECT_GT(worst, 0.4);   // the test sees the final rounding
  std::vector<double> edge = {-0.5, 1.5, 1e300, -0.0, INFINITY, NAN};
  while (edge.size() < 32) edge.push_back(0.25);   // whole blocks, each holding an out-of-range value
  std::vector<double> z = edge;
  log1p_unit_f64(z.data(), static_cast<int64_t>(z.size()));
  for (size_t i = 0; i < edge.size(); ++i) {
    if (std::isnan(edge[i])) EXPECT_TRUE(std::isnan(z[i]));
    else EXPECT_EQ(z[i], std::log1p(edge[i])) << edge[i];
  }
}

}  // namespace
}  // namespace dg
