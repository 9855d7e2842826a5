// Tests for harness/dtype: every rounding is checked against MPFR's documented emulation of a
// small binary format (round to p bits, narrow emin/emax in MPFR's 0.5 <= m < 1 convention,
// mpfr_check_range, mpfr_subnormalize), exhaustively for the 8- and 16-bit formats and on random
// inputs for all of them; tf32 modes against a direct reference; known values for the rest.
#include "harness/core/dtype.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(DRIFTGATE_CUDA_HOST_HEADERS)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace dg {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string hex(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

// Equal as values including the sign of zero; any NaN equals any NaN.
bool same(double a, double b) {
  if (a != a || b != b) return a != a && b != b;
  return a == b && std::signbit(a) == std::signbit(b);
}

struct Mp {
  mpfr_t v;
  explicit Mp(mpfr_prec_t prec) { mpfr_init2(v, prec); }
  Mp(mpfr_prec_t prec, double x) : Mp(prec) { mpfr_set_d(v, x, MPFR_RNDN); }
  ~Mp() { mpfr_clear(v); }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
};

// MPFR's emulation of format t (MPFR manual, mpfr_subnormalize), plus the format's overflow rule.
double emulate(DType t, mpfr_srcptr x) {
  const FormatInfo& f = info(t);
  if (t == DType::f64) return mpfr_get_d(x, MPFR_RNDN);
  Mp y(f.precision);
  int inex = mpfr_set(y.v, x, MPFR_RNDN);   // p bits, unbounded exponent
  const mpfr_exp_t old_min = mpfr_get_emin();
  const mpfr_exp_t old_max = mpfr_get_emax();
  mpfr_set_emin(f.emin - f.precision + 2);   // smallest subnormal 2^(emin-p+1) = 0.5 * 2^(emin-p+2)
  mpfr_set_emax(f.emax + 1);
  inex = mpfr_check_range(y.v, inex, MPFR_RNDN);
  mpfr_subnormalize(y.v, inex, MPFR_RNDN);
  const double d = mpfr_get_d(y.v, MPFR_RNDN);   // exact
  mpfr_set_emin(old_min);
  mpfr_set_emax(old_max);
  // E4M3FN: MPFR's p=4 format has 480 too (the NaN slot) and Inf; both saturate to 448.
  if (f.overflow == Overflow::saturate && std::fabs(d) > f.max_finite) return std::copysign(f.max_finite, d);
  return d;
}

// Checks round_to for the three input kinds against emulate(), counting mismatches and printing
// only the first few.
struct Checker {
  DType t;
  int failures = 0;
  int64_t checks = 0;

  void expect(double got, double want, const std::string& what) {
    ++checks;
    if (same(got, want)) return;
    if (++failures <= 10) {
      ADD_FAILURE() << name(t) << " " << what << ": got " << hex(got) << " want " << hex(want);
    }
  }
  void dbl(double x) {
    const Mp m(64, x);
    const double want = emulate(t, m.v);
    expect(round_to(t, x), want, "double " + hex(x));
    expect(decode(t, encode(t, x)), want, "encode(double) " + hex(x));
  }
  void dd(DD x) {
    Mp m(300, x.hi);   // lo == 0 keeps hi's sign of zero
    if (x.lo != 0 && mpfr_add_d(m.v, m.v, x.lo, MPFR_RNDN) != 0) ADD_FAILURE() << "test bug: inexact DD sum";
    expect(round_to(t, x), emulate(t, m.v), "DD{" + hex(x.hi) + ", " + hex(x.lo) + "}");
  }
  void mp(mpfr_srcptr x) {
    expect(round_to(t, x), emulate(t, x), "mpfr " + hex(mpfr_get_d(x, MPFR_RNDN)));
  }
  // The value x * (1 + rel) at 200 bits, rel = +-2^-k.
  void mp_rel(double x, int sgn, int k) {
    Mp m(200, x);
    Mp d(200, x);
    mpfr_mul_2si(d.v, d.v, -k, MPFR_RNDN);
    if (sgn > 0) mpfr_add(m.v, m.v, d.v, MPFR_RNDN); else mpfr_sub(m.v, m.v, d.v, MPFR_RNDN);
    mp(m.v);
  }
  // Every kind around one value x (a midpoint, a value past max, ...).
  void around(double x) {
    dbl(x);
    dbl(x * (1 + 0x1p-40));
    dbl(x * (1 - 0x1p-40));
    const double tiny = std::ldexp(x, -60);   // well below ulp(x)/2: a normalized DD
    dd({x, 0.0});
    dd({x, tiny});
    dd({x, -tiny});
    dd({std::nextafter(x, 0.0), tiny});        // just below x (toward zero)
    dd({std::nextafter(x, 2 * x), -tiny});     // just above x (away from zero)
    const Mp m(200, x);
    mp(m.v);
    mp_rel(x, +1, 40);
    mp_rel(x, -1, 40);
    mp_rel(x, +1, 150);
    mp_rel(x, -1, 150);
  }
};

// --- format table --------------------------------------------------------------------------------

