#include "harness/metrics/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace dg {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TensorMetrics compare_one(double r, double c, DType f) {
  return compare(std::span<const double>(&r, 1), std::span<const double>(&c, 1), f);
}

// Significand bits of each float format, written out so these tests do not lean on info().
struct FormatP {
  DType type;
  int p;
};
constexpr FormatP kFormats[] = {{DType::f64, 53}, {DType::f32, 24}, {DType::tf32, 11}, {DType::bf16, 8},
                                {DType::f16, 11}, {DType::e4m3, 4}, {DType::e5m2, 3}};

// ---- formulas on known vectors ---------------------------------------------------------------

TEST(Compare, FormulasOnKnownVectors) {
  const std::vector<double> r = {1, 2, 3, 4};
  const std::vector<double> c = {1.5, 2, 2, 4};   // d = {0.5, 0, -1, 0}
  const TensorMetrics m = compare(r, c, DType::f64);
  EXPECT_EQ(m.count, 4);
  EXPECT_EQ(m.nonfinite_mismatch, 0);
  EXPECT_EQ(m.first_mismatch, -1);
  EXPECT_EQ(m.max_abs, 1.0);
  EXPECT_EQ(m.argmax_abs, 2);
  EXPECT_EQ(m.max_rel, 0.5);                                  // 0.5/1 beats 1/3
  EXPECT_DOUBLE_EQ(m.rms_ratio, std::sqrt(1.25 / 30.0));      // ||d||^2 = 1.25, ||r||^2 = 30
  EXPECT_NEAR(m.bits, 0.5 * std::log2(24.0), 1e-12);
  EXPECT_DOUBLE_EQ(m.cosine, 27.5 / std::sqrt(26.25 * 30.0)); // <c,r> = 27.5, ||c||^2 = 26.25
}

// Two f32 ULPs (at 1) of error on a reference 0: ulp_max reads 2^127 (the tiny value's own ULP), the
// scale-aware ulp_rms_max reads the error in ULPs at the output's typical size.
TEST(Compare, UlpAtRmsIsScaleAware) {
  const float one_ulp = std::ldexp(1.0f, -23);   // ulp_f32(1)
  const std::vector<double> r = {1.0, -1.0, 1.0, 0.0};
  const std::vector<double> c = {1.0, -1.0, 1.0, 2.0 * one_ulp};
  const TensorMetrics m = compare(r, c, DType::f32);
  EXPECT_GT(m.ulp_max, 1e10);
  // rms(r) = sqrt(3/4) in [0.5, 1): ulp_f32 = 2^-24, and the error is 2 ulp_f32(1) = 4 ulps there.
  EXPECT_DOUBLE_EQ(m.ulp_rms_max, 4.0);
  // Exact output and an all-zero reference read 0.
  EXPECT_EQ(compare(r, r, DType::f32).ulp_rms_max, 0.0);
  const std::vector<double> z = {0.0, 0.0};
  EXPECT_EQ(compare(z, z, DType::f32).ulp_rms_max, 0.0);
  // Huge magnitudes do not overflow the sum of squares.
  const std::vector<double> big = {1e300, 1e300}, big_c = {1e300, std::nextafter(1e300, 2e300)};
  EXPECT_DOUBLE_EQ(compare(big, big_c, DType::f64).ulp_rms_max, 1.0);
  // A reference far below a huge candidate (its squares underflow in the scaled sum) still has a scale.
  const std::vector<double> tiny = {0x1p-600, 0x1p-600}, wild = {0x1p-600, 1.0};
  EXPECT_GT(compare(tiny, wild, DType::f64).ulp_rms_max, 1e100);
}

TEST(Compare, MaxRelUsesTheFloor) {
  const std::vector<double> r = {0, 1e-3, 2};
  const std::vector<double> c = {1e-3, 2e-3, 2};
  EXPECT_DOUBLE_EQ(compare(r, c, DType::f64, 0.01).max_rel, 0.1);   // both errors / 0.01
  EXPECT_DOUBLE_EQ(compare(r, c, DType::f64, 1e-4).max_rel, 10.0);  // 1e-3 / 1e-4 at r = 0
  // default floor: the format's smallest normal (bf16: 2^-126)
  EXPECT_EQ(compare_one(0, 0x1p-120, DType::bf16).max_rel, 64.0);
  EXPECT_EQ(compare_one(0, 0x1p-130, DType::bf16).max_rel, 0x1p-4);   // a bf16 subnormal
  EXPECT_EQ(compare_one(0, 0x1p-20, DType::f16).max_rel, 0x1p-6);     // f16: 2^-14
  // above the floor it is the plain relative error
  EXPECT_EQ(compare_one(4, 5, DType::bf16).max_rel, 0.25);
}

