// KDA reference: the recurrence of kda.h written once over Real, the state kernels (generic, and
// vectorized ones for f64 and dd with the same operation order), and the driver: inputs streamed
// token by token, worker threads over (sequence, value head) pairs.
#include "reference/kda.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"
#include "reference/real/dd.h"
#include "reference/real/f128.h"
#include "reference/real/f64.h"
#include "reference/real/mpfr_real.h"
#include "reference/real/real_ops.h"
#include "reference/real/simd.h"

namespace dg {
namespace {


// Kernels are compiled for 512-bit vectors (GCC prefers 256-bit ones on AVX-512 machines by
// default) and kept out of line so that preference holds.
#if defined(__x86_64__)
#define DG_KERNEL __attribute__((noinline, target("prefer-vector-width=512")))
#else
#define DG_KERNEL __attribute__((noinline))
#endif

// dd lane accumulator: (h, l) += x * b. The product is TwoProd of the high parts plus the cross
// terms by fma (x.lo * b.lo, below 2^-106 relative, dropped: JMP's DWTimesDW2), its high part is
// TwoSum'd into h, its low part and the TwoSum error are added to l (Sum2 in double-double);
// two_sum(h, l) normalizes at the end.
inline void dd_accumulate(double& h, double& l, const DD& x, const DD& b) {
  double ph = x.hi * b.hi;
  double pl = std::fma(x.hi, b.hi, -ph) + std::fma(x.lo, b.hi, x.hi * b.lo);
  DD s = two_sum(h, ph);
  h = s.hi;
  l = l + (s.lo + pl);
}

// sum_i x_i^2: in the f64 tier Dot2 over 8 interleaved lanes (lane l takes x[l], x[l + 8], ...,
// each in index order), the lanes' sums then added by Sum2 in lane order and their errors summed:
// Dot2's bound, and the same bits at every vector width. The dd tier: dd_accumulate lanes in index
// order; other tiers: the tier's arithmetic in index order.
inline double sum_squares(const double* x, int64_t n) {
  constexpr int kWays = 8;
  double s[kWays] = {}, c[kWays] = {};
  int64_t i = 0;
  for (; i + kWays <= n; i += kWays)
    for (int l = 0; l < kWays; ++l) dot2_step(s[l], c[l], x[i + l], x[i + l]);
  for (int l = 0; i < n; ++i, ++l) dot2_step(s[l], c[l], x[i], x[i]);
  double hs = 0.0, hc = 0.0;
  for (int l = 0; l < kWays; ++l) {
    sum2_step(hs, hc, s[l]);
    hc += c[l];
  }
  return hs + hc;
}
inline DD sum_squares(const DD* x, int64_t n) {
  double h = 0.0, l = 0.0;
  for (int64_t i = 0; i < n; ++i) dd_accumulate(h, l, x[i], x[i]);
  return two_sum(h, l);
}
template <class Real> Real sum_squares(const Real* x, int64_t n) {
  Real s(0.0);
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

// x[i] <- exp(x[i]); for dd, all in exp_core's range: one vectorized loop (the same operations as
// the scalar exp).
template <class Real> void exp_all(Real* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = r_exp(x[i]);
}
DG_KERNEL void dd_exp_core_all(DD* __restrict x, int64_t n, const dd_detail::ExpTable& t) {
  for (int64_t i = 0; i < n; ++i) x[i] = exp_core(x[i], t);
}
template <> void exp_all(double* x, int64_t n) { exp_all_f64(x, n); }
template <> void exp_all(DD* x, int64_t n) {
  bool in_range = true;
  for (int64_t i = 0; i < n; ++i) in_range &= x[i].hi >= -700.0 && x[i].hi <= 700.0;
  if (!in_range) {
    for (int64_t i = 0; i < n; ++i) x[i] = exp(x[i]);
    return;
  }
  dd_exp_core_all(x, n, dd_detail::exp_table());
}

template <class Real> Real sigmoid(const Real& x) {
  if (x >= 0.0) return 1.0 / (1.0 + r_exp(-x));
  Real e = r_exp(x);
  return e / (1.0 + e);
}
template <class Real> Real softplus(const Real& x) {
  if (x > 0.0) return x + r_log1p(r_exp(-x));
  return r_log1p(r_exp(x));
}

// The gate of one token, before alpha = exp(g): g[i] from the raw gate gd[i] (kda.h's formulas),
// ea = exp(A_log[hv]), dtb = dt_bias[hv*K:] (zeros when absent).
struct GateArgs {
  KdaGate gate;
  bool use_A_log;
  double lower_bound;
};
template <class Real>
void gate_generic(const GateArgs& a, const double* gd, const double* dtb, const Real& ea, Real* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (a.gate) {
      case KdaGate::pregated: g[i] = Real(gd[i]); break;
      case KdaGate::softplus: g[i] = -(ea * softplus(Real(gd[i]) + dtb[i])); break;
      case KdaGate::lower_bound: {
        Real z = Real(gd[i]) + dtb[i];
        if (a.use_A_log) z = ea * z;
        g[i] = a.lower_bound * sigmoid(z);
        break;
      }
    }
  }
}
template <class Real>
void gate_all(const GateArgs& a, const double* gd, const double* dtb, const Real& ea, Real* g, int64_t n) {
  gate_generic(a, gd, dtb, ea, g, n);
}

// dd: the operations of the generic loop above (softplus, sigmoid, dd_log1p and dd_expm1 inlined,
// each branch computed for every lane and the lane's one selected; expm1 of the Newton step as
// softplus_finish says), in passes over the token's K gates that vectorize; the double log1p that
// starts dd_log1p's Newton step is the one scalar pass. Same bits as the generic loop except where
// that expm1 takes another branch (y0 > 0.34, |z| < 0.9), where both are within 2^-104. The
// profile of the softplus gate before: 65% of the dd tier's time in scalar exp, expm1 and log1p
// (26K tokens/s at K = V = 128 on one AVX-512 core against 68K pregated). Lanes whose exp argument
// leaves exp_core's range [-700, 700] take the generic loop (the whole token does), and so does
// the pregated gate (a copy).
namespace gate_dd {

// Every dd helper inlined (flatten), or the loops keep calls and stay scalar.
#define DG_GATE_KERNEL DG_KERNEL __attribute__((flatten))

// z = gd + dtb (scaled by ea for the lower-bound gate with A_log); s = -|z|; e = exp(s).
DG_GATE_KERNEL void exp_neg_abs(const double* __restrict gd, const double* __restrict dtb, DD ea, bool scale,
                           DD* __restrict z, DD* __restrict e, int64_t n, const dd_detail::ExpTable& t) {
  for (int64_t i = 0; i < n; ++i) {
    DD zi = dw_plus_fp(DD(gd[i]), dtb[i]);
    if (scale) zi = dw_times_dw(ea, zi);
    z[i] = zi;
    const double sg = zi.hi > 0.0 ? -1.0 : 1.0;   // s = -|z| (exact)
    e[i] = exp_core(DD(sg * zi.hi, sg * zi.lo), t);
  }
}

// Softplus from e = exp(-|z|): log1p(e) by dd_log1p's Newton step from y0 = log1p(e.hi); then
// z + log1p(e) where z > 0; g = -(ea * softplus).
DG_GATE_KERNEL void softplus_finish(const DD* __restrict z, const DD* __restrict e, const double* __restrict y0,
                               DD ea, DD* __restrict g, int64_t n, const dd_detail::ExpTable& t) {
  using namespace dd_detail;
  for (int64_t i = 0; i < n; ++i) {
    const double y = y0[i];
    // expm1(y), y in (0, ln2]: y = n ln2/1024 + r, n + 512 = 1024 m + j (m in {0, 1}),
    // expm1(y) = 2^m (expm1_j + (1 + expm1_j) expm1(r)) + 2^m - 1: for m = 0 (y <= 0.3466) the
    // operations of dd_expm1's table branch; for m = 1 (expm1(y) >= 0.41, no cancellation) one
    // table entry instead of dd_expm1's exp(y) - 1, to the same 2^-104.
    const double nn = std::nearbyint(y * kInvLn2x1024);
    const DD q = expm1_poly(reduce(DD(y), nn));
    const auto ni = static_cast<int64_t>(nn) + kTableHalf;
    const auto j = static_cast<size_t>(ni & (2 * kTableHalf - 1));
    const double sc = ni >= 2 * kTableHalf ? 2.0 : 1.0;
    const DD tm = dw_plus_dw(DD(t.em1_hi[j], t.em1_lo[j]), dw_times_dw(DD(t.one_hi[j], t.one_lo[j]), q));
    const DD em1 = dw_plus_fp(DD(sc * tm.hi, sc * tm.lo), sc - 1.0);
    const DD d = dw_div_dw(dw_plus_dw(e[i], -em1), dw_plus_fp(em1, 1.0));
    const DD lp = dw_plus_fp(dw_plus_fp(d, -0.5 * d.hi * d.hi), y);
    const DD zp = dw_plus_dw(z[i], lp);
    const bool pos = z[i].hi > 0.0;
    const DD sp(pos ? zp.hi : lp.hi, pos ? zp.lo : lp.lo);
    const DD m = dw_times_dw(ea, sp);
    g[i] = DD(-m.hi, -m.lo);
  }
}

// Lower-bound gate from e = exp(-|z|): sigmoid(z) = 1 / (1 + e) for z >= 0, e / (1 + e) below;
// g = lb * sigmoid(z).
DG_GATE_KERNEL void sigmoid_finish(const DD* __restrict z, const DD* __restrict e, double lb, DD* __restrict g,
                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const DD den = dw_plus_fp(e[i], 1.0);
    const bool pos = z[i].hi >= 0.0;
    const DD num(pos ? 1.0 : e[i].hi, pos ? 0.0 : e[i].lo);
    g[i] = dw_times_fp(dw_div_dw(num, den), lb);
  }
}

#undef DG_GATE_KERNEL

}  // namespace gate_dd

template <>
void gate_all(const GateArgs& a, const double* gd, const double* dtb, const DD& ea, DD* g, int64_t n) {
  constexpr int64_t kMax = 1024;
  bool vectorized = a.gate != KdaGate::pregated && n <= kMax;
  for (int64_t i = 0; vectorized && i < n; ++i) {
    // |z| <= 700 with room for dd's low part and for ea's scaling of the lower-bound gate
    const double z = (gd[i] + dtb[i]) * (a.gate == KdaGate::lower_bound && a.use_A_log ? ea.hi : 1.0);
    vectorized = std::fabs(z) <= 690.0;
  }
  if (!vectorized) return gate_generic(a, gd, dtb, ea, g, n);
  alignas(64) DD z[kMax], e[kMax];
  const dd_detail::ExpTable& t = dd_detail::exp_table();
  const bool lb = a.gate == KdaGate::lower_bound;
  gate_dd::exp_neg_abs(gd, dtb, ea, lb && a.use_A_log, z, e, n, t);
  if (lb) {
    gate_dd::sigmoid_finish(z, e, a.lower_bound, g, n);
    return;
  }
  alignas(64) double y0[kMax];
  for (int64_t i = 0; i < n; ++i) y0[i] = std::log1p(e[i].hi);
  gate_dd::softplus_finish(z, e, y0, ea, g, n, t);
}

// f64, softplus gate: the generic loop's operations, as passes over the token's K gates that
// vectorize: z = gd + dtb, e = exp(-|z|) (exp_all_f64), log1p(e) (log1p_unit_f64, e in (0, 1]),
// then z + log1p(e) where z > 0 and g = -(ea * softplus). Each within about half an ulp of glibc's
// exp and log1p, which the generic loop calls once per gate (a third of the f64 tier's time at K =
// V = 128 on an AVX2 core). Gates with |z| > 690 take the generic loop (the whole token does), and so
// do the pregated (a copy) and lower-bound gates.
template <>
void gate_all(const GateArgs& a, const double* gd, const double* dtb, const double& ea, double* g, int64_t n) {
  constexpr int64_t kMax = 1024;
  bool vectorized = a.gate == KdaGate::softplus && n <= kMax;
  for (int64_t i = 0; vectorized && i < n; ++i) vectorized = std::fabs(gd[i] + dtb[i]) <= 690.0;
  if (!vectorized) return gate_generic(a, gd, dtb, ea, g, n);
  alignas(64) double z[kMax], e[kMax];
  for (int64_t i = 0; i < n; ++i) {
    z[i] = gd[i] + dtb[i];
    e[i] = -std::fabs(z[i]);
  }
  exp_all_f64(e, n);
  log1p_unit_f64(e, n);
  for (int64_t i = 0; i < n; ++i) g[i] = -(ea * (z[i] > 0.0 ? z[i] + e[i] : e[i]));
}

// x <- x * (1 / sqrt(sum x^2 + eps))
template <class Real> void l2norm(Real* x, int64_t n) {
  Real ss = sum_squares(x, n);
  Real inv = 1.0 / r_sqrt(ss + KdaParams::kL2NormEps);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// 64-byte aligned storage for the vectorized kernels.
template <class T> struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U> Aligned64(const Aligned64<U>&) {}  // NOLINT
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U> bool operator==(const Aligned64<U>&) const { return true; }
};
using AlignedVec = std::vector<double, Aligned64<double>>;

// --- the state S (K x V) and its sweeps ------------------------------------------------------------
// Per token t the state sees two sweeps in the documented order: decay-and-project (S *= alpha;
// acc = S^T k) and write-and-read (S += bk r^T; out = S^T q). The state types run them a block of
// tokens at a time (TokenBlock): token i's write-and-read, then token i + 1's decay-and-project.
// Column v of the state only ever meets column v of r, o and acc (the per-token q, k, alpha, beta
// are shared by all columns), so the vectorized types take a few columns through every token of
// the block before moving on: those columns stay in L1 and the state is read once per block, not
// twice per token. Each element still sees the same operations in the same order, and each lane's
// reductions run over k in increasing order, so the loop order changes no bit.

// One token's prepared inputs: q (normalized, scaled), kk (normalized), alpha = exp(g),
// bk = beta * kk, and v (padded with zeros to Vpad).
template <class Real> struct Token {
  std::vector<Real> q, kk, alpha, bk;
  std::vector<double> v;
};

// tok[0 .. n) are the block's tokens; tok[n] is the next one when has_next. On entry acc[0 .. V)
// holds S^T kk of token 0 with its decayed state (its decay-and-project has run); on return it
// holds the same for token n when has_next. o + i * Vpad receives token i's read.
template <class Real> struct TokenBlock {
  const Token<Real>* tok;
  int64_t n;
  bool has_next;
  Real* acc;
  Real* o;
  int64_t Vpad;
};

// Generic: plain loops in the documented order, each operation rounded in Real.
template <class Real> class GenericState {
 public:
  GenericState(int64_t K, int64_t V) : K_(K), V_(V), s_(static_cast<size_t>(K * V), Real(0.0)), r_(static_cast<size_t>(V)) {}
  void set(int64_t k, int64_t v, double x) { s_[static_cast<size_t>(k * V_ + v)] = Real(x); }
  const Real& get(int64_t k, int64_t v) const { return s_[static_cast<size_t>(k * V_ + v)]; }

  // S[k,:] <- S[k,:] * alpha[k];  acc[:] <- acc[:] + S[k,:] * kk[k]   (k increasing)
  void decay_project(const Real* alpha, const Real* kk, Real* acc) {
    for (int64_t v = 0; v < V_; ++v) acc[v] = Real(0.0);
    for (int64_t k = 0; k < K_; ++k) {
      Real* row = &s_[static_cast<size_t>(k * V_)];
      for (int64_t v = 0; v < V_; ++v) {
        row[v] *= alpha[k];
        acc[v] += row[v] * kk[k];
      }
    }
  }
  // S[k,:] <- S[k,:] + bk[k] * r[:];  out[:] <- out[:] + S[k,:] * q[k]   (k increasing)
  void write_read(const Real* bk, const Real* r, const Real* q, Real* out) {
    for (int64_t v = 0; v < V_; ++v) out[v] = Real(0.0);
    for (int64_t k = 0; k < K_; ++k) {
      Real* row = &s_[static_cast<size_t>(k * V_)];
      for (int64_t v = 0; v < V_; ++v) {
        row[v] += bk[k] * r[v];
        out[v] += row[v] * q[k];
      }
    }
  }
  void run_block(const TokenBlock<Real>& b) {
    for (int64_t i = 0; i < b.n; ++i) {
      const Token<Real>& t = b.tok[i];
      for (int64_t v = 0; v < V_; ++v) r_[static_cast<size_t>(v)] = t.v[static_cast<size_t>(v)] - b.acc[v];
      write_read(t.bk.data(), r_.data(), t.q.data(), b.o + i * b.Vpad);
      if (i + 1 < b.n || b.has_next) decay_project(b.tok[i + 1].alpha.data(), b.tok[i + 1].kk.data(), b.acc);
    }
  }

 private:
  int64_t K_, V_;
  std::vector<Real> s_, r_;
};

// The vectorized kernels keep the state in panels of kLanes columns (simd::VD, the build's widest
// double vector): panel p holds columns [p L, p L + L) of every row, row after row, so a sweep walks
// a panel from row 0 to row K-1 with contiguous loads and keeps its lanes' accumulators in
// registers. Columns past V are zero (r is zero there) and never read back.
using simd::VD;
constexpr int kLanes = VD::kLanes;
// f64: panels side by side, for independent work in flight and broadcasts shared by the group
// (4 measured fastest with AVX2's 16 registers; dd works on one panel, pipelined over rows).
constexpr int kGroupF64 = 4;

inline int64_t panels(int64_t V) { return (V + kLanes - 1) / kLanes; }
// Panels start 64 bytes past a multiple of K L doubles: at K = 128 a bare panel is 4 KiB (AVX2),
// and panels a multiple of 4 KiB apart share L1 sets and alias in store-to-load forwarding.
inline int64_t panel_stride(int64_t K) { return K * kLanes + 8; }
inline size_t panel_index(int64_t K, int64_t k, int64_t v) {
  return static_cast<size_t>((v / kLanes) * panel_stride(K) + k * kLanes + v % kLanes);
}

// f64: the write S + bk r is one fma; both reductions are blocked compensated sums (FABsum:
// P. Blanchard, N. J. Higham, T. Mary, "A class of fast and accurate summation algorithms", SIAM J.
// Sci. Comput. 42(3), 2020): per lane, the products of kF64Block consecutive rows are summed by an
// fma chain from zero, and each block sum is added to the lane's (sum, err) pair by TwoSum, the
// errors summed in err; the result is sum + err. Error bound, u = 2^-53, n = K terms x_k y_k:
//   |res - x^T y| <= u |x^T y| + (kF64Block u + O(n u^2)) sum |x_k y_k|,
// independent of n to first order, where plain recursive summation has n u. That is the size of
// the error the state carries anyway (every element is rounded at each decay and write, u |S_kv|),
// so a twice-working-precision dot product (Dot2) would only add cost: its extra digits are below
// the state's own rounding. Measured against dd at T = 4096 (kimi_linear, long_memory,
// collinear_keys, unnormalized_keys, zero_gate, neg_eigval, nonsymmetric_h0): the f64 tier's o and
// ht agree with dd to 47.6 ... 52.9 bits with Dot2 and with FABsum alike (at most 0.75 bits apart,
// block 32). Blocks: rows [0, B), [B, 2B), ... (the last one shorter).
constexpr int kF64Block = 32;

// One token over G panels at sp (panel_stride apart): write-and-read with bk, r, q into out, and/or
// decay-and-project with a, kn into acc (r, out, acc: G L lanes).
template <bool kWrite, bool kNext, int G>
inline void f64_panels(double* __restrict sp, int64_t K, const double* __restrict bk, const double* __restrict r,
                       const double* __restrict q, double* __restrict out, const double* __restrict a,
                       const double* __restrict kn, double* __restrict acc) {
  const int64_t stride = panel_stride(K);
  VD rv[G], os[G], oe[G], ps[G], pe[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    rv[g] = kWrite ? VD::load(r + g * kLanes) : VD::zero();
    os[g] = oe[g] = ps[g] = pe[g] = VD::zero();
  }
  auto block = [&](int64_t k0, int64_t n) {
    VD ob[G], pb[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) ob[g] = pb[g] = VD::zero();
#pragma GCC unroll 8
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = k0 + i;
      const VD vb = kWrite ? VD::set1(bk[k]) : VD::zero(), vq = kWrite ? VD::set1(q[k]) : VD::zero();
      const VD va = kNext ? VD::set1(a[k]) : VD::zero(), vk = kNext ? VD::set1(kn[k]) : VD::zero();
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        double* e = sp + g * stride + k * kLanes;
        VD x = VD::load(e);
        if constexpr (kWrite) {
          x = fma(vb, rv[g], x);
          ob[g] = fma(x, vq, ob[g]);
        }
        if constexpr (kNext) {
          x = x * va;
          pb[g] = fma(x, vk, pb[g]);
        }
        x.store(e);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      VD t, err;
      if constexpr (kWrite) {
        simd::two_sum(os[g], ob[g], t, err);
        os[g] = t;
        oe[g] = oe[g] + err;
      }
      if constexpr (kNext) {
        simd::two_sum(ps[g], pb[g], t, err);
        ps[g] = t;
        pe[g] = pe[g] + err;
      }
    }
  };
  int64_t k0 = 0;
  for (; k0 + kF64Block <= K; k0 += kF64Block) block(k0, kF64Block);
  if (k0 < K) block(k0, K - k0);
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    if constexpr (kWrite) (os[g] + oe[g]).store(out + g * kLanes);
    if constexpr (kNext) (ps[g] + pe[g]).store(acc + g * kLanes);
  }
}