TEST(DTypeInfo, TableAndNames) {
  EXPECT_EQ(info(DType::bf16).precision, 8);
  EXPECT_EQ(info(DType::f16).emin, -14);
  EXPECT_EQ(info(DType::e4m3).max_finite, 448.0);
  EXPECT_EQ(info(DType::e4m3).overflow, Overflow::saturate);
  EXPECT_EQ(info(DType::e5m2).max_finite, 57344.0);
  EXPECT_EQ(info(DType::tf32).max_finite, 0x1.ffcp127);
  EXPECT_EQ(info(DType::tf32).storage_bytes, 4);
  EXPECT_EQ(info(DType::f32).max_finite, static_cast<double>(FLT_MAX));
  EXPECT_FALSE(info(DType::i32).is_float);
  const std::pair<const char*, const char*> names[] = {
      {"f64", "F64"},  {"f32", "F32"},      {"tf32", "F32"},     {"bf16", "BF16"}, {"f16", "F16"},
      {"e4m3", "F8_E4M3"}, {"e5m2", "F8_E5M2"}, {"i64", "I64"}, {"i32", "I32"}};
  for (const auto& [n, st] : names) {
    const auto t = parse_dtype(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_EQ(name(*t), n);
    EXPECT_EQ(info(*t).st_name, st);
    const auto s = parse_safetensors_dtype(st);
    ASSERT_TRUE(s.has_value()) << st;
    EXPECT_EQ(info(*s).st_name, st);
  }
  EXPECT_EQ(parse_safetensors_dtype("F32"), DType::f32);   // a file never says tf32
  EXPECT_FALSE(parse_dtype("fp32").has_value());
  EXPECT_FALSE(parse_dtype("BF16").has_value());
  EXPECT_FALSE(parse_safetensors_dtype("bf16").has_value());
  EXPECT_FALSE(parse_safetensors_dtype("F8_E4M3FNUZ").has_value());
}

TEST(DTypeDecode, KnownPatterns) {
  EXPECT_EQ(decode(DType::bf16, 0x3F80), 1.0);
  EXPECT_EQ(decode(DType::bf16, 0x0001), 0x1p-133);
  EXPECT_EQ(decode(DType::f16, 0x3C00), 1.0);
  EXPECT_EQ(decode(DType::f16, 0x7BFF), 65504.0);
  EXPECT_EQ(decode(DType::f16, 0x0001), 0x1p-24);
  EXPECT_EQ(decode(DType::f16, 0x7C00), kInf);
  EXPECT_EQ(decode(DType::e4m3, 0x7E), 448.0);
  EXPECT_EQ(decode(DType::e4m3, 0xFE), -448.0);
  EXPECT_EQ(decode(DType::e4m3, 0x08), 0x1p-6);
  EXPECT_EQ(decode(DType::e4m3, 0x01), 0x1p-9);
  EXPECT_EQ(decode(DType::e4m3, 0x78), 256.0);   // S.1111.000 is a number in E4M3FN
  EXPECT_TRUE(std::isnan(decode(DType::e4m3, 0x7F)));
  EXPECT_TRUE(std::isnan(decode(DType::e4m3, 0xFF)));
  EXPECT_EQ(decode(DType::e5m2, 0x7B), 57344.0);
  EXPECT_EQ(decode(DType::e5m2, 0x7C), kInf);
  EXPECT_EQ(decode(DType::e5m2, 0xFC), -kInf);
  EXPECT_TRUE(std::isnan(decode(DType::e5m2, 0x7D)));
  EXPECT_EQ(decode(DType::e5m2, 0x01), 0x1p-16);
  EXPECT_EQ(decode(DType::tf32, 0x3F802000), 1 + 0x1p-10);
  EXPECT_TRUE(same(decode(DType::f32, 0x80000000), -0.0));
  EXPECT_EQ(decode(DType::i32, 0xFFFFFFFF), -1.0);
  EXPECT_EQ(decode(DType::i64, 0xFFFFFFFFFFFFFFFE), -2.0);
}

// --- exhaustive: bf16, f16, e4m3, e5m2 -------------------------------------------------------------

class Exhaustive : public ::testing::TestWithParam<DType> {};

TEST_P(Exhaustive, RoundTripMidpointsAndOverflow) {
  const DType t = GetParam();
  const FormatInfo& f = info(t);
  const uint64_t count = uint64_t{1} << (8 * f.storage_bytes);
  const uint64_t sign = count >> 1;
  Checker c{t};

  // Every encoding: decode is exact and encode gives the same bits back (NaN: some NaN).
  std::vector<double> positive;   // finite values of the positive encodings, ascending
  for (uint64_t b = 0; b < count; ++b) {
    const double v = decode(t, b);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(decode(t, encode(t, v)))) << b;
      continue;
    }
    ASSERT_EQ(encode(t, v), b) << name(t) << " pattern " << b;
    c.expect(round_to(t, v), v, "round trip");
    c.expect(round_to(t, DD{v, 0.0}), v, "round trip DD");
    const Mp m(200, v);
    c.expect(round_to(t, m.v), v, "round trip mpfr");
    if (b < sign && std::isfinite(v)) positive.push_back(v);
  }
  for (size_t i = 1; i < positive.size(); ++i) ASSERT_LT(positive[i - 1], positive[i]);
  EXPECT_EQ(positive.back(), f.max_finite);

  // The midpoint of every pair of neighbours (exact in double: p + 1 <= 12 bits), and around it.
  for (size_t i = 0; i + 1 < positive.size(); ++i) {
    const double mid = 0.5 * (positive[i] + positive[i + 1]);
    {
      Mp exact(200, positive[i]);
      mpfr_add_d(exact.v, exact.v, positive[i + 1], MPFR_RNDN);
      mpfr_div_2ui(exact.v, exact.v, 1, MPFR_RNDN);
      ASSERT_EQ(mpfr_cmp_d(exact.v, mid), 0);
    }
    c.around(mid);
    c.around(-mid);
  }
  // Past the largest value: the tie max + ulp/2, one ulp, twice max, huge, the largest double, Inf.
  const double top = f.max_finite;
  const double u = ulp(t, top);
  for (const double x : {top + u / 2, top + u, 2 * top, 0x1p100, 1e300, DBL_MAX}) {
    c.around(x);
    c.around(-x);
  }
  c.dbl(kInf);
  c.dbl(-kInf);
  c.dd({kInf, 0.0});
  EXPECT_EQ(c.failures, 0) << "of " << c.checks << " checks";
}

