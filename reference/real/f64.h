// Compensated reductions for the f64 tier: sums and dot products "as if computed in twice the
// working precision, then rounded" (Ogita, Rump, Oishi, "Accurate sum and dot product", SIAM J. Sci.
// Comput. 26(6), 2005; Neumaier's variant of Kahan summation, ZAMM 54, 1974).
//   Dot2:  |res - x^T y| <= u |x^T y| + gamma_n^2 |x|^T |y|,   gamma_n = n u / (1 - n u), u = 2^-53
//   Sum2 / Neumaier: the same bound for sums (|x|^T |y| -> sum |x_i|).
// Summation order is the index order; the accumulators are plain doubles so the kernels can keep one
// per SIMD lane (Dot2Lane) and vectorize over independent dot products.
#pragma once

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
