// sin and cos in double-double, for references whose arguments are large angles (rope: position x
// frequency, up to 2^24 rad).
//
//   dd_reduce_pio2  x = k pi/2 + r with k = nearbyint(x 2/pi) and |r| <= pi/4 (+ an ulp): pi/2 is a
//                   three-double constant (to 2^-163 relative); k c0 and k c1 are exact (TwoProd), k c2
//                   is one double product; the subtractions are AccurateDWPlusDW (dd.h), so r carries
//                   the error of x itself plus about |k| 2^-161 + 2^-104 |r|. Valid for |x| < 2^50.
//   dd_sin_cos      sin and cos of x: the reduction, then Taylor series in z = r^2 by Horner in dd,
//                   sin r = r sum_{j<=14} (-z)^j / (2j+1)!, cos r = sum_{j<=14} (-z)^j / (2j)! (on
//                   |r| <= pi/4 the first omitted terms are below 2^-118 relative), and the quadrant
//                   k mod 4 picks +-sin r or +-cos r. Error at most 2^-105 (sin relative to
//                   min(1, |x|), cos absolute) over 1e5 arguments from 2^-35 to 2^25 against MPFR;
//                   tests/reference/rope_test.cpp checks 2^-100. Non-finite x gives NaN.
// Every fused multiply-add is explicit (dd.h); never compile this with -ffast-math.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/real/dd.h"

namespace dg {

namespace dd_detail {

// pi/2 = kPio2[0] + kPio2[1] + kPio2[2] to about 2^-163 relative; 2/pi rounded (for k only).
inline constexpr double kPio2[3] = {0x1.921fb54442d18p+0, 0x1.1a62633145c07p-54, -0x1.f1976b7ed8fbcp-110};
inline constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
inline constexpr int kTrigTerms = 15;   // j = 0 .. 14

// (-1)^j / (2j+1)! and (-1)^j / (2j)!, built once by exact-double divisions in dd.
struct TrigCoefficients {
  std::array<DD, kTrigTerms> sin_c, cos_c;
  TrigCoefficients() {
    std::array<DD, 2 * kTrigTerms + 2> inv_fact;
    inv_fact[0] = DD(1.0);
    for (size_t n = 1; n < inv_fact.size(); ++n) inv_fact[n] = dw_div_fp(inv_fact[n - 1], static_cast<double>(n));
    for (size_t j = 0; j < kTrigTerms; ++j) {
      const bool odd = j % 2 == 1;
      sin_c[j] = odd ? -inv_fact[2 * j + 1] : inv_fact[2 * j + 1];
      cos_c[j] = odd ? -inv_fact[2 * j] : inv_fact[2 * j];
    }
  }
};
inline const TrigCoefficients& trig_coefficients() {
  static const TrigCoefficients c;
  return c;
}

}  // namespace dd_detail

// sin x and cos x from sin r and cos r where x = k pi/2 + r: the quadrant k mod 4 picks the signs.
template <class T> void quadrant_sin_cos(int64_t k, const T& sr, const T& cr, T& s, T& c) {
  switch (((k % 4) + 4) % 4) {
    case 0: s = sr; c = cr; break;
    case 1: s = cr; c = -sr; break;
    case 2: s = -sr; c = -cr; break;
    default: s = -cr; c = sr; break;
  }
}

// x = k pi/2 + r; returns r and sets k (see the top).
inline DD dd_reduce_pio2(const DD& x, int64_t& k) {
  using namespace dd_detail;
  const double kd = std::nearbyint(x.hi * kTwoOverPi);
  k = static_cast<int64_t>(kd);
  DD r = dw_plus_dw(x, -two_prod(kd, kPio2[0]));
  r = dw_plus_dw(r, -two_prod(kd, kPio2[1]));
  return dw_plus_fp(r, -(kd * kPio2[2]));
}

inline void dd_sin_cos(const DD& x, DD& s, DD& c) {
  using namespace dd_detail;
  if (!std::isfinite(x.hi)) {
    s = c = DD(std::numeric_limits<double>::quiet_NaN());
    return;
  }
  int64_t k = 0;
  const DD r = dd_reduce_pio2(x, k);
  const DD z = dw_times_dw(r, r);
  const TrigCoefficients& t = trig_coefficients();
  DD ps = t.sin_c[kTrigTerms - 1], pc = t.cos_c[kTrigTerms - 1];
  for (int j = kTrigTerms - 2; j >= 0; --j) {
    ps = dw_plus_dw(dw_times_dw(ps, z), t.sin_c[static_cast<size_t>(j)]);
    pc = dw_plus_dw(dw_times_dw(pc, z), t.cos_c[static_cast<size_t>(j)]);
  }
  quadrant_sin_cos(k, dw_times_dw(r, ps), pc, s, c);
}

}  // namespace dg