// A token block over the G panels at sp (columns c0 .. c0 + G L): r = v - acc per token, then
// write-and-read, and the next token's decay-and-project where there is one.
template <int G>
DG_KERNEL void f64_block(double* __restrict sp, int64_t K, const TokenBlock<double>& b, int64_t c0) {
  constexpr int W = G * kLanes;
  alignas(64) double r[W], acc[W];
  for (int l = 0; l < W; ++l) acc[l] = b.acc[c0 + l];
  for (int64_t i = 0; i < b.n; ++i) {
    const Token<double>& t = b.tok[i];
    for (int l = 0; l < W; ++l) r[l] = t.v[static_cast<size_t>(c0 + l)] - acc[l];
    double* out = b.o + i * b.Vpad + c0;
    if (i + 1 < b.n || b.has_next) {
      const Token<double>& u = b.tok[i + 1];
      f64_panels<true, true, G>(sp, K, t.bk.data(), r, t.q.data(), out, u.alpha.data(), u.kk.data(), acc);
    } else {
      f64_panels<true, false, G>(sp, K, t.bk.data(), r, t.q.data(), out, nullptr, nullptr, nullptr);
    }
  }
  for (int l = 0; l < W; ++l) b.acc[c0 + l] = acc[l];
}

class F64State {
 public:
  F64State(int64_t K, int64_t V) : K_(K), V_(V), P_(panels(V)), s_(static_cast<size_t>(P_ * panel_stride(K)), 0.0) {}
  void set(int64_t k, int64_t v, double x) { s_[panel_index(K_, k, v)] = x; }
  double get(int64_t k, int64_t v) const { return s_[panel_index(K_, k, v)]; }

