// Double-double arithmetic: a value hi + lo with |lo| <= ulp(hi)/2, about 106 significand bits
// (unit roundoff u^2 = 2^-106 with u = 2^-53), the same exponent range as double.
//
// Why our own: Debian's QD (libqd) is built without QD_FMA and without QD_IEEE_ADD, so its addition
// only meets the "Cray-style" bound (unbounded relative error under cancellation) and its product
// is the sloppy one; Boost's cpp_double_fp_backend needs Boost >= 1.89 (we have 1.74) and measured
// about 9x slower than this header on the state-update pattern (notes/precision-arithmetic.md).
//
// Algorithms (u = 2^-53; bounds are relative errors of the result):
//   TwoSum, FastTwoSum (|a| >= |b|), TwoProd (p = a*b, e = fma(a, b, -p)): exact error-free transforms
//   DWPlusFP 2u^2, AccurateDWPlusDW 3u^2, DWTimesFP3 2u^2, DWTimesDW3 4u^2, DWDivFP3 3u^2,
//   DWDivDW3 9.8u^2: M. Joldes, J.-M. Muller, V. Popescu, "Tight and rigorous error bounds for basic
//   building blocks of double-word arithmetic", ACM TOMS 44(2), 2017 (algorithm numbers from there).
//   sqrt 25/8 u^2: V. Lefevre, N. Louvet, J.-M. Muller, J. Picot, L. Rideau, "Accurate calculation
//   of Euclidean norms using double-word arithmetic", ACM TOMS 49(1), 2023.
//   exp, expm1: reduction x = n ln2/1024 + r with a three-double ln2, |r| <= ln2/2048, a degree-8
//   Taylor polynomial for expm1(r) (low-order terms in dd, the tail in double) and a table of
//   expm1(j ln2/1024), j in [-512, 512], built once from a long Taylor series; log1p, log: one
//   Newton step on expm1/exp from the double logarithm. Measured errors are in dd_test.cpp.
// Every fused multiply-add is an explicit std::fma (the build uses -ffp-contract=off); never compile
// this with -ffast-math, which breaks the error-free transforms.
// Non-finite values: results with a non-finite hi carry an unspecified lo; exp and expm1 handle
// overflow and underflow explicitly. Results below about 2^-969 lose the low word (subnormal lo).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace dg {

struct DD;
inline DD dd_sqrt(const DD& x);
inline DD dd_exp(const DD& x);
inline DD dd_expm1(const DD& x);
inline DD dd_log1p(const DD& x);
inline DD dd_log(const DD& x);

struct DD {
  double hi = 0.0;
  double lo = 0.0;
  constexpr DD() = default;
  constexpr DD(double h) : hi(h) {}  // NOLINT: implicit, so generic code can write `Real x = 0.5`
  constexpr DD(double h, double l) : hi(h), lo(l) {}

  // The functions generic code calls unqualified, as hidden friends: found by argument-dependent
  // lookup for DD arguments only, so they never capture sqrt(double) or abs(int) in namespace dg.
  friend DD sqrt(const DD& x) { return dd_sqrt(x); }
  friend DD exp(const DD& x) { return dd_exp(x); }
  friend DD expm1(const DD& x) { return dd_expm1(x); }
  friend DD log1p(const DD& x) { return dd_log1p(x); }
  friend DD log(const DD& x) { return dd_log(x); }
  friend DD abs(const DD& a) { return a.hi < 0.0 ? DD(-a.hi, -a.lo) : a; }
  friend DD fabs(const DD& a) { return abs(a); }
  friend bool isfinite(const DD& a) { return std::isfinite(a.hi); }
  friend DD ldexp(const DD& a, int e) { return {std::ldexp(a.hi, e), std::ldexp(a.lo, e)}; }
  friend double to_double(const DD& a) { return a.hi; }  // nearest (hi of a normalized pair)
};

// --- error-free transforms --------------------------------------------------------------------------
inline DD two_sum(double a, double b) {
  double s = a + b;
  double bb = s - a;
  double e = (a - (s - bb)) + (b - bb);
  return {s, e};
}
inline DD fast_two_sum(double a, double b) {  // requires |a| >= |b| (or a == 0)
  double s = a + b;
  double e = b - (s - a);
  return {s, e};
}
inline DD two_prod(double a, double b) {
  double p = a * b;
  return {p, std::fma(a, b, -p)};
}

