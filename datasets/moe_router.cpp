// Input regimes and suites of moe_router (reference/moe_router.h; notes/model-ops.md sections 1.7, 2
// and 5). The logits are the router GEMM's output, stored in the case's dtype (f32: the GLM gate,
// an nn.Linear in fp32; bf16: vLLM's Kimi gate in the model dtype); the correction bias is f32.
//
// A trained router's logits: each expert has its own mean (popular and rare experts), mu_e ~
// N(-1, 0.5^2), and a token's logits scatter around them, z = mu_e + N(0, 1.5^2). The aux-free
// correction bias moves the selection by about the spread of the top experts' s: b ~ N(0, 0.1^2)
// (our assumption; checkpoints differ). The constructed regimes start from that draw and change
// it in double, then round the logits once to the dtype; the measures (harness/ops/moe_router.h)
// read the margins of the rounded inputs, so a construction blurred by the rounding is still judged
// by what it stored.
#include <cmath>
#include <cstdint>
#include <vector>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/moe_router.h"

namespace dg {
namespace {

using namespace dists;

// A draw of `name` as doubles (its stream is the case's and the name's).
std::vector<double> draw(const Case& c, const std::string& name, int64_t n, const Dist& d) {
  Tensor t(DType::f64, {n});
  fill(t, c, name, d);
  std::vector<double> v(static_cast<size_t>(n));
  t.read(0, v);
  return v;
}

// Production logits [T,E] as doubles, already rounded to the case's dtype.
std::vector<double> production_logits(const Case& c, const MoeRouterParams& p) {
  const std::vector<double> mu = draw(c, "expert_mean", p.E, map(normal(0.5), [](double x) { return x - 1.0; }));
  std::vector<double> z = draw(c, "logits", p.T * p.E, normal(1.5));
  for (int64_t i = 0; i < p.T * p.E; ++i) z[static_cast<size_t>(i)] = round_to(c.dtype(), z[static_cast<size_t>(i)] + mu[static_cast<size_t>(i % p.E)]);
  return z;
}

void store(TensorMap& in, const Case& c, const MoeRouterParams& p, const std::vector<double>& z, const std::vector<double>& b) {
  Tensor zt(c.dtype(), {p.T, p.E}), bt(DType::f32, {p.E});
  for (int64_t i = 0; i < p.T * p.E; ++i) zt.set(i, z[static_cast<size_t>(i)]);
  for (int64_t e = 0; e < p.E; ++e) bt.set(e, b[static_cast<size_t>(e)]);
  in["logits"] = std::move(zt);
  in["bias"] = std::move(bt);
}

std::vector<double> f32_bias(const Case& c, int64_t E, const Dist& d) {
  std::vector<double> b = draw(c, "bias", E, d);
  for (double& x : b) x = round_to(DType::f32, x);
  return b;
}

double logit(double s) { return std::log(s / (1.0 - s)); }

// near_ties: in every token the (k+1)-th expert of the kept groups is moved to 2^-x below the k-th
// selection score, x ~ U(10, 30): margins from far above an f32 kernel's error to far below it. With
// groups, odd tokens instead move the first dropped group's best expert so that its group scores
// 2^-x below the last kept group.
void generate_near_ties(const Case& c, TensorMap& in) {
  const MoeRouterParams p = moe_router_params(c);
  const int64_t G = p.E / p.n_group;
  std::vector<double> z = production_logits(c, p);
  const std::vector<double> b = f32_bias(c, p.E, normal(0.1));
  const std::vector<double> x = draw(c, "margin_exponent", p.T, uniform(10.0, 30.0));
  for (int64_t t = 0; t < p.T; ++t) {
    double* row = z.data() + t * p.E;
    const MoeRouterRank r = moe_router_rank(p, row, b.data());
    const double delta = std::exp2(-x[static_cast<size_t>(t)]);
    int64_t moved = -1;
    double sel = 0;
    if (t % 2 == 1 && p.topk_group < p.n_group) {
      const int64_t kept = r.groups[static_cast<size_t>(p.topk_group - 1)], dropped = r.groups[static_cast<size_t>(p.topk_group)];
      moved = dropped * G;
      for (int64_t e = dropped * G; e < (dropped + 1) * G; ++e)
        if (r.sel[static_cast<size_t>(e)] > r.sel[static_cast<size_t>(moved)]) moved = e;
      sel = r.sel[static_cast<size_t>(moved)] + (r.group_score[static_cast<size_t>(kept)] - r.group_score[static_cast<size_t>(dropped)]) - delta;
    } else if (static_cast<int64_t>(r.experts.size()) > p.k) {
      moved = r.experts[static_cast<size_t>(p.k)];
      sel = r.sel[static_cast<size_t>(r.experts[static_cast<size_t>(p.k - 1)])] - delta;
    }
    const double s = moved < 0 ? 0.0 : sel - b[static_cast<size_t>(moved)];
    if (s > 1e-30 && s < 1.0 - 1e-7) row[moved] = round_to(c.dtype(), logit(s));
  }
  store(in, c, p, z, b);
}

// exact_ties: the bias is constant over blocks of 4 experts and repeats in every group, so experts
// of one block, and the same places of two groups, tie when their logits do. In every token the
// first dropped group becomes a copy of the last kept one (a group tie at the boundary), then a
// block-mate outside the set takes the k-th expert's logit (an expert tie at the boundary).
void generate_exact_ties(const Case& c, TensorMap& in) {
  const MoeRouterParams p = moe_router_params(c);
  const int64_t G = p.E / p.n_group;
  std::vector<double> z = production_logits(c, p);
  const std::vector<double> base = f32_bias(c, (G + 3) / 4, normal(0.1));
  std::vector<double> b(static_cast<size_t>(p.E));
  for (int64_t e = 0; e < p.E; ++e) b[static_cast<size_t>(e)] = base[static_cast<size_t>((e % G) / 4)];
  for (int64_t t = 0; t < p.T; ++t) {
    double* row = z.data() + t * p.E;
    MoeRouterRank r = moe_router_rank(p, row, b.data());
    if (p.topk_group < p.n_group) {
      const int64_t kept = r.groups[static_cast<size_t>(p.topk_group - 1)], dropped = r.groups[static_cast<size_t>(p.topk_group)];
      for (int64_t i = 0; i < G; ++i) row[dropped * G + i] = row[kept * G + i];
      r = moe_router_rank(p, row, b.data());
    }
    const int64_t kth = r.experts[static_cast<size_t>(p.k - 1)];
    for (int64_t mate = kth - kth % 4; mate < kth - kth % 4 + 4 && mate < p.E; ++mate) {
      bool inside = false;
      for (int64_t j = 0; j < p.k; ++j) inside = inside || r.experts[static_cast<size_t>(j)] == mate;
      if (!inside && mate / G == kth / G && (mate % G) / 4 == (kth % G) / 4) {
        row[mate] = row[kth];
        break;
      }
    }
  }
  store(in, c, p, z, b);
}

// saturated: |z| where f32's sigmoid saturates. Even tokens: z ~ U(-80, -60), s ~ 1e-35 .. 1e-26,
// so sum(w) << 1e-20 and the renorm epsilon sets the weights; odd tokens: z = +-U(8, 30), half of
// the s round to 1 in f32 (the reference still orders them by 1 - e^-z). Bias zero (a router before
// its first correction step), so the saturated scores meet at the selection boundary.
void generate_saturated(const Case& c, TensorMap& in) {
  const MoeRouterParams p = moe_router_params(c);
  const std::vector<double> u = draw(c, "logits", p.T * p.E, uniform(0.0, 1.0));
  std::vector<double> z(u.size());
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t e = 0; e < p.E; ++e) {
      const size_t i = static_cast<size_t>(t * p.E + e);
      if (t % 2 == 0) z[i] = -80.0 + 20.0 * u[i];
      else z[i] = (u[i] < 0.5 ? -1.0 : 1.0) * (8.0 + 22.0 * std::fabs(2.0 * u[i] - 1.0));
      z[i] = round_to(c.dtype(), z[i]);
    }
  store(in, c, p, z, std::vector<double>(static_cast<size_t>(p.E), 0.0));
}

struct RegisterMoeRouterRegimes {
  RegisterMoeRouterRegimes() {
    register_regime({"production", "moe_router",
                     "a trained router: z = mu_e + N(0, 1.5^2) with per-expert means mu_e ~ N(-1, 0.5^2), "
                     "correction bias ~ N(0, 0.1^2)",
                     {},
                     [](const Case& c, TensorMap& in) {
                       const MoeRouterParams p = moe_router_params(c);
                       store(in, c, p, production_logits(c, p), f32_bias(c, p.E, normal(0.1)));
                     }});
    register_regime({"near_ties", "moe_router",
                     "production logits with the (k+1)-th expert of every token moved to 2^-U(10,30) below the k-th "
                     "selection score (with groups, odd tokens: the first dropped group to that far below the last kept "
                     "one): flips at the narrow margins are legitimate, none at the wide ones",
                     {}, generate_near_ties});
    register_regime({"exact_ties", "moe_router",
                     "duplicated logits under a bias constant over blocks of 4 experts and repeated per group: a group "
                     "tie and an expert tie at the boundary of every token, decided by the tie rule (lower index)",
                     {}, generate_exact_ties});
    register_regime({"bias_dominant", "moe_router",
                     "production logits, bias = -3 + N(0, 0.5^2): the bias decides the selection, every selection score "
                     "is negative, and weights from biased scores differ from the unbiased ones in sign",
                     {},
                     [](const Case& c, TensorMap& in) {
                       const MoeRouterParams p = moe_router_params(c);
                       store(in, c, p, production_logits(c, p), f32_bias(c, p.E, map(normal(0.5), [](double x) { return x - 3.0; })));
                     }});
    register_regime({"saturated", "moe_router",
                     "sigmoid saturated in f32: even tokens z ~ U(-80,-60) (the renorm epsilon 1e-20 dominates the sum), "
                     "odd tokens z = +-U(8,30) (s rounds to 1); bias zero",
                     {}, generate_saturated});
  }
};
const RegisterMoeRouterRegimes register_moe_router_regimes;

// Suites. Configs (notes/model-ops.md sections 1.7 and 2): DeepSeek-V3 E=256, n_group=8, topk_group=4,
// k=8, rsf=2.5; GLM-4.5/4.6/4.7 E=160, k=8, rsf=2.5; GLM-4.5-Air E=128, rsf=1; GLM-4.7-Flash E=64,
// k=4, rsf=1.8; GLM-5.x E=256, k=8, rsf=2.5; GLM-5.3-Flash E=288, k=8, rsf=2.5; Kimi Linear E=256, k=8,
// rsf=2.446 with a bf16 gate; the GLM and Kimi configs have one group and renorm on. renorm=0 (a
// norm_topk_prob = false config) runs in bias_dominant.
DG_REGISTER_SUITE(moe_router_smoke,
                  Suite{"moe-router-smoke", "small moe_router cases: every regime, config and dtype (seconds)",
                        {
                            "moe_router(T=32,E=160,k=8,regime=production,dtype=f32,seed=0)",
                            "moe_router(T=32,E=64,k=4,rsf=1.8,regime=near_ties,dtype=f32,seed=0)",
                            "moe_router(T=32,E=128,k=8,rsf=1,regime=exact_ties,dtype=f32,seed=0)",
                            "moe_router(T=32,E=256,k=8,n_group=8,topk_group=4,renorm=0,regime=bias_dominant,dtype=f32,seed=0)",
                            "moe_router(T=32,E=288,k=8,regime=saturated,dtype=bf16,seed=0)",
                        }});
DG_REGISTER_SUITE(moe_router_gate,
                  Suite{"moe-router-gate", "the moe_router merge gate: the DeepSeek-V3, GLM and Kimi configs in production, "
                        "near ties, exact ties, a dominant bias and saturated scores",
                        {
                            "moe_router(T=512,E=256,k=8,n_group=8,topk_group=4,regime=production,dtype=f32,seed=0)",
                            "moe_router(T=512,E=160,k=8,regime=production,dtype=f32,seed=0)",
                            "moe_router(T=512,E=64,k=4,rsf=1.8,regime=production,dtype=f32,seed=0)",
                            "moe_router(T=512,E=288,k=8,regime=production,dtype=f32,seed=0)",
                            "moe_router(T=512,E=256,k=8,rsf=2.446,regime=production,dtype=bf16,seed=0)",
                            "moe_router(T=512,E=256,k=8,n_group=8,topk_group=4,regime=near_ties,dtype=f32,seed=0)",
                            "moe_router(T=512,E=160,k=8,regime=near_ties,dtype=f32,seed=0)",
                            "moe_router(T=256,E=256,k=8,n_group=8,topk_group=4,regime=exact_ties,dtype=f32,seed=0)",
                            "moe_router(T=256,E=128,k=8,rsf=1,regime=exact_ties,dtype=f32,seed=0)",
                            "moe_router(T=256,E=256,k=8,n_group=8,topk_group=4,regime=bias_dominant,dtype=f32,seed=0)",
                            "moe_router(T=256,E=288,k=8,renorm=0,regime=bias_dominant,dtype=f32,seed=0)",
                            "moe_router(T=256,E=256,k=8,n_group=8,topk_group=4,regime=saturated,dtype=f32,seed=0)",
                            "moe_router(T=256,E=64,k=4,rsf=1.8,regime=saturated,dtype=bf16,seed=0)",
                        }});

}  // namespace
}  // namespace dg