  // acc: Vpad >= P L elements (the padding receives zeros).
  void decay_project(const double* alpha, const double* kk, double* acc) {
    for (int64_t pn = 0; pn < P_; ++pn)
      f64_panels<false, true, 1>(panel(pn), K_, nullptr, nullptr, nullptr, nullptr, alpha, kk, acc + pn * kLanes);
  }
  void run_block(const TokenBlock<double>& b) {
    int64_t pn = 0;
    for (; pn + kGroupF64 <= P_; pn += kGroupF64) f64_block<kGroupF64>(panel(pn), K_, b, pn * kLanes);
    for (; pn < P_; ++pn) f64_block<1>(panel(pn), K_, b, pn * kLanes);
  }

 private:
  double* panel(int64_t pn) { return s_.data() + pn * panel_stride(K_); }
  int64_t K_, V_, P_;
  AlignedVec s_;
};

// dd lane accumulator on vectors: (h, l) += x * b, the operations of dd_accumulate.
inline void dd_accumulate(VD& h, VD& l, VD xh, VD xl, VD bh, VD bl) {
  const VD ph = xh * bh;
  const VD pl = fms(xh, bh, ph) + fma(xl, bh, xh * bl);
  VD s, e;
  simd::two_sum(h, ph, s, e);
  h = s;
  l = l + (e + pl);
}

