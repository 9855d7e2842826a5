// KDA reference: the recurrence of kda.h written once over Real, the state kernels (generic, and
// vectorized ones for f64 and dd with the same operation order), and the driver: inputs streamed
// token by token, worker threads over (sequence, value head) pairs.
#include "reference/kda.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "harness/case.h"
#include "harness/dtype.h"
#include "reference/real/dd.h"
#include "reference/real/f128.h"
#include "reference/real/f64.h"
#include "reference/real/mpfr_real.h"

namespace dg {
namespace {

// --- the tier scalars' functions under one name ---------------------------------------------------
inline double r_sqrt(double x) { return std::sqrt(x); }
inline double r_exp(double x) { return std::exp(x); }
inline double r_log1p(double x) { return std::log1p(x); }
inline DD r_sqrt(const DD& x) { return sqrt(x); }
inline DD r_exp(const DD& x) { return exp(x); }
inline DD r_log1p(const DD& x) { return log1p(x); }
inline F128 r_sqrt(F128 x) { return f128_sqrt(x); }
inline F128 r_exp(F128 x) { return f128_exp(x); }
inline F128 r_log1p(F128 x) { return f128_log1p(x); }
template <int B> Mpfr<B> r_sqrt(const Mpfr<B>& x) { return sqrt(x); }
template <int B> Mpfr<B> r_exp(const Mpfr<B>& x) { return exp(x); }
template <int B> Mpfr<B> r_log1p(const Mpfr<B>& x) { return log1p(x); }

// Output: round to odd into double, and the two-double tail (x - x0) to the tier's full precision.
inline double to_odd(double x) { return x; }
inline double to_odd(const DD& x) { return round_to_odd(x); }
inline double to_odd(F128 x) { return f128_to_double_odd(x); }
template <int B> double to_odd(const Mpfr<B>& x) { return to_double_odd(x); }
inline void tail_of(double, double, double* t) { t[0] = t[1] = 0.0; }
inline void tail_of(const DD& x, double x0, double* t) {
  if (!std::isfinite(x.hi) || !std::isfinite(x0)) {
    t[0] = t[1] = 0.0;
    return;
  }
  DD d = two_sum(x.hi - x0, x.lo);  // x0 is hi or a neighbour of it: hi - x0 is exact
  t[0] = d.hi;
  t[1] = d.lo;
}
inline void tail_of(F128 x, double x0, double* t) { f128_tail(x, x0, t[0], t[1]); }
template <int B> void tail_of(const Mpfr<B>& x, double x0, double* t) { tail_parts(x, x0, t[0], t[1]); }

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

// sum_i x_i^2 in index order: Dot2 in the f64 tier, dd_accumulate lanes in the dd tier, the tier's
// arithmetic otherwise.
inline double sum_squares(const double* x, int64_t n) {
  Dot2 acc;
  for (int64_t i = 0; i < n; ++i) acc.add(x[i], x[i]);
  return acc.value();
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

// --- the state S (K x V, row k contiguous) and its two passes per token -----------------------------
// Generic: plain loops in the documented order, each operation rounded in Real.
template <class Real> class GenericState {
 public:
  GenericState(int64_t K, int64_t V) : K_(K), V_(V), s_(static_cast<size_t>(K * V), Real(0.0)) {}
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

 private:
  int64_t K_, V_;
  std::vector<Real> s_;
};

// The vectorized kernels: vectorized over v, each sweep over v handling R consecutive state rows so
// a lane's accumulators are loaded and stored once per R rows. Within a lane the operations and
// their order are those of the generic loops (row k before row k + 1).

// f64, pass 1: S[k,:] *= a[k]; (sum, err)[:] += S[k,:] * b[k] by Dot2, for the R rows at s.
template <int R>
DG_KERNEL void f64_pass1(double* __restrict s, int64_t V, const double* __restrict a, const double* __restrict b,
                         double* __restrict sum, double* __restrict err) {
  for (int64_t v = 0; v < V; ++v) {
    double sv = sum[v], ev = err[v];
    for (int i = 0; i < R; ++i) {
      double x = s[i * V + v] * a[i];
      s[i * V + v] = x;
      dot2_step(sv, ev, x, b[i]);
    }
    sum[v] = sv;
    err[v] = ev;
  }
}
// f64, pass 2: S[k,:] = fma(bk[k], r[:], S[k,:]); (sum, err)[:] += S[k,:] * q[k] by Dot2.
template <int R>
DG_KERNEL void f64_pass2(double* __restrict s, int64_t V, const double* __restrict bk, const double* __restrict q,
                         const double* __restrict r, double* __restrict sum, double* __restrict err) {
  for (int64_t v = 0; v < V; ++v) {
    double sv = sum[v], ev = err[v];
    const double rv = r[v];
    for (int i = 0; i < R; ++i) {
      double x = std::fma(bk[i], rv, s[i * V + v]);
      s[i * V + v] = x;
      dot2_step(sv, ev, x, q[i]);
    }
    sum[v] = sv;
    err[v] = ev;
  }
}

// dd, pass 1: S[k,:] = S[k,:] * a[k] (DWTimesDW); (sh, sl)[:] += S[k,:] * b[k].
template <int R>
DG_KERNEL void dd_pass1(double* __restrict xh, double* __restrict xl, int64_t V, const DD* __restrict a,
                        const DD* __restrict b, double* __restrict sh, double* __restrict sl) {
  for (int64_t v = 0; v < V; ++v) {
    double h = sh[v], l = sl[v];
    for (int i = 0; i < R; ++i) {
      DD x = dw_times_dw(DD(xh[i * V + v], xl[i * V + v]), a[i]);
      xh[i * V + v] = x.hi;
      xl[i * V + v] = x.lo;
      dd_accumulate(h, l, x, b[i]);
    }
    sh[v] = h;
    sl[v] = l;
  }
}
// dd, pass 2: S[k,:] = S[k,:] + bk[k] * r[:]; (sh, sl)[:] += S[k,:] * q[k]. The write's error is
// below 3u^2 (|S| + |bk r|) (u = 2^-53): the componentwise bound of an accumulation at 2^-106.
template <int R>
DG_KERNEL void dd_pass2(double* __restrict xh, double* __restrict xl, int64_t V, const DD* __restrict bk,
                        const DD* __restrict q, const double* __restrict rh, const double* __restrict rl,
                        double* __restrict sh, double* __restrict sl) {
  for (int64_t v = 0; v < V; ++v) {
    double h = sh[v], l = sl[v];
    const DD rv(rh[v], rl[v]);
    for (int i = 0; i < R; ++i) {
      // p = bk * r: TwoProd of the high parts plus the cross terms (DWTimesDW2, unnormalized)
      const double ph = bk[i].hi * rv.hi;
      const double pl = std::fma(bk[i].hi, rv.hi, -ph) + std::fma(bk[i].lo, rv.hi, bk[i].hi * rv.lo);
      // S + p: TwoSum of the high parts, low parts added, TwoSum to normalize
      const DD s = two_sum(xh[i * V + v], ph);
      const DD x = two_sum(s.hi, s.lo + (xl[i * V + v] + pl));
      xh[i * V + v] = x.hi;
      xl[i * V + v] = x.lo;
      dd_accumulate(h, l, x, q[i]);
    }
    sh[v] = h;
    sl[v] = l;
  }
}

// f64: the state update is one fma, both reductions are Dot2 per lane (TwoProd of the product,
// TwoSum into the lane's sum, errors summed in a second lane).
class F64State {
 public:
  F64State(int64_t K, int64_t V)
      : K_(K), V_(V), s_(static_cast<size_t>(K * V), 0.0), sum_(static_cast<size_t>(V)), err_(static_cast<size_t>(V)) {}
  void set(int64_t k, int64_t v, double x) { s_[static_cast<size_t>(k * V_ + v)] = x; }
  double get(int64_t k, int64_t v) const { return s_[static_cast<size_t>(k * V_ + v)]; }

  void decay_project(const double* alpha, const double* kk, double* acc) {
    std::fill(sum_.begin(), sum_.end(), 0.0);
    std::fill(err_.begin(), err_.end(), 0.0);
    int64_t k = 0;
    for (; k + kRows <= K_; k += kRows) f64_pass1<kRows>(row(k), V_, alpha + k, kk + k, sum_.data(), err_.data());
    for (; k < K_; ++k) f64_pass1<1>(row(k), V_, alpha + k, kk + k, sum_.data(), err_.data());
    for (int64_t v = 0; v < V_; ++v) acc[v] = sum_[static_cast<size_t>(v)] + err_[static_cast<size_t>(v)];
  }
  void write_read(const double* bk, const double* r, const double* q, double* out) {
    std::fill(sum_.begin(), sum_.end(), 0.0);
    std::fill(err_.begin(), err_.end(), 0.0);
    int64_t k = 0;
    for (; k + kRows <= K_; k += kRows) f64_pass2<kRows>(row(k), V_, bk + k, q + k, r, sum_.data(), err_.data());
    for (; k < K_; ++k) f64_pass2<1>(row(k), V_, bk + k, q + k, r, sum_.data(), err_.data());
    for (int64_t v = 0; v < V_; ++v) out[v] = sum_[static_cast<size_t>(v)] + err_[static_cast<size_t>(v)];
  }

 private:
  static constexpr int kRows = 4;
  double* row(int64_t k) { return s_.data() + k * V_; }
  int64_t K_, V_;
  AlignedVec s_, sum_, err_;
};

// dd: the state as structure-of-arrays (hi[], lo[]), normalized after every update: DWTimesDW for
// the decay, the product-and-TwoSum write of dd_pass2; the reductions keep a (hi, lo) pair per lane
// (dd_accumulate), normalized by one TwoSum at the end.
class DDState {
 public:
  DDState(int64_t K, int64_t V)
      : K_(K), V_(V), hi_(static_cast<size_t>(K * V), 0.0), lo_(static_cast<size_t>(K * V), 0.0),
        sh_(static_cast<size_t>(V)), sl_(static_cast<size_t>(V)), rh_(static_cast<size_t>(V)), rl_(static_cast<size_t>(V)) {}
  void set(int64_t k, int64_t v, double x) {
    hi_[static_cast<size_t>(k * V_ + v)] = x;
    lo_[static_cast<size_t>(k * V_ + v)] = 0.0;
  }
  DD get(int64_t k, int64_t v) const { return {hi_[static_cast<size_t>(k * V_ + v)], lo_[static_cast<size_t>(k * V_ + v)]}; }

  void decay_project(const DD* alpha, const DD* kk, DD* acc) {
    std::fill(sh_.begin(), sh_.end(), 0.0);
    std::fill(sl_.begin(), sl_.end(), 0.0);
    int64_t k = 0;
    for (; k + kRows <= K_; k += kRows) dd_pass1<kRows>(hi(k), lo(k), V_, alpha + k, kk + k, sh_.data(), sl_.data());
    for (; k < K_; ++k) dd_pass1<1>(hi(k), lo(k), V_, alpha + k, kk + k, sh_.data(), sl_.data());
    for (int64_t v = 0; v < V_; ++v) acc[v] = two_sum(sh_[static_cast<size_t>(v)], sl_[static_cast<size_t>(v)]);
  }
  void write_read(const DD* bk, const DD* r, const DD* q, DD* out) {
    std::fill(sh_.begin(), sh_.end(), 0.0);
    std::fill(sl_.begin(), sl_.end(), 0.0);
    for (int64_t v = 0; v < V_; ++v) {
      rh_[static_cast<size_t>(v)] = r[v].hi;
      rl_[static_cast<size_t>(v)] = r[v].lo;
    }
    int64_t k = 0;
    for (; k + kRows <= K_; k += kRows)
      dd_pass2<kRows>(hi(k), lo(k), V_, bk + k, q + k, rh_.data(), rl_.data(), sh_.data(), sl_.data());
    for (; k < K_; ++k) dd_pass2<1>(hi(k), lo(k), V_, bk + k, q + k, rh_.data(), rl_.data(), sh_.data(), sl_.data());
    for (int64_t v = 0; v < V_; ++v) out[v] = two_sum(sh_[static_cast<size_t>(v)], sl_[static_cast<size_t>(v)]);
  }

 private:
  static constexpr int kRows = 2;
  double* hi(int64_t k) { return hi_.data() + k * V_; }
  double* lo(int64_t k) { return lo_.data() + k * V_; }
  int64_t K_, V_;
  AlignedVec hi_, lo_, sh_, sl_, rh_, rl_;
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
  std::vector<double> qd(Ks), kd(Ks), vd(Vs), gd(Ks);
  std::vector<Real> q(Ks), kk(Ks), alpha(Ks), bk(Ks), acc(Vs), r(Vs), o(Vs);
  KdaReferenceResult& out = *c.out;
  for (int64_t tok = begin; tok < begin + count; ++tok) {
    read_finite(*c.q, "q", (tok * H + h) * K, qd);
    read_finite(*c.k, "k", (tok * H + h) * K, kd);
    read_finite(*c.v, "v", (tok * HV + hv) * V, vd);
    read_finite(*c.g, "g", (tok * HV + hv) * K, gd);
    double bd = 0.0;
    read_finite(*c.beta, "beta", tok * HV + hv, std::span<double>(&bd, 1));
    for (size_t i = 0; i < Ks; ++i) {
      q[i] = Real(qd[i]);
      kk[i] = Real(kd[i]);
    }
    if (p.qk_l2norm) {
      l2norm(q.data(), K);
      l2norm(kk.data(), K);
    }
    for (size_t i = 0; i < Ks; ++i) q[i] *= scale;
    // gate, then alpha = exp(g)
    for (size_t i = 0; i < Ks; ++i) {
      switch (p.gate) {
        case KdaGate::pregated: alpha[i] = Real(gd[i]); break;
        case KdaGate::softplus: alpha[i] = -(ea * softplus(Real(gd[i]) + dtb[i])); break;
        case KdaGate::lower_bound: {
          Real z = Real(gd[i]) + dtb[i];
          if (p.use_A_log) z = ea * z;
          alpha[i] = p.lower_bound * sigmoid(z);
          break;
        }
      }
    }
    exp_all(alpha.data(), K);
    Real beta(bd);
    if (p.beta == KdaBeta::sigmoid) beta = sigmoid(beta);
    if (p.beta == KdaBeta::sigmoid2) beta = 2.0 * sigmoid(beta);

    st.decay_project(alpha.data(), kk.data(), acc.data());
    for (size_t j = 0; j < Vs; ++j) r[j] = vd[j] - acc[j];
    for (size_t i = 0; i < Ks; ++i) bk[i] = beta * kk[i];
    st.write_read(bk.data(), r.data(), q.data(), o.data());

    const auto base = static_cast<size_t>((tok * HV + hv) * V);
    for (size_t j = 0; j < Vs; ++j) {
      double x0 = to_odd(o[j]);
      out.o[base + j] = x0;
      if (c.opt.tails) tail_of(o[j], x0, &out.o_tail[2 * (base + j)]);
    }
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