INSTANTIATE_TEST_SUITE_P(SmallFormats, Exhaustive,
                         ::testing::Values(DType::bf16, DType::f16, DType::e4m3, DType::e5m2),
                         [](const auto& p) { return std::string(name(p.param)); });

// --- random inputs, every float format -------------------------------------------------------------

// A random double of either sign over the format's whole range (a few binades below the smallest
// subnormal to past overflow); a quarter are exact midpoints of t, a quarter a double-ulp off one,
// a quarter exactly representable.
double random_double(std::mt19937_64& rng, DType t) {
  const FormatInfo& f = info(t);
  std::uniform_int_distribution<int> exp_dist(f.emin - f.precision - 3, f.emax + 2);
  double x = std::ldexp(1.0 + std::ldexp(static_cast<double>(rng() >> 12), -52), exp_dist(rng));
  if (rng() & 1) x = -x;
  const uint64_t kind = rng() % 4;
  if (kind == 0) return x;
  const double half_q = ulp(t, x) / 2;
  double n = std::floor(std::fabs(x) / half_q);
  if (kind == 3) return std::copysign(std::floor(n / 2) * 2 * half_q, x);
  if (std::fmod(n, 2.0) == 0) n += 1;   // an odd multiple of half a quantum: a midpoint
  const double mid = std::copysign(n * half_q, x);
  if (kind == 1) return mid;
  return std::nextafter(mid, (rng() & 1) ? kInf : -kInf);
}

class RandomInputs : public ::testing::TestWithParam<DType> {};

TEST_P(RandomInputs, AgreeWithMpfr) {
  const DType t = GetParam();
  std::mt19937_64 rng(0x5eed0000u + static_cast<unsigned>(t));
  Checker c{t};
  constexpr int kDoubles = 1 << 18;   // x 6 formats: about 1.6M doubles
  constexpr int kOthers = 1 << 15;
  for (int i = 0; i < kDoubles; ++i) c.dbl(random_double(rng, t));
  for (int i = 0; i < kOthers; ++i) {
    const double hi = random_double(rng, t);
    const int k = 2 + static_cast<int>(rng() % 60);
    // ilogb(0) and ilogb(NaN) are INT_MIN: subtracting from it would overflow; such a hi gets lo = 0.
    const int e = (hi == 0 || std::isnan(hi)) ? -1074 : std::ilogb(hi);
    double lo = std::ldexp(static_cast<double>(rng() >> 11), e - 53 - 53 - k);
    if (rng() & 1) lo = -lo;
    c.dd({hi, (rng() % 8 == 0) ? 0.0 : lo});
    c.mp_rel(hi, (rng() & 1) ? 1 : -1, 20 + static_cast<int>(rng() % 120));
  }
  // Fully random 200-bit significands.
  gmp_randstate_t state;
  gmp_randinit_default(state);
  gmp_randseed_ui(state, 12345 + static_cast<unsigned>(t));
  const FormatInfo& f = info(t);
  Mp x(200);
  for (int i = 0; i < kOthers; ++i) {
    mpfr_urandomb(x.v, state);
    const int e = f.emin - f.precision - 3 + static_cast<int>(rng() % (f.emax - f.emin + f.precision + 6));
    mpfr_mul_2si(x.v, x.v, e, MPFR_RNDN);
    if (rng() & 1) mpfr_neg(x.v, x.v, MPFR_RNDN);
    c.mp(x.v);
  }
  gmp_randclear(state);
  EXPECT_EQ(c.failures, 0) << "of " << c.checks << " checks";
}

INSTANTIATE_TEST_SUITE_P(AllFloatFormats, RandomInputs,
                         ::testing::Values(DType::f32, DType::tf32, DType::bf16, DType::f16, DType::e4m3,
                                           DType::e5m2),
                         [](const auto& p) { return std::string(name(p.param)); });

// --- round to odd ----------------------------------------------------------------------------------

