// causal_conv1d, written once over Real (causal_conv1d.h has the definition).
#include "reference/causal_conv1d.h"

#include <cmath>
#include <span>
#include <string>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

template <class Real>
ConvReferenceResult conv(const ConvParams& p, const Tensor& xt, const Tensor& wt, const Tensor* st, bool tails) {
  const int64_t B = p.B, T = p.T, D = p.D, W = p.W, S = W - 1;
  const std::vector<double> x = read_finite(xt, "x"), w = read_finite(wt, "weight");
  const std::vector<double> s0 = st ? read_finite(*st, "state0") : std::vector<double>(static_cast<size_t>(B * D * S), 0.0);
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
        put_odd(z, r.y, tails ? &r.y_tail : nullptr, static_cast<size_t>((b * T + t) * D + d));
      }
      for (int64_t j = 0; j < S; ++j)   // exact copies: the tails stay zero
        r.state[static_cast<size_t>((b * D + d) * S + j)] = h[static_cast<size_t>(T + j)];
    }
  return r;
}

}  // namespace

ConvReferenceResult causal_conv1d_reference(Tier tier, const ConvParams& p, const Tensor& x, const Tensor& weight,
                                            const Tensor* state0, bool tails) {
  if (p.B < 1 || p.T < 0 || p.D < 1 || p.W < 1) throw InputError("causal_conv1d reference: bad shape parameters");
  expect_numel(x, "x", p.B * p.T * p.D, "[B,T,D]");
  expect_numel(weight, "weight", p.D * p.W, "[D,W]");
  if (state0) expect_numel(*state0, "state0", p.B * p.D * (p.W - 1), "[B,D,W-1]");
  return with_tier(tier, [&](auto real) { return conv<decltype(real)>(p, x, weight, state0, tails); });
}

}  // namespace dg