// dd: the state as two panel arrays (hi, lo), normalized after every update. Per element:
//   decay  S = S * a (DWTimesDW3);
//   write  S = S + bk r: p = bk r as TwoProd of the high parts plus the cross terms (unnormalized),
//          TwoSum of the high parts, low parts added, TwoSum to normalize; its error is below
//          3u^2 (|S| + |bk r|) (u = 2^-53), the componentwise bound of an accumulation at 2^-106;
// and each reduction keeps a (hi, lo) pair per lane (dd_accumulate), normalized by one TwoSum at
// the end. Rows in increasing order.
// One token over the panel at (xh, xl). With both halves, row k's write-and-read is issued beside row
// k - 1's decay-and-project (a software pipeline of two stages): the two dependency chains are
// independent, and each element still sees write, read, decay, project in that order.
template <bool kWrite, bool kNext>
inline void dd_panel(double* __restrict xh, double* __restrict xl, int64_t K, const DD* __restrict bk,
                     const double* __restrict rh, const double* __restrict rl, const DD* __restrict q,
                     double* __restrict oh, double* __restrict ol, const DD* __restrict a,
                     const DD* __restrict kn, double* __restrict ah, double* __restrict al) {
  const VD rvh = kWrite ? VD::load(rh) : VD::zero(), rvl = kWrite ? VD::load(rl) : VD::zero();
  VD o1 = VD::zero(), o2 = VD::zero(), p1 = VD::zero(), p2 = VD::zero();
  // S = S + bk r, then (o1, o2) += S q[k]
  auto write_read = [&](int64_t k, VD& h, VD& l) {
    const VD bh = VD::set1(bk[k].hi), bl = VD::set1(bk[k].lo);
    const VD ph = bh * rvh;
    const VD pl = fms(bh, rvh, ph) + fma(bl, rvh, bh * rvl);
    VD s, e;
    simd::two_sum(h, ph, s, e);
    simd::two_sum(s, e + (l + pl), h, l);
    dd_accumulate(o1, o2, h, l, VD::set1(q[k].hi), VD::set1(q[k].lo));
  };
  // S = S a[k] (DWTimesDW3: TwoProd of the high parts, cross terms by fma, FastTwoSum), then
  // (p1, p2) += S kn[k]
  auto decay_project = [&](int64_t k, VD& h, VD& l) {
    const VD yh = VD::set1(a[k].hi), yl = VD::set1(a[k].lo);
    const VD ch = h * yh;
    const VD cl = fms(h, yh, ch);
    const VD cl3 = cl + fma(l, yh, fma(h, yl, l * yl));
    h = ch + cl3;
    l = cl3 - (h - ch);
    dd_accumulate(p1, p2, h, l, VD::set1(kn[k].hi), VD::set1(kn[k].lo));
  };
  if constexpr (kWrite && kNext) {
    VD wh = VD::load(xh), wl = VD::load(xl);   // row k - 1, written and read, awaiting its decay
    write_read(0, wh, wl);
    for (int64_t k = 1; k < K; ++k) {
      VD h = VD::load(xh + k * kLanes), l = VD::load(xl + k * kLanes);
      write_read(k, h, l);
      decay_project(k - 1, wh, wl);
      wh.store(xh + (k - 1) * kLanes);
      wl.store(xl + (k - 1) * kLanes);
      wh = h;
      wl = l;
    }
    decay_project(K - 1, wh, wl);
    wh.store(xh + (K - 1) * kLanes);
    wl.store(xl + (K - 1) * kLanes);
  } else {
    for (int64_t k = 0; k < K; ++k) {
      VD h = VD::load(xh + k * kLanes), l = VD::load(xl + k * kLanes);
      if constexpr (kWrite) write_read(k, h, l);
      if constexpr (kNext) decay_project(k, h, l);
      h.store(xh + k * kLanes);
      l.store(xl + k * kLanes);
    }
  }
  VD s, e;
  if constexpr (kWrite) {
    simd::two_sum(o1, o2, s, e);
    s.store(oh);
    e.store(ol);
  }
  if constexpr (kNext) {
    simd::two_sum(p1, p2, s, e);
    s.store(ah);
    e.store(al);
  }
}

