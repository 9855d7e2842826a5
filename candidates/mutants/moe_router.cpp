// Mutants and equivalent variants of moe_router (reference/moe_router.h), each the naive CPU
// candidate's loops (candidates/cpu/moe_router.cpp) with one hook turned. The bugs come from the
// router's physics and its production forms (notes/model-ops.md sections 1.7 and 5):
//
//   mutants      weights from the biased scores s + b (the silent bug); the bias ignored in
//                the selection; softmax over the experts for sigmoid; renorm missing; the renorm
//                epsilon outside the division (w / sum + 1e-20); rsf missing; rsf applied twice (to
//                the weights and again as if to the expert output); a group's score its max for the
//                sum of its top two; topk_group ignored (top-k over every expert); the scores rounded
//                to bf16; the bias rounded to bf16; ties broken toward the higher index; a cubic
//                exp2 in the sigmoid (relative error ~1e-4); group boundaries off by one (expert e
//                in group (e - 1) / G); dropped groups masked with 0.0 instead of -inf (HF's
//                masked_fill(0.0), which selects from them once every kept score is negative)
//   equivalents  f64 scores, ranking and weights (rounded to f32 once); another loop order (a
//                single pass for a group's top two, a stable sort for the ranking, the renorm sum
//                from the last slot); the slots sorted by decreasing expert id
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/moe_router.h"