// Independent round-to-odd of an MPFR value: 53 bits toward zero in the normal range, the fixed
// quantum 2^-1074 below it, DBL_MAX above.
double round_to_odd_reference(mpfr_srcptr x) {
  if (mpfr_zero_p(x)) return mpfr_signbit(x) ? -0.0 : 0.0;
  const double sgn = mpfr_signbit(x) ? -1.0 : 1.0;
  const mpfr_exp_t e = mpfr_get_exp(x);   // |x| in [2^(e-1), 2^e)
  if (e > 1024) return sgn * DBL_MAX;
  uint64_t bits;
  if (e - 1 >= -1022) {
    Mp y(53);
    const int inex = mpfr_set(y.v, x, MPFR_RNDZ);
    bits = std::bit_cast<uint64_t>(mpfr_get_d(y.v, MPFR_RNDZ)) | (inex != 0 ? 1u : 0u);
  } else {
    Mp s(mpfr_get_prec(x) + 64);
    mpfr_mul_2si(s.v, x, 1074, MPFR_RNDN);   // exact
    mpfr_abs(s.v, s.v, MPFR_RNDN);
    Mp n(64);
    const int inex = mpfr_trunc(n.v, s.v);
    bits = (static_cast<uint64_t>(mpfr_get_ui(n.v, MPFR_RNDZ)) | (inex != 0 ? 1u : 0u));
    bits |= sgn < 0 ? 0x8000000000000000ull : 0;
  }
  return std::bit_cast<double>(bits);
}

TEST(RoundToOdd, MpfrAtEveryMagnitude) {
  std::mt19937_64 rng(7);
  gmp_randstate_t state;
  gmp_randinit_default(state);
  gmp_randseed_ui(state, 99);
  Mp x(120);
  int failures = 0;
  for (int i = 0; i < 200000; ++i) {
    mpfr_urandomb(x.v, state);
    if (i % 3 == 0) mpfr_prec_round(x.v, 50, MPFR_RNDN);   // exact in a double, often
    const int e = -1140 + static_cast<int>(rng() % 2300);  // below 2^-1074 to past 2^1024
    mpfr_mul_2si(x.v, x.v, e, MPFR_RNDN);
    if (rng() & 1) mpfr_neg(x.v, x.v, MPFR_RNDN);
    mpfr_prec_round(x.v, 120, MPFR_RNDN);
    const double want = round_to_odd_reference(x.v);
    const double got = round_to_odd(x.v);
    if (!same(got, want) && ++failures <= 10) ADD_FAILURE() << "got " << hex(got) << " want " << hex(want);
    // f64 target: plain RN.
    if (!same(round_to(DType::f64, x.v), mpfr_get_d(x.v, MPFR_RNDN)) && ++failures <= 10) ADD_FAILURE();
  }
  gmp_randclear(state);
  EXPECT_EQ(failures, 0);
  Mp y(200);
  mpfr_set_ui_2exp(y.v, 3, -1080, MPFR_RNDN);   // 3 * 2^-1080 < 2^-1074: zero, inexact -> 2^-1074
  EXPECT_EQ(round_to_odd(y.v), 0x1p-1074);
  mpfr_set_ui_2exp(y.v, 3, -1075, MPFR_RNDN);   // 1.5 * 2^-1074 -> 2^-1074 (odd)
  EXPECT_EQ(round_to_odd(y.v), 0x1p-1074);
  mpfr_set_ui_2exp(y.v, 5, -1075, MPFR_RNDN);   // 2.5 * 2^-1074 -> 3 * 2^-1074
  EXPECT_EQ(round_to_odd(y.v), 3 * 0x1p-1074);
  mpfr_set_ui_2exp(y.v, 1, 5000, MPFR_RNDN);
  EXPECT_EQ(round_to_odd(y.v), DBL_MAX);
  mpfr_set_inf(y.v, -1);
  EXPECT_EQ(round_to_odd(y.v), -kInf);
  mpfr_set_zero(y.v, -1);
  EXPECT_TRUE(same(round_to_odd(y.v), -0.0));
  EXPECT_TRUE(same(round_to(DType::bf16, y.v), -0.0));
}

TEST(RoundToOdd, DoubleDouble) {
  std::mt19937_64 rng(11);
  int failures = 0;
  for (int i = 0; i < 200000; ++i) {
    const int e = -1074 + static_cast<int>(rng() % 2090);
    double hi = std::ldexp(1.0 + std::ldexp(static_cast<double>(rng() >> 12), -52), std::max(e, -1022));
    if (i % 5 == 0) hi = std::ldexp(1.0, e);   // a power of two, and subnormal ones
    if (rng() & 1) hi = -hi;
    const int k = static_cast<int>(rng() % 70);
    double lo = std::ldexp(static_cast<double>(rng() >> 11), std::ilogb(hi) - 53 - 54 - k);
    if (rng() & 1) lo = -lo;
    if (i % 7 == 0) lo = (rng() & 1) ? std::ldexp(hi, -30) : -std::ldexp(hi, -30);   // not normalized
    Mp exact(2400, hi);
    mpfr_add_d(exact.v, exact.v, lo, MPFR_RNDN);
    const DD x{hi, lo};
    const double want = round_to_odd_reference(exact.v);
    if (!same(round_to_odd(x), want) && ++failures <= 10) {
      ADD_FAILURE() << hex(hi) << " + " << hex(lo) << ": got " << hex(round_to_odd(x)) << " want " << hex(want);
    }
    if (!same(round_to(DType::f64, x), mpfr_get_d(exact.v, MPFR_RNDN)) && ++failures <= 10) ADD_FAILURE();
  }
  EXPECT_EQ(failures, 0);
  // hi a power of two, lo negative: the truncation is the double just below hi, made odd.
  EXPECT_EQ(round_to_odd(DD{1.0, -0x1p-60}), 1 - 0x1p-53);
  EXPECT_EQ(round_to_odd(DD{1.0, 0x1p-60}), 1 + 0x1p-52);
  EXPECT_EQ(round_to_odd(DD{1.0, 0.0}), 1.0);
  EXPECT_EQ(round_to_odd(DD{-0x1p-1074, 0x1p-1074}), 0.0);
  EXPECT_TRUE(same(round_to_odd(DD{-0.0, 0.0}), -0.0));
  EXPECT_TRUE(same(round_to(DType::f16, DD{-0.0, 0.0}), -0.0));
  EXPECT_EQ(round_to_odd(DD{DBL_MAX, DBL_MAX}), DBL_MAX);   // beyond the double range
  EXPECT_EQ(round_to(DType::f64, DD{DBL_MAX, DBL_MAX}), kInf);
  EXPECT_TRUE(std::isnan(round_to(DType::bf16, DD{kNaN, 0.0})));
}

