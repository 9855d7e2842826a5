// CPU candidates of sampler (reference/sampler.h), both in f32 as vLLM's sampler runs:
//   sampler_cpu_naive_f32   the policy's naive: plain loops over the row. s = l / T (f32); min-p on the
//                           f32 softmax (p_i >= min_p * max p); top-k by one descending sort of s (keep
//                           s >= the k-th); top-p over the kept tokens in ascending order (equal s: the
//                           higher index first), a sequential f32 cumsum of their softmax, dropped while
//                           cumsum <= 1 - top_p; the final softmax over the kept tokens (sum in index
//                           order), E = -log u in f32, the first largest p / E
//   sampler_cpu_vllm_f32    vLLM V1's tensor program (apply_min_p, apply_top_k_top_p, random_sample) on
//                           one row: -inf masks over the whole row, one ascending sort of the whole row
//                           (stable by index: equal values keep the lower index first, as an unstable
//                           torch.sort may), top-k as "sorted < sorted[V - k]", top-p as the softmax of
//                           the sorted row and its f32 cumsum over all V (masked entries add 0),
//                           scattered back; f32 softmax of the row, q = -log u in f32, argmax of p / q
// Both read the logits as f32 (exact for bf16 and f32 storage) and T, min_p, top_p as f32 (vLLM's
// tensors), and write the token ids (the harness allocates them in i32). Greedy (T < 1e-5): the first
// largest logit.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "candidates/cpu/sampler_rows.h"
#include "harness/cases/registry.h"
#include "harness/ops/sampler.h"

namespace dg {
namespace {

int64_t argmax_first(const std::vector<float>& v) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(v.size()); ++i)
    if (v[static_cast<size_t>(i)] > v[static_cast<size_t>(best)]) best = i;
  return best;
}

// Naive: the kept mask of one row after min-p and top-k, from s and e = exp(s - max s).
std::vector<char> naive_filters(const SamplerParams& p, const std::vector<float>& s, const std::vector<float>& e) {
  std::vector<char> keep(s.size(), 1);
  if (p.min_p > 0) {
    float z = 0.0f, pmax = 0.0f;
    for (float x : e) z += x;
    for (float x : e) pmax = std::max(pmax, x / z);
    const float threshold = static_cast<float>(p.min_p) * pmax;
    for (size_t i = 0; i < s.size(); ++i) keep[i] = e[i] / z >= threshold;
  }
  if (p.top_k > 0 && p.top_k < p.V) {
    std::vector<float> sorted = s;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth = sorted[static_cast<size_t>(p.top_k - 1)];
    for (size_t i = 0; i < s.size(); ++i) keep[i] = keep[i] && s[i] >= kth;
  }
  return keep;
}

// Naive top-p over the kept tokens (ascending s, the higher index first among equals).
void naive_top_p(const SamplerParams& p, const std::vector<float>& s, const std::vector<float>& e, std::vector<char>& keep) {
  if (p.top_p >= 1.0) return;
  std::vector<int64_t> order;
  for (int64_t i = 0; i < p.V; ++i)
    if (keep[static_cast<size_t>(i)]) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float x = s[static_cast<size_t>(a)], y = s[static_cast<size_t>(b)];
    return x < y || (x == y && a > b);
  });
  float z = 0.0f, c = 0.0f;
  for (int64_t i : order) z += e[static_cast<size_t>(i)];
  const float threshold = 1.0f - static_cast<float>(p.top_p);
  for (size_t j = 0; j + 1 < order.size(); ++j) {
    c += e[static_cast<size_t>(order[j])] / z;
    if (c > threshold) break;
    keep[static_cast<size_t>(order[j])] = 0;
  }
}

