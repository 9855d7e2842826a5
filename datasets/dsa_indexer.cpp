// Input regimes and suites of dsa_indexer (reference/dsa_indexer.h; notes/model-ops.md sections 1.4,
// 5 and 6). The indexer's queries q [B,32,128] and keys k [L,128] are the projections' bf16 output
// (LayerNormed keys: N(0,1) around a per-channel LayerNorm bias beta ~ N(0, 0.3^2); queries
// N(0, 0.5^2)); the head weights w [B,32] are the f32 weights projection, N(0,1) (heads of either
// sign). Every constructed regime starts from that draw, changes it in double and rounds once to
// the dtype; the measures (harness/ops/dsa_indexer.h) read the stored inputs, so a construction the
// rounding blurs is still judged by what it stored. Selection happens only where a row sees more
// than topk keys (section 5: test at contexts > 2048).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "datasets/dists.h"
#include "datasets/indexer_inputs.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/core/rng.h"
#include "harness/ops/dsa_indexer.h"

namespace dg {
namespace {

using indexer_inputs::normals;
using indexer_inputs::stored;

struct Draw {
  DsaIndexerParams p;
  std::vector<int64_t> ctx;
  std::vector<double> q, k, w;
};

Draw production(const Case& c) {
  Draw d{dsa_indexer_params(c), dsa_indexer_lens(c), {}, {}, {}};
  const DsaIndexerParams& p = d.p;
  d.q = normals(c, "q", p.B * p.H * p.D, 0.5);
  d.k = indexer_inputs::layernormed_keys(c, p.L, p.D);
  d.w = normals(c, "w", p.B * p.H, 1.0);
  for (double& x : d.q) x = round_to(c.dtype(), x);
  for (double& x : d.k) x = round_to(c.dtype(), x);
  for (double& x : d.w) x = round_to(DType::f32, x);
  return d;
}

void store(const Case& c, const Draw& d, TensorMap& in) {
  in["q"] = stored(c.dtype(), {d.p.B, d.p.H, d.p.D}, d.q);
  in["k"] = stored(c.dtype(), {d.p.L, d.p.D}, d.k);
  in["w"] = stored(DType::f32, {d.p.B, d.p.H}, d.w);
  in["ctx"] = stored(DType::i32, {d.p.B}, std::vector<double>(d.ctx.begin(), d.ctx.end()));
}

// Row b's visible keys ranked by the reference's rule (double scores, lower index on ties).
std::vector<int64_t> ranked(const Draw& d, int64_t b) {
  const int64_t n = d.ctx[static_cast<size_t>(b)];
  return indexer_inputs::ranked(dsa_indexer_scores(d.p, d.q.data(), d.k.data(), d.w.data(), b, n));
}

// In every row that selects: the keys ranked topk - 3 .. topk + 3 are copied, each to a random
// visible key outside the row's set (so copies sit at lower and higher indices than their
// originals). Three copies above rank topk shift the pairs so that the pair of the key ranked
// topk - 2 straddles it; `nudge` moves one element of each copy by 2^U(0,6) ulps of the dtype (a near tie),
// else the copy is exact (a tie decided by the tie rule). Rows are built in order; a later row's
// copy may overwrite a key an earlier row ranked.
void copy_boundary_keys(const Case& c, Draw& d, bool nudge) {
  const DsaIndexerParams& p = d.p;
  const TensorRng rng(c.seed(), c.str(), "boundary");
  uint64_t draw = 0;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t n = d.ctx[static_cast<size_t>(b)];
    if (n <= p.topk + 4) continue;
    const std::vector<int64_t> order = ranked(d, b);
    std::vector<char> taken(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < p.topk + 4 && j < n; ++j) taken[static_cast<size_t>(order[static_cast<size_t>(j)])] = 1;
    for (int64_t j = std::max<int64_t>(0, p.topk - 3); j < p.topk + 4 && j < n; ++j) {
      const int64_t src = order[static_cast<size_t>(j)];
      const int64_t dst = indexer_inputs::take_free(rng, draw, taken);
      if (dst < 0) continue;
      std::copy_n(d.k.begin() + src * p.D, p.D, d.k.begin() + dst * p.D);
      if (!nudge) continue;
      const int64_t e = static_cast<int64_t>(rng.uniform(draw++) * static_cast<double>(p.D));
      indexer_inputs::nudge_ulps(c.dtype(), rng, draw, d.k[static_cast<size_t>(dst * p.D + e)]);
    }
  }
}

// A few dominant keys: the queries share a direction c (q = 0.7 N(0,1) + 0.7 c), 32 keys (the
// first 4, as attention sinks, and 28 at random) are 3 c + N(0, 0.5^2), and the head weights are
// positive (|N(0,1)|): those keys outscore every other by ~100x and are always selected.
void generate_dominant(const Case& c, TensorMap& in) {
  Draw d = production(c);
  const DsaIndexerParams& p = d.p;
  const std::vector<double> dir = normals(c, "direction", p.D, 1.0), noise = normals(c, "dominant_noise", 32 * p.D, 0.5);
  const std::vector<double> qn = normals(c, "q", p.B * p.H * p.D, 1.0);
  for (int64_t i = 0; i < p.B * p.H * p.D; ++i)
    d.q[static_cast<size_t>(i)] = round_to(c.dtype(), 0.7 * qn[static_cast<size_t>(i)] + 0.7 * dir[static_cast<size_t>(i % p.D)]);
  for (double& x : d.w) x = std::fabs(x);
  const TensorRng rng(c.seed(), c.str(), "dominant_keys");
  for (int64_t j = 0; j < 32; ++j) {
    const int64_t s = j < 4 ? std::min(j, p.L - 1) : static_cast<int64_t>(rng.uniform(static_cast<uint64_t>(j)) * static_cast<double>(p.L));
    for (int64_t e = 0; e < p.D; ++e)
      d.k[static_cast<size_t>(s * p.D + e)] = round_to(c.dtype(), 3.0 * dir[static_cast<size_t>(e)] + noise[static_cast<size_t>(j * p.D + e)]);
  }
  store(c, d, in);
}

struct RegisterDsaIndexerRegimes {
  RegisterDsaIndexerRegimes() {
    register_regime({"production", "dsa_indexer",
                     "LayerNormed keys N(0,1) + beta_c (beta ~ N(0, 0.3^2)), queries N(0, 0.5^2), head weights N(0,1); "
                     "rows are the last B tokens of one prefill of L",
                     {}, [](const Case& c, TensorMap& in) { store(c, production(c), in); }});
    register_regime({"ragged", "dsa_indexer",
                     "production inputs, ragged contexts: the rows cycle through L, 1, topk, topk + 1, L/2 + 3, L - 1 "
                     "(rows that select everything, and rows with thousands of future keys to mask)",
                     {}, [](const Case& c, TensorMap& in) { store(c, production(c), in); }});
    register_regime({"near_ties", "dsa_indexer",
                     "production, then in every selecting row the keys ranked topk-3 .. topk+3 copied to random keys "
                     "outside the set with one element moved 2^U(0,6) ulps: score gaps at rank k from far below to "
                     "above an f32 kernel's error",
                     {}, [](const Case& c, TensorMap& in) {
                       Draw d = production(c);
                       copy_boundary_keys(c, d, true);
                       store(c, d, in);
                     }});
    register_regime({"exact_ties", "dsa_indexer",
                     "production, then in every selecting row the keys ranked topk-3 .. topk+3 copied exactly to random "
                     "keys outside the set: ties straddling rank k, decided by the tie rule (lower index first)",
                     {}, [](const Case& c, TensorMap& in) {
                       Draw d = production(c);
                       copy_boundary_keys(c, d, false);
                       store(c, d, in);
                     }});
    register_regime({"dominant", "dsa_indexer",
                     "queries sharing a direction, 32 keys along it (the first 4 as attention sinks) and positive head "
                     "weights: a few keys outscore the rest by ~100x",
                     {}, generate_dominant});
  }
};
const RegisterDsaIndexerRegimes register_dsa_indexer_regimes;

// Suites: H = 32, D = 128, topk = 2048 (DeepSeek-V3.2, GLM-5.x); contexts past 2048 where the
// selection happens, and one short context that selects everything.
DG_REGISTER_SUITE(dsa_indexer_smoke,
                  Suite{"dsa-indexer-smoke", "small dsa_indexer cases: every regime and dtype (seconds)",
                        {
                            "dsa_indexer(B=2,L=4096,topk=2048,regime=production,dtype=bf16,seed=0)",
                            "dsa_indexer(B=6,L=3000,topk=2048,regime=ragged,dtype=bf16,seed=0)",
                            "dsa_indexer(B=2,L=4096,topk=2048,regime=near_ties,dtype=f32,seed=0)",
                            "dsa_indexer(B=2,L=4096,topk=2048,regime=exact_ties,dtype=bf16,seed=0)",
                            "dsa_indexer(B=2,L=3072,topk=2048,regime=dominant,dtype=bf16,seed=0)",
                            "dsa_indexer(B=2,L=1024,topk=2048,regime=production,dtype=f32,seed=0)",
                            "dsa_indexer(B=2,L=600,topk=512,regime=production,dtype=bf16,seed=0)",
                        }});
DG_REGISTER_SUITE(dsa_indexer_gate,
                  Suite{"dsa-indexer-gate", "the dsa_indexer merge gate: contexts 4K to 64K, ragged rows, near and "
                        "exact ties at rank 2048, dominant keys, a short context, topk 512",
                        {
                            "dsa_indexer(B=4,L=4096,topk=2048,regime=production,dtype=bf16,seed=0)",
                            "dsa_indexer(B=2,L=16384,topk=2048,regime=production,dtype=bf16,seed=0)",
                            "dsa_indexer(B=1,L=65536,topk=2048,regime=production,dtype=bf16,seed=0)",
                            "dsa_indexer(B=2,L=8192,topk=2048,regime=production,dtype=f32,seed=0)",
                            "dsa_indexer(B=6,L=8192,topk=2048,regime=ragged,dtype=bf16,seed=0)",
                            "dsa_indexer(B=4,L=8192,topk=2048,regime=near_ties,dtype=bf16,seed=0)",
                            "dsa_indexer(B=4,L=8192,topk=2048,regime=near_ties,dtype=f32,seed=0)",
                            "dsa_indexer(B=4,L=8192,topk=2048,regime=exact_ties,dtype=bf16,seed=0)",
                            "dsa_indexer(B=4,L=4096,topk=2048,regime=dominant,dtype=bf16,seed=0)",
                            "dsa_indexer(B=2,L=2048,topk=2048,regime=production,dtype=bf16,seed=0)",
                            "dsa_indexer(B=6,L=2048,topk=512,regime=ragged,dtype=f32,seed=0)",
                        }});

}  // namespace
}  // namespace dg
