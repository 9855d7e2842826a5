// Compensated reductions for the f64 tier: sums and dot products "as if computed in twice the
// working precision, then rounded" (Ogita, Rump, Oishi, "Accurate sum and dot product", SIAM J. Sci.
// Comput. 26(6), 2005; Neumaier's variant of Kahan summation, ZAMM 54, 1974).
//   Dot2:  |res - x^T y| <= u |x^T y| + gamma_n^2 |x|^T |y|,   gamma_n = n u / (1 - n u), u = 2^-53
//   Sum2 / Neumaier: the same bound for sums (|x|^T |y| -> sum |x_i|).
// Summation order is the index order; the accumulators are plain doubles so the kernels can keep one
// per SIMD lane (Dot2Lane) and vectorize over independent dot products.
#pragma once

#include <cmath>
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
