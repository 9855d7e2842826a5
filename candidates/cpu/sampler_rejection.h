// The rejection sampler of sampler (reference/sampler.h), FlashInfer's sort-free form
// (top_k_top_p_sampling_from_probs: sample, test, raise the pivot), shared by the candidate
// sampler_cpu_rejection_f32 (candidates/cpu/sampler_rejection.cpp) and its mutants
// (candidates/mutants/sampler_rejection.cpp). In f32, per row:
//   s_i = l_i / T, e_i = exp(s_i - max s)
//   the kept set: min-p (e_i >= min_p), top-k (s_i >= the k-th largest s, one nth_element, ties
//   kept), top-p over those (token j kept when the sum of their e over j and the tokens below it,
//   divided by their sum, exceeds 1 - top_p, or j is the largest): each filter keeps an upper set of
//   the order "s ascending, the higher index first among equals" (the reference's), so when a drawn
//   token is rejected every token below it is too
//   round r = 0, 1, ...: with the uniform u_r (the row's uniforms read in order, one a round) draw j
//   by the inverse CDF of e over the tokens above the pivot (in index order: the first j whose running
//   sum exceeds u_r times their sum); accept j when it is kept, else the pivot becomes j
// The accepted token is distributed as p over the kept set (the rejection step conditions the draw on
// the kept set), but for the same uniforms it is another token than the reference's race: the
// candidate registers judged_by = "distribution" (harness/ops/sampler.h). Greedy (T < 1e-5): the
// first largest logit. No sort of the row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "candidates/cpu/sampler_rows.h"
#include "harness/cases/registry.h"
#include "harness/ops/sampler.h"

namespace dg::sampler_rejection {

// Hooks the mutants and equivalents turn (all off: the candidate).
struct Hooks {
  bool temperature_twice = false;   // mutant: s = (l / T) / T
  bool top_p_unfiltered = false;    // mutant: top-p's sums over the whole row, not the min-p and top-k set
  bool z_unrestricted = false;      // mutant: each round's inverse CDF scaled by the whole row's sum
  bool reverse_walk = false;        // equivalent: the inverse CDF walked from the last index
};

struct Row {
  const SamplerParams& p;
  const Hooks& h;
  std::vector<float> s, e;
  float kth = -INFINITY, z_base = 0.0f, z_all = 0.0f;

  bool below(int64_t i, int64_t j) const {   // i before j in the order "s ascending, higher index first"
    const float a = s[static_cast<size_t>(i)], b = s[static_cast<size_t>(j)];
    return a < b || (a == b && i > j);
  }
  bool in_base(int64_t i) const {   // min-p and top-k
    return (p.min_p <= 0 || e[static_cast<size_t>(i)] >= static_cast<float>(p.min_p)) && s[static_cast<size_t>(i)] >= kth;
  }
  bool kept(int64_t j) const {
    if (!in_base(j)) return false;
    if (p.top_p >= 1.0) return true;
    float c = 0.0f;
    bool largest = true;
    for (int64_t i = 0; i < p.V; ++i) {
      if (!h.top_p_unfiltered && !in_base(i)) continue;
      if (i == j || below(i, j)) c += e[static_cast<size_t>(i)];
      else if (in_base(i)) largest = false;
    }
    return largest || c / (h.top_p_unfiltered ? z_all : z_base) > 1.0f - static_cast<float>(p.top_p);
  }
};

inline Row prepare(const SamplerParams& p, const Hooks& h, const std::vector<float>& l) {
  Row r{p, h, std::vector<float>(l.size()), std::vector<float>(l.size())};
  const float t = static_cast<float>(p.temperature);
  for (size_t i = 0; i < l.size(); ++i) r.s[i] = h.temperature_twice ? l[i] / t / t : l[i] / t;
  const float m = *std::max_element(r.s.begin(), r.s.end());
  for (size_t i = 0; i < l.size(); ++i) r.e[i] = std::exp(r.s[i] - m);
  if (p.top_k > 0 && p.top_k < p.V) {
    std::vector<float> v = r.s;
    std::nth_element(v.begin(), v.begin() + (p.top_k - 1), v.end(), std::greater<float>());
    r.kth = v[static_cast<size_t>(p.top_k - 1)];
  }
  for (int64_t i = 0; i < p.V; ++i) {
    r.z_all += r.e[static_cast<size_t>(i)];
    if (r.in_base(i)) r.z_base += r.e[static_cast<size_t>(i)];
  }
  return r;
}

// One round: the inverse CDF of e over the tokens above the pivot (-1: none), with uniform u.
inline int64_t draw(const Row& r, int64_t pivot, float u) {
  const int64_t V = r.p.V;
  auto at = [&](int64_t k) { return r.h.reverse_walk ? V - 1 - k : k; };
  auto above = [&](int64_t i) { return pivot < 0 || r.below(pivot, i); };
  float z = 0.0f;
  for (int64_t k = 0; k < V; ++k)
    if (above(at(k))) z += r.e[static_cast<size_t>(at(k))];
  const float target = u * (r.h.z_unrestricted ? r.z_all : z);
  float c = 0.0f;
  int64_t last = -1;
  for (int64_t k = 0; k < V; ++k) {
    const int64_t i = at(k);
    if (!above(i)) continue;
    last = i;
    c += r.e[static_cast<size_t>(i)];
    if (c > target) return i;
  }
  return last;   // the running sum rounded below the target: the last token above the pivot
}

inline int64_t sample(const SamplerParams& p, const Hooks& h, const std::vector<float>& l, const std::vector<float>& u) {
  if (p.greedy()) return std::max_element(l.begin(), l.end()) - l.begin();
  const Row r = prepare(p, h, l);
  int64_t pivot = -1;
  for (int64_t round = 0; round < p.V; ++round) {
    const int64_t j = draw(r, pivot, u[static_cast<size_t>(round)]);
    if (j < 0) break;
    if (r.kept(j)) return j;
    pivot = j;
  }
  return pivot;   // not reached: the largest token is always kept
}

inline RunFn make(Hooks h) {
  return sampler_cpu::rows([h](const SamplerParams& p, const std::vector<float>& l, const std::vector<float>& u) {
    return sample(p, h, l, u);
  });
}

}  // namespace dg::sampler_rejection