int64_t sample_naive(const SamplerParams& p, const std::vector<float>& l, const std::vector<float>& u) {
  if (p.greedy()) return argmax_first(l);
  const float t = static_cast<float>(p.temperature);
  std::vector<float> s(l.size()), e(l.size());
  for (size_t i = 0; i < l.size(); ++i) s[i] = l[i] / t;
  const float m = *std::max_element(s.begin(), s.end());
  for (size_t i = 0; i < l.size(); ++i) e[i] = std::exp(s[i] - m);
  std::vector<char> keep = naive_filters(p, s, e);
  naive_top_p(p, s, e, keep);
  float z = 0.0f;
  for (size_t i = 0; i < l.size(); ++i)
    if (keep[i]) z += e[i];
  int64_t best = -1;
  float best_race = 0.0f;
  for (size_t i = 0; i < l.size(); ++i) {
    if (!keep[i]) continue;
    const float race = (e[i] / z) / -std::log(u[i]);
    if (best < 0 || race > best_race) best = static_cast<int64_t>(i), best_race = race;
  }
  return best;
}

// torch.softmax of a row in f32: max, exp(x - max) (masked -inf: 0), sum in index order, divide.
std::vector<float> softmax(const std::vector<float>& x) {
  const float m = *std::max_element(x.begin(), x.end());
  std::vector<float> y(x.size());
  float z = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) z += (y[i] = std::exp(x[i] - m));
  for (float& v : y) v /= z;
  return y;
}

// apply_top_k_top_p on one row: an ascending sort, the k-th value mask, the cumsum mask, scattered back.
void vllm_top_k_top_p(const SamplerParams& p, std::vector<float>& x) {
  const int64_t V = p.V;
  std::vector<int64_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return x[static_cast<size_t>(a)] < x[static_cast<size_t>(b)]; });
  std::vector<float> xs(x.size());
  for (int64_t j = 0; j < V; ++j) xs[static_cast<size_t>(j)] = x[static_cast<size_t>(idx[static_cast<size_t>(j)])];
  if (p.top_k > 0 && p.top_k < V) {
    const float kth = xs[static_cast<size_t>(V - p.top_k)];
    for (float& v : xs)
      if (v < kth) v = -INFINITY;
  }
  if (p.top_p < 1.0) {
    const std::vector<float> ps = softmax(xs);
    const float threshold = 1.0f - static_cast<float>(p.top_p);
    float c = 0.0f;
    for (int64_t j = 0; j + 1 < V; ++j) {
      c += ps[static_cast<size_t>(j)];
      if (c <= threshold) xs[static_cast<size_t>(j)] = -INFINITY;
    }
  }
  for (int64_t j = 0; j < V; ++j) x[static_cast<size_t>(idx[static_cast<size_t>(j)])] = xs[static_cast<size_t>(j)];
}

int64_t sample_vllm(const SamplerParams& p, const std::vector<float>& l, const std::vector<float>& u) {
  if (p.greedy()) return argmax_first(l);
  const float t = static_cast<float>(p.temperature);
  std::vector<float> x(l.size());
  for (size_t i = 0; i < l.size(); ++i) x[i] = l[i] / t;
  if (p.min_p > 0) {
    const std::vector<float> probs = softmax(x);
    const float threshold = static_cast<float>(p.min_p) * *std::max_element(probs.begin(), probs.end());
    for (size_t i = 0; i < x.size(); ++i)
      if (probs[i] < threshold) x[i] = -INFINITY;
  }
  if (p.top_k > 0 || p.top_p < 1.0) vllm_top_k_top_p(p, x);
  std::vector<float> ratio = softmax(x);
  for (size_t i = 0; i < x.size(); ++i) ratio[i] /= -std::log(u[i]);
  return argmax_first(ratio);
}

}  // namespace

DG_REGISTER_CANDIDATE(sampler_cpu_naive_f32,
                      {"sampler_cpu_naive_f32", "sampler", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain f32 loops: l / T, min-p, top-k by a sort, top-p by an ascending cumsum, p / E race (the policy's naive)"},
                      sampler_cpu::rows(sample_naive));
DG_REGISTER_CANDIDATE(sampler_cpu_vllm_f32,
                      {"sampler_cpu_vllm_f32", "sampler", "cpu", "vllm", DType::f32, DType::f32, DType::f32,
                       "vLLM V1's order and roundings in f32: -inf masks, one ascending sort, cumsum over the row, softmax, p / q"},
                      sampler_cpu::rows(sample_vllm));

}  // namespace dg
