// Input regimes and suites of sampler (reference/sampler.h; notes/model-ops.md sections 1.8, 2 and 5).
// The logits are the lm_head output stored in the case's dtype (bf16 in production); the uniforms
// are f32 draws in [2^-24, 1 - 2^-24] (E = -log u in (6e-8, 16.7]), as a kernel's RNG hands them out.
//
// A trained model's logits: a long tail, l ~ N(0, 2^2) over the vocabulary, and a head of 8 tokens
// of each row at 12 + N(0, 2^2) (together most of the mass; our assumption, checkpoints differ). The
// constructed regimes start from that draw and change it in double, then round the logits once to
// the dtype; the measures (harness/ops/sampler.h) read the margins of the stored inputs, so a
// construction blurred by the rounding is still judged by what it stored.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/sampler.h"

namespace dg {
namespace {

using namespace dists;

constexpr int64_t kHead = 8;

std::vector<double> draw(const Case& c, const std::string& name, int64_t n, const Dist& d) {
  Tensor t(DType::f64, {n});
  fill(t, c, name, d);
  std::vector<double> v(static_cast<size_t>(n));
  t.read(0, v);
  return v;
}

// Tail N(0, 2^2) and, per row, kHead tokens at random places raised to head_base + head(draw).
std::vector<double> logits_with_head(const Case& c, const SamplerParams& p, double head_base, const Dist& head) {
  std::vector<double> l = draw(c, "logits", p.B * p.V, normal(2.0));
  const std::vector<double> where = draw(c, "head_place", p.B * kHead, uniform(0.0, 1.0));
  const std::vector<double> value = draw(c, "head_value", p.B * kHead, head);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j = 0; j < kHead; ++j) {
      const int64_t i = std::min(p.V - 1, static_cast<int64_t>(where[static_cast<size_t>(b * kHead + j)] * static_cast<double>(p.V)));
      l[static_cast<size_t>(b * p.V + i)] = head_base + value[static_cast<size_t>(b * kHead + j)];
    }
  return l;
}

// With draws > 1 every row takes the logits of its group's first row (its own uniforms stay).
void store(TensorMap& in, const Case& c, const SamplerParams& p, const std::vector<double>& l) {
  Tensor lt(c.dtype(), {p.B, p.V}), ut(DType::f32, {p.B, p.V});
  const std::vector<double> u = draw(c, "uniforms", p.B * p.V, uniform(0.0, 1.0));
  const int64_t n = sampler_draws(c);
  for (int64_t i = 0; i < p.B * p.V; ++i) {
    lt.set(i, round_to(c.dtype(), l[static_cast<size_t>((i / p.V) / n * n * p.V + i % p.V)]));
    ut.set(i, std::clamp(round_to(DType::f32, u[static_cast<size_t>(i)]), 0x1p-24, 1.0 - 0x1p-24));
  }
  in["logits"] = std::move(lt);
  in["uniforms"] = std::move(ut);
}

void round_all(const Case& c, std::vector<double>& l) {
  for (double& x : l) x = round_to(c.dtype(), x);
}

// ties_at_k: in every row the values at ranks k and k + 1 (k = top_k, or 50 when off) take the k-th
// value: boundary ties that top-k keeps (more than k tokens).
void generate_ties_at_k(const Case& c, TensorMap& in) {
  const SamplerParams p = sampler_params(c);
  std::vector<double> l = logits_with_head(c, p, 12.0, normal(2.0));
  round_all(c, l);
  const int64_t k = std::min(p.top_k > 0 ? p.top_k : 50, p.V - 2);
  for (int64_t b = 0; b < p.B; ++b) {
    double* row = l.data() + b * p.V;
    std::vector<int64_t> idx(static_cast<size_t>(p.V));
    for (int64_t i = 0; i < p.V; ++i) idx[static_cast<size_t>(i)] = i;
    std::partial_sort(idx.begin(), idx.begin() + k + 2, idx.end(), [&](int64_t a, int64_t z) { return row[a] > row[z]; });
    for (int64_t r = k; r < k + 2; ++r) row[idx[static_cast<size_t>(r)]] = row[idx[static_cast<size_t>(k - 1)]];
  }
  store(in, c, p, l);
}

// top_p_edge: in every row the token whose cumsum crosses 1 - top_p (after min-p and top-k, in the
// ascending order) gets the logit that puts its cumsum 2^-U(10,30) above or below 1 - top_p.
void generate_top_p_edge(const Case& c, TensorMap& in) {
  const SamplerParams p = sampler_params(c);
  std::vector<double> l = logits_with_head(c, p, 12.0, normal(2.0));
  round_all(c, l);
  const std::vector<double> x = draw(c, "margin_exponent", p.B, uniform(10.0, 30.0));
  const std::vector<double> sign = draw(c, "margin_sign", p.B, uniform(-1.0, 1.0));
  const double t = std::max(p.temperature, SamplerParams::kGreedyBelow);
  for (int64_t b = 0; b < p.B; ++b) {
    double* row = l.data() + b * p.V;
    std::vector<double> s(static_cast<size_t>(p.V));
    for (int64_t i = 0; i < p.V; ++i) s[static_cast<size_t>(i)] = sampler_scaled(row[i], t);
    const double m = *std::max_element(s.begin(), s.end());
    SamplerParams one = p;
    one.B = 1, one.top_p = 1.0, one.temperature = t;   // the set top-p reads: min-p and top-k only
    const SamplerRow r = sampler_analyze(one, row, std::vector<double>(static_cast<size_t>(p.V), 0.5).data(), 0);
    std::vector<int64_t> order;
    for (int64_t i = 0; i < p.V; ++i)
      if (r.status[static_cast<size_t>(i)] != SamplerStatus::dropped) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t z) { return s[static_cast<size_t>(a)] < s[static_cast<size_t>(z)] || (s[static_cast<size_t>(a)] == s[static_cast<size_t>(z)] && a > z); });
    double z = 0;
    for (int64_t i : order) z += std::exp(s[static_cast<size_t>(i)] - m);
    const double target = 1.0 - p.top_p;
    double c_prev = 0;
    for (size_t j = 0; j + 1 < order.size(); ++j) {
      const double e = std::exp(s[static_cast<size_t>(order[j])] - m);
      if ((c_prev + e) / z <= target) { c_prev += e / z; continue; }
      const double want = target + (sign[static_cast<size_t>(b)] < 0 ? -1.0 : 1.0) * std::exp2(-x[static_cast<size_t>(b)]);
      const double P = c_prev * z, R = z - P - e, e_new = (want * (P + R) - P) / (1.0 - want);
      if (e_new > 0 && e_new < 1.0) row[order[j]] = round_to(c.dtype(), t * (m + std::log(e_new)));
      break;
    }
  }
  store(in, c, p, l);
}

