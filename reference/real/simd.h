// Lane vectors of doubles for the reference's state kernels: the build's widest vector (8 lanes with
// AVX-512F, 4 with AVX2 and FMA, 1 otherwise). Each operation is the IEEE operation per lane (fma is
// the fused one, rounded once), so a kernel gives the same bits at every width; the width only
// decides how many independent lanes run at once.
#pragma once

#include <cmath>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace dg::simd {

#if defined(__AVX512F__)
struct VD {
  static constexpr int kLanes = 8;
  __m512d v;
  static VD load(const double* p) { return {_mm512_loadu_pd(p)}; }
  static VD set1(double x) { return {_mm512_set1_pd(x)}; }
  static VD zero() { return {_mm512_setzero_pd()}; }
  void store(double* p) const { _mm512_storeu_pd(p, v); }
};
inline VD operator+(VD a, VD b) { return {_mm512_add_pd(a.v, b.v)}; }
inline VD operator-(VD a, VD b) { return {_mm512_sub_pd(a.v, b.v)}; }
inline VD operator*(VD a, VD b) { return {_mm512_mul_pd(a.v, b.v)}; }
inline VD fma(VD a, VD b, VD c) { return {_mm512_fmadd_pd(a.v, b.v, c.v)}; }
inline VD fms(VD a, VD b, VD c) { return {_mm512_fmsub_pd(a.v, b.v, c.v)}; }
#elif defined(__AVX2__) && defined(__FMA__)
struct VD {
  static constexpr int kLanes = 4;
  __m256d v;
  static VD load(const double* p) { return {_mm256_loadu_pd(p)}; }
  static VD set1(double x) { return {_mm256_set1_pd(x)}; }
  static VD zero() { return {_mm256_setzero_pd()}; }
  void store(double* p) const { _mm256_storeu_pd(p, v); }
};
inline VD operator+(VD a, VD b) { return {_mm256_add_pd(a.v, b.v)}; }
inline VD operator-(VD a, VD b) { return {_mm256_sub_pd(a.v, b.v)}; }
inline VD operator*(VD a, VD b) { return {_mm256_mul_pd(a.v, b.v)}; }
inline VD fma(VD a, VD b, VD c) { return {_mm256_fmadd_pd(a.v, b.v, c.v)}; }
inline VD fms(VD a, VD b, VD c) { return {_mm256_fmsub_pd(a.v, b.v, c.v)}; }
#else
struct VD {
  static constexpr int kLanes = 1;
  double v;
  static VD load(const double* p) { return {*p}; }
  static VD set1(double x) { return {x}; }
  static VD zero() { return {0.0}; }
  void store(double* p) const { *p = v; }
};
inline VD operator+(VD a, VD b) { return {a.v + b.v}; }
inline VD operator-(VD a, VD b) { return {a.v - b.v}; }
inline VD operator*(VD a, VD b) { return {a.v * b.v}; }
inline VD fma(VD a, VD b, VD c) { return {std::fma(a.v, b.v, c.v)}; }
inline VD fms(VD a, VD b, VD c) { return {std::fma(a.v, b.v, -c.v)}; }
#endif

// fms(a, b, c) = a b - c rounded once (TwoProd's error term: fms(a, b, fl(a b)) is exact).

// TwoSum per lane: s + e == a + b exactly, s = fl(a + b) (Knuth; no condition on the magnitudes).
inline void two_sum(VD a, VD b, VD& s, VD& e) {
  s = a + b;
  const VD bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

}  // namespace dg::simd