TEST(Compare, IdenticalOutputIsExact) {
  std::vector<double> r(1000);
  for (size_t i = 0; i < r.size(); ++i) r[i] = (static_cast<double>(i % 97) - 48) * 0x1p-5;
  const TensorMetrics m = compare(r, r, DType::bf16);
  EXPECT_EQ(m.count, 1000);
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_EQ(m.argmax_abs, 0);
  EXPECT_EQ(m.rms_ratio, 0);
  EXPECT_EQ(m.bits, 64);
  EXPECT_DOUBLE_EQ(m.cosine, 1);
  EXPECT_EQ(m.ulp_max, 0);
  EXPECT_EQ(m.ulp_p99, 0);
  EXPECT_EQ(m.ulp_mean, 0);
  EXPECT_EQ(m.ulp_dist_max, 0);
}

TEST(Compare, RmsRatioBitsAndCosineConventions) {
  const std::vector<double> zeros = {0, 0, 0};
  const std::vector<double> ones = {1, -1, 1};
  TensorMetrics m = compare(zeros, zeros, DType::f32);
  EXPECT_EQ(m.rms_ratio, 0);
  EXPECT_EQ(m.bits, 64);
  EXPECT_EQ(m.cosine, 1);
  m = compare(zeros, ones, DType::f32);   // only the reference is zero
  EXPECT_EQ(m.rms_ratio, kInf);
  EXPECT_EQ(m.bits, -kInf);
  EXPECT_EQ(m.cosine, 0);
  m = compare(ones, zeros, DType::f32);   // a zeros candidate: ratio 1, no bits, orthogonal
  EXPECT_EQ(m.rms_ratio, 1);
  EXPECT_EQ(m.bits, 0);
  EXPECT_EQ(m.cosine, 0);
  const std::vector<double> fours = {4, -4, 4};
  m = compare(ones, fours, DType::f32);   // error three times the signal: negative bits
  EXPECT_DOUBLE_EQ(m.rms_ratio, 3);
  EXPECT_DOUBLE_EQ(m.bits, -std::log2(3.0));
  EXPECT_DOUBLE_EQ(m.cosine, 1);
  const std::vector<double> flipped = {-1, 1, -1};
  m = compare(ones, flipped, DType::f32);
  EXPECT_DOUBLE_EQ(m.rms_ratio, 2);
  EXPECT_DOUBLE_EQ(m.bits, -1);
  EXPECT_DOUBLE_EQ(m.cosine, -1);
}

TEST(Compare, BitsAreCappedAt64) {
  const std::vector<double> r = {0x1p20, 0x1p-50};
  const std::vector<double> c = {0x1p20, 0x1p-50 + 0x1p-102};   // ratio about 2^-122
  const TensorMetrics m = compare(r, c, DType::f64);
  EXPECT_GT(m.rms_ratio, 0);
  EXPECT_EQ(m.bits, 64);
  EXPECT_NEAR(compare_one(1, 1 + 0x1p-52, DType::f64).bits, 52, 1e-12);
}

TEST(Compare, SumsAreCompensated) {
  // ||r||^2 = 2^54 + 1000: a plain sum drops every 1 (half an ulp of 2^54 is 2).
  std::vector<double> r(1001, 1.0), c(1001, 1.0);
  r[0] = 0x1p27;
  c[0] = 0x1p27 + 1;
  const TensorMetrics m = compare(r, c, DType::f64);
  EXPECT_EQ(m.rms_ratio, 1.0 / std::sqrt(0x1p54 + 1000));
  EXPECT_NE(m.rms_ratio, 0x1p-27);
}

TEST(Compare, HugeAndTinyMagnitudesAreScaled) {
  for (const double scale : {0x1p600, 0x1p-600, 0x1p-1000}) {
    const std::vector<double> r = {1 * scale, -2 * scale, 3 * scale};
    const std::vector<double> c = {(1 + 0x1p-10) * scale, -2 * scale, 3 * scale};
    const TensorMetrics m = compare(r, c, DType::f64);
    EXPECT_DOUBLE_EQ(m.rms_ratio, 0x1p-10 / std::sqrt(14.0)) << scale;
    EXPECT_NEAR(m.bits, 10 + 0.5 * std::log2(14.0), 1e-12) << scale;
    EXPECT_GT(m.cosine, 0.9999) << scale;
    EXPECT_LE(m.cosine, 1.0) << scale;
  }
}

TEST(Compare, EmptyInput) {
  const std::vector<double> none;
  const TensorMetrics m = compare(none, none, DType::bf16);
  EXPECT_EQ(m.count, 0);
  EXPECT_EQ(m.argmax_abs, -1);
  EXPECT_EQ(m.rms_ratio, 0);
  EXPECT_EQ(m.bits, 64);
  EXPECT_EQ(m.ulp_p99, 0);
}

TEST(Compare, InvalidArgumentsThrow) {
  const std::vector<double> a = {1, 2}, b = {1};
  EXPECT_THROW(compare(a, b, DType::f32), std::invalid_argument);
  EXPECT_THROW(compare(a, a, DType::i32), std::invalid_argument);
  EXPECT_THROW(compare(a, a, DType::i64), std::invalid_argument);
  EXPECT_THROW(compare(a, a, DType::f32, -1.0), std::invalid_argument);
  EXPECT_THROW(compare(a, a, DType::f32, kNaN), std::invalid_argument);
}