// --- Joldes-Muller-Popescu building blocks ----------------------------------------------------------
inline DD dw_plus_fp(const DD& x, double y) {  // Alg. 4
  DD s = two_sum(x.hi, y);
  double v = x.lo + s.lo;
  return fast_two_sum(s.hi, v);
}
inline DD dw_plus_dw(const DD& x, const DD& y) {  // Alg. 6 (AccurateDWPlusDW)
  DD s = two_sum(x.hi, y.hi);
  DD t = two_sum(x.lo, y.lo);
  double c = s.lo + t.hi;
  DD v = fast_two_sum(s.hi, c);
  double w = t.lo + v.lo;
  return fast_two_sum(v.hi, w);
}
inline DD dw_times_fp(const DD& x, double y) {  // Alg. 9 (DWTimesFP3)
  DD c = two_prod(x.hi, y);
  double cl3 = std::fma(x.lo, y, c.lo);
  return fast_two_sum(c.hi, cl3);
}
inline DD dw_times_dw(const DD& x, const DD& y) {  // Alg. 12 (DWTimesDW3)
  DD c = two_prod(x.hi, y.hi);
  double tl0 = x.lo * y.lo;
  double tl1 = std::fma(x.hi, y.lo, tl0);
  double cl2 = std::fma(x.lo, y.hi, tl1);
  double cl3 = c.lo + cl2;
  return fast_two_sum(c.hi, cl3);
}
inline DD dw_div_fp(const DD& x, double y) {  // Alg. 15 (DWDivFP3)
  double th = x.hi / y;
  DD p = two_prod(th, y);
  double dh = x.hi - p.hi;
  double dt = dh - p.lo;
  double d = dt + x.lo;
  double tl = d / y;
  return fast_two_sum(th, tl);
}
inline DD dw_div_dw(const DD& x, const DD& y) {  // Alg. 18 (DWDivDW3)
  double th = 1.0 / y.hi;
  double rh = std::fma(-y.hi, th, 1.0);
  double rl = -(y.lo * th);
  DD e = fast_two_sum(rh, rl);
  DD d = dw_times_fp(e, th);
  DD m = dw_plus_fp(d, th);
  return dw_times_dw(x, m);
}

// --- operators ------------------------------------------------------------------------------------
inline DD operator-(const DD& a) { return {-a.hi, -a.lo}; }
inline DD operator+(const DD& a, const DD& b) { return dw_plus_dw(a, b); }
inline DD operator+(const DD& a, double b) { return dw_plus_fp(a, b); }
inline DD operator+(double a, const DD& b) { return dw_plus_fp(b, a); }
inline DD operator-(const DD& a, const DD& b) { return dw_plus_dw(a, -b); }
inline DD operator-(const DD& a, double b) { return dw_plus_fp(a, -b); }
inline DD operator-(double a, const DD& b) { return dw_plus_fp(-b, a); }
inline DD operator*(const DD& a, const DD& b) { return dw_times_dw(a, b); }
inline DD operator*(const DD& a, double b) { return dw_times_fp(a, b); }
inline DD operator*(double a, const DD& b) { return dw_times_fp(b, a); }
inline DD operator/(const DD& a, const DD& b) { return dw_div_dw(a, b); }
inline DD operator/(const DD& a, double b) { return dw_div_fp(a, b); }
inline DD operator/(double a, const DD& b) { return dw_div_dw(DD(a), b); }
inline DD& operator+=(DD& a, const DD& b) { return a = a + b; }
inline DD& operator+=(DD& a, double b) { return a = a + b; }
inline DD& operator-=(DD& a, const DD& b) { return a = a - b; }
inline DD& operator-=(DD& a, double b) { return a = a - b; }
inline DD& operator*=(DD& a, const DD& b) { return a = a * b; }
inline DD& operator*=(DD& a, double b) { return a = a * b; }
inline DD& operator/=(DD& a, const DD& b) { return a = a / b; }
inline DD& operator/=(DD& a, double b) { return a = a / b; }

// Comparisons of normalized values: by hi, then by lo (a double converts to {x, 0}).
inline bool operator==(const DD& a, const DD& b) { return a.hi == b.hi && a.lo == b.lo; }
inline std::partial_ordering operator<=>(const DD& a, const DD& b) {
  if (a.hi != b.hi) return a.hi <=> b.hi;
  return a.lo <=> b.lo;
}

inline DD dd_sqrt(const DD& x) {  // SQRTDWtoDW (Lefevre et al.)
  if (!(x.hi > 0.0) || x.hi == std::numeric_limits<double>::infinity()) {
    return x.hi == 0.0 ? DD(x.hi) : DD(std::sqrt(x.hi));  // 0, -0, +Inf, NaN for negatives
  }
  double sh = std::sqrt(x.hi);
  double r1 = std::fma(-sh, sh, x.hi);
  double r2 = x.lo + r1;
  double sl = r2 / (2.0 * sh);
  return fast_two_sum(sh, sl);
}

