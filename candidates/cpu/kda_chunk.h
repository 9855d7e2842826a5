// Building blocks of the chunked KDA candidates: 16-lane f32 vectors, a vector exp, and a
// register-blocked f32 GEMM whose tiles hand their accumulators to an epilogue.
//
// V16 maps onto one AVX-512 register when the build has AVX-512F; otherwise onto 16 floats that the
// compiler vectorises as it can (AVX2 with -mavx2 -mfma). Every multiply-add is an explicit fma.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
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
constexpr int kGemmMR = 8;   // 8 x 32 tile: 16 accumulators of the 32 registers

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
inline V16 scale2(V16 p, V16 n) {
  V16 r;
  for (int l = 0; l < 16; ++l) {
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
#undef DG_V16_LANEWISE
constexpr int kGemmMR = 4;

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

// One MR x (16 NV) tile of acc = A B over k in [0, kc): A rows of stride lda, B rows of stride ldb,
// both already offset to the tile. epi(i, j, acc) receives the 16 sums C[i, j .. j+16).
template <int MR, int NV, class Epi>
inline void gemm_tile(int64_t kc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t i0,
                      int64_t j0, const Epi& epi) {
  V16 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = V16::zero();
  for (int64_t kk = 0; kk < kc; ++kk) {
    V16 b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = V16::load(B + kk * ldb + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const V16 a = V16::set1(A[r * lda + kk]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = fma(a, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) epi(i0 + r, j0 + 16 * v, acc[r][v]);
}

template <int NV, class Epi>
inline void gemm_rows(int mr, int64_t kc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t i0,
                      int64_t j0, const Epi& epi) {
  switch (mr) {
    case 1: gemm_tile<1, NV>(kc, A, lda, B, ldb, i0, j0, epi); break;
    case 2: gemm_tile<2, NV>(kc, A, lda, B, ldb, i0, j0, epi); break;
    case 3: gemm_tile<3, NV>(kc, A, lda, B, ldb, i0, j0, epi); break;
    case 4: gemm_tile<4, NV>(kc, A, lda, B, ldb, i0, j0, epi); break;
#if defined(__AVX512F__)
    case 5: gemm_tile<5, NV>(kc, A, lda, B, ldb, i0, j0, epi); break;
    case 6: gemm_tile<6, NV>(kc, A, lda, B, ldb, i0, j0, epi); break;
    case 7: gemm_tile<7, NV>(kc, A, lda, B, ldb, i0, j0, epi); break;
    case 8: gemm_tile<8, NV>(kc, A, lda, B, ldb, i0, j0, epi); break;
#endif
    default: break;
  }
}

// C = A[M x kc] B[kc x N] (row-major, strides lda, ldb), delivered tile by tile to epi(i, j, acc),
// which owns C[i, j .. j+16). N must be a multiple of 16. With lower_A, A is lower triangular with
// stored zeros above the diagonal, and the row block [i0, i0 + mr) stops at k = i0 + mr.
// Loop order: 32-column panels of B (kc x 32, L1-resident) outside, row blocks of A inside.
template <class Epi>
void gemm(int64_t M, int64_t N, int64_t kc, const float* A, int64_t lda, const float* B, int64_t ldb, bool lower_A,
          const Epi& epi) {
  for (int64_t j0 = 0; j0 < N; j0 += 32) {
    const bool two = N - j0 >= 32;
    for (int64_t i0 = 0; i0 < M; i0 += kGemmMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kGemmMR, M - i0));
      const int64_t kend = lower_A ? std::min<int64_t>(kc, i0 + mr) : kc;
      if (two) gemm_rows<2>(mr, kend, A + i0 * lda, lda, B + j0, ldb, i0, j0, epi);
      else gemm_rows<1>(mr, kend, A + i0 * lda, lda, B + j0, ldb, i0, j0, epi);
    }
  }
}

}  // namespace dg::kda_cpu