// ---- NaN / Inf -------------------------------------------------------------------------------

TEST(Compare, OneNanInAMillionIsCaught) {
  const int64_t n = 1 << 20;
  std::vector<double> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = 1 + static_cast<double>(i % 128) * 0x1p-7;
  std::vector<double> c = r;
  c[777777] = kNaN;
  const TensorMetrics m = compare(r, c, DType::bf16);
  EXPECT_EQ(m.nonfinite_mismatch, 1);
  EXPECT_EQ(m.first_mismatch, 777777);
  EXPECT_EQ(m.count, n - 1);
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_EQ(m.rms_ratio, 0);
  EXPECT_EQ(m.ulp_max, 0);
}

TEST(Compare, MatchingNanAndInfAreNotMismatches) {
  const std::vector<double> r = {kNaN, kInf, -kInf, 1, -kNaN};
  const std::vector<double> c = {kNaN, kInf, -kInf, 1, kNaN};   // a NaN's sign or payload is no matter
  const TensorMetrics m = compare(r, c, DType::f32);
  EXPECT_EQ(m.nonfinite_mismatch, 0);
  EXPECT_EQ(m.first_mismatch, -1);
  EXPECT_EQ(m.count, 1);
  EXPECT_EQ(m.max_abs, 0);
}

TEST(Compare, EveryKindOfNonfiniteMismatch) {
  const double pairs[][2] = {{1, kNaN},  {kNaN, 1},  {1, kInf},    {kInf, 1},   {-kInf, 1}, {1, -kInf},
                             {kInf, -kInf}, {-kInf, kInf}, {kNaN, kInf}, {kInf, kNaN}, {0, kNaN}};
  for (const auto& p : pairs) {
    const TensorMetrics m = compare_one(p[0], p[1], DType::bf16);
    EXPECT_EQ(m.nonfinite_mismatch, 1) << p[0] << " vs " << p[1];
    EXPECT_EQ(m.first_mismatch, 0);
    EXPECT_EQ(m.count, 0);
  }
}

TEST(Compare, MismatchesAreExcludedFromTheOtherMetrics) {
  const std::vector<double> r = {1, 2, kInf, 4, kNaN, 8};
  const std::vector<double> c = {1, 2.5, -kInf, kNaN, kNaN, 0x1p100};
  TensorMetrics m = compare(r, c, DType::f32);
  EXPECT_EQ(m.nonfinite_mismatch, 2);   // -Inf for +Inf, NaN for 4
  EXPECT_EQ(m.first_mismatch, 2);
  EXPECT_EQ(m.count, 3);
  EXPECT_EQ(m.argmax_abs, 5);
  EXPECT_TRUE(std::isfinite(m.rms_ratio));
  EXPECT_TRUE(std::isfinite(m.ulp_max));
}

// ---- ULP -------------------------------------------------------------------------------------

TEST(CompareUlp, OneUlpAwayInEveryFormat) {
  for (const auto& [f, p] : kFormats) {
    const double u = std::ldexp(1.0, 1 - p);   // the quantum in [1, 2)
    TensorMetrics m = compare_one(1, 1 + u, f);
    EXPECT_EQ(m.ulp_dist_max, 1) << name(f);
    EXPECT_EQ(m.ulp_max, 1) << name(f);
    m = compare_one(-1, -1 - u, f);
    EXPECT_EQ(m.ulp_dist_max, 1) << name(f);
    EXPECT_EQ(m.ulp_max, 1) << name(f);
    m = compare_one(1, 1 - u / 2, f);   // one value below 1: half the quantum of 1
    EXPECT_EQ(m.ulp_dist_max, 1) << name(f);
    EXPECT_EQ(m.ulp_max, 0.5) << name(f);
    m = compare_one(1, 1 + 3 * u, f);
    EXPECT_EQ(m.ulp_dist_max, 3) << name(f);
    EXPECT_EQ(m.ulp_max, 3) << name(f);
  }
}

