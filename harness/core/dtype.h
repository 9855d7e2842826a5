// driftgate dtypes: the storage formats a candidate reads and writes, and one correct rounding into
// each of them.
//
// Every conversion into a narrow format rounds once, correctly: an exact double is rounded to nearest
// even directly; a double-double or MPFR value is first rounded to odd into a double (which keeps a
// sticky bit, Boldo-Melquiond), then rounded to nearest even into the target. This is exact double
// rounding for every format here, because 53 >= p + 2 for all of them.
//
// We write our own converters rather than use Eigen::half / Eigen::bfloat16: those convert from
// double through float, which rounds twice (half(1 + 2^-11 + 2^-40) gives 1, not 1 + 2^-10), and
// neither Eigen nor Boost knows fp8.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include <mpfr.h>

#include "reference/real/dd.h"

namespace dg {

enum class DType : uint8_t { f64, f32, tf32, bf16, f16, e4m3, e5m2, i64, i32 };

inline constexpr DType kFloatDTypes[] = {DType::f64, DType::f32, DType::tf32, DType::bf16,
                                         DType::f16, DType::e4m3, DType::e5m2};

// How a format behaves at overflow.
enum class Overflow : uint8_t {
  to_inf,     // IEEE: |x| >= max + ulp/2 rounds to Inf (f64 f32 tf32 bf16 f16 e5m2)
  saturate,   // e4m3 as CUDA's __NV_SATFINITE / cvt.rn.satfinite: clamps to +-448; NaN stays NaN
  none,       // integer formats
};

struct FormatInfo {
  std::string_view name;         // "bf16": the name in case strings and on the command line
  std::string_view st_name;      // the .safetensors dtype ("BF16"); tf32 is stored as "F32"
  int storage_bytes;             // bytes per element in memory and in files
  int precision;                 // significand bits including the hidden bit (0 for integers)
  int emin;                      // exponent of the smallest normal number
  int emax;                      // exponent of the largest finite number
  double max_finite;
  Overflow overflow;
  bool is_float;
};

const FormatInfo& info(DType t);
std::string_view name(DType t);
std::optional<DType> parse_dtype(std::string_view s);           // "bf16" -> DType::bf16
std::optional<DType> parse_safetensors_dtype(std::string_view s);  // "BF16" -> DType::bf16

// tf32 comes in three conversion modes: RNE, RNA (ties away, PTX cvt.rna.tf32.f32, the CUTLASS
// default) and RZ (the tensor core truncating a raw fp32 operand).
enum class Tf32Mode : uint8_t { rne, rna, rz };

// --- one correct rounding, result given as the double the format value equals -----------------
double round_to(DType t, double x);      // RNE (tf32: RNE) with t's overflow policy
double round_to(DType t, const DD& x);   // round-to-odd to double, then RNE
double round_to(DType t, mpfr_srcptr x);
double round_tf32(double x, Tf32Mode mode);  // x must be an f32 value (tf32 converts from f32)
// Integer dtypes (i64, i32): the nearest integer, ties to even, as a double; throws
// std::out_of_range for NaN and for a result outside the type (or, from MPFR, not a double).

// Round-to-odd into double: the double nearest x toward zero, with its last bit set when inexact.
double round_to_odd(const DD& x);
double round_to_odd(mpfr_srcptr x);

// --- bit patterns -------------------------------------------------------------------------------
// encode rounds x as round_to does and returns the storage bits (tf32: an f32 bit pattern with the
// low 13 bits clear); decode returns the exact value of a bit pattern (i64 beyond 2^53: the
// nearest double). NaN encodes as the format's quiet NaN (fp8: 0x7F, as CUDA's converters do).
uint64_t encode(DType t, double x);
double decode(DType t, uint64_t bits);

// --- ULP ----------------------------------------------------------------------------------------
// ulp(t, x) = 2^(max(floor(log2 |x|), emin) - p + 1): the quantum of t at x (fixed in the subnormal
// range). ulp_error is the real ULP error |c - x| / ulp(t, x) of a candidate value c against an
// exact (or higher-precision) x. ulp_distance is the integer count of representable values between
// two encodings (both zeros are 0 apart; NaN/Inf must be handled by the caller).
double ulp(DType t, double x);
double ulp_error(DType t, double candidate, double exact);
int64_t ulp_distance(DType t, uint64_t a_bits, uint64_t b_bits);

// --- fast inline paths for kernels (bit-identical to encode/decode) ------------------------------
inline uint32_t f32_bits(float x) { uint32_t b; std::memcpy(&b, &x, 4); return b; }
inline float f32_from_bits(uint32_t b) { float x; std::memcpy(&x, &b, 4); return x; }

// f32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t bf16_from_f32(float x) {
  uint32_t b = f32_bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
inline float f32_from_bf16(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
// Round an f32 to the nearest bf16 value, kept in an f32.
inline float round_bf16(float x) { return f32_from_bf16(bf16_from_f32(x)); }

uint16_t f16_from_f32(float x);   // RNE, overflow to Inf, subnormals exact
float f32_from_f16(uint16_t h);

namespace detail {
// The portable software paths behind f16_from_f32 / f32_from_f16 where F16C is absent (same
// results); declared here so the tests cover them on every machine.
uint16_t f16_from_f32_soft(float x);
float f32_from_f16_soft(uint16_t h);
}  // namespace detail

}  // namespace dg