// Rounding through a narrower intermediate (Eigen::half(double) goes through float) gives 1.
TEST(RoundTo, DoubleRoundingPitfall) {
  EXPECT_EQ(round_to(DType::f16, DD{1 + 0x1p-11, 0x1p-40}), 1 + 0x1p-10);
  EXPECT_EQ(round_to(DType::f16, 1 + 0x1p-11 + 0x1p-40), 1 + 0x1p-10);
  EXPECT_EQ(round_to(DType::f16, DD{1 + 0x1p-11, 0x1p-70}), 1 + 0x1p-10);
  EXPECT_EQ(round_to(DType::f16, DD{1 + 0x1p-11, -0x1p-70}), 1.0);
  EXPECT_EQ(round_to(DType::f16, 1 + 0x1p-11), 1.0);   // the exact tie goes to even
  EXPECT_EQ(round_to(DType::bf16, DD{1 + 0x1p-8, 0x1p-80}), 1 + 0x1p-7);
  Mp x(300, 1 + 0x1p-11);
  mpfr_add(x.v, x.v, Mp(300, 0x1p-200).v, MPFR_RNDN);
  EXPECT_EQ(round_to(DType::f16, x.v), 1 + 0x1p-10);
  EXPECT_EQ(round_to(DType::e4m3, DD{1 + 0x1p-4, 0x1p-90}), 1.125);
}

// --- overflow, NaN, zeros ---------------------------------------------------------------------------

TEST(RoundTo, OverflowPolicies) {
  EXPECT_EQ(round_to(DType::e4m3, 449.0), 448.0);
  EXPECT_EQ(encode(DType::e4m3, 449.0), 0x7Eu);
  EXPECT_EQ(encode(DType::e4m3, 464.0), 0x7Eu);
  EXPECT_EQ(encode(DType::e4m3, 1e9), 0x7Eu);
  EXPECT_EQ(encode(DType::e4m3, -1e9), 0xFEu);
  EXPECT_EQ(encode(DType::e4m3, kInf), 0x7Eu);
  EXPECT_EQ(encode(DType::e4m3, -kInf), 0xFEu);
  EXPECT_EQ(encode(DType::e4m3, kNaN), 0x7Fu);
  EXPECT_TRUE(std::isnan(round_to(DType::e4m3, kNaN)));
  EXPECT_EQ(round_to(DType::e4m3, DD{1e9, 1.0}), 448.0);
  EXPECT_EQ(encode(DType::e5m2, 61439.99), 0x7Bu);
  EXPECT_EQ(encode(DType::e5m2, 61440.0), 0x7Cu);   // max + ulp/2: Inf
  EXPECT_EQ(encode(DType::e5m2, -1e9), 0xFCu);
  EXPECT_EQ(encode(DType::e5m2, kNaN), 0x7Fu);
  EXPECT_EQ(round_to(DType::f16, 65519.99), 65504.0);
  EXPECT_EQ(round_to(DType::f16, 65520.0), kInf);
  EXPECT_EQ(encode(DType::f16, -65520.0), 0xFC00u);
  EXPECT_EQ(round_to(DType::bf16, 0x1.ffp127), kInf);
  EXPECT_EQ(round_to(DType::bf16, 0x1.feffp127), 0x1.fep127);
  EXPECT_EQ(round_to(DType::tf32, 0x1.ffep127), kInf);
  EXPECT_EQ(round_to(DType::f32, 1e39), kInf);
  EXPECT_EQ(encode(DType::tf32, 1e39), 0x7F800000u);
  EXPECT_EQ(encode(DType::bf16, kNaN), 0x7FC0u);
  EXPECT_EQ(encode(DType::f16, kNaN), 0x7E00u);
}