// A token block over the panel at (xh, xl) (columns c0 .. c0 + L): r = v - acc per token, then
// write-and-read, and the next token's decay-and-project where there is one.
DG_KERNEL void dd_block(double* __restrict xh, double* __restrict xl, int64_t K, const TokenBlock<DD>& b, int64_t c0) {
  alignas(64) double rh[kLanes], rl[kLanes], oh[kLanes], ol[kLanes], ah[kLanes], al[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    ah[l] = b.acc[c0 + l].hi;
    al[l] = b.acc[c0 + l].lo;
  }
  for (int64_t i = 0; i < b.n; ++i) {
    const Token<DD>& t = b.tok[i];
    for (int l = 0; l < kLanes; ++l) {   // r = v - acc in dd (v a double), as the generic loop does
      const DD r = t.v[static_cast<size_t>(c0 + l)] - DD(ah[l], al[l]);
      rh[l] = r.hi;
      rl[l] = r.lo;
    }
    if (i + 1 < b.n || b.has_next) {
      const Token<DD>& u = b.tok[i + 1];
      dd_panel<true, true>(xh, xl, K, t.bk.data(), rh, rl, t.q.data(), oh, ol, u.alpha.data(), u.kk.data(), ah, al);
    } else {
      dd_panel<true, false>(xh, xl, K, t.bk.data(), rh, rl, t.q.data(), oh, ol, nullptr, nullptr, nullptr, nullptr);
    }
    DD* out = b.o + i * b.Vpad + c0;
    for (int l = 0; l < kLanes; ++l) out[l] = DD(oh[l], ol[l]);
  }
  for (int l = 0; l < kLanes; ++l) b.acc[c0 + l] = DD(ah[l], al[l]);
}