TEST(CompareUlp, TiesRoundToEvenAndRoundedToOddReferencesDecide) {
  for (const auto& [f, p] : kFormats) {
    if (f == DType::f64) continue;   // a double reference is never between two doubles
    const double u = std::ldexp(1.0, 1 - p), half = u / 2;
    // 1 + u/2 is a tie between 1 (even) and 1 + u (odd): RN gives 1
    EXPECT_EQ(compare_one(1 + half, 1, f).ulp_dist_max, 0) << name(f);
    EXPECT_EQ(compare_one(1 + half, 1, f).ulp_max, 0.5) << name(f);
    EXPECT_EQ(compare_one(1 + half, 1 + u, f).ulp_dist_max, 1) << name(f);
    EXPECT_EQ(compare_one(1 + half, 1 + u, f).ulp_max, 0.5) << name(f);
    // 1 + 3u/2 is a tie between 1 + u (odd) and 1 + 2u (even): RN gives 1 + 2u
    EXPECT_EQ(compare_one(1 + 3 * half, 1 + 2 * u, f).ulp_dist_max, 0) << name(f);
    EXPECT_EQ(compare_one(1 + 3 * half, 1 + u, f).ulp_dist_max, 1) << name(f);
    // a true value just above the tie, rounded to odd into double, keeps its sticky bit: RN goes up
    const double above = 1 + half + 0x1p-52, below = 1 + half - 0x1p-52;
    EXPECT_EQ(compare_one(above, 1 + u, f).ulp_dist_max, 0) << name(f);
    EXPECT_EQ(compare_one(above, 1, f).ulp_dist_max, 1) << name(f);
    EXPECT_EQ(compare_one(below, 1, f).ulp_dist_max, 0) << name(f);
    EXPECT_EQ(compare_one(below, 1 + u, f).ulp_dist_max, 1) << name(f);
    // negative ties mirror
    EXPECT_EQ(compare_one(-(1 + half), -1, f).ulp_dist_max, 0) << name(f);
    EXPECT_EQ(compare_one(-above, -1 - u, f).ulp_dist_max, 0) << name(f);
  }
}

TEST(CompareUlp, BinadeBoundaries) {
  // bf16 below 2: 2 - 2^-7, then 2. 2 - 2^-9 is above the tie 2 - 2^-8, so RN gives 2.
  TensorMetrics m = compare_one(2 - 0x1p-9, 2 - 0x1p-7, DType::bf16);
  EXPECT_EQ(m.ulp_dist_max, 1);
  EXPECT_EQ(m.ulp_max, 0.75);   // |c - r| = 3 * 2^-9 over ulp(r) = 2^-7
  m = compare_one(2 - 0x1p-9, 2, DType::bf16);
  EXPECT_EQ(m.ulp_dist_max, 0);
  EXPECT_EQ(m.ulp_max, 0.25);
  m = compare_one(2, 2 - 0x1p-7, DType::bf16);   // ulp(2) = 2^-6
  EXPECT_EQ(m.ulp_dist_max, 1);
  EXPECT_EQ(m.ulp_max, 0.5);
}

TEST(CompareUlp, SubnormalsZerosAndSignCrossing) {
  const double q16 = 0x1p-24;   // f16 subnormal quantum
  TensorMetrics m = compare_one(3 * q16, 5 * q16, DType::f16);
  EXPECT_EQ(m.ulp_dist_max, 2);
  EXPECT_EQ(m.ulp_max, 2);
  m = compare_one(q16, -q16, DType::f16);   // +min, +0 == -0, -min
  EXPECT_EQ(m.ulp_dist_max, 2);
  EXPECT_EQ(m.ulp_max, 2);
  m = compare_one(0, q16, DType::f16);
  EXPECT_EQ(m.ulp_dist_max, 1);
  EXPECT_EQ(m.ulp_max, 1);
  EXPECT_EQ(compare_one(-0.0, 0.0, DType::f16).ulp_dist_max, 0);
  EXPECT_EQ(compare_one(0.0, -0.0, DType::bf16).ulp_dist_max, 0);
  m = compare_one(0x1p-14, 0x1p-14 - q16, DType::f16);   // smallest normal to largest subnormal
  EXPECT_EQ(m.ulp_dist_max, 1);
  EXPECT_EQ(m.ulp_max, 1);
  m = compare_one(0.4 * q16, 0, DType::f16);   // RN(0.4 q) = 0
  EXPECT_EQ(m.ulp_dist_max, 0);
  EXPECT_DOUBLE_EQ(m.ulp_max, 0.4);
  m = compare_one(3 * 0x1p-133, 0x1p-133, DType::bf16);
  EXPECT_EQ(m.ulp_dist_max, 2);
  EXPECT_EQ(m.ulp_max, 2);
  m = compare_one(7 * 0x1p-149, 4 * 0x1p-149, DType::f32);
  EXPECT_EQ(m.ulp_dist_max, 3);
  EXPECT_EQ(m.ulp_max, 3);
  m = compare_one(7 * 0x1p-1074, 4 * 0x1p-1074, DType::f64);
  EXPECT_EQ(m.ulp_dist_max, 3);
  EXPECT_EQ(m.ulp_max, 3);
  m = compare_one(0x1p-1022, -0x1p-1022, DType::f64);
  EXPECT_EQ(m.ulp_dist_max, int64_t{2} << 52);
  m = compare_one(0x1p-2, 0x1p-9, DType::e4m3);   // e4m3: 2^-9 is its smallest subnormal
  EXPECT_EQ(m.ulp_dist_max, 8 * 4 + 8 - 1);       // ordinals 40 (2^-2) and 1 (2^-9)
}

