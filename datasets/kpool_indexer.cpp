// Input regimes and suites of kpool_indexer (reference/kpool_indexer.h; notes/model-ops.md sections
// 1.4 and 5). Per token the cache holds k = LN(W_k h), N(0,1) around a per-channel LayerNorm bias
// beta ~ N(0, 0.3^2), and the gate W_g h, N(0, 1.5^2) (our assumption: a gate that prefers one or two
// of a pool's tokens); ape ~ N(0, 0.5^2) (f32); queries N(0, 0.5^2); head weights N(0,1). The
// constructed regimes change that draw in double and round once to the dtype; the measures
// (harness/ops/kpool_indexer.h) read the stored inputs. Selection happens only where a row has more
// than topk complete pools (contexts past 2048 + 3 at topk = 512).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "datasets/indexer_inputs.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/core/rng.h"
#include "harness/ops/kpool_indexer.h"

namespace dg {
namespace {

using indexer_inputs::normals;
using indexer_inputs::stored;

struct Draw {
  KpoolIndexerParams p;
  KpoolInputs in;
};

void round_all(std::vector<double>& v, DType dt) {
  for (double& x : v) x = round_to(dt, x);
}

Draw production(const Case& c, double gate_sd = 1.5) {
  Draw d{kpool_indexer_params(c), {}};
  const KpoolIndexerParams& p = d.p;
  KpoolInputs& in = d.in;
  kpool_indexer_ranges(c, in.ctx, in.start);
  in.q = normals(c, "q", p.B * p.H * p.D, 0.5);
  in.w = normals(c, "w", p.B * p.H, 1.0);
  in.k = indexer_inputs::layernormed_keys(c, p.L, p.D);
  in.gate = normals(c, "gate", p.L * p.D, gate_sd);
  in.ape = normals(c, "ape", kKpoolSize * p.D, 0.5);
  for (auto* v : {&in.q, &in.k, &in.gate}) round_all(*v, c.dtype());
  for (auto* v : {&in.w, &in.ape}) round_all(*v, DType::f32);
  return d;
}

void store(const Case& c, const Draw& d, TensorMap& in) {
  const KpoolIndexerParams& p = d.p;
  in["q"] = stored(c.dtype(), {p.B, p.H, p.D}, d.in.q);
  in["w"] = stored(DType::f32, {p.B, p.H}, d.in.w);
  in["k"] = stored(c.dtype(), {p.L, p.D}, d.in.k);
  in["gate"] = stored(c.dtype(), {p.L, p.D}, d.in.gate);
  in["ape"] = stored(DType::f32, {kKpoolSize, p.D}, d.in.ape);
  in["ctx"] = stored(DType::i32, {p.B}, std::vector<double>(d.in.ctx.begin(), d.in.ctx.end()));
  in["start"] = stored(DType::i32, {p.B}, std::vector<double>(d.in.start.begin(), d.in.start.end()));
}

// In every row that selects, the pools ranked topk - 3 .. topk + 3 are copied (the k and gate rows of
// their 4 tokens) to random pools outside the row's set (the pair of the pool ranked topk - 2 then
// straddles rank topk); `nudge` moves one k element of each copy by
// 2^U(0,6) ulps of the dtype (a near tie), else the copy is exact (a tie for the tie rule).
void copy_boundary_pools(const Case& c, Draw& d, bool nudge) {
  const KpoolIndexerParams& p = d.p;
  const TensorRng rng(c.seed(), c.str(), "boundary");
  uint64_t draw = 0;
  const int64_t W = kKpoolSize * p.D;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t s0 = d.in.start[static_cast<size_t>(b)], P = (d.in.ctx[static_cast<size_t>(b)] - s0) / kKpoolSize;
    if (P <= p.topk + 4) continue;
    const std::vector<int64_t> order = indexer_inputs::ranked(kpool_indexer_scores(p, d.in, b));
    std::vector<char> taken(static_cast<size_t>(P), 0);
    for (int64_t j = 0; j < p.topk + 4; ++j) taken[static_cast<size_t>(order[static_cast<size_t>(j)])] = 1;
    for (int64_t j = std::max<int64_t>(0, p.topk - 3); j < p.topk + 4; ++j) {
      const int64_t src = order[static_cast<size_t>(j)];
      const int64_t dst = indexer_inputs::take_free(rng, draw, taken);
      if (dst < 0) continue;
      const int64_t from = (s0 + kKpoolSize * src) * p.D, to = (s0 + kKpoolSize * dst) * p.D;
      std::copy_n(d.in.k.begin() + from, W, d.in.k.begin() + to);
      std::copy_n(d.in.gate.begin() + from, W, d.in.gate.begin() + to);
      if (!nudge) continue;
      const int64_t e = static_cast<int64_t>(rng.uniform(draw++) * static_cast<double>(W));
      indexer_inputs::nudge_ulps(c.dtype(), rng, draw, d.in.k[static_cast<size_t>(to + e)]);
    }
  }
}

struct RegisterKpoolIndexerRegimes {
  RegisterKpoolIndexerRegimes() {
    register_regime({"production", "kpool_indexer",
                     "LayerNormed keys N(0,1) + beta_c, gates N(0, 1.5^2), ape N(0, 0.5^2), queries N(0, 0.5^2), head "
                     "weights N(0,1); rows are the last B tokens of one prefill of L, pools from token 0",
                     {}, [](const Case& c, TensorMap& in) { store(c, production(c), in); }});
    register_regime({"ragged", "kpool_indexer",
                     "production inputs, ragged rows: contexts L, 2051, 2054, 2053 + 2 topk, 9, L - 3 with first valid "
                     "tokens 0, 1, 2, 3, 6, 0 (pools off the grid, tails of 0 to 3 tokens, rows with no pool)",
                     {}, [](const Case& c, TensorMap& in) { store(c, production(c), in); }});
    register_regime({"near_ties", "kpool_indexer",
                     "production, then in every selecting row the pools ranked topk-3 .. topk+3 copied to random pools "
                     "outside the set with one key element moved 2^U(0,6) ulps",
                     {}, [](const Case& c, TensorMap& in) {
                       Draw d = production(c);
                       copy_boundary_pools(c, d, true);
                       store(c, d, in);
                     }});
    register_regime({"exact_ties", "kpool_indexer",
                     "production, then in every selecting row the pools ranked topk-3 .. topk+3 copied exactly to random "
                     "pools outside the set: ties straddling rank topk, decided by the tie rule (lower pool first)",
                     {}, [](const Case& c, TensorMap& in) {
                       Draw d = production(c);
                       copy_boundary_pools(c, d, false);
                       store(c, d, in);
                     }});
    register_regime({"saturated_gate", "kpool_indexer",
                     "gates N(0, 40^2): the pool softmax is one-hot in fp32 and exp(gate) overflows f32 without the max "
                     "subtracted (the reason for production's fp32 softmax with nan_to_num)",
                     {}, [](const Case& c, TensorMap& in) { store(c, production(c, 40.0), in); }});
  }
};
const RegisterKpoolIndexerRegimes register_kpool_indexer_regimes;

// Suites: H = 32, D = 128, topk = 512 pools of 4 (GLM-5.3-Flash); contexts past 2051 where the
// selection happens, and one short context that selects everything.
DG_REGISTER_SUITE(kpool_indexer_smoke,
                  Suite{"kpool-indexer-smoke", "small kpool_indexer cases: every regime and dtype (seconds)",
                        {
                            "kpool_indexer(B=2,L=4096,topk=512,regime=production,dtype=bf16,seed=0)",
                            "kpool_indexer(B=6,L=4096,topk=512,regime=ragged,dtype=bf16,seed=0)",
                            "kpool_indexer(B=2,L=4096,topk=512,regime=near_ties,dtype=f32,seed=0)",
                            "kpool_indexer(B=2,L=4096,topk=512,regime=exact_ties,dtype=bf16,seed=0)",
                            "kpool_indexer(B=2,L=4096,topk=512,regime=saturated_gate,dtype=bf16,seed=0)",
                            "kpool_indexer(B=2,L=1500,topk=512,regime=production,dtype=f32,seed=0)",
                        }});
DG_REGISTER_SUITE(kpool_indexer_gate,
                  Suite{"kpool-indexer-gate", "the kpool_indexer merge gate: contexts 4K to 64K, ragged rows and tails, "
                        "near and exact ties at rank 512, saturated gates, a short context",
                        {
                            "kpool_indexer(B=4,L=4096,topk=512,regime=production,dtype=bf16,seed=0)",
                            "kpool_indexer(B=2,L=16384,topk=512,regime=production,dtype=bf16,seed=0)",
                            "kpool_indexer(B=1,L=65536,topk=512,regime=production,dtype=bf16,seed=0)",
                            "kpool_indexer(B=2,L=8192,topk=512,regime=production,dtype=f32,seed=0)",
                            "kpool_indexer(B=6,L=8192,topk=512,regime=ragged,dtype=bf16,seed=0)",
                            "kpool_indexer(B=4,L=8192,topk=512,regime=near_ties,dtype=bf16,seed=0)",
                            "kpool_indexer(B=4,L=8192,topk=512,regime=near_ties,dtype=f32,seed=0)",
                            "kpool_indexer(B=4,L=8192,topk=512,regime=exact_ties,dtype=bf16,seed=0)",
                            "kpool_indexer(B=4,L=8192,topk=512,regime=saturated_gate,dtype=bf16,seed=0)",
                            "kpool_indexer(B=2,L=2051,topk=512,regime=production,dtype=bf16,seed=0)",
                        }});

}  // namespace
}  // namespace dg
