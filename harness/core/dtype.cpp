// driftgate dtypes: format table, one correct rounding into every format, bit patterns, ULPs.
//
// The rounding core is rne<P, EMIN>: round-to-nearest-even of a double to a binary format with a
// P-bit significand (hidden bit included) and smallest normal exponent EMIN, with an unbounded
// exponent above (the caller applies the format's overflow rule). Two cases:
//   |x| >= 2^EMIN  the quantum is 2^(e-P+1): add half a quantum minus one (plus the kept lsb, for
//                  ties-to-even) to the double's bit pattern and clear the dropped bits; a carry
//                  runs into the exponent field, which is exactly the step to the next binade.
//   |x| <  2^EMIN  the quantum is fixed at 2^(EMIN-P+1): (|x| + C) - C with C = 2^(EMIN-P+53)
//                  rounds |x| to a multiple of it in the current (round-to-nearest-even) mode,
//                  because every double in [C, 2C) is such a multiple.
// Both assume the default floating-point environment (round to nearest even), as everything in
// driftgate does. Inputs that are not doubles (DD, MPFR) are first rounded to odd into a double,
// which keeps a sticky bit in the last place, then go through the same core (Boldo-Melquiond:
// exact because 53 >= P + 2 for every format here).
#include "harness/core/dtype.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace dg {
namespace {

constexpr uint64_t kSign64 = 0x8000000000000000ull;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr double kTf32Max = 0x1.ffcp127;   // (2 - 2^-10) * 2^127
constexpr double kBf16Max = 0x1.fep127;    // (2 - 2^-7) * 2^127
constexpr double kI64Max = 0x1.fffffffffffffp62;   // 2^63 - 1024: the largest double below 2^63

constexpr FormatInfo kInfo[] = {
    {"f64", "F64", 8, 53, -1022, 1023, DBL_MAX, Overflow::to_inf, true},
    {"f32", "F32", 4, 24, -126, 127, FLT_MAX, Overflow::to_inf, true},
    {"tf32", "F32", 4, 11, -126, 127, kTf32Max, Overflow::to_inf, true},
    {"bf16", "BF16", 2, 8, -126, 127, kBf16Max, Overflow::to_inf, true},
    {"f16", "F16", 2, 11, -14, 15, 65504.0, Overflow::to_inf, true},
    {"e4m3", "F8_E4M3", 1, 4, -6, 8, 448.0, Overflow::saturate, true},
    {"e5m2", "F8_E5M2", 1, 3, -14, 15, 57344.0, Overflow::to_inf, true},
    {"i64", "I64", 8, 0, 0, 62, kI64Max, Overflow::none, false},
    {"i32", "I32", 4, 0, 0, 30, 2147483647.0, Overflow::none, false},
};
constexpr size_t kNumDTypes = sizeof(kInfo) / sizeof(kInfo[0]);

// Round-to-nearest-even to <P, EMIN>, unbounded above. x must not be NaN.
template <int P, int EMIN>
inline double rne(double x) {
  static_assert(P >= 2 && P <= 52);
  const uint64_t b = std::bit_cast<uint64_t>(x);
  const uint64_t sign = b & kSign64;
  uint64_t a = b ^ sign;
  const int e = static_cast<int>(a >> 52) - 1023;   // zero and subnormal doubles give -1023
  if (e >= EMIN) {
    constexpr int kDrop = 53 - P;
    constexpr uint64_t kHalf = uint64_t{1} << (kDrop - 1);
    a += kHalf - 1 + ((a >> kDrop) & 1u);
    a &= ~((uint64_t{1} << kDrop) - 1);
    return std::bit_cast<double>(a | sign);
  }
  constexpr double kC = std::bit_cast<double>(static_cast<uint64_t>(EMIN - P + 53 + 1023) << 52);
  const double r = (std::bit_cast<double>(a) + kC) - kC;
  return std::bit_cast<double>(std::bit_cast<uint64_t>(r) | sign);
}

template <int P, int EMIN>
inline double round_float(double x, double max_finite, Overflow ov) {
  if (x != x) return x;
  const double r = rne<P, EMIN>(x);
  if (std::fabs(r) > max_finite) {
    return std::copysign(ov == Overflow::saturate ? max_finite : kInf, x);
  }
  return r;
}

// Nearest integer, ties to even, of a double (exact: no intermediate rounding).
inline double rne_integer(double x) {
  if (!(std::fabs(x) < 0x1p52)) return x;   // already an integer (or NaN/Inf)
  const double c = std::copysign(0x1p52, x);
  return std::copysign((x + c) - c, x);
}

[[noreturn]] void throw_int_range(DType t, double x) {
  throw std::out_of_range(std::string(name(t)) + ": value " + std::to_string(x) +
                          " is not representable");
}

// Range check of an integer-valued double for an integer dtype; returns it.
double check_int_range(DType t, double r, double x) {
  const bool ok = t == DType::i64 ? (r >= -0x1p63 && r < 0x1p63)
                                  : (r >= -2147483648.0 && r <= 2147483647.0);
  if (!ok) throw_int_range(t, x);   // also NaN
  return r + 0.0;                   // integers have no negative zero
}

// fp8 layouts: m mantissa bits, emin, and whether it is E4M3FN (no Inf, one NaN per sign).
struct Fp8Layout {
  int mbits;
  int emin;
  bool fn;
};
constexpr Fp8Layout kE4m3{3, -6, true};
constexpr Fp8Layout kE5m2{2, -14, false};

uint8_t encode_fp8(double r, Fp8Layout f) {
  if (r != r) return 0x7F;   // the NaN CUDA's converters produce, for either sign
  const uint8_t s = std::signbit(r) ? 0x80 : 0x00;
  const double a = std::fabs(r);
  const int emask = f.fn ? 0xF : 0x1F;
  if (a == kInf) return static_cast<uint8_t>(s | (emask << f.mbits));   // e5m2 only
  if (a == 0) return s;
  const int e = std::ilogb(a);
  if (e < f.emin) return static_cast<uint8_t>(s | static_cast<int>(std::ldexp(a, f.mbits - f.emin)));
  const unsigned m = static_cast<unsigned>(std::bit_cast<uint64_t>(a) >> (52 - f.mbits)) &
                     ((1u << f.mbits) - 1u);
  return static_cast<uint8_t>(s | ((e - f.emin + 1) << f.mbits) | m);
}

double decode_fp8_formula(uint8_t b, Fp8Layout f) {
  const int emask = f.fn ? 0xF : 0x1F;
  const int mmask = (1 << f.mbits) - 1;
  const int ef = (b >> f.mbits) & emask;
  const int m = b & mmask;
  const double sgn = (b & 0x80) ? -1.0 : 1.0;
  if (f.fn && ef == emask && m == mmask) return kNaN;
  if (!f.fn && ef == emask) return m ? kNaN : sgn * kInf;
  if (ef == 0) return sgn * std::ldexp(m, f.emin - f.mbits);
  return sgn * std::ldexp((1 << f.mbits) + m, ef - (1 - f.emin) - f.mbits);
}

struct Fp8Tables {
  std::array<double, 256> e4m3, e5m2;
  Fp8Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = decode_fp8_formula(static_cast<uint8_t>(i), kE4m3);
      e5m2[i] = decode_fp8_formula(static_cast<uint8_t>(i), kE5m2);
    }
  }
};
const Fp8Tables& fp8_tables() {
  static const Fp8Tables t;
  return t;
}

