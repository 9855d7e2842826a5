// rmsnorm and add_rmsnorm, written once over Real (rmsnorm.h has the definitions).
#include "reference/rmsnorm.h"

#include <cmath>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/f64.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

// s = round_dtype(x + residual), element by element (rmsnorm.h: one rounding of the double sum).
std::vector<double> residual_sum(const std::vector<double>& x, const std::vector<double>& res, DType dt) {
  std::vector<double> s(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    s[i] = round_to(dt, x[i] + res[i]);
    if (!std::isfinite(s[i]))
      throw InputError(fmt::format("add_rmsnorm reference: x + residual at element {} ({} + {}) overflows {}", i, x[i],
                                   res[i], name(dt)));
  }
  return s;
}

// sum_i x_i^2 in increasing i; the f64 tier accumulates by Dot2 (reference/real/f64.h), as if in
// twice the precision, so its only sizable errors are the few roundings after the sum.
template <class Real> Real sum_squares(const double* row, int64_t D) {
  if constexpr (std::is_same_v<Real, double>) {
    Dot2 acc;
    for (int64_t i = 0; i < D; ++i) acc.add(row[i], row[i]);
    return acc.value();
  } else {
    Real ss(0.0);
    for (int64_t i = 0; i < D; ++i) ss += Real(row[i]) * Real(row[i]);
    return ss;
  }
}

template <class Real>
RmsNormReferenceResult norm(const RmsNormParams& p, std::vector<double> x, const std::vector<double>& w, bool tails) {
  const int64_t N = p.N, D = p.D;
  RmsNormReferenceResult r;
  r.y.resize(static_cast<size_t>(N * D));
  if (tails) r.y_tail.assign(2 * r.y.size(), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const double* row = x.data() + n * D;
    const Real ss = sum_squares<Real>(row, D);
    const Real rstd = 1.0 / r_sqrt(ss / static_cast<double>(D) + p.eps);
    for (int64_t i = 0; i < D; ++i) {
      const Real y = (Real(row[i]) * rstd) * w[static_cast<size_t>(i)];
      put_odd(y, r.y, tails ? &r.y_tail : nullptr, static_cast<size_t>(n * D + i));
    }
  }
  return r;
}

}  // namespace

RmsNormReferenceResult rmsnorm_reference(Tier tier, const RmsNormParams& p, const Tensor& x, const Tensor* residual,
                                         const Tensor& weight, bool tails) {
  const char* op = residual ? "add_rmsnorm" : "rmsnorm";
  if (p.N < 0 || p.D < 1 || !(p.eps > 0)) throw InputError(fmt::format("{} reference: bad parameters", op));
  expect_numel(x, "x", p.N * p.D, "[N,D]");
  expect_numel(weight, "weight", p.D, "[D]");
  std::vector<double> xs = read_finite(x, "x"), s;
  const std::vector<double> w = read_finite(weight, "weight");
  if (residual) {
    expect_numel(*residual, "residual", p.N * p.D, "[N,D]");
    s = residual_sum(xs, read_finite(*residual, "residual"), p.dtype);
    xs = s;
  }
  RmsNormReferenceResult r = with_tier(tier, [&](auto real) { return norm<decltype(real)>(p, xs, w, tails); });
  r.residual = std::move(s);
  return r;
}

}  // namespace dg