TEST(CompareUlp, OverflowPolicy) {
  const double bf16_max = 0x1.fep127;   // (2 - 2^-7) * 2^127; its half-ulp is 2^119
  EXPECT_EQ(compare_one(0x1p128, bf16_max, DType::bf16).ulp_dist_max, 1);            // RN = Inf
  EXPECT_EQ(compare_one(0x1p128, bf16_max, DType::bf16).ulp_max, 0.5);
  EXPECT_EQ(compare_one(bf16_max + 0x1p119, bf16_max, DType::bf16).ulp_dist_max, 1);  // tie -> even -> Inf
  EXPECT_EQ(compare_one(bf16_max + 0x1p118, bf16_max, DType::bf16).ulp_dist_max, 0);
  EXPECT_EQ(compare_one(1e300, bf16_max, DType::bf16).ulp_dist_max, 1);
  EXPECT_EQ(compare_one(-1e300, -bf16_max, DType::bf16).ulp_dist_max, 1);
  EXPECT_EQ(compare_one(65520, 65504, DType::f16).ulp_dist_max, 1);   // the f16 overflow tie
  EXPECT_EQ(compare_one(65519, 65504, DType::f16).ulp_dist_max, 0);
  EXPECT_EQ(compare_one(0x1p128, 0x1.fffffep127, DType::f32).ulp_dist_max, 1);
  EXPECT_EQ(compare_one(1e6, 57344, DType::e5m2).ulp_dist_max, 1);
  // e4m3 saturates: RN(1000) = 448
  TensorMetrics m = compare_one(1000, 448, DType::e4m3);
  EXPECT_EQ(m.ulp_dist_max, 0);
  EXPECT_EQ(m.ulp_max, 552.0 / 64);   // ulp(1000) = 2^(9 - 3)
  EXPECT_EQ(compare_one(1000, 416, DType::e4m3).ulp_dist_max, 1);
  EXPECT_EQ(compare_one(-1000, -448, DType::e4m3).ulp_dist_max, 0);
  // f64 values of opposite sign at the top of the range: the distance saturates
  EXPECT_EQ(compare_one(0x1.fffffffffffffp1023, -0x1.fffffffffffffp1023, DType::f64).ulp_dist_max,
            std::numeric_limits<int64_t>::max());
}

// The inline per-format paths must equal the dtype functions: ulp_distance(F, encode(F, c),
// encode(F, round_to(F, r))) and |c - r| / ulp(F, r).
TEST(CompareUlp, MatchesTheDtypeFunctions) {
  std::mt19937_64 rng(12345);
  for (const auto& [f, p] : kFormats) {
    const FormatInfo& fi = info(f);
    const int bytes = fi.storage_bytes;
    const uint64_t mask = bytes == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * bytes)) - 1;
    const uint64_t step = f == DType::tf32 ? uint64_t{1} << 13 : 1;   // tf32 keeps the low 13 bits clear
    const int lo = std::max(fi.emin - p - 2, -1074), hi = std::min(fi.emax + 2, 1023);
    int checked = 0;
    for (int trial = 0; trial < 20000; ++trial) {
      const double mant = 1 + std::ldexp(static_cast<double>(rng() >> 11), -53);
      const int e = lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
      double r = std::ldexp(mant, e) * ((rng() & 1) ? -1 : 1);
      const uint64_t rb = encode(f, r);
      if (trial % 4 == 1 || trial % 4 == 2) {   // a tie, or a rounded-to-odd value just off it
        const double a = decode(f, rb), b = decode(f, (rb + step) & mask);
        if (!std::isfinite(a) || !std::isfinite(b) || f == DType::f64) continue;
        r = a + (b - a) / 2;
        if (trial % 4 == 2) r = std::nextafter(r, (rng() & 1) ? kInf : -kInf);
      }
      const double rounded = round_to(f, r);
      if (!std::isfinite(rounded)) continue;   // ulp_distance leaves Inf to the caller
      const auto delta = static_cast<int64_t>(rng() % 7) - 3;
      const double c = decode(f, (rb + static_cast<uint64_t>(delta) * step) & mask);
      if (!std::isfinite(c)) continue;
      const TensorMetrics m = compare_one(r, c, f);
      EXPECT_EQ(m.ulp_dist_max, ulp_distance(f, encode(f, c), encode(f, rounded)))
          << name(f) << " r=" << r << " c=" << c;
      EXPECT_EQ(m.ulp_max, std::fabs(c - r) / ulp(f, r)) << name(f) << " r=" << r << " c=" << c;
      ++checked;
    }
    EXPECT_GT(checked, 5000) << name(f);
  }
}

// ---- p99 -------------------------------------------------------------------------------------

TensorMetrics compare_histogram(std::span<const double> r, std::span<const double> c, DType f) {
  CompareOptions options;
  options.exact_p99_max_count = 0;   // always the histogram
  return compare(r, c, f, options);
}