class DDState {
 public:
  DDState(int64_t K, int64_t V)
      : K_(K), V_(V), P_(panels(V)), hi_(static_cast<size_t>(P_ * panel_stride(K)), 0.0), lo_(hi_.size(), 0.0) {}
  void set(int64_t k, int64_t v, double x) {
    hi_[panel_index(K_, k, v)] = x;
    lo_[panel_index(K_, k, v)] = 0.0;
  }
  DD get(int64_t k, int64_t v) const { return {hi_[panel_index(K_, k, v)], lo_[panel_index(K_, k, v)]}; }

  void decay_project(const DD* alpha, const DD* kk, DD* acc) {
    alignas(64) double ah[kLanes], al[kLanes];
    for (int64_t pn = 0; pn < P_; ++pn) {
      dd_panel<false, true>(hi(pn), lo(pn), K_, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, alpha, kk, ah,
                            al);
      for (int l = 0; l < kLanes; ++l) acc[pn * kLanes + l] = DD(ah[l], al[l]);
    }
  }
  void run_block(const TokenBlock<DD>& b) {
    for (int64_t pn = 0; pn < P_; ++pn) dd_block(hi(pn), lo(pn), K_, b, pn * kLanes);
  }

 private:
  double* hi(int64_t pn) { return hi_.data() + pn * panel_stride(K_); }
  double* lo(int64_t pn) { return lo_.data() + pn * panel_stride(K_); }
  int64_t K_, V_, P_;
  AlignedVec hi_, lo_;
};

// --- the driver ---------------------------------------------------------------------------------
struct Ctx {
  const KdaParams& p;
  const KdaReferenceOptions& opt;
  const Tensor* q;
  const Tensor* k;
  const Tensor* v;
  const Tensor* g;
  const Tensor* beta;
  const Tensor* A_log;    // null when absent or unused
  const Tensor* dt_bias;  // null when absent
  const Tensor* h0;       // null without an initial state
  KdaReferenceResult* out;
};

[[noreturn]] void bad_value(const char* name, const Tensor& t, int64_t index, double x) {
  throw InputError(std::string("kda reference: input '") + name + "' has a non-finite value (" +
                   (std::isnan(x) ? "nan" : "inf") + ") at element " + std::to_string(index) + " of shape " +
                   t.shape_str());
}

// Reads elements [offset, offset + buf.size()) of t and rejects NaN/Inf.
void read_finite(const Tensor& t, const char* name, int64_t offset, std::span<double> buf) {
  t.read(offset, buf);
  // Exponent field all ones = Inf or NaN; an OR over the row (vectorizes), then the search.
  constexpr uint64_t kExp = 0x7ff0000000000000ull;
  uint64_t bad = 0;
  for (double x : buf) bad |= (std::bit_cast<uint64_t>(x) & kExp) == kExp;
  if (bad == 0) return;
  for (size_t i = 0; i < buf.size(); ++i) {
    if (!std::isfinite(buf[i])) bad_value(name, t, offset + static_cast<int64_t>(i), buf[i]);
  }
}

