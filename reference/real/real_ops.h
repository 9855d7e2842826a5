// The tier scalars' elementary functions and output conversions under one name each, for the
// references written once over Real (reference/*.cpp): r_sqrt, r_exp, r_log1p, r_log, r_sin_cos;
// to_odd (round to odd
// into a double, so one later RNE gives the correctly rounded value in any format) and tail_of (the
// two-double rest x - to_odd(x), to the tier's full precision).
#pragma once

#include <cmath>

#include "reference/real/dd.h"
#include "reference/real/dd_trig.h"
#include "reference/real/f128.h"
#include "reference/real/mpfr_real.h"

namespace dg {

// float: not a tier. The KDA loops run in it as FLA's naive code runs in fp32, for the policy's naive
// f32 candidate (KdaReferenceOptions::plain_f32).
inline float r_sqrt(float x) { return std::sqrt(x); }
inline float r_exp(float x) { return std::exp(x); }
inline float r_log1p(float x) { return std::log1p(x); }
inline double r_sqrt(double x) { return std::sqrt(x); }
inline double r_exp(double x) { return std::exp(x); }
inline double r_log1p(double x) { return std::log1p(x); }
inline DD r_sqrt(const DD& x) { return sqrt(x); }
inline DD r_exp(const DD& x) { return exp(x); }
inline DD r_log1p(const DD& x) { return log1p(x); }
inline F128 r_sqrt(F128 x) { return f128_sqrt(x); }
inline F128 r_exp(F128 x) { return f128_exp(x); }
inline F128 r_log1p(F128 x) { return f128_log1p(x); }
template <int B> Mpfr<B> r_sqrt(const Mpfr<B>& x) { return sqrt(x); }
template <int B> Mpfr<B> r_exp(const Mpfr<B>& x) { return exp(x); }
template <int B> Mpfr<B> r_log1p(const Mpfr<B>& x) { return log1p(x); }
inline double r_log(double x) { return std::log(x); }
inline DD r_log(const DD& x) { return log(x); }
inline F128 r_log(F128 x) { return f128_log(x); }
template <int B> Mpfr<B> r_log(const Mpfr<B>& x) { return log(x); }
// sin and cos of any finite angle in the tier (each reduces large arguments itself: glibc's double
// and binary128 functions and MPFR exactly, dd by dd_trig.h's three-double pi/2).
inline void r_sin_cos(double x, double& s, double& c) { s = std::sin(x); c = std::cos(x); }
inline void r_sin_cos(const DD& x, DD& s, DD& c) { dd_sin_cos(x, s, c); }
inline void r_sin_cos(F128 x, F128& s, F128& c) { s = f128_sin(x); c = f128_cos(x); }
template <int B> void r_sin_cos(const Mpfr<B>& x, Mpfr<B>& s, Mpfr<B>& c) { sin_cos(x, s, c); }

// Output: round to odd into double, and the two-double tail (x - x0) to the tier's full precision.
inline double to_odd(float x) { return x; }
inline double to_odd(double x) { return x; }
inline double to_odd(const DD& x) { return round_to_odd(x); }
inline double to_odd(F128 x) { return f128_to_double_odd(x); }
template <int B> double to_odd(const Mpfr<B>& x) { return to_double_odd(x); }
inline void tail_of(float, double, double* t) { t[0] = t[1] = 0.0; }
inline void tail_of(double, double, double* t) { t[0] = t[1] = 0.0; }
inline void tail_of(const DD& x, double x0, double* t) {
  if (!std::isfinite(x.hi) || !std::isfinite(x0)) {
    t[0] = t[1] = 0.0;
    return;
  }
  DD d = two_sum(x.hi - x0, x.lo);  // x0 is hi or a neighbour of it: hi - x0 is exact
  t[0] = d.hi;
  t[1] = d.lo;
}
inline void tail_of(F128 x, double x0, double* t) { f128_tail(x, x0, t[0], t[1]); }
template <int B> void tail_of(const Mpfr<B>& x, double x0, double* t) { tail_parts(x, x0, t[0], t[1]); }

// sigmoid in the tier's arithmetic, the overflow-free form.
template <class Real> Real r_sigmoid(const Real& x) {
  if (x >= 0.0) return 1.0 / (1.0 + r_exp(-x));
  Real e = r_exp(x);
  return e / (1.0 + e);
}

}  // namespace dg