namespace dg::mutants {
namespace {

struct Variant {
  // mutants
  bool biased_weights = false, bias_ignored = false, softmax = false, renorm_missing = false, eps_outside = false,
       rsf_missing = false, rsf_twice = false, group_max = false, topk_group_ignored = false, scores_bf16 = false,
       bias_bf16 = false, ties_high = false, cubic_exp = false, group_off_by_one = false, mask_zero = false;
  // equivalents
  bool f64 = false, loop_order = false, slots_by_id_desc = false;
};

// 2^t by a cubic on the fraction (relative error about 1e-4), as a hand-rolled fast exp.
float cubic_exp(float x) {
  const float t = x * 1.44269504f;
  if (t < -126.0f) return 0.0f;
  if (t > 127.0f) return INFINITY;
  const float n = std::floor(t), f = t - n;
  return std::ldexp(1.0f + f * (0.6960f + f * (0.2245f + f * 0.0794f)), static_cast<int>(n));
}

template <class F> struct Router {
  const Variant& v;
  const MoeRouterParams& p;
  int64_t G;

  int64_t group_of(int64_t e) const { return v.group_off_by_one ? (e == 0 ? 0 : (e - 1) / G) : e / G; }
  bool beats(F a, int64_t ia, F b, int64_t ib) const { return a > b || (v.ties_high && a == b && ia > ib); }
  int64_t argmax(const std::vector<F>& x, const std::vector<char>& ok) const {
    int64_t best = -1;
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
      if (ok[static_cast<size_t>(i)] && (best < 0 || beats(x[static_cast<size_t>(i)], i, x[static_cast<size_t>(best)], best))) best = i;
    return best;
  }
  // A group's score: the sum of its two largest (or the max), by two argmax passes or one pass.
  F group_score(const std::vector<F>& sel, int64_t g) const {
    std::vector<char> ok(sel.size(), 0);
    for (int64_t e = 0; e < p.E; ++e) ok[static_cast<size_t>(e)] = group_of(e) == g;
    if (v.loop_order) {
      F m1 = -INFINITY, m2 = -INFINITY;
      for (int64_t e = 0; e < p.E; ++e) {
        if (!ok[static_cast<size_t>(e)]) continue;
        const F x = sel[static_cast<size_t>(e)];
        if (x > m1) { m2 = m1; m1 = x; } else if (x > m2) m2 = x;
      }
      return m1 + m2;
    }
    const int64_t a = argmax(sel, ok);
    if (v.group_max) return sel[static_cast<size_t>(a)];
    ok[static_cast<size_t>(a)] = 0;
    return sel[static_cast<size_t>(a)] + sel[static_cast<size_t>(argmax(sel, ok))];
  }
  std::vector<int64_t> route(std::vector<F> sel) const {
    if (p.n_group > 1 && !v.topk_group_ignored) {
      std::vector<F> gs(static_cast<size_t>(p.n_group));
      for (int64_t g = 0; g < p.n_group; ++g) gs[static_cast<size_t>(g)] = group_score(sel, g);
      std::vector<char> gopen(gs.size(), 1), keep(gs.size(), 0);
      for (int64_t j = 0; j < p.topk_group; ++j) {
        const int64_t g = argmax(gs, gopen);
        gopen[static_cast<size_t>(g)] = 0;
        keep[static_cast<size_t>(g)] = 1;
      }
      for (int64_t e = 0; e < p.E; ++e)
        if (!keep[static_cast<size_t>(group_of(e))]) sel[static_cast<size_t>(e)] = v.mask_zero ? F(0) : F(-INFINITY);
    }
    std::vector<int64_t> ids(static_cast<size_t>(p.E));
    std::iota(ids.begin(), ids.end(), 0);
    if (v.loop_order) {
      std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return sel[static_cast<size_t>(a)] > sel[static_cast<size_t>(b)]; });
      ids.resize(static_cast<size_t>(p.k));
      return ids;
    }
    std::vector<char> ok(sel.size(), 1);
    ids.clear();
    for (int64_t j = 0; j < p.k; ++j) {
      const int64_t e = argmax(sel, ok);
      ok[static_cast<size_t>(e)] = 0;
      ids.push_back(e);
    }
    return ids;
  }
  std::vector<F> scores(const std::vector<float>& z) const {
    std::vector<F> s(z.size());
    F mx = -INFINITY, sum = 0;
    for (float x : z) mx = std::max(mx, F(x));
    for (size_t e = 0; e < z.size(); ++e) {
      const F x = z[e];
      if (v.softmax) s[e] = std::exp(x - mx), sum += s[e];
      else s[e] = F(1) / (F(1) + (v.cubic_exp ? F(cubic_exp(-z[e])) : std::exp(-x)));
      if (v.scores_bf16) s[e] = round_bf16(static_cast<float>(s[e]));
    }
    if (v.softmax)
      for (F& x : s) x = x / sum;
    return s;
  }
  // Weights of one token in slot order.
  std::vector<F> weights(const std::vector<F>& s, const std::vector<F>& sel, const std::vector<int64_t>& ids) const {
    std::vector<F> w;
    for (int64_t id : ids) w.push_back(v.biased_weights ? sel[static_cast<size_t>(id)] : s[static_cast<size_t>(id)]);
    F sum = 0;
    if (v.loop_order) for (size_t j = w.size(); j-- > 0;) sum += w[j];
    else for (F x : w) sum += x;
    const F rsf = static_cast<F>(static_cast<float>(p.rsf));
    for (F& x : w) {
      if (p.renorm && !v.renorm_missing) x = v.eps_outside ? x / sum + F(1e-20f) : x / (sum + F(1e-20f));
      if (!v.rsf_missing) x = x * rsf;
      if (v.rsf_twice) x = x * rsf;
    }
    return w;
  }
};

template <class F> void run_token(const Variant& v, const MoeRouterParams& p, const std::vector<float>& z,
                                  const std::vector<float>& b, std::vector<int64_t>& ids, std::vector<float>& w) {
  const Router<F> r{v, p, p.E / p.n_group};
  const std::vector<F> s = r.scores(z);
  std::vector<F> sel(s.size());
  for (size_t e = 0; e < s.size(); ++e) {
    const F be = v.bias_bf16 ? F(round_bf16(b[e])) : F(b[e]);
    sel[e] = v.bias_ignored ? s[e] : s[e] + be;
  }
  ids = r.route(sel);
  if (v.slots_by_id_desc) std::sort(ids.begin(), ids.end(), std::greater<int64_t>());
  const std::vector<F> wf = r.weights(s, sel, ids);
  w.assign(wf.begin(), wf.end());
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const MoeRouterParams p = moe_router_params(c);
    std::vector<float> z(static_cast<size_t>(p.E)), b(z.size()), w;
    std::vector<int64_t> ids;
    load_row(in.at("bias"), 0, p.E, b.data());
    for (int64_t t = 0; t < p.T; ++t) {
      load_row(in.at("logits"), t * p.E, p.E, z.data());
      if (v.f64) run_token<double>(v, p, z, b, ids, w);
      else run_token<float>(v, p, z, b, ids, w);
      for (int64_t j = 0; j < p.k; ++j) out.at("topk_ids").set(t * p.k + j, static_cast<double>(ids[static_cast<size_t>(j)]));
      store_row(out.at("topk_weights"), t * p.k, p.k, w.data());
    }
  };
}

