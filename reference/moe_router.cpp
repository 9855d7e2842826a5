// moe_router, written once over Real (moe_router.h has the definition and the tie rule).
#include "reference/moe_router.h"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/real_ops.h"

namespace dg {

void moe_router_check_params(const MoeRouterParams& p) {
  auto bad = [](const std::string& m) { throw InputError("moe_router: " + m); };
  if (p.T < 1) bad(fmt::format("T must be >= 1, got {}", p.T));
  if (p.E < 2 || p.E > 4096) bad(fmt::format("E must be in [2, 4096], got {}", p.E));
  if (p.n_group < 1 || p.E % p.n_group != 0) bad(fmt::format("n_group ({}) must divide E ({})", p.n_group, p.E));
  if (p.n_group > 1 && p.E / p.n_group < 2)
    bad(fmt::format("E / n_group must be >= 2 when n_group > 1 (a group score sums two experts), got {}", p.E / p.n_group));
  if (p.topk_group < 1 || p.topk_group > p.n_group)
    bad(fmt::format("topk_group must be in [1, n_group = {}], got {}", p.n_group, p.topk_group));
  if (p.k < 1 || p.k > p.topk_group * (p.E / p.n_group))
    bad(fmt::format("k must be in [1, topk_group * E / n_group = {}], got {}", p.topk_group * (p.E / p.n_group), p.k));
  if (!(p.rsf > 0) || p.rsf > 1e6) bad(fmt::format("rsf must be in (0, 1e6], got {}", p.rsf));
}

namespace {

// True when score a of index ia ranks before score b of index ib (larger first, lower index on ties).
template <class Real> bool ranks_before(const Real& a, int64_t ia, const Real& b, int64_t ib) {
  return a > b || (!(a < b) && ia < ib);
}

// The n largest of `score` over the indices where `allowed` holds, in rank order (repeated argmax).
template <class Real>
std::vector<int64_t> top_n(const std::vector<Real>& score, const std::vector<char>& allowed, int64_t n) {
  std::vector<char> taken(score.size(), 0);
  std::vector<int64_t> out;
  for (int64_t r = 0; r < n; ++r) {
    int64_t best = -1;
    for (int64_t i = 0; i < static_cast<int64_t>(score.size()); ++i) {
      if (!allowed[static_cast<size_t>(i)] || taken[static_cast<size_t>(i)]) continue;
      if (best < 0 || ranks_before(score[static_cast<size_t>(i)], i, score[static_cast<size_t>(best)], best)) best = i;
    }
    taken[static_cast<size_t>(best)] = 1;
    out.push_back(best);
  }
  return out;
}

// The experts of the kept groups: all of them with one group, else the topk_group groups whose two
// largest selection scores sum highest.
template <class Real> std::vector<char> kept_experts(const MoeRouterParams& p, const std::vector<Real>& sel) {
  std::vector<char> keep(sel.size(), 1);
  if (p.n_group == 1) return keep;
  const int64_t G = p.E / p.n_group;
  std::vector<Real> gscore(static_cast<size_t>(p.n_group));
  for (int64_t g = 0; g < p.n_group; ++g) {
    const std::vector<Real> part(sel.begin() + g * G, sel.begin() + (g + 1) * G);
    const std::vector<int64_t> two = top_n(part, std::vector<char>(part.size(), 1), 2);
    gscore[static_cast<size_t>(g)] = part[static_cast<size_t>(two[0])] + part[static_cast<size_t>(two[1])];
  }
  const std::vector<int64_t> groups = top_n(gscore, std::vector<char>(gscore.size(), 1), p.topk_group);
  keep.assign(sel.size(), 0);
  for (int64_t g : groups)
    for (int64_t e = g * G; e < (g + 1) * G; ++e) keep[static_cast<size_t>(e)] = 1;
  return keep;
}

template <class Real>
MoeRouterReferenceResult route(const MoeRouterParams& p, const std::vector<double>& z, const std::vector<double>& b,
                               bool tails) {
  MoeRouterReferenceResult r;
  r.ids.resize(static_cast<size_t>(p.T * p.k));
  r.weights.resize(r.ids.size());
  if (tails) r.weights_tail.assign(2 * r.ids.size(), 0.0);
  std::vector<Real> s(static_cast<size_t>(p.E)), sel(s.size());
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t e = 0; e < p.E; ++e) {
      s[static_cast<size_t>(e)] = r_sigmoid(Real(z[static_cast<size_t>(t * p.E + e)]));
      sel[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + Real(b[static_cast<size_t>(e)]);
    }
    const std::vector<int64_t> ids = top_n(sel, kept_experts(p, sel), p.k);
    Real sum(0.0);
    for (int64_t id : ids) sum += s[static_cast<size_t>(id)];   // slot order
    const Real denom = sum + kMoeRouterRenormEps;
    for (int64_t j = 0; j < p.k; ++j) {
      const size_t o = static_cast<size_t>(t * p.k + j);
      r.ids[o] = static_cast<double>(ids[static_cast<size_t>(j)]);
      Real w = s[static_cast<size_t>(ids[static_cast<size_t>(j)])];
      if (p.renorm) w = w / denom;
      w = w * p.rsf;
      put_odd(w, r.weights, tails ? &r.weights_tail : nullptr, o);
    }
  }
  return r;
}

}  // namespace

MoeRouterReferenceResult moe_router_reference(Tier tier, const MoeRouterParams& p, const Tensor& logits,
                                              const Tensor& bias, bool tails) {
  moe_router_check_params(p);
  expect_numel(logits, "logits", p.T * p.E, "[T,E]");
  expect_numel(bias, "bias", p.E, "[E]");
  const std::vector<double> z = read_finite(logits, "logits"), b = read_finite(bias, "bias");
  return with_tier(tier, [&](auto real) { return route<decltype(real)>(p, z, b, tails); });
}

}  // namespace dg