// The number of bits in a storage pattern of t.
int storage_bits(DType t) { return 8 * info(t).storage_bytes; }

// Nearest integer (ties to even) of the exact sum hi + lo, as a double.
double rne_integer(const DD& x) {
  const double n = rne_integer(x.hi);
  if (!(std::fabs(x.hi) < 0x1p52)) {
    // hi is an integer; the result is hi + (the rounding of lo), itself rounded to a double.
    const double k = rne_integer(x.lo);
    if (std::fabs(x.lo - k) == 0.5 && x.lo != k) {
      // lo is a half: the tie goes to the even one of hi + floor(lo), hi + ceil(lo).
      const double f = std::floor(x.lo);
      const bool hi_odd = std::fmod(x.hi, 2.0) != 0;
      const bool f_odd = std::fmod(f, 2.0) != 0;
      return x.hi + ((hi_odd != f_odd) ? f + 1 : f);
    }
    return x.hi + k;
  }
  // |hi| < 2^52: d = hi - n is exact (|d| <= 1/2); the remainder is d + lo exactly = s + err.
  const double d = x.hi - n;
  const double s = d + x.lo;
  const double bb = s - d;
  const double err = (d - (s - bb)) + (x.lo - bb);
  if (s > 0.5 || (s == 0.5 && err > 0)) return n + 1;
  if (s < -0.5 || (s == -0.5 && err < 0)) return n - 1;
  if (std::fabs(s) == 0.5 && err == 0) {
    const double up = s > 0 ? n + 1 : n - 1;   // an exact tie between n and up
    return std::fmod(n, 2.0) == 0 ? n : up;
  }
  return n;
}

}  // namespace

