// Input regimes and suites of moe_combine (reference/moe_combine.h; notes/model-ops.md sections 1.7,
// 2 and 5). The experts' and shared outputs are stored in the case's dtype, the router's weights in
// f32: sigmoid scores of the k selected experts renormalised to sum 1 (GLM's and DeepSeek-V3's
// noaux_tc router; rsf is the op's, applied after).
#include <cmath>
#include <cstdint>
#include <vector>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/moe_combine.h"

namespace dg {
namespace {

using namespace dists;

// [T,k] weights: s_j = sigmoid(z_j + 1.5), z ~ N(0,1) (selected experts score high), w_j = s_j / sum s
// in f32.
std::vector<double> router_weights(const Case& c, const MoeCombineParams& p) {
  std::vector<double> z(static_cast<size_t>(p.T * p.k)), w(z.size());
  TensorRng(c.seed(), c.str(), "weights").normal(0, z);
  for (int64_t t = 0; t < p.T; ++t) {
    float sum = 0.0f;
    std::vector<float> s(static_cast<size_t>(p.k));
    for (int64_t j = 0; j < p.k; ++j) sum += s[static_cast<size_t>(j)] = static_cast<float>(sigmoid(z[static_cast<size_t>(t * p.k + j)] + 1.5));
    for (int64_t j = 0; j < p.k; ++j) w[static_cast<size_t>(t * p.k + j)] = s[static_cast<size_t>(j)] / sum;
  }
  return w;
}

void put(TensorMap& in, const std::string& name, DType dt, std::vector<int64_t> shape, const std::vector<double>& v) {
  Tensor t(dt, std::move(shape));
  t.write(0, v);
  in[name] = std::move(t);
}

// Experts' outputs E[t][j][h] = sd_tj N(0,1), sd_tj log-uniform in [1/4, 4] (experts differ in
// scale), and the shared output ~ N(0, shared_sd^2).
void generate(const Case& c, TensorMap& in, double shared_sd) {
  const MoeCombineParams p = moe_combine_params(c);
  put(in, "weights", DType::f32, {p.T, p.k}, router_weights(c, p));
  std::vector<double> sd(static_cast<size_t>(p.T * p.k));
  TensorRng(c.seed(), c.str(), "expert_scale").uniform(0, sd);
  make(in, c, "expert_out", c.dtype(), {p.T, p.k, p.H}, [&](const TensorRng& r, uint64_t i0, std::span<double> out) {
    r.normal(i0, out);
    for (size_t j = 0; j < out.size(); ++j) out[j] *= std::exp2(4 * sd[(i0 + j) / static_cast<uint64_t>(p.H)] - 2);
  });
  if (p.shared) make(in, c, "shared", c.dtype(), {p.T, p.H}, normal(shared_sd));
}

// Slots in pairs (2i, 2i+1) that nearly cancel: E_{2i+1} = -(a_{2i} / a_{2i+1}) E_{2i} (1 + 1e-3 z),
// rounded to the dtype, with a_j the slot factors of the case's rsf placement; an odd last slot and
// the shared output ~ N(0, 1e-3^2). The result is ~1e-3 of the terms.
void generate_cancel(const Case& c, TensorMap& in) {
  const MoeCombineParams p = moe_combine_params(c);
  const std::vector<double> w = router_weights(c, p);
  put(in, "weights", DType::f32, {p.T, p.k}, w);
  std::vector<double> e(static_cast<size_t>(p.T * p.k * p.H)), z(e.size());
  TensorRng(c.seed(), c.str(), "expert_out").normal(0, e);
  TensorRng(c.seed(), c.str(), "perturb").normal(0, z);
  for (int64_t t = 0; t < p.T; ++t) {
    const std::vector<double> a = moe_combine_factors(p, w.data() + t * p.k);
    for (int64_t j = 0; j < p.k; ++j)
      for (int64_t h = 0; h < p.H; ++h) {
        const size_t i = static_cast<size_t>((t * p.k + j) * p.H + h);
        if (j % 2 == 0) e[i] = j + 1 < p.k ? round_to(c.dtype(), e[i]) : 1e-3 * e[i];
        else e[i] = -(a[static_cast<size_t>(j - 1)] / a[static_cast<size_t>(j)]) * e[i - static_cast<size_t>(p.H)] * (1 + 1e-3 * z[i]);
      }
  }
  put(in, "expert_out", c.dtype(), {p.T, p.k, p.H}, e);
  if (p.shared) make(in, c, "shared", c.dtype(), {p.T, p.H}, normal(1e-3));
}

struct RegisterMoeCombineRegimes {
  RegisterMoeCombineRegimes() {
    register_regime({"production", "moe_combine",
                     "experts' outputs N(0, sd^2) with sd log-uniform in [1/4, 4] per token and slot, shared N(0,1), "
                     "weights: sigmoid(N(0,1) + 1.5) of the selected experts renormalised to sum 1 (f32)",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, 1.0); }});
    register_regime({"cancel", "moe_combine",
                     "slot pairs whose weighted outputs cancel to 1e-3 (E_{2i+1} = -(a_{2i}/a_{2i+1}) E_{2i} (1 + 1e-3 z)), "
                     "shared N(0, 1e-3^2): the result is ~1e-3 of its terms (plus the dtype's rounding of the cancelling slot), so the accumulation's precision shows",
                     {}, generate_cancel});
    register_regime({"large_shared", "moe_combine",
                     "the production experts with a shared output N(0, 100^2): where rsf and the shared add are "
                     "placed decides the result",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, 100.0); }});
  }
};
const RegisterMoeCombineRegimes register_moe_combine_regimes;

