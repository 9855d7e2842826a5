// swiglu, written once over Real (swiglu.h has the definition).
#include "reference/swiglu.h"

#include <algorithm>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

template <class Real> SwigluReferenceResult swiglu(const SwigluParams& p, const std::vector<double>& x, bool tails) {
  const int64_t N = p.N, I = p.I;
  SwigluReferenceResult r;
  r.y.resize(static_cast<size_t>(N * I));
  if (tails) r.y_tail.assign(2 * r.y.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < I; ++i) {
      double g = x[static_cast<size_t>(n * 2 * I + i)], u = x[static_cast<size_t>(n * 2 * I + I + i)];
      if (p.limit > 0) {   // exact: a comparison and a copy
        g = std::min(g, p.limit);
        u = std::clamp(u, -p.limit, p.limit);
      }
      const Real gr(g);
      const Real y = (gr * r_sigmoid(gr)) * u;
      put_odd(y, r.y, tails ? &r.y_tail : nullptr, static_cast<size_t>(n * I + i));
    }
  return r;
}

}  // namespace

SwigluReferenceResult swiglu_reference(Tier tier, const SwigluParams& p, const Tensor& x, bool tails) {
  if (p.N < 0 || p.I < 1 || !(p.limit >= 0)) throw InputError("swiglu reference: bad parameters");
  expect_numel(x, "x", p.N * 2 * p.I, "[N,2I]");
  const std::vector<double> xs = read_finite(x, "x");
  return with_tier(tier, [&](auto real) { return swiglu<decltype(real)>(p, xs, tails); });
}

}  // namespace dg