CandidateInfo info(const std::string& name, const char* kind, const std::string& doc) {
  return {"moe_router_" + name, "moe_router", "cpu", kind, DType::f32, DType::f32, DType::f32, doc};
}

#define DG_MOE_ROUTER_VARIANT(id, kind, doc, field)                                  \
  DG_REGISTER_CANDIDATE(moe_router_##id, info(#id, kind, doc), [] {                  \
    Variant v;                                                                       \
    v.field = true;                                                                  \
    return variant(v);                                                               \
  }())

DG_MOE_ROUTER_VARIANT(mutant_biased_weights, "mutant", "weights gathered from the biased scores s + b", biased_weights);
DG_MOE_ROUTER_VARIANT(mutant_bias_ignored, "mutant", "selection by s, the correction bias unused", bias_ignored);
DG_MOE_ROUTER_VARIANT(mutant_softmax, "mutant", "softmax over the experts instead of sigmoid", softmax);
DG_MOE_ROUTER_VARIANT(mutant_renorm_missing, "mutant", "norm_topk_prob ignored: no division by the sum", renorm_missing);
DG_MOE_ROUTER_VARIANT(mutant_renorm_eps_outside, "mutant", "w / sum + 1e-20: the epsilon outside the division", eps_outside);
DG_MOE_ROUTER_VARIANT(mutant_rsf_missing, "mutant", "routed_scaling_factor not applied", rsf_missing);
DG_MOE_ROUTER_VARIANT(mutant_rsf_twice, "mutant", "routed_scaling_factor applied twice", rsf_twice);
DG_MOE_ROUTER_VARIANT(mutant_group_max, "mutant", "group score = the group's max instead of its top-2 sum", group_max);
DG_MOE_ROUTER_VARIANT(mutant_topk_group_ignored, "mutant", "no group limit: top-k over every expert", topk_group_ignored);
DG_MOE_ROUTER_VARIANT(mutant_scores_bf16, "mutant", "sigmoid scores rounded to bf16", scores_bf16);
DG_MOE_ROUTER_VARIANT(mutant_bias_bf16, "mutant", "correction bias rounded to bf16", bias_bf16);
DG_MOE_ROUTER_VARIANT(mutant_ties_high_index, "mutant", "equal scores: the higher index wins", ties_high);
DG_MOE_ROUTER_VARIANT(mutant_cubic_exp, "mutant", "a cubic exp2 (relative error ~1e-4) inside the sigmoid", cubic_exp);
DG_MOE_ROUTER_VARIANT(mutant_group_off_by_one, "mutant", "group boundaries off by one: expert e in group (e - 1) / G", group_off_by_one);
DG_MOE_ROUTER_VARIANT(mutant_mask_zero, "mutant", "dropped groups masked with 0.0 instead of -inf", mask_zero);
DG_MOE_ROUTER_VARIANT(equivalent_f64, "equivalent", "scores, ranking and weights in f64, rounded to f32 once", f64);
DG_MOE_ROUTER_VARIANT(equivalent_loop_order, "equivalent", "one-pass group top-2, stable-sort ranking, renorm sum from the last slot", loop_order);
DG_MOE_ROUTER_VARIANT(equivalent_slots_by_id_desc, "equivalent", "the k slots ordered by decreasing expert id", slots_by_id_desc);

}  // namespace
}  // namespace dg::mutants
