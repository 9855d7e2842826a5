// causal_conv1d and rmsnorm_gated, written once over Real (layer_ops.h has the definitions).
#include "reference/layer_ops.h"

#include <cmath>
#include <span>
#include <string>

#include "harness/cases/case.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

void expect_numel(const Tensor& t, const char* name, int64_t n, const std::string& shape) {
  if (t.numel() != n)
    throw InputError(std::string("reference: input '") + name + "' has shape " + t.shape_str() + ", expected " + shape);
}

std::vector<double> read_all(const Tensor& t, const char* name) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  t.read(0, v);
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw InputError(std::string("reference: input '") + name + "' has a non-finite value at element " +
                       std::to_string(i) + " of shape " + t.shape_str());
  return v;
}

template <class Real> void put(const Real& x, std::vector<double>& out, std::vector<double>* tail, size_t i) {
  const double x0 = to_odd(x);
  out[i] = x0;
  if (tail) tail_of(x, x0, &(*tail)[2 * i]);
}

template <class Real>
ConvReferenceResult conv(const ConvParams& p, const Tensor& xt, const Tensor& wt, const Tensor* st, bool tails) {
  const int64_t B = p.B, T = p.T, D = p.D, W = p.W, S = W - 1;
  const std::vector<double> x = read_all(xt, "x"), w = read_all(wt, "weight");
  const std::vector<double> s0 = st ? read_all(*st, "state0") : std::vector<double>(static_cast<size_t>(B * D * S), 0.0);
  ConvReferenceResult r;
  r.y.resize(static_cast<size_t>(B * T * D));
  r.state.resize(static_cast<size_t>(B * D * S));
  if (tails) {
    r.y_tail.assign(2 * r.y.size(), 0.0);
    r.state_tail.assign(2 * r.state.size(), 0.0);
  }
  std::vector<double> h(static_cast<size_t>(S + T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t j = 0; j < S; ++j) h[static_cast<size_t>(j)] = s0[static_cast<size_t>((b * D + d) * S + j)];
      for (int64_t t = 0; t < T; ++t) h[static_cast<size_t>(S + t)] = x[static_cast<size_t>((b * T + t) * D + d)];
      for (int64_t t = 0; t < T; ++t) {
        Real z(0.0);
        for (int64_t k = 0; k < W; ++k) z += Real(w[static_cast<size_t>(d * W + k)]) * Real(h[static_cast<size_t>(t + k)]);
        if (p.silu) z = z * r_sigmoid(z);
        put(z, r.y, tails ? &r.y_tail : nullptr, static_cast<size_t>((b * T + t) * D + d));
      }
      for (int64_t j = 0; j < S; ++j)   // exact copies: the tails stay zero
        r.state[static_cast<size_t>((b * D + d) * S + j)] = h[static_cast<size_t>(T + j)];
    }
  return r;
}

template <class Real>
NormReferenceResult norm(const NormParams& p, const Tensor& xt, const Tensor& gt, const Tensor& wt, bool tails) {
  const int64_t N = p.N, D = p.D;
  const std::vector<double> x = read_all(xt, "x"), g = read_all(gt, "gate"), w = read_all(wt, "weight");
  NormReferenceResult r;
  r.y.resize(static_cast<size_t>(N * D));
  if (tails) r.y_tail.assign(2 * r.y.size(), 0.0);
  std::vector<Real> row(static_cast<size_t>(D));
  for (int64_t n = 0; n < N; ++n) {
    Real ss(0.0);
    for (int64_t i = 0; i < D; ++i) {
      row[static_cast<size_t>(i)] = Real(x[static_cast<size_t>(n * D + i)]);
      ss += row[static_cast<size_t>(i)] * row[static_cast<size_t>(i)];
    }
    const Real rstd = 1.0 / r_sqrt(ss / static_cast<double>(D) + p.eps);
    for (int64_t i = 0; i < D; ++i) {
      const Real y = ((row[static_cast<size_t>(i)] * rstd) * w[static_cast<size_t>(i)]) *
                     r_sigmoid(Real(g[static_cast<size_t>(n * D + i)]));
      put(y, r.y, tails ? &r.y_tail : nullptr, static_cast<size_t>(n * D + i));
    }
  }
  return r;
}

// f(Real{}) for the tier's scalar type.
template <class F> auto dispatch(Tier tier, F&& f) {
  switch (tier) {
    case Tier::f64: return f(double{});
    case Tier::dd: return f(DD{});
    case Tier::mpfr127: return f(Mpfr<127>{});
    case Tier::mpfr256: return f(Mpfr<256>{});
    case Tier::f128: return f(F128{});
  }
  return f(double{});
}

}  // namespace

ConvReferenceResult causal_conv1d_reference(Tier tier, const ConvParams& p, const Tensor& x, const Tensor& weight,
                                            const Tensor* state0, bool tails) {
  if (p.B < 1 || p.T < 0 || p.D < 1 || p.W < 1) throw InputError("causal_conv1d reference: bad shape parameters");
  expect_numel(x, "x", p.B * p.T * p.D, "[B,T,D]");
  expect_numel(weight, "weight", p.D * p.W, "[D,W]");
  if (state0) expect_numel(*state0, "state0", p.B * p.D * (p.W - 1), "[B,D,W-1]");
  return dispatch(tier, [&](auto real) { return conv<decltype(real)>(p, x, weight, state0, tails); });
}

NormReferenceResult rmsnorm_gated_reference(Tier tier, const NormParams& p, const Tensor& x, const Tensor& g,
                                            const Tensor& weight, bool tails) {
  if (p.N < 0 || p.D < 1 || !(p.eps > 0)) throw InputError("rmsnorm_gated reference: bad parameters");
  expect_numel(x, "x", p.N * p.D, "[N,D]");
  expect_numel(g, "gate", p.N * p.D, "[N,D]");
  expect_numel(weight, "weight", p.D, "[D]");
  return dispatch(tier, [&](auto real) { return norm<decltype(real)>(p, x, g, weight, tails); });
}

}  // namespace dg