TEST(RoundTo, SignedZerosAndUnderflow) {
  for (const DType t : kFloatDTypes) {
    SCOPED_TRACE(std::string(name(t)));
    const uint64_t sign = uint64_t{1} << (8 * info(t).storage_bytes - 1);
    EXPECT_EQ(encode(t, -0.0), sign);
    EXPECT_EQ(encode(t, 0.0), 0u);
    EXPECT_TRUE(same(round_to(t, -0.0), -0.0));
    if (t != DType::f64) {
      EXPECT_TRUE(same(round_to(t, -1e-300), -0.0));
      EXPECT_TRUE(same(round_to(t, DD{-1e-300, 1e-320}), -0.0));
      const double min_sub = ulp(t, 0.0);
      EXPECT_TRUE(same(round_to(t, min_sub / 2), 0.0));                       // tie to even: 0
      EXPECT_EQ(round_to(t, DD{min_sub / 2, 0x1p-1074}), min_sub);            // just past the tie
      EXPECT_EQ(round_to(t, min_sub * 0.75), min_sub);
      EXPECT_EQ(encode(t, -min_sub), sign | 1u << (t == DType::tf32 ? 13 : 0));
    }
  }
}

// --- tf32 modes ------------------------------------------------------------------------------------

double tf32_reference(float x, Tf32Mode mode) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double a = std::fabs(static_cast<double>(x));
  const double q = std::ldexp(1.0, std::max(std::ilogb(a), -126) - 10);
  const double lo = std::floor(a / q) * q;
  const double rem = a - lo;
  bool up = false;
  switch (mode) {
    case Tf32Mode::rz: up = false; break;
    case Tf32Mode::rna: up = rem >= q / 2; break;
    case Tf32Mode::rne: up = rem > q / 2 || (rem == q / 2 && std::fmod(lo / q, 2.0) == 1.0); break;
  }
  double r = up ? lo + q : lo;
  if (r > 0x1.ffcp127) r = kInf;
  return std::copysign(r, static_cast<double>(x));
}

TEST(Tf32, ModesAgainstReference) {
  int failures = 0;
  const auto check = [&](uint32_t b) {
    const float x = f32_from_bits(b);
    for (const Tf32Mode m : {Tf32Mode::rne, Tf32Mode::rna, Tf32Mode::rz}) {
      const double got = round_tf32(x, m);
      const double want = tf32_reference(x, m);
      if (!same(got, want) && ++failures <= 10) {
        ADD_FAILURE() << "pattern " << std::hex << b << " mode " << static_cast<int>(m) << ": got " << hex(got)
                      << " want " << hex(want);
      }
    }
    if (!std::isnan(x) && !same(round_to(DType::tf32, x), round_tf32(x, Tf32Mode::rne)) && ++failures <= 10) {
      ADD_FAILURE() << "round_to(tf32) " << std::hex << b;
    }
  };
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 251) check(static_cast<uint32_t>(b));
  for (uint32_t top = 0; top < (1u << 19); ++top) {
    for (const uint32_t low : {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu}) check((top << 13) | low);
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(round_tf32(1 + 0x1p-11, Tf32Mode::rna), 1 + 0x1p-10);
  EXPECT_EQ(round_tf32(1 + 0x1p-11, Tf32Mode::rne), 1.0);
  EXPECT_EQ(round_tf32(1 + 0x1p-11 + 0x1p-23, Tf32Mode::rz), 1.0);
  EXPECT_EQ(round_tf32(-(1 + 0x1p-11), Tf32Mode::rna), -(1 + 0x1p-10));
  EXPECT_THROW(round_tf32(1 + 0x1p-40, Tf32Mode::rne), std::invalid_argument);
  EXPECT_TRUE(std::isnan(round_tf32(kNaN, Tf32Mode::rz)));
}

// --- fast f32 paths --------------------------------------------------------------------------------

// f32 inputs for a 16-bit format: a stride over all patterns, plus every neighbour midpoint of the
// format and the f32 values on either side of it.
std::vector<float> f32_probes(DType t) {
  std::vector<float> v;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) v.push_back(f32_from_bits(static_cast<uint32_t>(b)));
  const uint64_t positive_patterns = uint64_t{1} << (8 * info(t).storage_bytes - 1);
  for (uint64_t b = 0; b + 1 < positive_patterns; ++b) {
    const double a = decode(t, b);
    const double c = decode(t, b + 1);
    if (!std::isfinite(a) || !std::isfinite(c)) continue;
    const auto mid = static_cast<float>(0.5 * (a + c));   // exact
    for (const float m : {mid, -mid}) {
      v.push_back(m);
      v.push_back(std::nextafter(m, INFINITY));
      v.push_back(std::nextafter(m, -INFINITY));
    }
  }
  return v;
}

TEST(FastPaths, Bf16FromF32MatchesEncode) {
  int failures = 0;
  for (const float x : f32_probes(DType::bf16)) {
    if (std::isnan(x)) continue;
    if (bf16_from_f32(x) != encode(DType::bf16, x) && ++failures <= 10) ADD_FAILURE() << hex(x);
    if (!same(round_bf16(x), round_to(DType::bf16, x)) && ++failures <= 10) ADD_FAILURE() << hex(x);
  }
  EXPECT_EQ(failures, 0);
  EXPECT_TRUE(std::isnan(f32_from_bf16(bf16_from_f32(std::nanf("")))));
  EXPECT_TRUE(std::isnan(f32_from_bf16(bf16_from_f32(f32_from_bits(0x7F800001u)))));   // sNaN stays NaN
}

