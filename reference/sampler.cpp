// sampler, written once over Real (sampler.h has the definition and the tie rules).
#include "reference/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/real_ops.h"

namespace dg {

void sampler_check_params(const SamplerParams& p) {
  auto bad = [](const std::string& m) { throw InputError("sampler: " + m); };
  if (p.B < 1) bad(fmt::format("B must be >= 1, got {}", p.B));
  if (p.V < 2 || p.V > (int64_t{1} << 20)) bad(fmt::format("V must be in [2, 2^20], got {}", p.V));
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature) || p.temperature > 1e4)
    bad(fmt::format("temperature must be in [0, 1e4] (below 1e-5: greedy), got {}", p.temperature));
  if (p.top_k < 0 || p.top_k > p.V) bad(fmt::format("top_k must be in [0, V = {}] (0: off), got {}", p.V, p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1)) bad(fmt::format("top_p must be in (0, 1] (1: off), got {}", p.top_p));
  if (!(p.min_p >= 0 && p.min_p <= 1)) bad(fmt::format("min_p must be in [0, 1] (0: off), got {}", p.min_p));
}

double sampler_scaled(double logit, double temperature) {
  const float t = static_cast<float>(temperature);
  return static_cast<double>(static_cast<float>(static_cast<double>(static_cast<float>(logit)) / static_cast<double>(t)));
}

namespace {

// Greedy: the largest logit, the lower index among equals.
int64_t argmax_logit(const double* l, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (l[i] > l[best]) best = i;
  return best;
}

// The kept tokens after min-p and top-k, in ascending order of s (equal s: the higher index first).
template <class Real>
std::vector<int64_t> filtered_ascending(const SamplerParams& p, const std::vector<double>& s, const std::vector<Real>& e) {
  double kth = -INFINITY;
  if (p.top_k > 0 && p.top_k < p.V) {
    std::vector<double> sorted = s;
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<double>());
    kth = sorted[static_cast<size_t>(p.top_k - 1)];
  }
  const Real min_p(p.min_p);
  std::vector<int64_t> order;
  for (int64_t i = 0; i < p.V; ++i)
    if (s[static_cast<size_t>(i)] >= kth && (p.min_p == 0 || e[static_cast<size_t>(i)] >= min_p)) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double x = s[static_cast<size_t>(a)], y = s[static_cast<size_t>(b)];
    return x < y || (x == y && a > b);
  });
  return order;
}

template <class Real> Real sum_over(const std::vector<Real>& e, const std::vector<int64_t>& order, size_t from) {
  Real z(0.0);
  for (size_t j = from; j < order.size(); ++j) z += e[static_cast<size_t>(order[j])];
  return z;
}

// Top-p: the index in `order` of the first kept token (those before it are dropped).
template <class Real> size_t top_p_cut(const SamplerParams& p, const std::vector<Real>& e, const std::vector<int64_t>& order) {
  if (p.top_p >= 1.0) return 0;
  const Real z = sum_over(e, order, 0), threshold = Real(1.0) - Real(p.top_p);
  Real c(0.0);
  size_t j = 0;
  for (; j + 1 < order.size(); ++j) {
    const Real q = e[static_cast<size_t>(order[j])] / z;
    c += q;
    if (c > threshold) break;
  }
  return j;
}

// What a non-greedy row keeps after the filters: e = exp(s - max s) in the tier, the tokens min-p and
// top-k kept in ascending order, the top-p cut into it (order[cut ..] are kept) and their sum z.
template <class Real> struct KeptSet {
  std::vector<Real> e;
  std::vector<int64_t> order;
  size_t cut = 0;
  Real z;
};
template <class Real> KeptSet<Real> kept_set(const SamplerParams& p, const double* l) {
  std::vector<double> s(static_cast<size_t>(p.V));
  for (int64_t i = 0; i < p.V; ++i) s[static_cast<size_t>(i)] = sampler_scaled(l[i], p.temperature);
  const double m = *std::max_element(s.begin(), s.end());
  KeptSet<Real> k;
  k.e.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) k.e[i] = r_exp(Real(s[i]) - Real(m));
  k.order = filtered_ascending(p, s, k.e);
  k.cut = top_p_cut(p, k.e, k.order);
  k.z = sum_over(k.e, k.order, k.cut);
  return k;
}

template <class Real> int64_t sample_row(const SamplerParams& p, const double* l, const double* u) {
  if (p.greedy()) return argmax_logit(l, p.V);
  const KeptSet<Real> k = kept_set<Real>(p, l);
  const std::vector<Real>& e = k.e;
  const Real& z = k.z;
  std::vector<int64_t> kept(k.order.begin() + static_cast<std::ptrdiff_t>(k.cut), k.order.end());
  std::sort(kept.begin(), kept.end());
  int64_t best = -1;
  Real best_race(0.0);
  for (int64_t i : kept) {
    const Real prob = e[static_cast<size_t>(i)] / z;
    const Real race = prob / (-r_log(Real(u[i])));
    if (best < 0 || race > best_race) best = i, best_race = race;
  }
  return best;
}

template <class Real> void probabilities_row(const SamplerParams& p, const double* l, double* out) {
  std::fill(out, out + p.V, 0.0);
  if (p.greedy()) {
    out[argmax_logit(l, p.V)] = 1.0;
    return;
  }
  const KeptSet<Real> k = kept_set<Real>(p, l);
  for (size_t j = k.cut; j < k.order.size(); ++j)
    out[k.order[j]] = to_odd(Real(k.e[static_cast<size_t>(k.order[j])] / k.z));
}

std::vector<double> read_uniforms(const Tensor& t) {
  std::vector<double> u = read_finite(t, "uniforms");
  for (size_t i = 0; i < u.size(); ++i)
    if (!(u[i] > 0.0 && u[i] < 1.0))
      throw InputError(fmt::format("sampler: uniforms must lie in (0, 1) (E = -log u must be finite and > 0); "
                                   "element {} of shape {} is {}", i, t.shape_str(), u[i]));
  return u;
}

}  // namespace

std::vector<double> sampler_reference(Tier tier, const SamplerParams& p, const Tensor& logits, const Tensor& uniforms) {
  sampler_check_params(p);
  expect_numel(logits, "logits", p.B * p.V, "[B,V]");
  expect_numel(uniforms, "uniforms", p.B * p.V, "[B,V]");
  const std::vector<double> l = read_finite(logits, "logits"), u = read_uniforms(uniforms);
  return with_tier(tier, [&](auto real) {
    std::vector<double> ids(static_cast<size_t>(p.B));
    for (int64_t b = 0; b < p.B; ++b)
      ids[static_cast<size_t>(b)] = static_cast<double>(sample_row<decltype(real)>(p, l.data() + b * p.V, u.data() + b * p.V));
    return ids;
  });
}

std::vector<double> sampler_probabilities(Tier tier, const SamplerParams& p, const Tensor& logits) {
  sampler_check_params(p);
  expect_numel(logits, "logits", p.B * p.V, "[B,V]");
  const std::vector<double> l = read_finite(logits, "logits");
  return with_tier(tier, [&](auto real) {
    std::vector<double> probs(l.size());
    for (int64_t b = 0; b < p.B; ++b) probabilities_row<decltype(real)>(p, l.data() + b * p.V, probs.data() + b * p.V);
    return probs;
  });
}

}  // namespace dg
