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
#include "harness/core/rng.h"

#include <bit>
#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

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

// 53 high bits of a 64-bit word as a double in [0, 1): exact, a multiple of 2^-53. Built from the
// bits (u >> 1 placed in the significand of 2^52, then the low bit added back; every step exact),
// so that lane loops vectorize where no 64-bit integer conversion instruction exists.
inline double unit53(uint64_t b) {
  const uint64_t u = b >> 11;
  const double half = std::bit_cast<double>(0x4330000000000000ull | (u >> 1)) - 0x1p52;   // u >> 1 exactly
  return (2.0 * half + static_cast<double>(u & 1u)) * 0x1p-53;
}

// ln x for x in (0, 1], from basic operations only. x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...), s = (m - 1)/(m + 1), |s| <= 0.1716: the series to
// s^27/27 leaves a relative error below 1e-21. ln 2 is split as in fdlibm, so e * kLn2Hi is exact.
// m and e come from x's bits (x >= 2^-53 is normal): the m and e of std::frexp, m in [0.5, 1).
inline double det_log(double x) {
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  double m = std::bit_cast<double>((bits & 0x000fffffffffffffull) | 0x3fe0000000000000ull);
  double de = (std::bit_cast<double>(0x4330000000000000ull | (bits >> 52)) - 0x1p52) - 1022.0;   // e, exactly
  // Bring m into [sqrt(1/2), sqrt(2)). Every operation runs in every lane (m * 1 and de - 0 are
  // exact), and only the operands are selected: no speculated arithmetic, so the loops vectorize.
  const bool low = m < 0.70710678118654752440;
  m = m * (low ? 2.0 : 1.0);
  de = de - (low ? 1.0 : 0.0);
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 27.0;
#pragma GCC unroll 16
  for (int k = 25; k >= 1; k -= 2) p = p * s2 + 1.0 / k;
  const double ln_m = 2.0 * s * p;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;   // 32 significant bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  return de * kLn2Hi + (de * kLn2Lo + ln_m);
}

// sin a and cos a for a in [0, pi/4], Taylor series in Horner form to a^19 and a^18 (the first
// omitted terms are below 1e-21).
inline double det_sin_quarter(double a) {
  const double a2 = a * a;
  double p = 1.0;
#pragma GCC unroll 16
  for (int k = 19; k >= 3; k -= 2) p = 1.0 - a2 / (static_cast<double>(k) * (k - 1)) * p;
  return a * p;
}
inline double det_cos_quarter(double a) {
  const double a2 = a * a;
  double p = 1.0;
#pragma GCC unroll 16
  for (int k = 18; k >= 2; k -= 2) p = 1.0 - a2 / (static_cast<double>(k) * (k - 1)) * p;
  return p;
}

// cos(2 pi v) for v in [0, 1). The reductions 1 - v, 0.5 - r and 0.25 - r are exact (Sterbenz), so
// the only rounding before the series is the product r * 2pi. Branch-free (both series are formed
// and one is kept), so lane loops vectorize.
inline double det_cos_turns(double v) {
  constexpr double kTwoPi = 6.28318530717958647693;
  const double w = 1.0 - v;
  double r = v >= 0.5 ? w : v;           // cos(2 pi v) = cos(2 pi (1 - v)); r in [0, 0.5]
  const double h = 0.5 - r;
  const bool flip = r > 0.25;            // cos(2 pi r) = -cos(2 pi (0.5 - r))
  r = flip ? h : r;
  const double sign = flip ? -1.0 : 1.0;
  const bool use_sin = r > 0.125;        // cos(x) = sin(pi/2 - x)
  const double as = (0.25 - r) * kTwoPi, ac = r * kTwoPi;
  const double a = use_sin ? as : ac;
  const double sn = det_sin_quarter(a), cs = det_cos_quarter(a);
  return sign * (use_sin ? sn : cs);
}

inline double box_muller(double u0, double u1) {
  const double radius = std::sqrt(-2.0 * det_log(1.0 - u0));   // 1 - u0 is exact and in (0, 1]
  return radius * det_cos_turns(u1);
}

