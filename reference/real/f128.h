// The optional f128 tier: GCC's __float128 (IEEE binary128, 113-bit significand, software
// arithmetic, one rounding per operation) with glibc's _Float128 functions from libm (sqrtf128,
// expf128, log1pf128, logf128, sinf128, cosf128: no libquadmath needed). A cross-check between dd (106 bits) and mpfr127;
// certified against mpfr127 (tier.h).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__clang__)
// clang's C++ mode does not see glibc's _Float128 declarations (the fuzz build, tests/fuzz, uses
// clang); the functions are the same libm symbols, and __float128 is the same type.
extern "C" {
__float128 sqrtf128(__float128) noexcept;
__float128 expf128(__float128) noexcept;
__float128 log1pf128(__float128) noexcept;
__float128 logf128(__float128) noexcept;
__float128 sinf128(__float128) noexcept;
__float128 cosf128(__float128) noexcept;
}
#endif

namespace dg {

using F128 = __float128;

inline F128 f128_sqrt(F128 x) { return sqrtf128(x); }
inline F128 f128_exp(F128 x) { return expf128(x); }
inline F128 f128_log1p(F128 x) { return log1pf128(x); }
inline F128 f128_log(F128 x) { return logf128(x); }
// glibc's binary128 sin and cos reduce large arguments exactly (Payne-Hanek), as MPFR does.
inline F128 f128_sin(F128 x) { return sinf128(x); }
inline F128 f128_cos(F128 x) { return cosf128(x); }

// Round-to-odd into double: the double nearest x toward zero, with its last bit set when inexact
// (subnormals and overflow included: past the double range it is +-DBL_MAX, whose last bit is set).
inline double f128_to_double_odd(F128 x) {
  double d = static_cast<double>(x);  // nearest
  if (x != x || static_cast<F128>(d) == x) return d;
  const F128 ax = x < 0 ? -x : x;
  if (static_cast<F128>(std::fabs(d)) > ax) d = std::nextafter(d, 0.0);  // step back toward zero
  return std::bit_cast<double>(std::bit_cast<uint64_t>(d) | 1u);
}

// x - x0 as two doubles t1 = RN(x - x0), t2 = RN(x - x0 - t1) (x0 within an ulp of x: exact in f128).
inline void f128_tail(F128 x, double x0, double& t1, double& t2) {
  if (x != x || !std::isfinite(x0)) {
    t1 = t2 = 0.0;
    return;
  }
  const F128 r = x - static_cast<F128>(x0);
  t1 = static_cast<double>(r);
  t2 = static_cast<double>(r - static_cast<F128>(t1));
}

}  // namespace dg
