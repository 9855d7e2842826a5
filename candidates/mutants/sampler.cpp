// Mutants and equivalent variants of sampler (reference/sampler.h), each the naive CPU candidate's
// loops (candidates/cpu/sampler.cpp) with one hook turned. The bugs come from the sampler's physics and
// its production forms (notes/model-ops.md sections 1.8 and 5):
//
//   mutants      the top-p cumsum rounded to bf16 at every step; top-k keeping exactly k (no boundary
//                ties); top-p on the exclusive cumsum (c_j - q_j <= 1 - p: the token that crosses is
//                dropped too, the missing shift of HF's descending form); min-p against the scaled
//                logits (s_i >= min_p * max s) instead of the probabilities; the temperature applied
//                after the softmax (p / T, which the race ignores: sampling at T = 1); softmaxes
//                without the max subtraction (inf / inf at large logits); the race argmax p * E for
//                p / E; the greedy threshold ignored (T = 0 divides by zero); top-p applied before
//                min-p and top-k (on the full distribution instead of the filtered one); the draws
//                read with the wrong stride ([B,V] read as [V,B])
//   equivalents  softmax, cumsum and race in f64 (after the f32 temperature); Gumbel-max as
//                argmax(log p - log E); top-k's k-th value from a size-k min-heap; another loop order
//                (max, sums and the race scanned from the last token, the lower index kept on ties)
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <queue>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/sampler.h"

namespace dg::mutants {
namespace {

struct Variant {
  // mutants
  bool cumsum_bf16 = false, topk_exact = false, topp_exclusive = false, minp_logits = false, temp_after_softmax = false,
       no_max = false, race_mul = false, greedy_ignored = false, topp_first = false, stride = false;
  // equivalents
  bool f64 = false, gumbel_log = false, heap_topk = false, loop_order = false;
};

template <class F> struct Sampler {
  const Variant& v;
  const SamplerParams& p;

  // Indices 0..V-1 in scan order (the last first under loop_order).
  size_t at(size_t j) const { return v.loop_order ? static_cast<size_t>(p.V) - 1 - j : j; }
  F sum_kept(const std::vector<F>& e, const std::vector<char>& keep) const {
    F z = 0;
    for (size_t j = 0; j < e.size(); ++j)
      if (keep[at(j)]) z += e[at(j)];
    return z;
  }
  void min_p(const std::vector<float>& s, float m, const std::vector<F>& e, std::vector<char>& keep) const {
    if (p.min_p <= 0) return;
    if (v.minp_logits) {
      for (size_t i = 0; i < s.size(); ++i) keep[i] = keep[i] && s[i] >= static_cast<float>(p.min_p) * m;
      return;
    }
    const F z = sum_kept(e, std::vector<char>(e.size(), 1));
    F pmax = 0;
    for (F x : e) pmax = std::max(pmax, x / z);
    const F threshold = F(static_cast<float>(p.min_p)) * pmax;
    for (size_t i = 0; i < s.size(); ++i) keep[i] = keep[i] && e[i] / z >= threshold;
  }
  float kth_value(const std::vector<float>& s) const {
    if (v.heap_topk) {
      std::priority_queue<float, std::vector<float>, std::greater<float>> heap;
      for (float x : s) {
        if (static_cast<int64_t>(heap.size()) < p.top_k) heap.push(x);
        else if (x > heap.top()) heap.pop(), heap.push(x);
      }
      return heap.top();
    }
    std::vector<float> sorted = s;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    return sorted[static_cast<size_t>(p.top_k - 1)];
  }
  void top_k(const std::vector<float>& s, std::vector<char>& keep) const {
    if (p.top_k <= 0 || p.top_k >= p.V) return;
    if (v.topk_exact) {   // the first k of (s desc, index asc), boundary ties cut
      std::vector<int64_t> idx(s.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return s[static_cast<size_t>(a)] > s[static_cast<size_t>(b)]; });
      for (size_t j = static_cast<size_t>(p.top_k); j < idx.size(); ++j) keep[static_cast<size_t>(idx[j])] = 0;
      return;
    }
    const float kth = kth_value(s);
    for (size_t i = 0; i < s.size(); ++i) keep[i] = keep[i] && s[i] >= kth;
  }
  void top_p(const std::vector<float>& s, const std::vector<F>& e, std::vector<char>& keep) const {
    if (p.top_p >= 1.0) return;
    std::vector<int64_t> order;
    for (int64_t i = 0; i < p.V; ++i)
      if (keep[static_cast<size_t>(i)]) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const float x = s[static_cast<size_t>(a)], y = s[static_cast<size_t>(b)];
      return x < y || (x == y && a > b);
    });
    F z = 0, c = 0;
    for (int64_t i : order) z += e[static_cast<size_t>(i)];
    const F threshold = F(1.0f - static_cast<float>(p.top_p));
    for (size_t j = 0; j + 1 < order.size(); ++j) {
      const F before = c, q = e[static_cast<size_t>(order[j])] / z;
      c = v.cumsum_bf16 ? F(round_bf16(static_cast<float>(c + q))) : c + q;
      if ((v.topp_exclusive ? before : c) > threshold) break;
      keep[static_cast<size_t>(order[j])] = 0;
    }
  }
  F race(F prob, float u) const {
    const F E = -std::log(F(u));
    if (v.gumbel_log) return std::log(prob) - std::log(E);
    return v.race_mul ? prob * E : prob / E;
  }
  int64_t sample(const std::vector<float>& l, const std::vector<float>& u) const;
};