// --- exp, expm1, log1p, log -------------------------------------------------------------------------
namespace dd_detail {

inline constexpr double kInvLn2x1024 = 0x1.71547652b82fep+10;  // 1024 / ln2, rounded
// ln2 / 1024 = kL0 + kL1 + kL2 to about 2^-170 relative
inline constexpr double kL0 = 0x1.62e42fefa39efp-11;
inline constexpr double kL1 = 0x1.abc9e3b39803fp-66;
inline constexpr double kL2 = 0x1.7b57a079a1934p-121;
inline constexpr DD kLn2{0x1.62e42fefa39efp-1, 0x1.abc9e3b39803fp-56};
inline constexpr double kLn2Lo2 = 0x1.7b57a079a1934p-111;
inline constexpr DD kInv6{0x1.5555555555555p-3, 0x1.5555555555555p-57};
inline constexpr DD kInv24{0x1.5555555555555p-5, 0x1.5555555555555p-59};
inline constexpr int kTableHalf = 512;

// expm1(j ln2/1024) and 1 + expm1(j ln2/1024) for j in [-512, 512], as structure-of-arrays.
struct ExpTable {
  std::array<double, 2 * kTableHalf + 1> em1_hi, em1_lo, one_hi, one_lo;
  ExpTable() {
    for (int j = -kTableHalf; j <= kTableHalf; ++j) {
      double dj = j;
      // a = j ln2/1024 in dd: j*kL0 is exact (TwoProd), the rest contributes below 2^-110.
      DD a = dw_plus_fp(two_prod(dj, kL0), std::fma(dj, kL1, dj * kL2));
      // Taylor series of expm1 on |a| <= 0.347 to 30 terms (the last term is below 2^-150):
      // Horner from the top, coefficients 1/n! built by exact-double division in dd.
      std::array<DD, 31> c;
      c[0] = DD(1.0);
      for (int n = 1; n <= 30; ++n) c[static_cast<size_t>(n)] = dw_div_fp(c[static_cast<size_t>(n - 1)], n);
      DD s = c[30];
      for (int n = 29; n >= 1; --n) s = dw_plus_dw(dw_times_dw(s, a), c[static_cast<size_t>(n)]);
      DD e = dw_times_dw(s, a);
      DD one = dw_plus_fp(e, 1.0);
      size_t i = static_cast<size_t>(j + kTableHalf);
      em1_hi[i] = e.hi; em1_lo[i] = e.lo; one_hi[i] = one.hi; one_lo[i] = one.lo;
    }
  }
};
inline const ExpTable& exp_table() {
  static const ExpTable table;
  return table;
}

// x = n ln2/1024 + r exactly enough (|error of r| < 2^-150 for |n| <= 2^20): returns r.
inline DD reduce(const DD& x, double n) {
  DD p0 = two_prod(n, kL0);
  DD p1 = two_prod(n, kL1);
  DD r = dw_plus_dw(x, -p0);
  r = dw_plus_dw(r, -p1);
  return dw_plus_fp(r, -(n * kL2));
}

// expm1(r) for |r| <= 2^-11.4: Taylor through r^8/8!. Terms from r^5 on are summed in double (their
// rounding errors stay below 2^-116), r^2..r^4 in dd.
inline DD expm1_poly(const DD& r) {
  double rh = r.hi;
  double w = 0x1.6c16c16c16c17p-10 + rh * (0x1.a01a01a01a01ap-13 + rh * 0x1.a01a01a01a01ap-16);
  w = 0x1.1111111111111p-7 + rh * w;      // 1/120 + r (1/720 + ...)
  DD w4 = dw_plus_fp(kInv24, rh * w);      // 1/24 + r w
  DD w3 = dw_plus_dw(kInv6, dw_times_dw(r, w4));
  DD w2 = dw_plus_fp(dw_times_dw(r, w3), 0.5);
  DD w1 = dw_plus_fp(dw_times_dw(r, w2), 1.0);
  return dw_times_dw(r, w1);
}

}  // namespace dd_detail

// exp for x.hi in [-700, 700], branch-free so that loops over arrays vectorize (exp() below is
// this plus range handling). n = round(x 1024/ln2) by the 1.5 * 2^52 shift (ties to even),
// n + 512 = 1024 m + i with i in [0, 1024): exp(x) = 2^m (1 + expm1((i - 512) ln2/1024)) (1 + q).
inline DD exp_core(const DD& x, const dd_detail::ExpTable& t) {
  using namespace dd_detail;
  constexpr double kShift = 0x1.8p52;
  double n = (x.hi * kInvLn2x1024 + kShift) - kShift;
  DD r = reduce(x, n);
  DD q = expm1_poly(r);
  const auto ni = static_cast<int64_t>(n) + kTableHalf;
  const auto i = static_cast<size_t>(ni & (2 * kTableHalf - 1));
  const int64_t m = ni >> 10;  // floor((n + 512) / 1024): an arithmetic shift
  DD one{t.one_hi[i], t.one_lo[i]};
  DD y = dw_plus_dw(one, dw_times_dw(one, q));
  double scale = std::bit_cast<double>(static_cast<uint64_t>(m + 1023) << 52);
  return {y.hi * scale, y.lo * scale};
}