template <class Real, class State>
void run_head(const Ctx& c, int64_t n, int64_t hv) {
  const KdaParams& p = c.p;
  const int64_t K = p.K, V = p.V, H = p.H, HV = p.HV, h = hv / p.group();
  State st(K, V);
  std::vector<double> buf(static_cast<size_t>(std::max(K, V)));
  if (c.h0 != nullptr) {
    const int64_t base = (n * HV + hv) * K * V;
    if (!p.state_v_first) {
      for (int64_t k = 0; k < K; ++k) {
        read_finite(*c.h0, "h0", base + k * V, std::span<double>(buf.data(), static_cast<size_t>(V)));
        for (int64_t v = 0; v < V; ++v) st.set(k, v, buf[static_cast<size_t>(v)]);
      }
    } else {
      for (int64_t v = 0; v < V; ++v) {
        read_finite(*c.h0, "h0", base + v * K, std::span<double>(buf.data(), static_cast<size_t>(K)));
        for (int64_t k = 0; k < K; ++k) st.set(k, v, buf[static_cast<size_t>(k)]);
      }
    }
  }
  // Per-head gate constants: exp(A_log[hv]) and dt_bias[hv*K:].
  Real ea(1.0);
  std::vector<double> dtb(static_cast<size_t>(K), 0.0);
  if (p.gate != KdaGate::pregated) {
    if (c.A_log != nullptr) {
      double a = 0.0;
      read_finite(*c.A_log, "A_log", hv, std::span<double>(&a, 1));
      ea = r_exp(Real(a));
    }
    if (c.dt_bias != nullptr) read_finite(*c.dt_bias, "dt_bias", hv * K, dtb);
  }

  const int64_t begin = p.seq_begin(n), len = p.seq_end(n) - begin;
  const int64_t count = c.opt.max_tokens >= 0 ? std::min(len, c.opt.max_tokens) : len;
  const double scale = p.scale_value();
  const auto Ks = static_cast<size_t>(K), Vs = static_cast<size_t>(V);
  const int64_t Vpad = (V + 7) / 8 * 8;   // whole panels of any vector width up to 8 doubles
  std::vector<double> qd(Ks), kd(Ks), gd(Ks);
  auto prepare = [&](int64_t tok, Token<Real>& x) {
    x.q.resize(Ks);
    x.kk.resize(Ks);
    x.alpha.resize(Ks);
    x.bk.resize(Ks);
    x.v.resize(static_cast<size_t>(Vpad), 0.0);   // the padding stays zero
    read_finite(*c.q, "q", (tok * H + h) * K, qd);
    read_finite(*c.k, "k", (tok * H + h) * K, kd);
    read_finite(*c.v, "v", (tok * HV + hv) * V, std::span<double>(x.v.data(), Vs));
    read_finite(*c.g, "g", (tok * HV + hv) * K, gd);
    double bd = 0.0;
    read_finite(*c.beta, "beta", tok * HV + hv, std::span<double>(&bd, 1));
    for (size_t i = 0; i < Ks; ++i) {
      x.q[i] = Real(qd[i]);
      x.kk[i] = Real(kd[i]);
    }
    if (p.qk_l2norm) {
      l2norm(x.q.data(), K);
      l2norm(x.kk.data(), K);
    }
    for (size_t i = 0; i < Ks; ++i) x.q[i] *= scale;
    // gate, then alpha = exp(g)
    const GateArgs ga{p.gate, p.use_A_log, p.lower_bound};
    if (c.opt.generic_kernels) gate_generic(ga, gd.data(), dtb.data(), ea, x.alpha.data(), K);
    else gate_all(ga, gd.data(), dtb.data(), ea, x.alpha.data(), K);
    exp_all(x.alpha.data(), K);
    Real beta(bd);
    if (p.beta == KdaBeta::sigmoid) beta = sigmoid(beta);
    if (p.beta == KdaBeta::sigmoid2) beta = 2.0 * sigmoid(beta);
    for (size_t i = 0; i < Ks; ++i) x.bk[i] = beta * x.kk[i];
  };

  // Blocks of kTokenBlock tokens; tok[0] is the block's first token, already decayed and projected
  // (acc), and tok[n] the next block's first, prepared ahead for the last token's fused sweep.
  constexpr int64_t kTokenBlock = 32;
  std::vector<Token<Real>> tok(static_cast<size_t>(kTokenBlock + 1));
  std::vector<Real> acc(static_cast<size_t>(Vpad), Real(0.0)), o(static_cast<size_t>(kTokenBlock * Vpad), Real(0.0));
  const int64_t stop = begin + count;
  if (count > 0) {
    prepare(begin, tok[0]);
    st.decay_project(tok[0].alpha.data(), tok[0].kk.data(), acc.data());
  }
  KdaReferenceResult& out = *c.out;
  for (int64_t b0 = begin; b0 < stop;) {
    const int64_t n = std::min(kTokenBlock, stop - b0);
    const bool has_next = b0 + n < stop;
    for (int64_t i = 1; i < n + (has_next ? 1 : 0); ++i) prepare(b0 + i, tok[static_cast<size_t>(i)]);
    st.run_block(TokenBlock<Real>{tok.data(), n, has_next, acc.data(), o.data(), Vpad});
    for (int64_t i = 0; i < n; ++i) {
      const auto base = static_cast<size_t>(((b0 + i) * HV + hv) * V);
      const Real* oi = o.data() + i * Vpad;
      for (size_t j = 0; j < Vs; ++j) {
        double x0 = to_odd(oi[j]);
        out.o[base + j] = x0;
        if (c.opt.tails) tail_of(oi[j], x0, &out.o_tail[2 * (base + j)]);
      }
    }
    if (has_next) std::swap(tok[0], tok[static_cast<size_t>(n)]);
    b0 += n;
  }
  if (count < len && !c.opt.state_after_prefix) return;  // ht stays NaN
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t v = 0; v < V; ++v) {
      const int64_t idx = p.state_v_first ? ((n * HV + hv) * V + v) * K + k : ((n * HV + hv) * K + k) * V + v;
      const Real x = st.get(k, v);
      double x0 = to_odd(x);
      out.ht[static_cast<size_t>(idx)] = x0;
      if (c.opt.tails) tail_of(x, x0, &out.ht_tail[2 * static_cast<size_t>(idx)]);
    }
  }
}