struct RegisterSamplerRegimes {
  RegisterSamplerRegimes() {
    register_regime({"typical", "sampler",
                     "a trained model's logits: tail N(0, 2^2), a head of 8 tokens per row at 12 + N(0, 2^2)", {},
                     [](const Case& c, TensorMap& in) {
                       const SamplerParams p = sampler_params(c);
                       store(in, c, p, logits_with_head(c, p, 12.0, normal(2.0)));
                     }});
    register_regime({"peaked", "sampler", "tail N(0, 2^2) and one token per row 25 above it: p of the rest ~1e-6", {},
                     [](const Case& c, TensorMap& in) {
                       const SamplerParams p = sampler_params(c);
                       std::vector<double> l = logits_with_head(c, p, 12.0, normal(2.0));
                       for (int64_t b = 0; b < p.B; ++b) {
                         double* row = l.data() + b * p.V;
                         double* top = std::max_element(row, row + p.V);
                         *top += 25.0;
                       }
                       store(in, c, p, l);
                     }});
    register_regime({"flat", "sampler",
                     "near-uniform: l = 20 + N(0, 0.25^2); in bf16 (ulp 0.125) about 8 distinct values a row, so ties "
                     "everywhere: at the top-k boundary, at the top-p cut, at the greedy argmax", {},
                     [](const Case& c, TensorMap& in) {
                       const SamplerParams p = sampler_params(c);
                       std::vector<double> l = draw(c, "logits", p.B * p.V, normal(0.25));
                       for (double& v : l) v += 20.0;
                       store(in, c, p, l);
                     }});
    register_regime({"ties_at_k", "sampler",
                     "typical logits with the values at ranks k and k+1 (k = top_k, 50 when off) set to the k-th: "
                     "top-k keeps k + 2 tokens", {}, generate_ties_at_k});
    register_regime({"top_p_edge", "sampler",
                     "typical logits with the token whose ascending cumsum crosses 1 - top_p moved to 2^-U(10,30) from it "
                     "(above or below): flips at the narrow margins are legitimate, none at the wide ones", {},
                     generate_top_p_edge});
    register_regime({"greedy", "sampler",
                     "typical tail with the head of 8 tokens in [16, 17): in bf16 (ulp 0.125) the argmax often ties, "
                     "decided by the lower index", {},
                     [](const Case& c, TensorMap& in) {
                       const SamplerParams p = sampler_params(c);
                       store(in, c, p, logits_with_head(c, p, 16.0, uniform(0.0, 1.0)));
                     }});
    register_regime({"large_logits", "sampler",
                     "logits near f32 exp overflow: tail 70 + N(0, 2^2), head at 90 + N(0, 2^2) (exp(89) overflows f32: "
                     "a softmax without the max subtraction gives inf / inf)", {},
                     [](const Case& c, TensorMap& in) {
                       const SamplerParams p = sampler_params(c);
                       std::vector<double> l = logits_with_head(c, p, 90.0, normal(2.0));
                       for (int64_t i = 0; i < p.B * p.V; ++i)
                         if (l[static_cast<size_t>(i)] < 40.0) l[static_cast<size_t>(i)] += 70.0;
                       store(in, c, p, l);
                     }});
  }
};
const RegisterSamplerRegimes register_sampler_regimes;

