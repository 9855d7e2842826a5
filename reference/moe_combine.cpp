// moe_combine, written once over Real (moe_combine.h has the definition).
#include "reference/moe_combine.h"

#include <type_traits>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/f64.h"
#include "reference/real/real_ops.h"

namespace dg {

std::vector<double> moe_combine_factors(const MoeCombineParams& p, const double* w) {
  const double rsf = static_cast<float>(p.rsf);
  std::vector<double> a(static_cast<size_t>(p.k));
  for (int64_t j = 0; j < p.k; ++j)
    a[static_cast<size_t>(j)] = p.rsf_on_output ? rsf * w[j] : static_cast<float>(rsf * w[j]);   // exact; one rounding
  return a;
}

namespace {

template <class Real>
MoeCombineReferenceResult combine(const MoeCombineParams& p, const std::vector<double>& e, const std::vector<double>& w,
                                  const std::vector<double>& s, bool tails) {
  const int64_t T = p.T, k = p.k, H = p.H;
  MoeCombineReferenceResult r;
  r.y.resize(static_cast<size_t>(T * H));
  if (tails) r.y_tail.assign(2 * r.y.size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> a = moe_combine_factors(p, w.data() + t * k);
    for (int64_t h = 0; h < H; ++h) {
      const size_t i = static_cast<size_t>(t * H + h);
      const double* et = e.data() + t * k * H + h;
      if constexpr (std::is_same_v<Real, double>) {
        double sum = 0.0, c = 0.0;
        for (int64_t j = 0; j < k; ++j) dot2_step(sum, c, a[static_cast<size_t>(j)], et[j * H]);
        if (p.shared) sum2_step(sum, c, s[i]);
        put_odd(sum + c, r.y, tails ? &r.y_tail : nullptr, i);
      } else {
        Real acc(0.0);
        for (int64_t j = 0; j < k; ++j) acc += Real(a[static_cast<size_t>(j)]) * et[j * H];
        if (p.shared) acc = acc + s[i];
        put_odd(acc, r.y, tails ? &r.y_tail : nullptr, i);
      }
    }
  }
  return r;
}

}  // namespace

MoeCombineReferenceResult moe_combine_reference(Tier tier, const MoeCombineParams& p, const Tensor& expert_out,
                                                const Tensor& weights, const Tensor* shared, bool tails) {
  if (p.T < 0 || p.k < 1 || p.H < 1 || !std::isfinite(p.rsf) || p.shared != (shared != nullptr))
    throw InputError("moe_combine reference: bad parameters");
  expect_numel(expert_out, "expert_out", p.T * p.k * p.H, "[T,k,H]");
  expect_numel(weights, "weights", p.T * p.k, "[T,k]");
  if (shared) expect_numel(*shared, "shared", p.T * p.H, "[T,H]");
  const std::vector<double> e = read_finite(expert_out, "expert_out"), w = read_finite(weights, "weights");
  const std::vector<double> s = shared ? read_finite(*shared, "shared") : std::vector<double>{};
  return with_tier(tier, [&](auto real) { return combine<decltype(real)>(p, e, w, s, tails); });
}

}  // namespace dg