template <class F> int64_t Sampler<F>::sample(const std::vector<float>& l, const std::vector<float>& u) const {
  const size_t V = l.size();
  if (p.greedy() && !v.greedy_ignored) return std::max_element(l.begin(), l.end()) - l.begin();
  const float t = static_cast<float>(p.temperature);
  std::vector<float> s(V);
  for (size_t i = 0; i < V; ++i) s[i] = v.temp_after_softmax ? l[i] : l[i] / t;
  float m = s[at(0)];
  for (size_t j = 1; j < V; ++j) m = std::max(m, s[at(j)]);
  std::vector<F> e(V);
  for (size_t i = 0; i < V; ++i) e[i] = std::exp(v.no_max ? F(s[i]) : F(s[i]) - F(m));
  std::vector<char> keep(V, 1);
  if (v.topp_first) top_p(s, e, keep);
  min_p(s, m, e, keep);
  top_k(s, keep);
  if (!v.topp_first) top_p(s, e, keep);
  const F z = sum_kept(e, keep);
  int64_t best = -1;
  F best_race = 0;
  for (size_t j = 0; j < V; ++j) {
    const size_t i = at(j);
    if (!keep[i]) continue;
    F prob = e[i] / z;
    if (v.temp_after_softmax) prob = prob / F(t);
    const F r = race(prob, u[i]);
    const bool better = v.loop_order ? r >= best_race : r > best_race;
    if (best < 0 || better) best = static_cast<int64_t>(i), best_race = r;
  }
  return best;
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const SamplerParams p = sampler_params(c);
    std::vector<float> l(static_cast<size_t>(p.V)), u(l.size());
    for (int64_t b = 0; b < p.B; ++b) {
      load_row(in.at("logits"), b * p.V, p.V, l.data());
      if (v.stride)
        for (int64_t i = 0; i < p.V; ++i) u[static_cast<size_t>(i)] = static_cast<float>(in.at("uniforms").get(i * p.B + b));
      else load_row(in.at("uniforms"), b * p.V, p.V, u.data());
      const int64_t id = v.f64 ? Sampler<double>{v, p}.sample(l, u) : Sampler<float>{v, p}.sample(l, u);
      out.at("token_ids").set(b, static_cast<double>(id));
    }
  };
}

CandidateInfo info(const std::string& name, const char* kind, const std::string& doc) {
  return {"sampler_" + name, "sampler", "cpu", kind, DType::f32, DType::f32, DType::f32, doc};
}

#define DG_SAMPLER_VARIANT(id, kind, doc, field)                                     \
  DG_REGISTER_CANDIDATE(sampler_##id, info(#id, kind, doc), [] {                     \
    Variant v;                                                                       \
    v.field = true;                                                                  \
    return variant(v);                                                               \
  }())

DG_SAMPLER_VARIANT(mutant_cumsum_bf16, "mutant", "the top-p cumsum rounded to bf16 at every step", cumsum_bf16);
DG_SAMPLER_VARIANT(mutant_topk_exact_k, "mutant", "top-k keeps exactly k tokens: boundary ties cut by index", topk_exact);
DG_SAMPLER_VARIANT(mutant_topp_exclusive, "mutant", "top-p on the exclusive cumsum: the token that crosses 1 - p dropped", topp_exclusive);
DG_SAMPLER_VARIANT(mutant_minp_logits, "mutant", "min-p against the logits (s >= min_p * max s), not the probabilities", minp_logits);
DG_SAMPLER_VARIANT(mutant_temp_after_softmax, "mutant", "the temperature applied after the softmax (p / T)", temp_after_softmax);
DG_SAMPLER_VARIANT(mutant_softmax_no_max, "mutant", "softmaxes without the max subtraction (overflow at large logits)", no_max);
DG_SAMPLER_VARIANT(mutant_race_mul, "mutant", "the race argmax p * E instead of p / E", race_mul);
DG_SAMPLER_VARIANT(mutant_greedy_ignored, "mutant", "no greedy branch: T = 0 divides by zero", greedy_ignored);
DG_SAMPLER_VARIANT(mutant_topp_first, "mutant", "top-p applied before min-p and top-k", topp_first);
DG_SAMPLER_VARIANT(mutant_draw_stride, "mutant", "the draws read with the wrong stride ([B,V] read as [V,B])", stride);
DG_SAMPLER_VARIANT(equivalent_f64, "equivalent", "softmax, cumsum and race in f64 after the f32 temperature", f64);
DG_SAMPLER_VARIANT(equivalent_gumbel_log, "equivalent", "Gumbel-max: argmax log p - log E", gumbel_log);
DG_SAMPLER_VARIANT(equivalent_heap_topk, "equivalent", "top-k's k-th value from a size-k min-heap", heap_topk);
DG_SAMPLER_VARIANT(equivalent_loop_order, "equivalent", "max, sums and race scanned from the last token", loop_order);

}  // namespace
}  // namespace dg::mutants