TEST(CompareP99, IntegerErrorsBothPaths) {
  // bf16 at r = 1 (ulp 2^-7): errors 0..99 ulps, 100 of each; the 9900th smallest is 98
  std::vector<double> r(10000, 1.0), c(10000);
  for (size_t i = 0; i < c.size(); ++i) c[i] = 1 + static_cast<double>(i % 100) * 0x1p-7;
  for (const TensorMetrics& m : {compare(r, c, DType::bf16), compare_histogram(r, c, DType::bf16)}) {
    EXPECT_EQ(m.ulp_p99, 98);
    EXPECT_EQ(m.ulp_max, 99);
    EXPECT_EQ(m.ulp_mean, 49.5);
    EXPECT_EQ(m.ulp_dist_max, 99);
  }
}

TEST(CompareP99, NearestRankOnSmallCounts) {
  std::vector<double> r(100, 1.0), c(100);
  for (size_t i = 0; i < c.size(); ++i) c[i] = 1 + static_cast<double>(99 - i) * 0x1p-7;
  EXPECT_EQ(compare(r, c, DType::bf16).ulp_p99, 98);   // ceil(0.99 * 100) = 99th smallest
  EXPECT_EQ(compare_histogram(r, c, DType::bf16).ulp_p99, 98);
  for (const size_t n : {101, 150}) {   // errors 0 .. n-1: the ceil(0.99 n)-th smallest is 99, 148
    std::vector<double> rn(n, 1.0), cn(n);
    for (size_t i = 0; i < n; ++i) cn[i] = 1 + static_cast<double>(i) * 0x1p-23;   // f32 at 1
    const double expected = n == 101 ? 99 : 148;
    EXPECT_EQ(compare(rn, cn, DType::f32).ulp_p99, expected) << n;
    EXPECT_EQ(compare_histogram(rn, cn, DType::f32).ulp_p99, expected) << n;
  }
  EXPECT_EQ(compare_one(1, 1 + 0x1p-7, DType::bf16).ulp_p99, 1);
}

TEST(CompareP99, HistogramBoundsTheExactValue) {
  // errors t in [0, 0.5) with 30 random bits: r = 1 + t * 2^-7 against c = 1 is exactly t ulps
  std::mt19937_64 rng(7);
  const size_t n = 200001;
  std::vector<double> r(n), c(n, 1.0), t(n);
  for (size_t i = 0; i < n; ++i) {
    t[i] = std::ldexp(static_cast<double>(rng() >> 34), -31);
    r[i] = 1 + t[i] * 0x1p-7;
  }
  std::vector<double> sorted = t;
  std::sort(sorted.begin(), sorted.end());
  const double exact = sorted[(99 * n + 99) / 100 - 1];

  const TensorMetrics e = compare(r, c, DType::bf16);
  const TensorMetrics h = compare_histogram(r, c, DType::bf16);
  EXPECT_EQ(e.ulp_p99, exact);
  EXPECT_GE(h.ulp_p99, exact);
  EXPECT_LT(h.ulp_p99, exact * (1 + 0x1p-8));
  EXPECT_TRUE(std::binary_search(sorted.begin(), sorted.end(), h.ulp_p99));   // an observed error
  EXPECT_EQ(h.ulp_max, e.ulp_max);
  EXPECT_EQ(h.ulp_mean, e.ulp_mean);
  EXPECT_EQ(h.ulp_max, sorted.back());

  CompareOptions at_limit;   // the exact path up to and including the limit
  at_limit.exact_p99_max_count = static_cast<int64_t>(n);
  EXPECT_EQ(compare(r, c, DType::bf16, at_limit).ulp_p99, exact);
}

// ---- drift curve -----------------------------------------------------------------------------

std::vector<int64_t> varlen_positions(std::initializer_list<int64_t> lengths) {
  std::vector<int64_t> pos;
  for (const int64_t len : lengths)
    for (int64_t t = 0; t < len; ++t) pos.push_back(t);
  return pos;
}

// r alternates in sign and magnitude; c = r + err(position) with the sign of r.
void fill(const std::vector<int64_t>& pos, int64_t inner, double (*err)(int64_t), std::vector<double>& r,
          std::vector<double>& c) {
  r.assign(pos.size() * static_cast<size_t>(inner), 0);
  c.assign(r.size(), 0);
  for (size_t i = 0; i < r.size(); ++i) {
    r[i] = (i % 2 ? -1.0 : 1.0) * (1 + static_cast<double>(i % 5) / 8);
    c[i] = r[i] + std::copysign(err(pos[i / static_cast<size_t>(inner)]), r[i]);
  }
}