// exp(x): relative error about 2^-104 for results above 2^-969; 0 below exp(-745.2); +Inf above the
// double range.
inline DD dd_exp(const DD& x) {
  using namespace dd_detail;
  if (x.hi >= -700.0 && x.hi <= 700.0) return exp_core(x, exp_table());
  if (!(x.hi > -745.2)) return x.hi != x.hi ? x : DD(0.0);
  if (!(x.hi < 709.79)) return DD(std::numeric_limits<double>::infinity());
  // near the ends of the range: exp(x) = exp(x -+ 40) exp(+-40), both inside exp_core's range
  // (x.hi -+ 40 is exact: it stays in x.hi's binade)
  const double c = x.hi > 0.0 ? 40.0 : -40.0;
  return dw_times_dw(exp_core(DD(x.hi - c, x.lo), exp_table()), exp_core(DD(c), exp_table()));
}

// expm1(x) = exp(x) - 1 with relative accuracy near 0: for |x| <= 0.34, expm1(j ln2/1024) from the
// table plus (1 + expm1(j ln2/1024)) expm1(r); beyond, exp(x) - 1 (cancellation at most a factor 3).
inline DD dd_expm1(const DD& x) {
  using namespace dd_detail;
  if (!(std::fabs(x.hi) <= 0.34)) return x.hi != x.hi ? x : dw_plus_fp(exp(x), -1.0);
  double n = std::nearbyint(x.hi * kInvLn2x1024);
  DD r = reduce(x, n);
  DD q = expm1_poly(r);
  size_t j = static_cast<size_t>(n + kTableHalf);
  const ExpTable& t = exp_table();
  DD em1{t.em1_hi[j], t.em1_lo[j]};
  DD one{t.one_hi[j], t.one_lo[j]};
  return dw_plus_dw(em1, dw_times_dw(one, q));
}

// log1p(x) for x >= -1: y0 = log1p(x.hi) in double, then one Newton step on expm1:
// y = y0 + d - d^2/2 with d = (x - expm1(y0)) / (1 + expm1(y0)) (d is about 2^-53 y0, so the next
// term is below 2^-150 relative).
inline DD dd_log1p(const DD& x) {
  if (!(x.hi > -1.0)) {
    if (x.hi == -1.0 && x.lo == 0.0) return DD(-std::numeric_limits<double>::infinity());
    return DD(std::numeric_limits<double>::quiet_NaN());
  }
  if (x.hi == std::numeric_limits<double>::infinity()) return x;
  if (x.hi == 0.0) return x;
  double y0 = std::log1p(x.hi);
  DD e = expm1(DD(y0));
  DD d = dw_div_dw(dw_plus_dw(x, -e), dw_plus_fp(e, 1.0));
  return dw_plus_fp(dw_plus_fp(d, -0.5 * d.hi * d.hi), y0);
}

// log(x): log1p(x - 1) on [0.5, 2] (x - 1 is exact there); elsewhere one Newton step on exp from
// the double logarithm (|log x| > 0.69, so absolute errors of 2^-106 stay relative ones).
inline DD dd_log(const DD& x) {
  if (x.hi >= 0.5 && x.hi <= 2.0) return log1p(two_sum(x.hi - 1.0, x.lo));
  if (!(x.hi > 0.0)) {
    if (x.hi == 0.0) return DD(-std::numeric_limits<double>::infinity());
    return DD(std::numeric_limits<double>::quiet_NaN());
  }
  if (x.hi == std::numeric_limits<double>::infinity()) return x;
  if (x.hi < 0x1p-900) {  // keep exp(y0) in the normal range: log(x) = log(x 2^200) - 200 ln2
    DD y = log(DD(x.hi * 0x1p200, x.lo * 0x1p200));
    return dw_plus_fp(dw_plus_dw(y, dw_times_fp(dd_detail::kLn2, -200.0)), -200.0 * dd_detail::kLn2Lo2);
  }
  double y0 = std::log(x.hi);
  DD e = exp(DD(y0));
  DD d = dw_div_dw(dw_plus_dw(x, -e), e);
  return dw_plus_fp(dw_plus_fp(d, -0.5 * d.hi * d.hi), y0);
}

}  // namespace dg
