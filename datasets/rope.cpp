// Input regimes and suites of rope (reference/rope.h; notes/model-ops.md sections 1.2, 1.3, 2 and 5).
// x is q or k of one layer, stored in the case's dtype; positions are the case's layout
// (harness/ops/rope.h rope_positions), in i64. Shapes from the configs: GLM-4.5/4.6/4.7 q 96 heads
// (k 8) of 128 with the first 64 dims rotated, NeoX, theta 1e6; GLM-5.x MLA q_pe 64 heads (k_pe
// one shared head) of the 64-d rope slice, interleaved, theta 1e6 (GLM-5) or 8e6 (GLM-5.2/5.3);
// the DSA indexer's 32 heads of 128 with 64 rotated.
#include <cmath>
#include <cstdint>

#include "datasets/dists.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/rope.h"

namespace dg {
namespace {

using namespace dists;

// x ~ N(0, sd^2) in the case's dtype (q and k after QK-norm, or MLA's projections), and the positions.
void generate(const Case& c, TensorMap& in, double sd) {
  const RopeParams p = rope_params(c);
  make(in, c, "x", c.dtype(), {p.T, p.H, p.D}, normal(sd));
  const std::vector<int64_t> pos = rope_positions(c);
  Tensor t(DType::i64, {p.T});
  for (int64_t i = 0; i < p.T; ++i) t.data<int64_t>()[i] = pos[static_cast<size_t>(i)];
  in["positions"] = std::move(t);
}

// 2^20 + 4093: just past a 1M context, an odd distance past the power of two.
constexpr const char* kPastOneM = "1052669";

struct RegisterRopeRegimes {
  RegisterRopeRegimes() {
    register_regime({"glm4", "rope",
                     "GLM-4.5/4.6/4.7 q/k after QK-norm, x ~ N(0,1): head_dim 128 with the first 64 dims rotated, NeoX "
                     "pairing, theta 1e6, a prefill chunk",
                     {}, [](const Case& c, TensorMap& in) { generate(c, in, 1.0); }});
    register_regime({"glm5_mla", "rope",
                     "GLM-5.x MLA's 64-d rope slice (q_pe per head, k_pe one shared head), x ~ N(0,1): interleaved "
                     "(GPT-J) pairing, theta 1e6",
                     {{"D", "64"}, {"d_rope", "64"}, {"style", "gptj"}},
                     [](const Case& c, TensorMap& in) { generate(c, in, 1.0); }});
    register_regime({"long_positions", "rope",
                     "a decode batch at every context length: positions spread geometrically from 0 to 2^20 + 4093, "
                     "where an f32 angle pos * inv_freq is off by up to 2^-4 rad for the high-frequency pairs; x ~ N(0,1)",
                     {{"layout", "spread"}, {"pos_max", kPastOneM}},
                     [](const Case& c, TensorMap& in) { generate(c, in, 1.0); }});
    register_regime({"high_theta", "rope",
                     "GLM-5.2/5.3's theta 8e6 on the interleaved 64-d MLA slice, positions spread to 2^20 + 4093: the "
                     "low-frequency pairs turn by under a radian over a 1M context, the high ones by 2^20 rad",
                     {{"theta", "8e6"}, {"D", "64"}, {"d_rope", "64"}, {"style", "gptj"}, {"layout", "spread"},
                      {"pos_max", kPastOneM}},
                     [](const Case& c, TensorMap& in) { generate(c, in, 1.0); }});
    register_regime({"counter_edges", "rope",
                     "a prefill chunk across 2^16 (positions 65504 ..): a 16-bit position counter wraps in the middle; "
                     "with pos0 near 2^24 - T, the last integers an f32 position holds; x ~ N(0,1)",
                     {{"pos0", "65504"}}, [](const Case& c, TensorMap& in) { generate(c, in, 1.0); }});
  }
};
const RegisterRopeRegimes register_rope_regimes;

// Suites. Gate cases hold 2^18 to 2^19 outputs (a call of a few hundred us on 2 cores).
DG_REGISTER_SUITE(rope_smoke,
                  Suite{"rope-smoke", "small rope cases: every regime, pairing, layout, dtype and theta (seconds)",
                        {
                            "rope(T=16,H=4,D=128,d_rope=64,regime=glm4,dtype=bf16,seed=0)",
                            "rope(T=16,H=4,D=64,d_rope=64,regime=glm5_mla,dtype=f32,seed=0)",
                            "rope(T=64,H=2,D=128,d_rope=64,regime=long_positions,dtype=bf16,seed=0)",
                            "rope(T=64,H=2,D=64,d_rope=64,regime=high_theta,dtype=f32,seed=0)",
                            "rope(T=64,H=2,D=96,d_rope=32,theta=10000,regime=counter_edges,dtype=bf16,seed=0)",
                            "rope(T=8,H=2,D=64,d_rope=64,pos0=16777208,regime=counter_edges,dtype=f32,seed=0)",
                        }});
DG_REGISTER_SUITE(rope_gate,
                  Suite{"rope-gate", "the rope merge gate: GLM-4.x q/k (NeoX, 64 of 128), GLM-5.x MLA slices and the "
                        "indexer (interleaved), positions to 2^20 + 4093 and near 2^24, theta 1e4 to 8e6, both dtypes",
                        {
                            "rope(T=48,H=96,D=128,d_rope=64,regime=glm4,dtype=bf16,seed=0)",
                            "rope(T=512,H=8,D=128,d_rope=64,pos0=130000,regime=glm4,dtype=bf16,seed=0)",
                            "rope(T=128,H=64,D=64,d_rope=64,regime=glm5_mla,dtype=bf16,seed=0)",
                            "rope(T=512,H=8,D=128,d_rope=64,style=gptj,regime=long_positions,dtype=bf16,seed=0)",
                            "rope(T=512,H=16,D=64,d_rope=64,style=gptj,regime=long_positions,dtype=f32,seed=0)",
                            "rope(T=1024,H=8,D=64,d_rope=64,regime=high_theta,dtype=bf16,seed=0)",
                            "rope(T=512,H=8,D=128,d_rope=128,theta=10000,regime=long_positions,dtype=f32,seed=0)",
                            "rope(T=512,H=8,D=128,d_rope=64,regime=counter_edges,dtype=bf16,seed=0)",
                            "rope(T=256,H=16,D=80,d_rope=48,theta=10000,pos0=16776960,regime=counter_edges,dtype=f32,seed=0)",
                        }});

}  // namespace
}  // namespace dg