TEST(DriftCurve, BucketBoundariesAndValues) {
  std::vector<int64_t> pos(10);
  for (int64_t t = 0; t < 10; ++t) pos[static_cast<size_t>(t)] = t;
  std::vector<double> r(20, 1.0), c(20);
  for (size_t i = 0; i < c.size(); ++i) c[i] = 1 + static_cast<double>(pos[i / 2]) * 0x1p-10;
  const DriftCurve d = drift_curve(r, c, pos, 2);
  const int64_t begins[] = {0, 1, 2, 4, 8}, ends[] = {1, 2, 4, 8, 10}, counts[] = {2, 2, 4, 8, 4};
  ASSERT_EQ(d.buckets.size(), 5u);
  for (size_t b = 0; b < 5; ++b) {
    EXPECT_EQ(d.buckets[b].begin, begins[b]);
    EXPECT_EQ(d.buckets[b].end, ends[b]);
    EXPECT_EQ(d.buckets[b].count, counts[b]);
    EXPECT_EQ(d.buckets[b].nonfinite_mismatch, 0);
  }
  EXPECT_EQ(d.buckets[0].rms_ratio, 0);
  EXPECT_EQ(d.buckets[0].rms_error, 0);
  EXPECT_DOUBLE_EQ(d.buckets[1].rms_error, 0x1p-10);
  EXPECT_DOUBLE_EQ(d.buckets[2].rms_error, 0x1p-10 * std::sqrt(6.5));   // positions 2, 2, 3, 3
  EXPECT_DOUBLE_EQ(d.buckets[2].rms_ratio, 0x1p-10 * std::sqrt(6.5));   // ||r|| = sqrt(count)
  EXPECT_DOUBLE_EQ(d.buckets[4].rms_error, 0x1p-10 * std::sqrt(72.5));  // positions 8, 9

  // a max position of 2^k - 1 ends a full bucket; 2^k opens a clipped one
  std::vector<int64_t> to7 = {0, 1, 2, 3, 4, 5, 6, 7}, to8 = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<double> z7(8, 1.0), z8(9, 1.0);
  EXPECT_EQ(drift_curve(z7, z7, to7, 1).buckets.back().begin, 4);
  EXPECT_EQ(drift_curve(z7, z7, to7, 1).buckets.back().end, 8);
  EXPECT_EQ(drift_curve(z8, z8, to8, 1).buckets.back().begin, 8);
  EXPECT_EQ(drift_curve(z8, z8, to8, 1).buckets.back().end, 9);
  std::vector<int64_t> only0 = {0};
  std::vector<double> one = {1.0};
  const DriftCurve d0 = drift_curve(one, one, only0, 1);
  ASSERT_EQ(d0.buckets.size(), 1u);
  EXPECT_EQ(d0.buckets[0].end, 1);
}

TEST(DriftCurve, EmptyBucketsAreOmitted) {
  const std::vector<int64_t> pos = {9, 0, 9};
  const std::vector<double> r = {1, 1, 1};
  const DriftCurve d = drift_curve(r, r, pos, 1);
  ASSERT_EQ(d.buckets.size(), 2u);
  EXPECT_EQ(d.buckets[0].begin, 0);
  EXPECT_EQ(d.buckets[0].count, 1);
  EXPECT_EQ(d.buckets[1].begin, 8);
  EXPECT_EQ(d.buckets[1].end, 10);
  EXPECT_EQ(d.buckets[1].count, 2);
  EXPECT_TRUE(drift_curve({}, {}, {}, 4).buckets.empty());
}

TEST(DriftCurve, VarlenGroupsByPositionNotIndex) {
  // sequences of 5, 3 and 1 tokens, 3 elements each; error only at the second sequence's position 2
  const std::vector<int64_t> pos = varlen_positions({5, 3, 1});   // 0 1 2 3 4 | 0 1 2 | 0
  std::vector<double> r(pos.size() * 3, 1.0), c = r;
  for (size_t i = 7 * 3; i < 8 * 3; ++i) c[i] = 1.5;
  const DriftCurve d = drift_curve(r, c, pos, 3);
  ASSERT_EQ(d.buckets.size(), 4u);
  const int64_t counts[] = {9, 6, 9, 3};   // [0,1): 3 tokens, [1,2): 2, [2,4): 3, [4,5): 1
  for (size_t b = 0; b < 4; ++b) EXPECT_EQ(d.buckets[b].count, counts[b]);
  EXPECT_EQ(d.buckets[3].end, 5);
  EXPECT_EQ(d.buckets[0].rms_error, 0);
  EXPECT_EQ(d.buckets[1].rms_error, 0);
  EXPECT_DOUBLE_EQ(d.buckets[2].rms_error, 0.5 * std::sqrt(3.0 / 9.0));
  EXPECT_EQ(d.buckets[3].rms_error, 0);
  EXPECT_EQ(d.growth_exponent, 0);   // one bucket with error: no fit
}