// kLanes blocks at once: counters i0 .. i0 + kLanes - 1, words in structure-of-arrays form.
constexpr int kLanes = 8;
struct Blocks {
  uint32_t w[4][kLanes];
};
inline Blocks philox_lanes(const std::array<uint32_t, 2>& key, uint64_t i0) {
  Blocks b;
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t i = i0 + static_cast<uint64_t>(l);
    b.w[0][l] = static_cast<uint32_t>(i);
    b.w[1][l] = static_cast<uint32_t>(i >> 32);
    b.w[2][l] = 0u;
    b.w[3][l] = 0u;
  }
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * b.w[0][l];
      const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * b.w[2][l];
      const uint32_t c1 = b.w[1][l], c3 = b.w[3][l];
      b.w[0][l] = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      b.w[1][l] = static_cast<uint32_t>(p1);
      b.w[2][l] = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      b.w[3][l] = static_cast<uint32_t>(p0);
    }
  }
  return b;
}

// The two uniforms of blocks i0 .. i0 + kLanes - 1: u0 from words (w0, w1), u1 from (w2, w3).
#if defined(__AVX2__)
// Four blocks per register: each 64-bit lane holds one 32-bit word in its low half, so that
// _mm256_mul_epu32 gives Philox's 64-bit products and the high and low halves are a shift and a
// mask. unit53 as above, on the lanes. Tested equal to the scalar path (rng_test).
inline __m256d unit53_lanes(__m256i b) {
  const __m256i u = _mm256_srli_epi64(b, 11);
  const __m256i magic = _mm256_set1_epi64x(0x4330000000000000ll);
  const __m256d two52 = _mm256_set1_pd(0x1p52);
  const __m256d half = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(u, 1), magic)), two52);
  const __m256d low = _mm256_sub_pd(
      _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi64x(1)), magic)), two52);
  return _mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(2.0), half), low), _mm256_set1_pd(0x1p-53));
}
inline void philox_uniforms(const std::array<uint32_t, 2>& key, uint64_t i0, double* u0, double* u1) {
  static_assert(kLanes % 4 == 0);
  const __m256i lo32 = _mm256_set1_epi64x(0xffffffffll);
  const __m256i m0 = _mm256_set1_epi64x(kPhiloxM0), m1 = _mm256_set1_epi64x(kPhiloxM1);
  for (int g = 0; g < kLanes; g += 4) {
    const uint64_t i = i0 + static_cast<uint64_t>(g);
    const __m256i idx = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(i)), _mm256_set_epi64x(3, 2, 1, 0));
    __m256i w0 = _mm256_and_si256(idx, lo32), w1 = _mm256_srli_epi64(idx, 32);
    __m256i w2 = _mm256_setzero_si256(), w3 = _mm256_setzero_si256();
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k0 += kPhiloxW0;
        k1 += kPhiloxW1;
      }
      const __m256i p0 = _mm256_mul_epu32(w0, m0), p1 = _mm256_mul_epu32(w2, m1);
      const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), w1), _mm256_set1_epi64x(k0));
      const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), w3), _mm256_set1_epi64x(k1));
      w1 = _mm256_and_si256(p1, lo32);
      w3 = _mm256_and_si256(p0, lo32);
      w0 = n0;
      w2 = n2;
    }
    _mm256_storeu_pd(u0 + g, unit53_lanes(_mm256_or_si256(_mm256_slli_epi64(w1, 32), w0)));
    _mm256_storeu_pd(u1 + g, unit53_lanes(_mm256_or_si256(_mm256_slli_epi64(w3, 32), w2)));
  }
}
#else
inline void philox_uniforms(const std::array<uint32_t, 2>& key, uint64_t i0, double* u0, double* u1) {
  const Blocks b = philox_lanes(key, i0);
  for (int l = 0; l < kLanes; ++l) {
    u0[l] = unit53(join64(b.w[0][l], b.w[1][l]));
    u1[l] = unit53(join64(b.w[2][l], b.w[3][l]));
  }
}
#endif

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
  return box_muller(unit53(join64(w[0], w[1])), unit53(join64(w[2], w[3])));
}

void TensorRng::uniform(uint64_t i0, std::span<double> out) const {
  size_t j = 0;
  for (; j + kLanes <= out.size(); j += kLanes) {
    double u1[kLanes];
    philox_uniforms(key_, i0 + j, out.data() + j, u1);
  }
  for (; j < out.size(); ++j) out[j] = uniform(i0 + j);
}

void TensorRng::normal(uint64_t i0, std::span<double> out) const {
  size_t j = 0;
  for (; j + kLanes <= out.size(); j += kLanes) {
    double u0[kLanes], u1[kLanes];
    philox_uniforms(key_, i0 + j, u0, u1);
    double* o = out.data() + j;
    for (int l = 0; l < kLanes; ++l) o[l] = box_muller(u0[l], u1[l]);
  }
  for (; j < out.size(); ++j) out[j] = normal(i0 + j);
}

}  // namespace dg
