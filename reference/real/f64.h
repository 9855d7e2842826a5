// Compensated reductions for the f64 tier: sums and dot products "as if computed in twice the
// working precision, then rounded" (Ogita, Rump, Oishi, "Accurate sum and dot product", SIAM J. Sci.
// Comput. 26(6), 2005; Neumaier's variant of Kahan summation, ZAMM 54, 1974).
//   Dot2:  |res - x^T y| <= u |x^T y| + gamma_n^2 |x|^T |y|,   gamma_n = n u / (1 - n u), u = 2^-53
//   Sum2 / Neumaier: the same bound for sums (|x|^T |y| -> sum |x_i|).
// Summation order is the index order; the accumulators are plain doubles so the kernels can keep one
// per SIMD lane (Dot2Lane) and vectorize over independent dot products.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <span>

#include "reference/real/dd.h"

namespace dg {

// One step of Dot2 on a lane: (s, c) += a * b, with TwoProd for the product and TwoSum for the sum.
inline void dot2_step(double& s, double& c, double a, double b) {
  double p = a * b;
  double h = std::fma(a, b, -p);
  double t = s + p;
  double z = t - s;
  double q = (s - (t - z)) + (p - z);
  s = t;
  c = c + (q + h);
}

// One step of Sum2 (TwoSum-based, the addition part of Dot2) on a lane: (s, c) += x.
inline void sum2_step(double& s, double& c, double x) {
  double t = s + x;
  double z = t - s;
  double q = (s - (t - z)) + (x - z);
  s = t;
  c = c + q;
}

// Neumaier's compensated sum, accumulated in index order.
struct NeumaierSum {
  double s = 0.0, c = 0.0;
  void add(double x) {
    double t = s + x;
    if (std::fabs(s) >= std::fabs(x)) {
      c += (s - t) + x;
    } else {
      c += (x - t) + s;
    }
    s = t;
  }
  double value() const { return s + c; }
};

// Dot2 accumulator: the dot product in index order.
struct Dot2 {
  double s = 0.0, c = 0.0;
  void add(double a, double b) { dot2_step(s, c, a, b); }
  double value() const { return s + c; }
};

// x[i] <- exp(x[i]) for the f64 tier, within 0.501 ulp (measured against MPFR in dd_test), in
// blocks the compiler vectorizes; glibc's exp is as accurate but a call per element, the largest
// cost of a KDA token after the state sweeps. The reduction of the dd exp (dd.h): n = round(x 1024 /
// ln2), r = x - n ln2/1024 by two fmas (|r| <= ln2/2048), expm1(r) by Taylor to r^5 (the next term
// is below 2^-61 |r|), then exp(x) = 2^m T_i (1 + q) with T_i = 1 + expm1((i - 512) ln2/1024) the
// dd table's double-double, n + 512 = 1024 m + i, evaluated as T_hi + (T_hi q + T_lo) with one fma
// and one final rounding. Arguments outside [-700, 700] (results near or past the double range)
// and non-finite ones go to std::exp.
inline void exp_all_f64(double* x, int64_t n) {
  using namespace dd_detail;
  const ExpTable& t = exp_table();
  constexpr int64_t kBlock = 16;
  constexpr double kShift = 0x1.8p52;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    double* xb = x + b;
    bool in_range = true;
    for (int64_t i = 0; i < m; ++i) in_range &= xb[i] >= -700.0 && xb[i] <= 700.0;
    if (!in_range || m < kBlock) {
      for (int64_t i = 0; i < m; ++i) xb[i] = std::exp(xb[i]);
      continue;
    }
    double big[kBlock], q[kBlock], th[kBlock], tl[kBlock], sc[kBlock];
    for (int64_t i = 0; i < kBlock; ++i) {
      big[i] = xb[i] * kInvLn2x1024 + kShift;
      const double nn = big[i] - kShift;
      const double r = std::fma(-nn, kL1, std::fma(-nn, kL0, xb[i]));
      double p = std::fma(r, 1.0 / 120.0, 1.0 / 24.0);
      p = std::fma(r, p, 1.0 / 6.0);
      p = std::fma(r, p, 0.5);
      q[i] = std::fma(r * r, p, r);
    }
    for (int64_t i = 0; i < kBlock; ++i) {
      // the integer n sits in big's low significand bits (|n| < 2^51)
      const int64_t ni = (std::bit_cast<int64_t>(big[i]) - std::bit_cast<int64_t>(kShift)) + kTableHalf;
      const auto j = static_cast<size_t>(ni & (2 * kTableHalf - 1));
      th[i] = t.one_hi[j];
      tl[i] = t.one_lo[j];
      sc[i] = std::bit_cast<double>(static_cast<uint64_t>((ni >> 10) + 1023) << 52);
    }
    for (int64_t i = 0; i < kBlock; ++i) xb[i] = (th[i] + std::fma(th[i], q[i], tl[i])) * sc[i];
  }
}