TEST(DriftCurve, SqrtGrowthGivesOneHalf) {
  std::vector<double> r, c;
  const auto sqrt_err = [](int64_t p) { return 1e-6 * std::sqrt(static_cast<double>(p)); };
  std::vector<int64_t> pos(1 << 14);
  for (size_t t = 0; t < pos.size(); ++t) pos[t] = static_cast<int64_t>(t);
  fill(pos, 4, sqrt_err, r, c);
  EXPECT_NEAR(drift_curve(r, c, pos, 4).growth_exponent, 0.5, 0.05);
  // varlen: four sequences of different lengths
  pos = varlen_positions({16384, 5000, 777, 64});
  fill(pos, 3, sqrt_err, r, c);
  EXPECT_NEAR(drift_curve(r, c, pos, 3).growth_exponent, 0.5, 0.05);
  // linear growth
  fill(pos, 3, [](int64_t p) { return 1e-9 * static_cast<double>(p); }, r, c);
  EXPECT_NEAR(drift_curve(r, c, pos, 3).growth_exponent, 1.0, 0.05);
}

TEST(DriftCurve, ConstantErrorGivesZero) {
  std::vector<double> r, c;
  const std::vector<int64_t> pos = varlen_positions({4096, 1000, 17});
  fill(pos, 2, [](int64_t) { return 0x1p-20; }, r, c);
  const DriftCurve d = drift_curve(r, c, pos, 2);
  EXPECT_EQ(d.buckets.size(), 13u);   // [0,1) ... [2048, 4096)
  EXPECT_NEAR(d.growth_exponent, 0.0, 1e-6);
}

TEST(DriftCurve, GrowthOverTinyMagnitudesIsScaled) {
  std::vector<double> r, c;
  std::vector<int64_t> pos(1 << 10);
  for (size_t t = 0; t < pos.size(); ++t) pos[t] = static_cast<int64_t>(t);
  fill(pos, 1, [](int64_t p) { return 1e-6 * static_cast<double>(p); }, r, c);
  for (double& x : r) x *= 0x1p-700;
  for (double& x : c) x *= 0x1p-700;
  const DriftCurve d = drift_curve(r, c, pos, 1);
  EXPECT_NEAR(d.growth_exponent, 1.0, 0.05);
  EXPECT_GT(d.buckets.back().rms_ratio, 0);
  double mean_square = 0;   // of the positions in the last bucket, [512, 1024)
  for (int p = 512; p < 1024; ++p) mean_square += static_cast<double>(p) * p / 512;
  EXPECT_NEAR(d.buckets.back().rms_error / 0x1p-700, 1e-6 * std::sqrt(mean_square), 1e-9);
}

TEST(DriftCurve, NonfiniteAndZeroReferenceBuckets) {
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5};
  std::vector<double> r = {1, 0, 1, 1, 1, 1}, c = {1, 0.5, 1, 1, 1, kNaN};
  const DriftCurve d = drift_curve(r, c, pos, 1);
  ASSERT_EQ(d.buckets.size(), 4u);
  EXPECT_EQ(d.buckets[1].rms_ratio, kInf);   // only the reference is zero
  EXPECT_EQ(d.buckets[1].rms_error, 0.5);
  EXPECT_EQ(d.buckets[3].nonfinite_mismatch, 1);
  EXPECT_EQ(d.buckets[3].count, 1);
  EXPECT_EQ(d.buckets[3].rms_error, 0);
  EXPECT_EQ(d.growth_exponent, 0);   // the only bucket with error has a zero reference
}

TEST(DriftCurve, InvalidArgumentsThrow) {
  const std::vector<double> r4(4, 1.0), r3(3, 1.0);
  const std::vector<int64_t> pos2 = {0, 1}, neg = {0, -1};
  EXPECT_THROW(drift_curve(r4, r3, pos2, 2), std::invalid_argument);
  EXPECT_THROW(drift_curve(r4, r4, pos2, 0), std::invalid_argument);
  EXPECT_THROW(drift_curve(r4, r4, pos2, 3), std::invalid_argument);
  EXPECT_THROW(drift_curve(r4, r4, pos2, 1), std::invalid_argument);
  EXPECT_THROW(drift_curve(r4, r4, neg, 2), std::invalid_argument);
}

}  // namespace
}  // namespace dg

namespace dg {
namespace {

// Error that ramps up over the first chunk (positions < 64) and is flat after it: no growth with
// context length, so the default fit says ~0; fitting from position 0 sees the ramp.
TEST(DriftCurve, FirstChunkRampIsNotContextGrowth) {
  const int64_t T = 4096;
  std::vector<double> r(static_cast<size_t>(T), 1.0), c(static_cast<size_t>(T));
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    pos[static_cast<size_t>(t)] = t;
    double err = 1e-7 * std::min<double>(static_cast<double>(t + 1), 64.0) / 64.0;
    c[static_cast<size_t>(t)] = 1.0 + err;
  }
  EXPECT_NEAR(drift_curve(r, c, pos, 1).growth_exponent, 0.0, 0.02);
  EXPECT_GT(drift_curve(r, c, pos, 1, 0).growth_exponent, 0.3);
}

}  // namespace
}  // namespace dg
