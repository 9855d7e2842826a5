// rmsnorm_gated, written once over Real (rmsnorm_gated.h has the definition).
#include "reference/rmsnorm_gated.h"

#include <cmath>
#include <span>
#include <string>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

template <class Real>
NormReferenceResult norm(const NormParams& p, const Tensor& xt, const Tensor& gt, const Tensor& wt, bool tails) {
  const int64_t N = p.N, D = p.D;
  const std::vector<double> x = read_finite(xt, "x"), g = read_finite(gt, "gate"), w = read_finite(wt, "weight");
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
      put_odd(y, r.y, tails ? &r.y_tail : nullptr, static_cast<size_t>(n * D + i));
    }
  }
  return r;
}

}  // namespace

NormReferenceResult rmsnorm_gated_reference(Tier tier, const NormParams& p, const Tensor& x, const Tensor& g,
                                            const Tensor& weight, bool tails) {
  if (p.N < 0 || p.D < 1 || !(p.eps > 0)) throw InputError("rmsnorm_gated reference: bad parameters");
  expect_numel(x, "x", p.N * p.D, "[N,D]");
  expect_numel(g, "gate", p.N * p.D, "[N,D]");
  expect_numel(weight, "weight", p.D, "[D]");
  return with_tier(tier, [&](auto real) { return norm<decltype(real)>(p, x, g, weight, tails); });
}

}  // namespace dg