TEST(FastPaths, F16MatchesEncodeDecode) {
  int failures = 0;
  for (const float x : f32_probes(DType::f16)) {
    const uint16_t h = f16_from_f32(x);
    if (std::isnan(x)) {
      if (!std::isnan(f32_from_f16(h)) || !std::isnan(f32_from_f16(detail::f16_from_f32_soft(x)))) ++failures;
      continue;
    }
    if (h != encode(DType::f16, x) && ++failures <= 10) ADD_FAILURE() << hex(x);
    if (detail::f16_from_f32_soft(x) != h && ++failures <= 10) ADD_FAILURE() << "soft " << hex(x);
  }
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<uint16_t>(b);
    if (!same(f32_from_f16(h), decode(DType::f16, h)) && ++failures <= 10) ADD_FAILURE() << b;
    if (!same(detail::f32_from_f16_soft(h), decode(DType::f16, h)) && ++failures <= 10) ADD_FAILURE() << b;
  }
  EXPECT_EQ(failures, 0);
}

#if defined(DRIFTGATE_CUDA_HOST_HEADERS)
// CUDA's own converters, host side (cuda_fp8.h / cuda_bf16.h / cuda_fp16.h; no GPU needed). Their
// fp8 constructors saturate (__NV_SATFINITE): e4m3 matches our policy; for e5m2 (ours overflows to
// Inf, as IEEE) only inputs below the overflow threshold max + ulp/2 = 61440 are compared.
TEST(CudaHostConverters, FromFloat) {
  int failures = 0;
  const auto fail = [&](const char* what, float x) {
    if (++failures <= 10) ADD_FAILURE() << what << " " << hex(x);
  };
  for (const DType t : {DType::f16, DType::bf16, DType::e4m3, DType::e5m2}) {
    for (const float x : f32_probes(t)) {
      if (__nv_fp8_e4m3(x).__x != encode(DType::e4m3, x)) fail("e4m3", x);
      if ((std::isnan(x) || std::fabs(x) < 61440.0f) && __nv_fp8_e5m2(x).__x != encode(DType::e5m2, x)) {
        fail("e5m2", x);
      }
      if (std::isnan(x)) continue;
      if (__bfloat16_as_ushort(__nv_bfloat16(x)) != encode(DType::bf16, x)) fail("bf16", x);
      if (__half_as_ushort(__half(x)) != encode(DType::f16, x)) fail("f16", x);
    }
  }
  EXPECT_EQ(failures, 0);
}

// The constructors from double convert directly (one rounding), so they must match too.
TEST(CudaHostConverters, FromDouble) {
  int failures = 0;
  for (const DType t : {DType::e4m3, DType::e5m2, DType::bf16, DType::f16}) {
    std::mt19937_64 rng(3);
    for (int i = 0; i < 200000; ++i) {
      const double x = random_double(rng, t);
      unsigned got = 0;
      switch (t) {
        case DType::e4m3: got = __nv_fp8_e4m3(x).__x; break;
        case DType::e5m2: got = __nv_fp8_e5m2(x).__x; break;
        case DType::bf16: got = __bfloat16_as_ushort(__nv_bfloat16(x)); break;
        default: got = __half_as_ushort(__half(x)); break;
      }
      if (t == DType::e5m2 && !(std::fabs(x) < 61440.0)) continue;
      if (got != encode(t, x) && ++failures <= 10) ADD_FAILURE() << name(t) << " " << hex(x);
    }
  }
  EXPECT_EQ(failures, 0);
}
#endif

// --- ULP -------------------------------------------------------------------------------------------

