#include "datasets/suites.h"

#include <fmt/format.h>

namespace dg {
namespace {

std::vector<Suite> build() {
  std::vector<Suite> v;

  // kda-smoke: small and odd shapes, every gate and beta mode, varlen, GVA, layouts and decode;
  // under 30 s on 2 cores for all CPU candidates.
  v.push_back({"kda-smoke", "small, odd KDA cases covering every option and the decode op (seconds)",
               {
                   "kda(T=1,H=1,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)",
                   "kda(T=63,H=2,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)",
                   "kda(T=65,H=1,K=64,V=64,regime=glm_safe_gate,dtype=bf16,seed=0)",
                   "kda(T=1024,H=2,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)",
                   "kda(T=1024,H=1,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)",
                   "kda(T=256,H=2,HV=4,K=64,V=64,regime=zero_gate,dtype=f32,seed=0)",
                   "kda(T=200,H=1,K=64,V=64,regime=strong_decay,dtype=bf16,seed=0)",
                   "kda(T=200,H=1,K=64,V=64,regime=neg_eigval,dtype=bf16,seed=0)",
                   "kda(T=130,H=1,K=60,V=100,regime=odd_dims,dtype=bf16,seed=0)",
                   "kda(T=1208,H=1,K=64,V=64,regime=varlen_ragged,dtype=bf16,seed=0)",
                   "kda(T=200,H=1,K=64,V=64,layout=vfirst,regime=nonsymmetric_h0,dtype=bf16,seed=0)",
                   "kda_decode(T=256,B=4,H=2,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)",
                   "kda_decode(T=256,B=2,H=1,K=64,V=64,layout=vfirst,regime=long_memory,dtype=bf16,seed=0)",
               }});

  // kda-regimes: every regime at T=4096 (odd_dims keeps its K=60, V=100).
  Suite regimes{"kda-regimes", "every KDA input regime at T=4096, H=2, K=V=128", {}};
  for (const char* r : {"kimi_linear", "glm_safe_gate", "long_memory", "zero_gate", "forget_mix", "forget_burst",
                        "strong_decay", "collinear_keys", "neg_eigval", "tiny_norm", "unnormalized_keys", "nonsymmetric_h0"})
    regimes.cases.push_back(fmt::format("kda(T=4096,H=2,K=128,V=128,regime={},dtype=bf16,seed=0)", r));
  regimes.cases.push_back("kda(T=4096,H=2,K=128,V=128,layout=vfirst,regime=nonsymmetric_h0,dtype=bf16,seed=0)");
  regimes.cases.push_back("kda(T=4096,H=2,K=128,V=128,regime=varlen_ragged,dtype=bf16,seed=0)");
  regimes.cases.push_back("kda(T=4096,H=2,K=60,V=100,regime=odd_dims,dtype=bf16,seed=0)");
  v.push_back(regimes);

  // kda-long: production context lengths for the drift curve, one head of K = V = 128.
  // The f64 tier is the one made for full 1M-token runs (DESIGN.md); --certify measures it against dd.
  Suite long_suite{"kda-long", "KDA at T = 1K ... 1M tokens, H=1, K=V=128, long_memory and kimi_linear; f64 reference",
                   {}, "f64"};
  for (const char* r : {"long_memory", "kimi_linear"})
    for (const char* t : {"1024", "4096", "16384", "65536", "262144", "1048576"})
      long_suite.cases.push_back(fmt::format("kda(T={},H=1,K=128,V=128,regime={},dtype=bf16,seed=0)", t, r));
  v.push_back(long_suite);

  // Gate suites: the regimes and lengths that decide a merge. Two heads, so both cores work for
  // either candidate; long_memory at 64K for the drift rule.
  // Two cheap cases carry the axes the others miss: GVA with H >= 2 (a wrong value-to-key head map
  // is invisible at H = 1) on tiny_norm (where the L2 norm's epsilon decides), and one sequence past
  // 2^16 + 1 tokens of small heads (16-bit position counters, states dropped every 32K tokens).
  // K = V = 64, not smaller: the speed verdict is judged on every case, and at K = V = 32 the chunk
  // kernel is honestly slower than the recurrent one (0.85x), a shape no production model uses.
  const char* gva_tiny = "kda(T=1024,H=2,HV=4,K=64,V=64,regime=tiny_norm,dtype=bf16,seed=0)";
  const char* past_64k = "kda(T=66000,H=1,K=64,V=64,regime=long_memory,dtype=bf16,seed=0)";
  v.push_back({"kda-gate-quick", "the KDA merge gate in under a minute: production gates, long memory, varlen, GVA, past 64K", {
                   "kda(T=4096,H=2,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)",
                   "kda(T=4096,H=2,K=128,V=128,regime=glm_safe_gate,dtype=bf16,seed=0)",
                   "kda(T=16384,H=2,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)",
                   "kda(T=4096,H=2,K=64,V=64,regime=varlen_ragged,dtype=bf16,seed=0)",
                   gva_tiny,
                   past_64k,
                   // bursts of forgetting: the reverse-cumsum pitfall (kda_mutant_chunk_gamma_diff)
                   "kda(T=1024,H=2,K=64,V=64,regime=forget_burst,dtype=bf16,seed=0)",
               }});
  Suite gate{"kda-gate", "the KDA merge gate: every regime, GVA, long context past 64K (a few minutes)", {}};
  // strong_decay on f32 inputs: gates of full precision, whose chunk-local cumsums round (bf16
  // gates of this size sum exactly). forget_burst exposes the reverse-cumsum pitfall
  // (kda_mutant_chunk_gamma_diff) by 5-7 bits: its gates are formed in f32 from the raw gate.
  for (const char* r : {"kimi_linear", "glm_safe_gate", "zero_gate", "forget_mix", "forget_burst", "strong_decay",
                        "collinear_keys", "neg_eigval", "tiny_norm", "unnormalized_keys"})
    gate.cases.push_back(fmt::format("kda(T=4096,H=2,K=128,V=128,regime={},dtype={},seed=0)", r,
                                     std::string(r) == "strong_decay" ? "f32" : "bf16"));
  gate.cases.push_back("kda(T=4096,H=2,K=128,V=128,layout=vfirst,regime=nonsymmetric_h0,dtype=bf16,seed=0)");
  gate.cases.push_back("kda(T=4096,H=2,K=64,V=64,regime=varlen_ragged,dtype=bf16,seed=0)");
  gate.cases.push_back("kda(T=4096,H=2,K=60,V=100,regime=odd_dims,dtype=bf16,seed=0)");
  gate.cases.push_back("kda(T=65536,H=2,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)");
  gate.cases.push_back("kda(T=65536,H=2,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)");
  gate.cases.push_back(gva_tiny);
  gate.cases.push_back(past_64k);
  // The values no case above takes (driftgate list suites --coverage): GVA ratio 4 with B = 2, an
  // explicit query scale and the lower-bound gate without A_log on f16 inputs; varlen with empty
  // segments; f32 and f64 stored inputs.
  gate.cases.push_back("kda(T=2048,B=2,H=2,HV=8,K=64,V=64,a_log=0,scale=0.1,regime=glm_safe_gate,dtype=f16,seed=0)");
  gate.cases.push_back("kda(T=4096,H=2,K=64,V=64,seqlens=1/0/15/63/64/65/0/1000,regime=varlen_ragged,dtype=bf16,seed=0)");
  gate.cases.push_back("kda(T=1000,H=2,K=64,V=64,regime=collinear_keys,dtype=f32,seed=0)");
  gate.cases.push_back("kda(T=1024,H=2,K=128,V=128,regime=kimi_linear,dtype=f64,seed=0)");
  v.push_back(gate);

  // kda-gate-long: one sequence past 2^20 + 1 tokens (1M, the production context) of one small head,
  // on the regime where rounding accumulates (long_memory: the drift rule judges its growth) and on
  // the production gate; f64 reference, as kda-long (its certification is measured there).
  v.push_back({"kda-gate-long", "the KDA merge gate past 2^20 + 1 tokens: one small head, long memory and production gates; f64 reference",
               {
                   "kda(T=1048577,H=1,K=64,V=64,regime=long_memory,dtype=bf16,seed=0)",
                   "kda(T=1048577,H=1,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)",
               },
               "f64"});

  // layer-smoke: the ops around KDA in the decode layer (reference/layer_ops.h) and the fused decode
  // step, every regime of each; seconds.
  v.push_back({"layer-smoke", "causal_conv1d, rmsnorm_gated and the fused KDA decode step, every regime (seconds)", {
                   "causal_conv1d(T=64,B=2,D=256,regime=kimi_linear,dtype=bf16,seed=0)",
                   "causal_conv1d(T=33,D=100,W=3,state=0,regime=kimi_linear,dtype=bf16,seed=0)",
                   "causal_conv1d(T=64,B=2,D=256,regime=cancel,dtype=f32,seed=0)",
                   "rmsnorm_gated(N=256,D=128,regime=kimi_linear,dtype=bf16,seed=0)",
                   "rmsnorm_gated(N=256,D=128,regime=tiny_rms,dtype=bf16,seed=0)",
                   "rmsnorm_gated(N=256,D=100,regime=saturated_gate,dtype=bf16,seed=0)",
                   "kda_decode_fused(T=64,B=4,H=2,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)",
                   "kda_decode_fused(T=64,B=2,H=2,K=64,V=64,regime=glm_safe_gate,dtype=bf16,seed=0)",
                   "kda_decode_fused(T=256,H=1,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)",
               }});

  // kda-decode-gate: the merge gate of the decode step (`gate --base kda_decode_cpu_f32 --suite
  // kda-decode-gate`): several sequences on reversed pool slots (a slot mistake shows), GVA with two
  // key heads, the l2norm epsilon's regime, a non-symmetric carried state in a V-first pool (a
  // transposed pool shows), a long decode past 1024 steps (the drift rule applies), the lower-bound
  // gate and odd dims, then every other value of the op once (list suites --coverage: none missing);
  // seconds on 2 cores. It kills every kda_decode mutant (datasets/kill_rates.json).
  v.push_back({"kda-decode-gate", "the KDA decode-step merge gate: pool slots, GVA, eps, V-first carried state, 2K steps, every value (seconds)", {
                   "kda_decode(T=256,B=4,H=2,HV=4,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)",
                   "kda_decode(T=128,B=2,H=2,K=64,V=64,regime=tiny_norm,dtype=bf16,seed=0)",
                   "kda_decode(T=256,B=3,H=1,K=64,V=64,layout=vfirst,regime=nonsymmetric_h0,dtype=bf16,seed=0)",
                   "kda_decode(T=2048,B=2,H=1,K=64,V=64,regime=long_memory,dtype=bf16,seed=0)",
                   "kda_decode(T=256,B=2,H=2,K=128,V=128,regime=glm_safe_gate,dtype=bf16,seed=0)",
                   "kda_decode(T=128,B=2,H=1,K=60,V=100,regime=odd_dims,dtype=f32,seed=0)",
                   // every other value of the op, on small cases: GVA 4 at B = 1 with a given scale and
                   // the gate without A_log in f16; negative eigenvalues in f64; no l2norm; the
                   // remaining regimes.
                   "kda_decode(T=64,H=2,HV=8,K=32,V=32,a_log=0,scale=0.1,regime=glm_safe_gate,dtype=f16,seed=0)",
                   "kda_decode(T=128,B=2,H=1,K=64,V=64,regime=neg_eigval,dtype=f64,seed=0)",
                   "kda_decode(T=128,B=2,H=1,K=64,V=64,regime=unnormalized_keys,dtype=bf16,seed=0)",
                   "kda_decode(T=128,B=2,H=1,K=32,V=32,regime=strong_decay,dtype=bf16,seed=0)",
                   "kda_decode(T=128,B=2,H=1,K=32,V=32,regime=zero_gate,dtype=bf16,seed=0)",
                   "kda_decode(T=128,B=2,H=1,K=32,V=32,regime=forget_mix,dtype=bf16,seed=0)",
                   "kda_decode(T=128,B=2,H=1,K=32,V=32,regime=forget_burst,dtype=bf16,seed=0)",
                   "kda_decode(T=128,B=2,H=1,K=32,V=32,regime=collinear_keys,dtype=bf16,seed=0)",
               }});

  // kda-decode-gpu: the production decode shape (H=32 heads of K = V = 128, V-first state pools) at
  // B = 1, 8, 64 and 256 sequences, 8 steps each, plain and fused, and the plain step on K-first
  // pools at B=64; what scripts/gpu-check.sh gates and benches (state read + write: 4 MiB per
  // sequence per step). f64 reference: the candidates hold f32 states.
  Suite decode_gpu{"kda-decode-gpu",
                   "KDA decode at B = 1, 8, 64, 256, H=32, K=V=128, V-first pools, plain and fused; K-first at B=64",
                   {}, "f64"};
  for (const char* op : {"kda_decode", "kda_decode_fused"})
    for (const char* b : {"", "B=8,", "B=64,", "B=256,"})   // (B=1 is the default: canonical strings omit it)
      decode_gpu.cases.push_back(
          fmt::format("{}(T=8,{}H=32,K=128,V=128,layout=vfirst,regime=kimi_linear,dtype=bf16,seed=0)", op, b));
  decode_gpu.cases.push_back("kda_decode(T=8,B=64,H=32,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)");
  v.push_back(decode_gpu);

  // kda-selftest: small cases on which `driftgate selftest` proves every canary is caught quickly.
  v.push_back({"kda-selftest", "two small KDA cases for driftgate selftest (seconds)", {
                   "kda(T=512,H=2,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)",
                   "kda(T=1024,H=2,K=64,V=64,regime=long_memory,dtype=bf16,seed=0)",
               }});
  return v;
}

}  // namespace

const std::vector<Suite>& all_suites() {
  static const std::vector<Suite> suites = build();
  return suites;
}

const Suite* find_suite(std::string_view name) {
  for (const Suite& s : all_suites())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<Case> resolve_cases(const std::string& suite_name, const std::vector<std::string>& case_strs, const char* verb) {
  if (suite_name.empty() == case_strs.empty())
    throw InputError(fmt::format("{}: give exactly one of --case or --suite", verb));
  std::vector<Case> cases;
  if (!suite_name.empty()) {
    const Suite* s = find_suite(suite_name);
    if (!s) {
      std::string known;
      for (const Suite& k : all_suites()) known += (known.empty() ? "" : ", ") + k.name;
      throw InputError(fmt::format("unknown suite '{}' (suites: {})", suite_name, known));
    }
    for (const std::string& cs : s->cases) cases.push_back(parse_case(cs));
  }
  for (const std::string& cs : case_strs) cases.push_back(parse_case(cs));
  return cases;
}

Tier resolve_tier(const std::string& asked, const std::string& suite_name) {
  const Suite* suite = suite_name.empty() ? nullptr : find_suite(suite_name);
  std::string name = !asked.empty() ? asked : suite && !suite->tier.empty() ? suite->tier : "dd";
  auto t = parse_tier(name);
  if (!t) throw InputError(fmt::format("unknown reference tier '{}' (tiers: f64, dd, mpfr127, mpfr256, f128)", name));
  return *t;
}

}  // namespace dg