// Suites. Shapes from the configs (notes/model-ops.md section 2): top-8 routing with hidden 4096
// (GLM-4.5-Air, rsf 1; GLM-5.3-Flash, rsf 2.5), 5120 (GLM-4.5, rsf 2.5), 6144 (GLM-5.x, rsf 2.5),
// 2304 (Kimi-Linear, rsf 2.446), 7168 (DeepSeek-V3, rsf 2.5); top-4 with hidden 2048 (GLM-4.7-Flash,
// rsf 1.8). T = 16 decode
// tokens to 256 a prefill chunk; the gate's reference is the f64 tier (Dot2; --certify measures it).
DG_REGISTER_SUITE(moe_combine_smoke,
                  Suite{"moe-combine-smoke", "small moe_combine cases: every regime, dtype and rsf placement, with and "
                        "without the shared expert, top-4 and top-8, odd H (seconds)",
                        {
                            "moe_combine(T=16,topk=8,H=4096,rsf=2.5,regime=production,dtype=bf16,seed=0)",
                            "moe_combine(T=8,topk=8,H=1000,rsf=2.5,rsf_on=output,regime=production,dtype=f32,seed=0)",
                            "moe_combine(T=8,topk=4,H=2048,rsf=1.8,regime=cancel,dtype=bf16,seed=0)",
                            "moe_combine(T=8,topk=8,H=512,rsf=2.5,rsf_on=output,regime=cancel,dtype=f16,seed=0)",
                            "moe_combine(T=8,topk=8,H=300,rsf=2.446,regime=large_shared,dtype=bf16,seed=0)",
                            "moe_combine(T=4,topk=8,H=256,shared=0,regime=production,dtype=f64,seed=0)",
                        }});
DG_REGISTER_SUITE(moe_combine_gate,
                  Suite{"moe-combine-gate", "the moe_combine merge gate: the configs' widths, top-k and rsf, both rsf "
                        "placements, cancellation, a large shared output, no shared expert, every dtype; f64 reference",
                        {
                            "moe_combine(T=64,topk=8,H=6144,rsf=2.5,regime=production,dtype=bf16,seed=0)",
                            "moe_combine(T=64,topk=8,H=5120,rsf=2.5,rsf_on=output,regime=production,dtype=bf16,seed=0)",
                            "moe_combine(T=256,topk=8,H=4096,regime=production,dtype=bf16,seed=0)",
                            "moe_combine(T=64,topk=4,H=2048,rsf=1.8,regime=cancel,dtype=bf16,seed=0)",
                            "moe_combine(T=64,topk=8,H=4096,rsf=2.5,rsf_on=output,regime=cancel,dtype=f32,seed=0)",
                            "moe_combine(T=64,topk=8,H=2304,rsf=2.446,regime=large_shared,dtype=bf16,seed=0)",
                            "moe_combine(T=64,topk=8,H=4100,rsf=2.5,rsf_on=output,regime=large_shared,dtype=f16,seed=0)",
                            "moe_combine(T=64,topk=8,H=7168,rsf=2.5,shared=0,regime=production,dtype=f64,seed=0)",
                        },
                        "f64"});

}  // namespace
}  // namespace dg