TEST(Ulp, KnownValues) {
  EXPECT_EQ(ulp(DType::f64, 1.0), 0x1p-52);
  EXPECT_EQ(ulp(DType::f64, 0.0), 0x1p-1074);
  EXPECT_EQ(ulp(DType::f64, 0x1p-1070), 0x1p-1074);
  EXPECT_EQ(ulp(DType::f32, 1.0), 0x1p-23);
  EXPECT_EQ(ulp(DType::f32, 0.0), 0x1p-149);
  EXPECT_EQ(ulp(DType::tf32, 1.5), 0x1p-10);
  EXPECT_EQ(ulp(DType::tf32, 0.0), 0x1p-136);
  EXPECT_EQ(ulp(DType::bf16, -3.0), 0x1p-6);
  EXPECT_EQ(ulp(DType::bf16, 1e-40), 0x1p-133);
  EXPECT_EQ(ulp(DType::f16, 65504.0), 32.0);
  EXPECT_EQ(ulp(DType::f16, 0x1p-20), 0x1p-24);
  EXPECT_EQ(ulp(DType::f16, 0x1p-14), 0x1p-24);
  EXPECT_EQ(ulp(DType::f16, 1.999), 0x1p-10);
  EXPECT_EQ(ulp(DType::e4m3, 448.0), 32.0);
  EXPECT_EQ(ulp(DType::e4m3, 0.0), 0x1p-9);
  EXPECT_EQ(ulp(DType::e5m2, 1.0), 0.25);
  EXPECT_EQ(ulp(DType::e5m2, 0.0), 0x1p-16);
  EXPECT_EQ(ulp(DType::i32, 7.0), 1.0);
  EXPECT_TRUE(std::isnan(ulp(DType::f16, kNaN)));

  EXPECT_EQ(ulp_error(DType::f16, 1 + 0x1p-10, 1.0), 1.0);
  EXPECT_EQ(ulp_error(DType::bf16, 1.0, 1 + 0x1p-9), 0.25);
  EXPECT_EQ(ulp_error(DType::f16, 0x1p-24, 0.0), 1.0);
  EXPECT_EQ(ulp_error(DType::f16, 3 * 0x1p-24, 0x1p-24), 2.0);   // fixed quantum below 2^-14
  EXPECT_EQ(ulp_error(DType::e4m3, 448.0, 464.0), 0.5);
  EXPECT_EQ(ulp_error(DType::f32, 0.0, -0.0), 0.0);
  EXPECT_EQ(ulp_error(DType::f32, kInf, kInf), 0.0);
  EXPECT_EQ(ulp_error(DType::f32, kInf, 1.0), kInf);
  EXPECT_TRUE(std::isnan(ulp_error(DType::f32, kNaN, 1.0)));

  EXPECT_EQ(ulp_distance(DType::f16, 0x0000, 0x8000), 0);
  EXPECT_EQ(ulp_distance(DType::f16, 0x0001, 0x8001), 2);
  EXPECT_EQ(ulp_distance(DType::f16, 0x03FF, 0x0400), 1);   // largest subnormal, smallest normal
  EXPECT_EQ(ulp_distance(DType::f16, 0x3C00, 0x3C05), 5);
  EXPECT_EQ(ulp_distance(DType::f16, 0x3C05, 0x3C00), 5);
  EXPECT_EQ(ulp_distance(DType::bf16, 0x3F80, 0xBF80), 2 * 0x3F80);
  EXPECT_EQ(ulp_distance(DType::e4m3, 0x01, 0x81), 2);
  EXPECT_EQ(ulp_distance(DType::e4m3, 0x7E, 0x7D), 1);
  EXPECT_EQ(ulp_distance(DType::tf32, 0x3F800000, 0x3F806000), 3);
  EXPECT_EQ(ulp_distance(DType::f32, 0x00000001, 0x00800000), 0x7FFFFF);
  EXPECT_EQ(ulp_distance(DType::f64, 0, 0x7FEFFFFFFFFFFFFF), 0x7FEFFFFFFFFFFFFF);
  EXPECT_EQ(ulp_distance(DType::f64, 0xFFEFFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF),
            std::numeric_limits<int64_t>::max());   // saturates
  EXPECT_EQ(ulp_distance(DType::i32, encode(DType::i32, -3), encode(DType::i32, 4)), 7);
  // Adjacent encodings are one apart across the whole f16 line, zero included.
  for (int64_t v = -0x7BFF; v < 0x7BFF; ++v) {
    const auto enc = [](int64_t o) { return o < 0 ? 0x8000u | static_cast<uint64_t>(-o) : static_cast<uint64_t>(o); };
    ASSERT_EQ(ulp_distance(DType::f16, enc(v), enc(v + 1)), 1) << v;
  }
}

// --- integers --------------------------------------------------------------------------------------

TEST(Integers, RoundEncodeDecode) {
  EXPECT_EQ(round_to(DType::i32, 2.5), 2.0);
  EXPECT_EQ(round_to(DType::i32, 3.5), 4.0);
  EXPECT_EQ(round_to(DType::i32, -2.5), -2.0);
  EXPECT_TRUE(same(round_to(DType::i32, -0.4), 0.0));
  EXPECT_EQ(round_to(DType::i32, 2147483647.0), 2147483647.0);
  EXPECT_THROW(round_to(DType::i32, 2147483648.0), std::out_of_range);
  EXPECT_THROW(round_to(DType::i32, kNaN), std::out_of_range);
  EXPECT_EQ(round_to(DType::i64, -0x1p63), -0x1p63);
  EXPECT_THROW(round_to(DType::i64, 0x1p63), std::out_of_range);
  EXPECT_EQ(encode(DType::i32, -1.0), 0xFFFFFFFFu);
  EXPECT_EQ(encode(DType::i64, -1.0), 0xFFFFFFFFFFFFFFFFu);
  EXPECT_EQ(decode(DType::i64, encode(DType::i64, -5.0)), -5.0);
  EXPECT_EQ(decode(DType::i32, encode(DType::i32, -2147483648.0)), -2147483648.0);
  EXPECT_EQ(round_to(DType::i32, DD{2.5, 1e-20}), 3.0);
  EXPECT_EQ(round_to(DType::i32, DD{2.5, -1e-20}), 2.0);
  EXPECT_EQ(round_to(DType::i32, DD{2.5, 0.0}), 2.0);
  EXPECT_EQ(round_to(DType::i32, DD{3.5, 0.0}), 4.0);
  EXPECT_EQ(round_to(DType::i32, DD{-3.5, 0.0}), -4.0);
  EXPECT_EQ(round_to(DType::i64, DD{0x1p52, 0.5}), 0x1p52);
  EXPECT_EQ(round_to(DType::i64, DD{0x1p52 + 1, 0.5}), 0x1p52 + 2);
  EXPECT_EQ(round_to(DType::i64, DD{0x1p52, -0.5}), 0x1p52);
  EXPECT_EQ(round_to(DType::i32, Mp(64, 2.5).v), 2.0);
  EXPECT_EQ(round_to(DType::i32, Mp(64, -7.5).v), -8.0);
  EXPECT_THROW(round_to(DType::i32, Mp(64, 1e10).v), std::out_of_range);
}

}  // namespace
}  // namespace dg
