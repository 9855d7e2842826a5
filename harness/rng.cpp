// Counter-based random numbers for driftgate inputs.
//
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// as in Random123's philox4x32_R(10, ...): round r (r = 0..9) uses the key bumped r times by the Weyl
// constants (0x9E3779B9, 0xBB67AE85); one round is
//     (hi0, lo0) = mulhilo(0xD2511F53, c0)      (hi1, lo1) = mulhilo(0xCD9E8D57, c2)
//     c = { hi1 ^ c1 ^ k0,  lo1,  hi0 ^ c3 ^ k1,  lo0 }
//
// The stream of tensor `name` of case `case_str` under `seed` (frozen: changing any of this changes
// every generated input, so every stored baseline):
//   key64 = splitmix64_finalize(fnv1a64(le64(seed) || le64(len(case_str)) || case_str
//                                        || le64(len(name)) || name))
//   key   = { lo32(key64), hi32(key64) }
//   block(i) = philox4x32_10({ lo32(i), hi32(i), 0, 0 }, key)            words w0 w1 w2 w3
//   bits(i)    = w1 << 32 | w0
//   uniform(i) = (bits(i) >> 11) * 2^-53                                   in [0, 1)
//   normal(i)  = sqrt(-2 ln(1 - u0)) * cos(2 pi u1)   u0 = uniform from w0 w1, u1 from w2 w3
// The strings are length-prefixed, so ("ab", "c") and ("a", "bc") hash differently. fnv1a64 is
// FNV-1a with offset basis 0xcbf29ce484222325 and prime 0x100000001b3; splitmix64_finalize is
// Steele-Lea-Flood's SplitMix64 output mix (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27;
// z *= 0x94d049bb133111eb; z ^= z >> 31).
//
// 1 - u0 lies in (0, 1], so the logarithm never sees 0 and |normal| <= sqrt(106 ln 2) ~ 8.57.
// The logarithm and cosine are our own, built only from IEEE-754 +, -, *, / and sqrt (each correctly
// rounded, and with -ffp-contract=off never fused), so normal(i) is bitwise the same on every
// machine, compiler and libm; std::log / std::cos differ between libm versions in the last bit.
#include "harness/rng.h"

#include <cmath>

namespace dg {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv1a_bytes(uint64_t h, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

uint64_t fnv1a_le64(uint64_t h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  return fnv1a_bytes(h, b, 8);
}

uint64_t fnv1a_str(uint64_t h, std::string_view s) {
  h = fnv1a_le64(h, s.size());
  return fnv1a_bytes(h, reinterpret_cast<const unsigned char*>(s.data()), s.size());
}

uint64_t splitmix64_finalize(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z;
}

std::array<uint32_t, 4> block(const std::array<uint32_t, 2>& key, uint64_t i) {
  return philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0u, 0u}, key);
}

uint64_t join64(uint32_t lo, uint32_t hi) { return static_cast<uint64_t>(hi) << 32 | lo; }

// 53 high bits of a 64-bit word as a double in [0, 1): exact, a multiple of 2^-53.
double unit53(uint64_t b) { return static_cast<double>(b >> 11) * 0x1p-53; }

// ln x for x in (0, 1], from basic operations only. x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...), s = (m - 1)/(m + 1), |s| <= 0.1716: the series to
// s^27/27 leaves a relative error below 1e-21. ln 2 is split as in fdlibm, so e * kLn2Hi is exact.
double det_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);          // exact; m in [0.5, 1)
  if (m < 0.70710678118654752440) {      // bring m into [sqrt(1/2), sqrt(2))
    m *= 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 27.0;
  for (int k = 25; k >= 1; k -= 2) p = p * s2 + 1.0 / k;
  const double ln_m = 2.0 * s * p;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;   // 32 significant bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (de * kLn2Lo + ln_m);
}

// sin a and cos a for a in [0, pi/4], Taylor series in Horner form to a^19 and a^18 (the first
// omitted terms are below 1e-21).
double det_sin_quarter(double a) {
  const double a2 = a * a;
  double p = 1.0;
  for (int k = 19; k >= 3; k -= 2) p = 1.0 - a2 / (static_cast<double>(k) * (k - 1)) * p;
  return a * p;
}
double det_cos_quarter(double a) {
  const double a2 = a * a;
  double p = 1.0;
  for (int k = 18; k >= 2; k -= 2) p = 1.0 - a2 / (static_cast<double>(k) * (k - 1)) * p;
  return p;
}

// cos(2 pi v) for v in [0, 1). The reductions 1 - v, 0.5 - r and 0.25 - r are exact (Sterbenz), so
// the only rounding before the series is the product r * 2pi.
double det_cos_turns(double v) {
  constexpr double kTwoPi = 6.28318530717958647693;
  double r = v >= 0.5 ? 1.0 - v : v;     // cos(2 pi v) = cos(2 pi (1 - v)); r in [0, 0.5]
  double sign = 1.0;
  if (r > 0.25) {                        // cos(2 pi r) = -cos(2 pi (0.5 - r))
    r = 0.5 - r;
    sign = -1.0;
  }
  if (r > 0.125) return sign * det_sin_quarter((0.25 - r) * kTwoPi);   // cos(x) = sin(pi/2 - x)
  return sign * det_cos_quarter(r * kTwoPi);
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

TensorRng::TensorRng(uint64_t seed, std::string_view case_str, std::string_view tensor_name) {
  uint64_t h = fnv1a_le64(kFnvOffset, seed);
  h = fnv1a_str(h, case_str);
  h = fnv1a_str(h, tensor_name);
  const uint64_t k = splitmix64_finalize(h);
  key_ = {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
}

uint64_t TensorRng::bits(uint64_t i) const {
  const auto w = block(key_, i);
  return join64(w[0], w[1]);
}

double TensorRng::uniform(uint64_t i) const { return unit53(bits(i)); }

double TensorRng::normal(uint64_t i) const {
  const auto w = block(key_, i);
  const double u0 = unit53(join64(w[0], w[1]));
  const double u1 = unit53(join64(w[2], w[3]));
  const double radius = std::sqrt(-2.0 * det_log(1.0 - u0));   // 1 - u0 is exact and in (0, 1]
  return radius * det_cos_turns(u1);
}

}  // namespace dg