// --- format table ---------------------------------------------------------------------------------

const FormatInfo& info(DType t) {
  const auto i = static_cast<size_t>(t);
  if (i >= kNumDTypes) throw std::invalid_argument("dg::info: invalid DType " + std::to_string(i));
  return kInfo[i];
}

std::string_view name(DType t) { return info(t).name; }

std::optional<DType> parse_dtype(std::string_view s) {
  for (size_t i = 0; i < kNumDTypes; ++i) {
    if (kInfo[i].name == s) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::optional<DType> parse_safetensors_dtype(std::string_view s) {
  if (s == "F32") return DType::f32;   // tf32 shares "F32": a file never says tf32
  for (size_t i = 0; i < kNumDTypes; ++i) {
    if (kInfo[i].st_name == s) return static_cast<DType>(i);
  }
  return std::nullopt;
}

// --- rounding -------------------------------------------------------------------------------------

double round_to(DType t, double x) {
  switch (t) {
    case DType::f64: return x;
    case DType::f32: return static_cast<float>(x);   // the hardware conversion is one RNE
    case DType::tf32: return round_float<11, -126>(x, kTf32Max, Overflow::to_inf);
    case DType::bf16: return round_float<8, -126>(x, kBf16Max, Overflow::to_inf);
    case DType::f16: return round_float<11, -14>(x, 65504.0, Overflow::to_inf);
    case DType::e4m3: return round_float<4, -6>(x, 448.0, Overflow::saturate);
    case DType::e5m2: return round_float<3, -14>(x, 57344.0, Overflow::to_inf);
    case DType::i64:
    case DType::i32: return check_int_range(t, rne_integer(x), x);
  }
  throw std::invalid_argument("dg::round_to: invalid DType");
}

double round_to(DType t, const DD& x) {
  if (t == DType::f64) return x.lo == 0 ? x.hi : x.hi + x.lo;   // RN(hi + lo): hi when normalized
  if (!info(t).is_float) {
    const double s = x.hi + x.lo;
    if (s != s) throw_int_range(t, s);
    return check_int_range(t, rne_integer(x), s);
  }
  return round_to(t, round_to_odd(x));
}

double round_to(DType t, mpfr_srcptr x) {
  if (t == DType::f64) return mpfr_get_d(x, MPFR_RNDN);   // correctly rounded, subnormals too
  if (!info(t).is_float) {
    if (mpfr_nan_p(x)) throw_int_range(t, kNaN);
    MPFR_DECL_INIT(r, 128);
    mpfr_rint(r, x, MPFR_RNDN);   // ties to even; exact for |x| < 2^128
    const double d = mpfr_get_d(r, MPFR_RNDN);
    if (mpfr_cmp_d(r, d) != 0) throw_int_range(t, d);   // beyond 2^53 ulp or out of range
    return check_int_range(t, d, d);
  }
  return round_to(t, round_to_odd(x));
}

double round_tf32(double x, Tf32Mode mode) {
  if (x != x) return x;
  const float f = static_cast<float>(x);
  if (static_cast<double>(f) != x) {
    throw std::invalid_argument("dg::round_tf32: " + std::to_string(x) + " is not an f32 value");
  }
  uint32_t b = f32_bits(f);
  switch (mode) {
    case Tf32Mode::rna: b = (b + 0x1000u) & 0xFFFFE000u; break;
    case Tf32Mode::rne: b = (b + 0xFFFu + ((b >> 13) & 1u)) & 0xFFFFE000u; break;
    case Tf32Mode::rz: b &= 0xFFFFE000u; break;
  }
  return f32_from_bits(b);
}

double round_to_odd(const DD& x) {
  // TwoSum: s + err == hi + lo exactly, s = RN(hi + lo), |err| <= ulp(s)/2. This also accepts a
  // DD that is not normalized. lo == 0 returns hi as it is, which keeps a negative zero.
  if (x.lo == 0) return x.hi;
  const double s = x.hi + x.lo;
  if (!std::isfinite(s)) {
    // hi + lo overflowed: truncation toward zero gives DBL_MAX, which is odd already.
    if (std::isfinite(x.hi) && std::isfinite(x.lo)) return std::copysign(DBL_MAX, s);
    return s;
  }
  const double bb = s - x.hi;
  const double err = (x.hi - (s - bb)) + (x.lo - bb);
  if (err == 0) return s;
  // err != 0 implies s != 0 (a sum that rounds to zero is exact).
  uint64_t b = std::bit_cast<uint64_t>(s);
  if (std::signbit(err) != std::signbit(s)) b -= 1;   // truncate: one step toward zero
  return std::bit_cast<double>(b | 1u);
}

double round_to_odd(mpfr_srcptr x) {
  // mpfr_get_d rounds toward zero correctly at every magnitude: at 53 bits in the normal range, at
  // the fixed quantum 2^-1074 below it (to zero below 2^-1074) and to DBL_MAX above it. Whatever it
  // dropped makes the result inexact: set the sticky bit.
  if (mpfr_nan_p(x)) return kNaN;
  double d = mpfr_get_d(x, MPFR_RNDZ);
  if (mpfr_inf_p(x) || mpfr_zero_p(x)) return d;
  if (mpfr_cmp_d(x, d) != 0) d = std::bit_cast<double>(std::bit_cast<uint64_t>(d) | 1u);
  return d;
}

// --- bit patterns ---------------------------------------------------------------------------------

uint64_t encode(DType t, double x) {
  switch (t) {
    case DType::f64: return std::bit_cast<uint64_t>(x);
    case DType::f32: return f32_bits(static_cast<float>(x));
    case DType::tf32:
      if (x != x) return (std::signbit(x) ? 0x80000000u : 0u) | 0x7FC00000u;
      return f32_bits(static_cast<float>(round_to(t, x)));
    case DType::bf16:
      if (x != x) return (std::signbit(x) ? 0x8000u : 0u) | 0x7FC0u;
      return f32_bits(static_cast<float>(round_to(t, x))) >> 16;
    case DType::f16:
      if (x != x) return (std::signbit(x) ? 0x8000u : 0u) | 0x7E00u;
      return f16_from_f32(static_cast<float>(round_to(t, x)));   // exact: an f16 value
    case DType::e4m3: return encode_fp8(round_to(t, x), kE4m3);
    case DType::e5m2: return encode_fp8(round_to(t, x), kE5m2);
    case DType::i64: return static_cast<uint64_t>(static_cast<int64_t>(round_to(t, x)));
    case DType::i32:
      return static_cast<uint32_t>(static_cast<int32_t>(round_to(t, x)));
  }
  throw std::invalid_argument("dg::encode: invalid DType");
}

double decode(DType t, uint64_t bits) {
  switch (t) {
    case DType::f64: return std::bit_cast<double>(bits);
    case DType::f32:
    case DType::tf32: return f32_from_bits(static_cast<uint32_t>(bits));
    case DType::bf16: return f32_from_bf16(static_cast<uint16_t>(bits));
    case DType::f16: return f32_from_f16(static_cast<uint16_t>(bits));
    case DType::e4m3: return fp8_tables().e4m3[bits & 0xFF];
    case DType::e5m2: return fp8_tables().e5m2[bits & 0xFF];
    case DType::i64: return static_cast<double>(static_cast<int64_t>(bits));   // exact to 2^53
    case DType::i32: return static_cast<int32_t>(static_cast<uint32_t>(bits));
  }
  throw std::invalid_argument("dg::decode: invalid DType");
}

// --- ULP ------------------------------------------------------------------------------------------

double ulp(DType t, double x) {
  const FormatInfo& f = info(t);
  if (x != x) return x;
  if (std::isinf(x)) return kInf;
  if (!f.is_float) return 1.0;
  const int e = x == 0 ? f.emin : std::max(std::ilogb(x), f.emin);
  return std::ldexp(1.0, e - f.precision + 1);
}

double ulp_error(DType t, double candidate, double exact) {
  if (candidate == exact) return 0.0;   // also equal infinities and the two zeros
  if (candidate != candidate || exact != exact) return kNaN;
  if (std::isinf(candidate) || std::isinf(exact)) return kInf;
  // One rounding in the subtraction (relative 2^-53); the division by a power of two is exact
  // unless the quotient underflows, which an error below 2^-1022 ulp never matters for.
  return std::fabs(candidate - exact) / ulp(t, exact);
}

int64_t ulp_distance(DType t, uint64_t a_bits, uint64_t b_bits) {
  const int bits = storage_bits(t);
  if (!info(t).is_float) {
    // Integers: the plain difference of the two's-complement values.
    const auto sx = [&](uint64_t v) -> __int128 {
      return bits == 64 ? static_cast<int64_t>(v) : static_cast<int32_t>(static_cast<uint32_t>(v));
    };
    const __int128 d = sx(a_bits) - sx(b_bits);
    const __int128 ad = d < 0 ? -d : d;
    return ad > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                    : static_cast<int64_t>(ad);
  }
  const uint64_t sign = uint64_t{1} << (bits - 1);
  const uint64_t mag_mask = sign - 1;
  const int shift = t == DType::tf32 ? 13 : 0;   // tf32 counts its own values, not f32's
  const auto ord = [&](uint64_t v) -> __int128 {
    const __int128 m = static_cast<__int128>((v & mag_mask) >> shift);
    return (v & sign) ? -m : m;
  };
  const __int128 d = ord(a_bits) - ord(b_bits);
  const __int128 ad = d < 0 ? -d : d;
  return ad > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                  : static_cast<int64_t>(ad);
}

// --- f16 <-> f32 ----------------------------------------------------------------------------------

namespace detail {

uint16_t f16_from_f32_soft(float x) {
  const uint32_t b = f32_bits(x);
  const auto sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | (a >> 13));   // quiet NaN
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);   // >= 65520: Inf
  if (a >= 0x38800000u) {   // normal f16: >= 2^-14; RNE on the f32 pattern, then rebias 127 -> 15
    a += 0xFFFu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((a - 0x38000000u) >> 13));
  }
  // |x| < 2^-14: the f16 quantum is 2^-24, the f32 ulp on [1/2, 1); adding 1/2 rounds to it.
  const uint32_t r = f32_bits(f32_from_bits(a) + 0.5f) - 0x3F000000u;
  return static_cast<uint16_t>(sign | r);
}

float f32_from_f16_soft(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return f32_from_bits(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    const float v = static_cast<float>(m) * 0x1p-24f;   // exact
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace detail

uint16_t f16_from_f32(float x) {
#if defined(__F16C__)
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
#else
  return detail::f16_from_f32_soft(x);
#endif
}

float f32_from_f16(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return detail::f32_from_f16_soft(h);
#endif
}

}  // namespace dg
