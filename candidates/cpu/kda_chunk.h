// Building blocks of the chunked KDA candidates: 16-lane f32 vectors, a vector exp, and a
// register-blocked f32 GEMM whose tiles hand their accumulators to an epilogue.
//
// V16 maps onto one AVX-512 register when the build has AVX-512F, onto two AVX2 registers when it has
// AVX2 and FMA, and otherwise onto 16 floats in plain loops. Every operation is the same IEEE
// operation per lane on all three, so results do not depend on the path. Every multiply-add is an
// explicit fma.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "harness/core/dtype.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace dg::kda_cpu {

#if defined(__AVX512F__)

struct V16 {
  __m512 v;
  static V16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static V16 set1(float x) { return {_mm512_set1_ps(x)}; }
  static V16 zero() { return {_mm512_setzero_ps()}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
};
inline V16 operator+(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V16 operator-(V16 a, V16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V16 operator*(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
// The masked forms below, with every lane selected, spell out the pass-through operand that the
// plain intrinsics leave undefined (GCC 12 warns about the undefined one under -Wall).
constexpr __mmask16 kAll16 = 0xFFFF;
// clamp(x, lo, hi), NaN passing through (max/min return their second operand on NaN).
inline V16 clamp(V16 x, float lo, float hi) {
  const __m512 m = _mm512_mask_max_ps(x.v, kAll16, _mm512_set1_ps(lo), x.v);
  return {_mm512_mask_min_ps(m, kAll16, _mm512_set1_ps(hi), m)};
}
inline V16 round_nearest(V16 x) {
  return {_mm512_mask_roundscale_ps(x.v, kAll16, x.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// p * 2^n for integer-valued n, rounded once (also into the subnormal range).
inline V16 scale2(V16 p, V16 n) { return {_mm512_mask_scalef_ps(p.v, kAll16, p.v, n.v)}; }
// Pairwise tree: 16 -> 8 -> 4 -> 2 -> 1.
inline float hsum(V16 a) {
  const __m512d d = _mm512_castps_pd(a.v);
  const __m256 lo = _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, d, 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, d, 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
// Round each lane to the nearest bf16 (ties to even), kept as f32; NaN stays a quiet NaN. The same
// bits as dg::round_bf16.
inline V16 round_bf16(V16 x) {
  const __m512i b = _mm512_castps_si512(x.v), hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i lsb = _mm512_and_si512(_mm512_mask_srli_epi32(b, kAll16, b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_and_si512(_mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), hi);
  const __m512i qnan = _mm512_and_si512(_mm512_or_si512(b, _mm512_set1_epi32(0x00400000)), hi);
  return {_mm512_castsi512_ps(_mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x.v, x.v, _CMP_UNORD_Q), qnan))};
}
constexpr int kGemmMR = 8;   // 8 x 32 tile: 16 accumulators of the 32 registers
constexpr int kGemmNV = 2;

#elif defined(__AVX2__) && defined(__FMA__)

// Two 8-lane halves: lanes 0..7 in lo, 8..15 in hi. Every operation is the same IEEE operation per
// lane as the AVX-512 path, so both give the same bits.
struct V16 {
  __m256 lo, hi;
  static V16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static V16 set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static V16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  void store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
};
inline V16 operator+(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline V16 operator-(V16 a, V16 b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline V16 operator*(V16 a, V16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline V16 fma(V16 a, V16 b, V16 c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
// clamp(x, lo, hi), NaN passing through (max/min return their second operand on NaN).
inline V16 clamp(V16 x, float lo, float hi) {
  const __m256 l = _mm256_set1_ps(lo), h = _mm256_set1_ps(hi);
  return {_mm256_min_ps(h, _mm256_max_ps(l, x.lo)), _mm256_min_ps(h, _mm256_max_ps(l, x.hi))};
}
inline V16 round_nearest(V16 x) {
  constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return {_mm256_round_ps(x.lo, kMode), _mm256_round_ps(x.hi, kMode)};
}
// p * 2^n for integer-valued n in [-151, 128], rounded once (also into the subnormal range): with
// n1 = trunc(n / 2), p * 2^n1 is exact for the |p| in [0.5, 2] that exp16 passes, and the second
// factor 2^(n - n1) rounds once. Both factors are normal floats built from their exponent bits. A NaN
// p (NaN argument) stays NaN.
inline __m256 scale2_half(__m256 p, __m256 n) {
  const __m256 n1 = _mm256_round_ps(_mm256_mul_ps(n, _mm256_set1_ps(0.5f)), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 n2 = _mm256_sub_ps(n, n1);
  auto pow2 = [](__m256 e) {
    const __m256i b = _mm256_add_epi32(_mm256_cvtps_epi32(e), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(b, 23));
  };
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2(n1)), pow2(n2));
}
inline V16 scale2(V16 p, V16 n) { return {scale2_half(p.lo, n.lo), scale2_half(p.hi, n.hi)}; }
// Pairwise tree: 16 -> 8 -> 4 -> 2 -> 1, the AVX-512 path's tree.
inline float hsum(V16 a) {
  const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
// Round each lane to the nearest bf16 (ties to even), kept as f32; NaN stays a quiet NaN. The same
// bits as dg::round_bf16.
inline __m256 round_bf16_half(__m256 x) {
  const __m256i b = _mm256_castps_si256(x), hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_and_si256(_mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), hi);
  const __m256i qnan = _mm256_and_si256(_mm256_or_si256(b, _mm256_set1_epi32(0x00400000)), hi);
  return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(qnan), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
inline V16 round_bf16(V16 x) { return {round_bf16_half(x.lo), round_bf16_half(x.hi)}; }
// 6 x 16 tile: 12 accumulators, 2 for the row of B and 1 broadcast of the 16 registers.
constexpr int kGemmMR = 6;
constexpr int kGemmNV = 1;

#else

struct V16 {
  float x[16];
  static V16 load(const float* p) { V16 r; std::memcpy(r.x, p, sizeof r.x); return r; }
  static V16 set1(float s) { V16 r; for (float& e : r.x) e = s; return r; }
  static V16 zero() { return set1(0.0f); }
  void store(float* p) const { std::memcpy(p, x, sizeof x); }
};
#define DG_V16_LANEWISE(expr) V16 r; for (int l = 0; l < 16; ++l) r.x[l] = (expr); return r
inline V16 operator+(V16 a, V16 b) { DG_V16_LANEWISE(a.x[l] + b.x[l]); }
inline V16 operator-(V16 a, V16 b) { DG_V16_LANEWISE(a.x[l] - b.x[l]); }
inline V16 operator*(V16 a, V16 b) { DG_V16_LANEWISE(a.x[l] * b.x[l]); }
inline V16 fma(V16 a, V16 b, V16 c) { DG_V16_LANEWISE(std::fma(a.x[l], b.x[l], c.x[l])); }
inline V16 clamp(V16 a, float lo, float hi) {
  DG_V16_LANEWISE(a.x[l] < lo ? lo : (a.x[l] > hi ? hi : a.x[l]));
}
inline V16 round_nearest(V16 a) { DG_V16_LANEWISE(std::nearbyint(a.x[l])); }
// p * 2^n in two exact-range steps (n in [-151, 128]): p * 2^(n/2) is exact, the second step rounds.
// A NaN n (from a NaN argument of exp16) gives NaN.
inline V16 scale2(V16 p, V16 n) {
  V16 r;
  for (int l = 0; l < 16; ++l) {
    if (std::isnan(n.x[l])) {
      r.x[l] = n.x[l];
      continue;
    }
    int ni = static_cast<int>(n.x[l]);
    int n1 = ni / 2, n2 = ni - n1;
    uint32_t b1 = static_cast<uint32_t>(n1 + 127) << 23, b2 = static_cast<uint32_t>(n2 + 127) << 23;
    float f1, f2;
    std::memcpy(&f1, &b1, 4);
    std::memcpy(&f2, &b2, 4);
    r.x[l] = (p.x[l] * f1) * f2;
  }
  return r;
}
inline float hsum(V16 a) {
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) a.x[l] += a.x[l + w];
  return a.x[0];
}
inline V16 round_bf16(V16 a) { DG_V16_LANEWISE(dg::round_bf16(a.x[l])); }
#undef DG_V16_LANEWISE
constexpr int kGemmMR = 4;
constexpr int kGemmNV = 1;

#endif

// exp(x), lane-wise, within about 2 ulp for the f32 range (Cephes expf: x = n ln2 + r with a
// two-constant ln2, degree-7 polynomial on |r| <= ln2/2, then one rounding by 2^n). Arguments
// below -104 give +0, as exp does in f32; NaN stays NaN.
inline V16 exp16(V16 x) {
  x = clamp(x, -104.0f, 88.72283f);
  const V16 n = round_nearest(x * V16::set1(1.44269504088896341f));
  V16 r = fma(n, V16::set1(-0.693359375f), x);
  r = fma(n, V16::set1(2.12194440e-4f), r);
  V16 p = V16::set1(1.9875691500e-4f);
  p = fma(p, r, V16::set1(1.3981999507e-3f));
  p = fma(p, r, V16::set1(8.3334519073e-3f));
  p = fma(p, r, V16::set1(4.1665795894e-2f));
  p = fma(p, r, V16::set1(1.6666665459e-1f));
  p = fma(p, r, V16::set1(5.0000001201e-1f));
  const V16 y = fma(p, r * r, r) + V16::set1(1.0f);
  return scale2(y, n);
}

// 16 x 16 transpose: dst[c * ldd + r] = src[r * lds + c] for r, c < 16.
inline void transpose16(const float* src, int64_t lds, float* dst, int64_t ldd) {
#if defined(__AVX512F__)
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) {   // 2 x 2 blocks of single floats
    t[i] = _mm512_mask_unpacklo_ps(r[i], kAll16, r[i], r[i + 1]);
    t[i + 1] = _mm512_mask_unpackhi_ps(r[i], kAll16, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {   // 4 x 4 blocks
    for (int j = 0; j < 2; ++j) {
      const __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
      r[i + j] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(a, 0xFF, a, b));
      r[i + j + 2] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(a, 0xFF, a, b));
    }
  }
  for (int i = 0; i < 16; i += 8)     // 128-bit lanes: 8 x 8 blocks
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_mask_shuffle_f32x4(r[i + j], kAll16, r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_mask_shuffle_f32x4(r[i + j], kAll16, r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {       // 256-bit halves: 16 x 16
    r[j] = _mm512_mask_shuffle_f32x4(t[j], kAll16, t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_mask_shuffle_f32x4(t[j], kAll16, t[j], t[j + 8], 0xdd);
  }
  // After the four rounds register k holds column kCol[k] (the pd round swaps columns 1 and 2 of
  // each group of four).
  static constexpr int kCol[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  for (int k = 0; k < 16; ++k) _mm512_storeu_ps(dst + kCol[k] * ldd, r[k]);
#else
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) dst[j * ldd + i] = src[i * lds + j];
#endif
}

// Panel width of the GEMM: kGemmNV vectors of 16 columns (32 on AVX-512, 16 on AVX2).
constexpr int kGemmNR = 16 * kGemmNV;

// One MR x (16 NV) tile of acc = A B over k in [0, kc). B is a packed panel (rows of kGemmNR
// floats); A is read as A[r * lda + k], or with kTransA as A[k * lda + r] (A stored transposed).
// epi(i, j, acc) receives the 16 sums C[i, j .. j+16). Each sum runs over k in increasing order
// whatever the tile shape, so the shape does not change the result.
template <int MR, int NV, bool kTransA, class Epi>
inline void gemm_tile(int64_t kc, const float* A, int64_t lda, const float* B, int64_t i0, int64_t j0,
                      const Epi& epi) {
  V16 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = V16::zero();
  for (int64_t kk = 0; kk < kc; ++kk) {
    V16 b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = V16::load(B + kk * kGemmNR + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const V16 a = V16::set1(kTransA ? A[kk * lda + r] : A[r * lda + kk]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = fma(a, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) epi(i0 + r, j0 + 16 * v, acc[r][v]);
}

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
// The AVX2 tile with its accumulators as plain register arrays (GCC keeps an array of V16 structs
// in memory and stores every accumulator back each step) and one pointer per row of A.
template <int MR, bool kTransA, class Epi>
inline void gemm_tile_avx2(int64_t kc, const float* A, int64_t lda, const float* B, int64_t i0, int64_t j0,
                           const Epi& epi) {
  __m256 lo[MR], hi[MR];
  const float* a[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    lo[r] = _mm256_setzero_ps();
    hi[r] = _mm256_setzero_ps();
    a[r] = kTransA ? A + r : A + r * lda;
  }
  const int64_t step = kTransA ? lda : 1;
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m256 b0 = _mm256_loadu_ps(B + kk * kGemmNR), b1 = _mm256_loadu_ps(B + kk * kGemmNR + 8);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 x = _mm256_broadcast_ss(a[r] + kk * step);
      lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
    }
  }
  for (int r = 0; r < MR; ++r) epi(i0 + r, j0, V16{lo[r], hi[r]});
}
#endif

template <int NV, bool kTransA, class Epi>
inline void gemm_rows(int mr, int64_t kc, const float* A, int64_t lda, const float* B, int64_t i0, int64_t j0,
                      const Epi& epi) {
  static_assert(kGemmMR <= 8);
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
  static_assert(NV == 1);
  switch (mr) {
    case 1: gemm_tile_avx2<1, kTransA>(kc, A, lda, B, i0, j0, epi); return;
    case 2: gemm_tile_avx2<2, kTransA>(kc, A, lda, B, i0, j0, epi); return;
    case 3: gemm_tile_avx2<3, kTransA>(kc, A, lda, B, i0, j0, epi); return;
    case 4: gemm_tile_avx2<4, kTransA>(kc, A, lda, B, i0, j0, epi); return;
    case 5: gemm_tile_avx2<5, kTransA>(kc, A, lda, B, i0, j0, epi); return;
    case 6: gemm_tile_avx2<6, kTransA>(kc, A, lda, B, i0, j0, epi); return;
    default: return;
  }
#endif
  switch (mr) {
    case 1: gemm_tile<1, NV, kTransA>(kc, A, lda, B, i0, j0, epi); break;
    case 2: gemm_tile<2, NV, kTransA>(kc, A, lda, B, i0, j0, epi); break;
    case 3: gemm_tile<3, NV, kTransA>(kc, A, lda, B, i0, j0, epi); break;
    case 4: gemm_tile<4, NV, kTransA>(kc, A, lda, B, i0, j0, epi); break;
    case 5: if constexpr (kGemmMR >= 5) gemm_tile<5, NV, kTransA>(kc, A, lda, B, i0, j0, epi); break;
    case 6: if constexpr (kGemmMR >= 6) gemm_tile<6, NV, kTransA>(kc, A, lda, B, i0, j0, epi); break;
    case 7: if constexpr (kGemmMR >= 7) gemm_tile<7, NV, kTransA>(kc, A, lda, B, i0, j0, epi); break;
    case 8: if constexpr (kGemmMR >= 8) gemm_tile<8, NV, kTransA>(kc, A, lda, B, i0, j0, epi); break;
    default: break;
  }
}

enum class AForm : uint8_t { plain, lower, transposed };

// C = A[M x kc] B[kc x N] delivered tile by tile to epi(i, j, acc), which owns C[i, j .. j+16).
// B is row-major with stride ldb; N must be a multiple of 16. A is row-major with stride lda
// (plain), the same with stored zeros above the diagonal (lower: row block [i0, i0 + mr) stops at
// k = i0 + mr), or stored transposed, A[i][k] at A[k * lda + i] (transposed).
// Loop order: kGemmNR-column panels of B outside, each copied into `pack` (kc x kGemmNR floats,
// at most kc x 32) so that it sits in L1 without set conflicts whatever ldb is; row blocks of A
// inside.
template <class Epi>
void gemm(int64_t M, int64_t N, int64_t kc, const float* A, int64_t lda, AForm form, const float* B, int64_t ldb,
          float* pack, const Epi& epi) {
  for (int64_t j0 = 0; j0 < N; j0 += kGemmNR) {
    const bool full = N - j0 >= kGemmNR;   // else one vector of 16 (AVX-512's last panel)
    for (int64_t kk = 0; kk < kc; ++kk)
      for (int v = 0; v < (full ? kGemmNV : 1); ++v)
        V16::load(B + kk * ldb + j0 + 16 * v).store(pack + kk * kGemmNR + 16 * v);
    for (int64_t i0 = 0; i0 < M; i0 += kGemmMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kGemmMR, M - i0));
      const int64_t kend = form == AForm::lower ? std::min<int64_t>(kc, i0 + mr) : kc;
      const float* a = form == AForm::transposed ? A + i0 : A + i0 * lda;
      const bool trans = form == AForm::transposed;
      if (full && kGemmNV == 2) {
        if (trans) gemm_rows<kGemmNV, true>(mr, kend, a, lda, pack, i0, j0, epi);
        else gemm_rows<kGemmNV, false>(mr, kend, a, lda, pack, i0, j0, epi);
      } else {
        if (trans) gemm_rows<1, true>(mr, kend, a, lda, pack, i0, j0, epi);
        else gemm_rows<1, false>(mr, kend, a, lda, pack, i0, j0, epi);
      }
    }
  }
}

}  // namespace dg::kda_cpu