// Suites. Configs (notes/model-ops.md sections 1.8 and 2): vocabularies 32000 (Llama-2 class), 151552
// (GLM-4.5 ... 4.7) and 154880 (GLM-5.x); GLM-5.3-Flash's generation_config T = 1.0, top_p = 0.95;
// common serving settings T = 0.7, top_k = 50, min_p = 0.05 .. 0.1. The gate's rows give every mutant
// rows where its bug decides the token at every seed: flat rows with top_k = 20 tie dozens of tokens
// at the k-th value (bf16) or keep 20 near-equal ones that top-p halves (f32).
DG_REGISTER_SUITE(sampler_smoke,
                  Suite{"sampler-smoke", "small sampler cases: every regime, filter and dtype (seconds)",
                        {
                            "sampler(B=4,V=32000,temperature=0.7,top_k=50,top_p=0.95,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=4,V=32000,temperature=0,regime=greedy,dtype=bf16,seed=0)",
                            "sampler(B=4,V=4096,top_k=20,top_p=0.9,regime=flat,dtype=bf16,seed=0)",
                            "sampler(B=4,V=32000,top_k=5,regime=ties_at_k,dtype=bf16,seed=0)",
                            "sampler(B=4,V=32000,top_p=0.9,min_p=0.05,regime=top_p_edge,dtype=f32,seed=0)",
                            "sampler(B=4,V=32000,temperature=0.5,regime=large_logits,dtype=f32,seed=0)",
                            "sampler(B=1,V=151552,top_p=0.95,regime=peaked,dtype=bf16,seed=0)",
                            "sampler(B=2048,V=1024,temperature=0.7,top_k=20,top_p=0.9,draws=2048,regime=typical,dtype=bf16,seed=0)",
                        }});
DG_REGISTER_SUITE(sampler_gate,
                  Suite{"sampler-gate", "the sampler merge gate: serving settings on typical logits, boundary ties, the "
                        "top-p edge, flat and peaked rows, greedy, large logits, GLM vocabularies",
                        {
                            "sampler(B=32,V=32000,temperature=0.7,top_k=50,top_p=0.95,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=32,V=32000,temperature=1.5,top_p=0.5,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=32,V=32000,temperature=1.5,top_p=0.99,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=32,V=32000,min_p=0.1,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=32,V=32000,top_k=4,top_p=0.7,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=32,V=32000,top_k=5,regime=ties_at_k,dtype=bf16,seed=0)",
                            "sampler(B=32,V=4096,top_k=20,top_p=0.9,regime=flat,dtype=bf16,seed=0)",
                            "sampler(B=16,V=4096,top_k=20,regime=flat,dtype=bf16,seed=0)",
                            "sampler(B=16,V=4096,top_k=20,top_p=0.5,regime=flat,dtype=f32,seed=0)",
                            "sampler(B=32,V=32000,top_p=0.9,regime=top_p_edge,dtype=f32,seed=0)",
                            "sampler(B=32,V=32000,temperature=0,regime=greedy,dtype=bf16,seed=0)",
                            "sampler(B=16,V=32000,temperature=0.8,regime=large_logits,dtype=f32,seed=0)",
                            "sampler(B=4,V=151552,top_p=0.95,regime=peaked,dtype=bf16,seed=0)",
                            "sampler(B=1,V=154880,top_p=0.95,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=4096,V=1024,temperature=0.7,top_k=50,top_p=0.95,draws=4096,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=4096,V=1024,top_k=20,top_p=0.9,draws=4096,regime=flat,dtype=bf16,seed=0)",
                        }});

// sampler-distribution: the distribution test of samplers that draw differently (harness/ops/sampler.h):
// groups of 4096 or 8192 rows with the same logits, each row its own uniforms; the race candidates
// are judged token by token as everywhere, a candidate with judged_by = "distribution" by the TV of
// each group's tokens against the reference's probabilities (false alarm < 1% a case, power 95%
// against a distortion of TV 0.1-0.2: the measure's detail states it). Serving settings on typical
// logits (top-k alone: the kept set fixed, only the weights can be wrong), flat rows where the rejection
// rounds run deep (top-k 20 and top-p in bf16 ties), min-p with top-p, greedy.
DG_REGISTER_SUITE(sampler_distribution,
                  Suite{"sampler-distribution", "groups of 4096-8192 draws of one row: the distribution test of samplers "
                        "that draw differently (rejection sampling); typical, flat and greedy rows, every filter",
                        {
                            "sampler(B=8192,V=1024,temperature=0.7,top_k=50,draws=4096,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=8192,V=1024,temperature=1.5,top_k=50,top_p=0.9,draws=8192,regime=typical,dtype=f32,seed=0)",
                            "sampler(B=8192,V=1024,top_k=20,top_p=0.9,draws=4096,regime=flat,dtype=bf16,seed=0)",
                            "sampler(B=8192,V=2048,temperature=1.2,top_p=0.9,min_p=0.05,draws=8192,regime=typical,dtype=bf16,seed=0)",
                            "sampler(B=4096,V=1024,temperature=0,draws=4096,regime=greedy,dtype=bf16,seed=0)",
                        }});

}  // namespace
}  // namespace dg