// Runs every (sequence, value head) pair of `work` on `threads` workers (MPFR caches freed per
// worker); the first exception is rethrown after all workers stop.
template <class Real, class State>
void run_all(const Ctx& c, const std::vector<std::pair<int64_t, int64_t>>& work, int threads) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mu;
  auto worker = [&] {
    for (;;) {
      if (failed.load()) return;
      size_t i = next.fetch_add(1);
      if (i >= work.size()) return;
      try {
        run_head<Real, State>(c, work[i].first, work[i].second);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        failed.store(true);
        return;
      }
    }
  };
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.push_back(mpfr_thread(worker));
    for (std::thread& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);
}

const Tensor* find(const TensorMap& in, const char* name, bool required) {
  auto it = in.find(name);
  if (it == in.end()) {
    if (required) throw InputError(std::string("kda reference: missing input tensor '") + name + "'");
    return nullptr;
  }
  return &it->second;
}

void expect_numel(const Tensor* t, const char* name, int64_t numel, const std::string& expected) {
  if (t != nullptr && t->numel() != numel) {
    throw InputError(std::string("kda reference: input '") + name + "' has shape " + t->shape_str() +
                     ", expected " + expected);
  }
}

std::string shape(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) {
    if (s.size() > 1) s.push_back(',');
    s.append(std::to_string(d));
  }
  s.push_back(']');
  return s;
}

}  // namespace

KdaReferenceResult kda_reference(Tier tier, const KdaParams& p, const TensorMap& in,
                                 const KdaReferenceOptions& opt) {
  if (p.H < 1 || p.HV < 1 || p.HV % p.H != 0 || p.K < 1 || p.V < 1 || p.B < 1 || p.T < 0) {
    throw InputError("kda reference: bad shape parameters (need H >= 1, HV % H == 0, K, V, B >= 1)");
  }
  const int64_t B = p.B, T = p.T, H = p.H, HV = p.HV, K = p.K, V = p.V, N = p.num_seqs();
  if (!p.cu_seqlens.empty()) {
    bool ok = B == 1 && N >= 1 && p.cu_seqlens.front() == 0 && p.cu_seqlens.back() == T;
    for (size_t i = 1; ok && i < p.cu_seqlens.size(); ++i) ok = p.cu_seqlens[i] >= p.cu_seqlens[i - 1];
    if (!ok) throw InputError("kda reference: cu_seqlens must rise from 0 to T with B == 1");
  }
  const Tensor* A_log = p.gate != KdaGate::pregated && p.use_A_log ? find(in, "A_log", true) : nullptr;
  Ctx c{p, opt, find(in, "q", true), find(in, "k", true), find(in, "v", true), find(in, "g", true),
        find(in, "beta", true), A_log, p.gate != KdaGate::pregated ? find(in, "dt_bias", false) : nullptr,
        p.has_h0 ? find(in, "h0", true) : nullptr, nullptr};
  expect_numel(c.q, "q", B * T * H * K, shape({B, T, H, K}));
  expect_numel(c.k, "k", B * T * H * K, shape({B, T, H, K}));
  expect_numel(c.v, "v", B * T * HV * V, shape({B, T, HV, V}));
  expect_numel(c.g, "g", B * T * HV * K, shape({B, T, HV, K}));
  expect_numel(c.beta, "beta", B * T * HV, shape({B, T, HV}));
  expect_numel(c.A_log, "A_log", HV, shape({HV}));
  expect_numel(c.dt_bias, "dt_bias", HV * K, shape({HV * K}));
  expect_numel(c.h0, "h0", N * HV * K * V, p.state_v_first ? shape({N, HV, V, K}) : shape({N, HV, K, V}));

  std::vector<int64_t> heads = opt.heads;
  if (heads.empty()) {
    for (int64_t hv = 0; hv < HV; ++hv) heads.push_back(hv);
  }
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  if (heads.front() < 0 || heads.back() >= HV) {
    throw InputError("kda reference: value head out of range [0, " + std::to_string(HV) + ")");
  }
  std::vector<std::pair<int64_t, int64_t>> work;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t hv : heads) work.emplace_back(n, hv);
  }

  KdaReferenceResult result;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  result.o.assign(static_cast<size_t>(B * T * HV * V), nan);
  result.ht.assign(static_cast<size_t>(N * HV * K * V), nan);
  if (opt.tails) {
    result.o_tail.assign(2 * result.o.size(), 0.0);
    result.ht_tail.assign(2 * result.ht.size(), 0.0);
  }
  c.out = &result;

  int threads = opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), work.size()));
  const bool generic = opt.generic_kernels;
  if (opt.plain_f32) {
    run_all<float, GenericState<float>>(c, work, threads);
    return result;
  }
  switch (tier) {
    case Tier::f64:
      if (generic) run_all<double, GenericState<double>>(c, work, threads);
      else run_all<double, F64State>(c, work, threads);
      break;
    case Tier::dd:
      if (generic) run_all<DD, GenericState<DD>>(c, work, threads);
      else run_all<DD, DDState>(c, work, threads);
      break;
    case Tier::mpfr127: run_all<Mpfr<127>, GenericState<Mpfr<127>>>(c, work, threads); break;
    case Tier::mpfr256: run_all<Mpfr<256>, GenericState<Mpfr<256>>>(c, work, threads); break;
    case Tier::f128: run_all<F128, GenericState<F128>>(c, work, threads); break;
  }
  return result;
}

}  // namespace dg