// The table of log1p_unit_f64: for j = 0 .. 128, inv[j] = 1 / (1 + j/128) rounded to double and
// L[j] = -log(inv[j]) as a double-double (dd_log1p of inv[j] - 1, exact by Sterbenz: inv[j] is in
// [1/2, 1]).
struct LogTable {
  std::array<double, 129> inv, l_hi, l_lo;
  LogTable() {
    for (size_t j = 0; j <= 128; ++j) {
      inv[j] = 1.0 / (1.0 + static_cast<double>(j) / 128.0);
      const DD l = dd_log1p(DD(inv[j] - 1.0));
      l_hi[j] = -l.hi;
      l_lo[j] = -l.lo;
    }
  }
};
inline const LogTable& log_table() {
  static const LogTable t;
  return t;
}

// x[i] <- log1p(x[i]) for x[i] in [0, 1] (softplus's log1p(exp(-|z|)) in the f64 tier), within 0.501
// ulp (measured against MPFR in dd_test), in blocks the compiler vectorizes; glibc's log1p is as
// accurate but a call per element. s = 1 + x rounded and t = x - (s - 1) its exact error; j =
// round(128 (s - 1)); s inv[j] = 1 + r + rl exactly (TwoProd; r = fl(s inv[j]) - 1 is exact, |r| <
// 2^-7.9, |rl| <= 2^-53); log1p(x) = L[j] + log1p(r) + log1p((t inv[j] + rl) / (1 + r)), with
// log1p(r) = r + r^2 P(r) by Taylor to r^8 (the next term is below 2^-63 |r|) and the last term as
// (t inv[j] + rl)(1 - r) (its argument is below 2^-52, so the terms dropped are below 2^-104 and
// 2^-67). L[j] + r by TwoSum; the small terms added to its error; one final rounding. Arguments outside [0, 1] (or NaN) go to std::log1p.
inline void log1p_unit_f64(double* x, int64_t n) {
  const LogTable& t = log_table();
  constexpr int64_t kBlock = 16;
  constexpr double kShift = 0x1.8p52;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    double* xb = x + b;
    bool in_range = true;
    for (int64_t i = 0; i < m; ++i) in_range &= xb[i] >= 0.0 && xb[i] <= 1.0;
    if (!in_range || m < kBlock) {
      for (int64_t i = 0; i < m; ++i) xb[i] = std::log1p(xb[i]);
      continue;
    }
    double s[kBlock], tl[kBlock], big[kBlock], iv[kBlock], lh[kBlock], ll[kBlock];
    for (int64_t i = 0; i < kBlock; ++i) {
      s[i] = 1.0 + xb[i];
      tl[i] = xb[i] - (s[i] - 1.0);
      big[i] = (s[i] - 1.0) * 128.0 + kShift;   // j in big's low significand bits
    }
    for (int64_t i = 0; i < kBlock; ++i) {
      const auto j = static_cast<size_t>(std::bit_cast<int64_t>(big[i]) - std::bit_cast<int64_t>(kShift));
      iv[i] = t.inv[j];
      lh[i] = t.l_hi[j];
      ll[i] = t.l_lo[j];
    }
    for (int64_t i = 0; i < kBlock; ++i) {
      const double ph = s[i] * iv[i];
      const double r = ph - 1.0;                    // exact (Sterbenz)
      const double rl = std::fma(s[i], iv[i], -ph);  // s inv = 1 + r + rl exactly
      double p = std::fma(r, -1.0 / 8.0, 1.0 / 7.0);
      p = std::fma(r, p, -1.0 / 6.0);
      p = std::fma(r, p, 1.0 / 5.0);
      p = std::fma(r, p, -1.0 / 4.0);
      p = std::fma(r, p, 1.0 / 3.0);
      p = std::fma(r, p, -0.5);
      const double hi = lh[i] + r;   // TwoSum
      const double bb = hi - lh[i];
      const double err = (lh[i] - (hi - bb)) + (r - bb);
      const double c = tl[i] * iv[i] + rl;
      const double lo = err + (ll[i] + (std::fma(-c, r, c) + (r * r) * p));
      // Below 2^-30, x - x^2/2 rounded once (the next term is below 2^-60 x): there s = 1 + x keeps
      // few of x's bits, and the rounding of lo is a quarter of an ulp of results near 2^-53.
      // Both, then a select on the bits (x >= 0 orders as its bits; a floating-point compare is a
      // branch the vectorizer does not take out).
      const double series = std::fma(-0.5 * xb[i], xb[i], xb[i]), table = hi + lo;
      const uint64_t small = std::bit_cast<int64_t>(xb[i]) < std::bit_cast<int64_t>(0x1p-30) ? ~uint64_t{0} : 0;
      xb[i] = std::bit_cast<double>((std::bit_cast<uint64_t>(series) & small) | (std::bit_cast<uint64_t>(table) & ~small));
    }
  }
}

inline double neumaier_sum(std::span<const double> x) {
  NeumaierSum acc;
  for (double v : x) acc.add(v);
  return acc.value();
}

inline double dot2(std::span<const double> x, std::span<const double> y) {
  Dot2 acc;
  size_t n = x.size() < y.size() ? x.size() : y.size();
  for (size_t i = 0; i < n; ++i) acc.add(x[i], y[i]);
  return acc.value();
}

}  // namespace dg
