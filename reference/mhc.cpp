// mhc, written once over Real (mhc.h has the definition and the order of every sum).
#include "reference/mhc.h"

#include <type_traits>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/f64.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

constexpr int64_t n = kMhcStreams;

// sum_i a_i b_i for i in [0, len), increasing i; the f64 tier by Dot2 (reference/real/f64.h), as if
// in twice the precision.
template <class Real> Real dot(const double* a, const double* b, int64_t len) {
  if constexpr (std::is_same_v<Real, double>) {
    Dot2 acc;
    for (int64_t i = 0; i < len; ++i) acc.add(a[i], b[i]);
    return acc.value();
  } else {
    Real acc(0.0);
    for (int64_t i = 0; i < len; ++i) acc += Real(a[i]) * b[i];
    return acc;
  }
}

// The site's maps of one token: pre [4], post [4] and C [4x4] (row j, column k at 4j + k).
template <class Real> struct Maps {
  Real pre[n], post[n], C[n * n];
};

// C[j,k] = softmax_k(L[j,k]) + eps, row by row, the row's max subtracted.
template <class Real> void softmax_rows(const Real* L, Real* C) {
  for (int64_t j = 0; j < n; ++j) {
    Real m = L[j * n];
    for (int64_t k = 1; k < n; ++k)
      if (L[j * n + k] > m) m = L[j * n + k];
    Real s(0.0);
    for (int64_t k = 0; k < n; ++k) {
      C[j * n + k] = r_exp(L[j * n + k] - m);
      s += C[j * n + k];
    }
    for (int64_t k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / s + kMhcEps;
  }
}

// Divides each row (rows) or column (!rows) of C by its sum + eps.
template <class Real> void normalize(Real* C, bool rows) {
  for (int64_t a = 0; a < n; ++a) {
    Real s(0.0);
    for (int64_t b = 0; b < n; ++b) s += C[rows ? a * n + b : b * n + a];
    const Real d = s + kMhcEps;
    for (int64_t b = 0; b < n; ++b) {
      Real& c = C[rows ? a * n + b : b * n + a];
      c = c / d;
    }
  }
}

template <class Real>
Maps<Real> maps(const MhcParams& p, const double* x, const std::vector<double>& phi, const std::vector<double>& s,
                const std::vector<double>& b) {
  const int64_t D = n * p.H;
  const Real ss = dot<Real>(x, x, D);
  const Real r = 1.0 / r_sqrt(ss / static_cast<double>(D) + kMhcNormEps);
  Real a[kMhcMaps];
  for (int64_t m = 0; m < kMhcMaps; ++m) a[m] = dot<Real>(phi.data() + m * D, x, D) * r;
  Maps<Real> out;
  for (int64_t j = 0; j < n; ++j) {
    out.pre[j] = r_sigmoid(Real(a[j] * s[0] + b[static_cast<size_t>(j)])) + kMhcEps;
    out.post[j] = 2.0 * r_sigmoid(Real(a[n + j] * s[1] + b[static_cast<size_t>(n + j)]));
  }
  Real L[n * n];
  for (int64_t i = 0; i < n * n; ++i) L[i] = a[2 * n + i] * s[2] + b[static_cast<size_t>(2 * n + i)];
  softmax_rows(L, out.C);
  normalize(out.C, false);
  for (int64_t it = 1; it < p.iters; ++it) {
    normalize(out.C, true);
    normalize(out.C, false);
  }
  return out;
}

// sum_i c_i v_i over the len terms of a new stream (the casts of post and C times Fo and the
// streams: exact doubles), in index order; the f64 tier by Dot2.
template <class Real> Real mix(const double* c, const double* v, int64_t len) { return dot<Real>(c, v, len); }

struct Inputs {
  std::vector<double> x, fo, phi, s, b;
};

template <class Real> MhcReferenceResult run(const MhcParams& p, const Inputs& in, bool tails) {
  const int64_t T = p.T, H = p.H;
  MhcReferenceResult r;
  r.x_in.resize(static_cast<size_t>(T * H));
  r.x_out.resize(static_cast<size_t>(T * n * H));
  r.C.resize(static_cast<size_t>(T * n * n));
  if (tails) {
    r.x_in_tail.assign(2 * r.x_in.size(), 0.0);
    r.x_out_tail.assign(2 * r.x_out.size(), 0.0);
    r.C_tail.assign(2 * r.C.size(), 0.0);
  }
  for (int64_t t = 0; t < T; ++t) {
    const double* xt = in.x.data() + t * n * H;
    const Maps<Real> m = maps<Real>(p, xt, in.phi, in.s, in.b);
    for (int64_t i = 0; i < n * n; ++i) put_odd(m.C[i], r.C, tails ? &r.C_tail : nullptr, static_cast<size_t>(t * n * n + i));
    // The casts of post and C to the streams' dtype (one RNE from the tier's value rounded to odd:
    // exact doubles); pre stays in the tier for x_in.
    double post_b[n], C_b[n * n];
    for (int64_t k = 0; k < n; ++k) post_b[k] = round_to(p.dtype, to_odd(m.post[k]));
    for (int64_t i = 0; i < n * n; ++i) C_b[i] = round_to(p.dtype, to_odd(m.C[i]));
    for (int64_t h = 0; h < H; ++h) {
      Real xin(0.0);
      for (int64_t j = 0; j < n; ++j) xin += m.pre[j] * xt[j * H + h];
      put_odd(xin, r.x_in, tails ? &r.x_in_tail : nullptr, static_cast<size_t>(t * H + h));
      for (int64_t k = 0; k < n; ++k) {
        double c[n + 1], v[n + 1];
        c[0] = post_b[k];
        v[0] = in.fo[static_cast<size_t>(t * H + h)];
        for (int64_t j = 0; j < n; ++j) {
          c[j + 1] = C_b[j * n + k];   // C[j,k]: the transpose
          v[j + 1] = xt[j * H + h];
        }
        put_odd(mix<Real>(c, v, n + 1), r.x_out, tails ? &r.x_out_tail : nullptr, static_cast<size_t>((t * n + k) * H + h));
      }
    }
  }
  return r;
}

}  // namespace

MhcReferenceResult mhc_reference(Tier tier, const MhcParams& p, const Tensor& x, const Tensor& f_out, const Tensor& phi,
                                 const Tensor& scale, const Tensor& bias, bool tails) {
  if (p.T < 0 || p.H < 1 || p.iters < 1)
    throw InputError(fmt::format("mhc reference: bad parameters (T {}, H {}, iters {}): T >= 0, H >= 1, iters >= 1 required",
                                 p.T, p.H, p.iters));
  expect_numel(x, "x", p.T * n * p.H, "[T,4,H]");
  expect_numel(f_out, "f_out", p.T * p.H, "[T,H]");
  expect_numel(phi, "phi", kMhcMaps * n * p.H, "[24,4H]");
  expect_numel(scale, "scale", 3, "[3]");
  expect_numel(bias, "bias", kMhcMaps, "[24]");
  const Inputs in{read_finite(x, "x"), read_finite(f_out, "f_out"), read_finite(phi, "phi"), read_finite(scale, "scale"),
                  read_finite(bias, "bias")};
  return with_tier(tier, [&](auto real) { return run<decltype(real)>(p, in, tails); });
}

}  // namespace dg
