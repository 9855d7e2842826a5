// KDA input regimes and suites, of kda and kda_decode (the suites are at the end). Regimes: named,
// documented input distributions from the precision pitfalls of KDA kernels
// (../shared/notes/kda-numerics.md, "Precision pitfalls checklist"). Every regime is one table entry:
// the parameter defaults it implies and how it draws each tensor. Unlisted tensors use the baseline
// below. Element i of tensor X is a pure function of (seed, case string, X, i).
//
// Baseline: q, k, v ~ N(0,1); pregated g = logsigmoid(N(0,1)); raw gate f ~ N(0,1); beta =
// sigmoid(N(0,1)); beta logit b ~ N(0,1); A_log = log U(1,16); dt_bias = softplus^-1(dt) with dt
// log-uniform in [1e-3, 1e-1] (Kimi Linear's initialisation); h0 ~ N(0,1).
// Stored dtypes: q, k, v, g, beta in the case's dtype; A_log, dt_bias, h0 in f32 (as FLA requires).
#include <cmath>
#include <algorithm>
#include <functional>
#include <span>
#include <string>

#include <fmt/format.h>

#include "harness/ops/kda.h"
#include "harness/cases/registry.h"
#include "harness/core/rng.h"
#include "harness/core/threads.h"
#include "datasets/dists.h"
#include "datasets/suites.h"

namespace dg {
namespace {

using namespace dists;

struct KdaDists {
  Dist q = normal(), k = normal(), v = normal();
  Dist g = map(normal(), logsigmoid);
  Dist f = normal();
  Dist beta = map(normal(), sigmoid);
  Dist b = normal();
  Dist A_log = map(uniform(1.0, 16.0), [](double u) { return std::log(u); });
  Dist dt_bias = map(uniform(std::log(1e-3), std::log(1e-1)), [](double u) {
    double dt = std::exp(u);
    return dt + std::log(-std::expm1(-dt));   // softplus^-1(dt) = log(exp(dt) - 1)
  });
  Dist h0 = normal();
};

void generate(const Case& c, const KdaDists& d, TensorMap& in) {
  KdaParams p = kda_params(c);
  DType dt = c.dtype();
  auto make = [&](const std::string& name, DType type, std::vector<int64_t> shape, const Dist& dist) {
    Tensor t(type, std::move(shape));
    fill(t, c, name, dist);
    in[name] = std::move(t);
  };
  make("q", dt, {p.B, p.T, p.H, p.K}, d.q);
  make("k", dt, {p.B, p.T, p.H, p.K}, d.k);
  make("v", dt, {p.B, p.T, p.HV, p.V}, d.v);
  make("g", dt, {p.B, p.T, p.HV, p.K}, p.gate == KdaGate::pregated ? d.g : d.f);
  make("beta", dt, {p.B, p.T, p.HV}, p.beta == KdaBeta::given ? d.beta : d.b);
  if (p.gate != KdaGate::pregated) {
    if (p.use_A_log) make("A_log", DType::f32, {p.HV}, d.A_log);
    make("dt_bias", DType::f32, {p.HV * p.K}, d.dt_bias);
  }
  if (p.has_h0) {
    std::vector<int64_t> s = p.state_v_first ? std::vector<int64_t>{p.num_seqs(), p.HV, p.V, p.K}
                                             : std::vector<int64_t>{p.num_seqs(), p.HV, p.K, p.V};
    make("h0", DType::f32, s, d.h0);
  }
  if (!p.cu_seqlens.empty()) {
    Tensor cu(DType::i64, {static_cast<int64_t>(p.cu_seqlens.size())});
    for (size_t i = 0; i < p.cu_seqlens.size(); ++i) cu.data<int64_t>()[i] = p.cu_seqlens[i];
    in["cu_seqlens"] = std::move(cu);
  }
}

struct RegimeDef {
  const char* name;
  const char* doc;
  std::map<std::string, std::string> defaults;
  std::function<void(KdaDists&, const KdaParams&)> tweak;
  bool prefill_only = false;
};

const std::vector<RegimeDef>& regime_table() {
  static const std::vector<RegimeDef> table = {
      {"kimi_linear", "production Kimi Linear gate: g = -exp(A_log) softplus(f + dt_bias), A_log = log U(1,16), "
       "dt_bias = softplus^-1(dt), dt log-uniform in [1e-3,1e-1]; beta = sigmoid(b)",
       {{"gate", "softplus"}, {"beta", "sigmoid"}}, [](KdaDists&, const KdaParams&) {}},
      {"glm_safe_gate", "lower-bound (safe) gate g = -5 sigmoid(exp(A_log)(f + dt_bias)) with A_log = 0, as the "
       "safe-gate layer initialises it; beta = sigmoid(b)",
       {{"gate", "lower_bound"}, {"lb", "-5"}, {"beta", "sigmoid"}}, [](KdaDists& d, const KdaParams&) { d.A_log = constant(0.0); }},
      {"long_memory", "near-zero decay g ~ U[-1e-4, 0], small beta ~ U[1e-3, 1e-2] and a carried initial state "
       "(decode continues a prefilled context): memory barely fades, so rounding accumulates with context instead "
       "of decaying, and a state stored in bf16 cannot even apply the decay (1 - 5e-5 rounds to 1)",
       {{"h0", "1"}}, [](KdaDists& d, const KdaParams&) { d.g = uniform(-1e-4, 0.0); d.beta = uniform(1e-3, 1e-2); }},
      {"zero_gate", "g = 0 exactly: no decay at all; exercises chunk-boundary terms that decaying gates hide",
       {}, [](KdaDists& d, const KdaParams&) { d.g = constant(0.0); }},
      {"forget_mix", "g = 0 with 1% of elements at -1000 (near-total forgetting of that channel)",
       {}, [](KdaDists& d, const KdaParams&) {
         d.g = map(uniform(0.0, 1.0), [](double u) { return u < 0.01 ? -1000.0 : 0.0; });
       }},
      {"forget_burst", "the Kimi Linear gate with 1% of the raw gate f at +60 (its top percentile): bursts of near-total forgetting "
       "(g = -60 A) between ordinary decays computed in f32, so a chunk's cumulative gate sits near -60 A to -960 "
       "while the terms after a burst still weigh ~1 (a suffix sum formed as a difference of two such inclusive "
       "sums loses |G| 2^-24: the reverse-cumsum pitfall)",
       {{"gate", "softplus"}, {"beta", "sigmoid"}}, [](KdaDists& d, const KdaParams&) {
         d.f = map(normal(), [](double z) { return z > 2.326 ? 60.0 : z; });   // P(z > 2.326) = 1%
       }},
      {"strong_decay", "g ~ U[-5, -1.4] per element: chunk-local cumulative gates of 64 tokens reach -90 to -320, "
       "past the f32 exp range",
       {}, [](KdaDists& d, const KdaParams&) { d.g = uniform(-5.0, -1.4); }},
      {"collinear_keys", "all-positive q, k ~ U(0,1) (normalized keys strongly correlated) with beta ~ U(0.9, 1): "
       "ill-conditioned (I + L)",
       {}, [](KdaDists& d, const KdaParams&) { d.q = uniform(0.0, 1.0); d.k = uniform(0.0, 1.0); d.beta = uniform(0.9, 1.0); }},
      {"neg_eigval", "beta = 2 sigmoid(b) in (0, 2) with b ~ N(0, 2): negative eigenvalues of the transition",
       {{"beta", "sigmoid2"}}, [](KdaDists& d, const KdaParams&) { d.b = normal(2.0); }},
      {"tiny_norm", "q, k ~ N(0, 1e-4): norms near 1e-3, where the eps inside the L2 norm's sqrt matters",
       {}, [](KdaDists& d, const KdaParams&) { d.q = normal(1e-4); d.k = normal(1e-4); }},
      {"unnormalized_keys", "no L2 norm, |k| ~ 1.5 and beta ~ U(0.5, 1): I - beta k k^T is no longer a contraction",
       {{"l2norm", "0"}}, [](KdaDists& d, const KdaParams& p) {
         d.k = normal(1.5 / std::sqrt(static_cast<double>(p.K)));
         d.beta = uniform(0.5, 1.0);
       }},
      {"nonsymmetric_h0", "a random non-symmetric initial state with slow decay g = logsigmoid(N(0,1))/10: "
       "catches transposed state layouts",
       {{"h0", "1"}}, [](KdaDists& d, const KdaParams&) {
         d.g = map(normal(), [](double z) { return logsigmoid(z) / 10.0; });
       }},
      {"varlen_ragged", "packed varlen segments of 1, 15, 63, 64, 65 and 1000 tokens (the rest of T one last "
       "segment), each with its own initial state",
       {{"seqlens", "1/15/63/64/65/1000"}, {"h0", "1"}, {"T", "1208"}}, [](KdaDists&, const KdaParams&) {}, true},
      {"odd_dims", "non-power-of-two head dims K = 60, V = 100 (unmasked-lane bugs)",
       {{"K", "60"}, {"V", "100"}}, [](KdaDists&, const KdaParams&) {}},
  };
  return table;
}

struct RegisterKdaRegimes {
  RegisterKdaRegimes() {
    for (const RegimeDef& def : regime_table()) {
      for (const char* op : {"kda", "kda_decode"}) {
        if (def.prefill_only && std::string(op) == "kda_decode") continue;
        Regime r;
        r.name = def.name;
        r.op = op;
        r.doc = def.doc;
        r.defaults = def.defaults;
        auto tweak = def.tweak;
        r.generate = [tweak](const Case& c, TensorMap& in) {
          KdaDists d;
          tweak(d, kda_params(c));
          generate(c, d, in);
        };
        register_regime(std::move(r));
      }
    }
  }
};
const RegisterKdaRegimes register_kda_regimes;

}  // namespace

// --- suites ---------------------------------------------------------------------------------------
// The suites that judge kda and kda_decode alone (datasets/suites.cpp has those that mix ops and the
// order `list suites` prints them in).

// kda-smoke: small and odd shapes, every gate and beta mode, varlen, GVA, layouts and decode;
// under 30 s on 2 cores for all CPU candidates.
DG_REGISTER_SUITE(kda_smoke,
                  Suite{"kda-smoke", "small, odd KDA cases covering every option and the decode op (seconds)",
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
DG_REGISTER_SUITE(kda_regimes, [] {
  Suite regimes{"kda-regimes", "every KDA input regime at T=4096, H=2, K=V=128", {}};
  for (const char* r : {"kimi_linear", "glm_safe_gate", "long_memory", "zero_gate", "forget_mix", "forget_burst",
                        "strong_decay", "collinear_keys", "neg_eigval", "tiny_norm", "unnormalized_keys", "nonsymmetric_h0"})
    regimes.cases.push_back(fmt::format("kda(T=4096,H=2,K=128,V=128,regime={},dtype=bf16,seed=0)", r));
  regimes.cases.push_back("kda(T=4096,H=2,K=128,V=128,layout=vfirst,regime=nonsymmetric_h0,dtype=bf16,seed=0)");
  regimes.cases.push_back("kda(T=4096,H=2,K=128,V=128,regime=varlen_ragged,dtype=bf16,seed=0)");
  regimes.cases.push_back("kda(T=4096,H=2,K=60,V=100,regime=odd_dims,dtype=bf16,seed=0)");
  return regimes;
}());

// kda-long: production context lengths for the drift curve, one head of K = V = 128.
// The f64 tier is the one made for full 1M-token runs (DESIGN.md); --certify measures it against dd.
DG_REGISTER_SUITE(kda_long, [] {
  Suite long_suite{"kda-long", "KDA at T = 1K ... 1M tokens, H=1, K=V=128, long_memory and kimi_linear; f64 reference",
                   {}, "f64"};
  for (const char* r : {"long_memory", "kimi_linear"})
    for (const char* t : {"1024", "4096", "16384", "65536", "262144", "1048576"})
      long_suite.cases.push_back(fmt::format("kda(T={},H=1,K=128,V=128,regime={},dtype=bf16,seed=0)", t, r));
  return long_suite;
}());

// Gate suites: the regimes and lengths that decide a merge. Two heads, so both cores work for
// either candidate; long_memory at 64K for the drift rule.
// Two cheap cases carry the axes the others miss: GVA with H >= 2 (a wrong value-to-key head map
// is invisible at H = 1) on tiny_norm (where the L2 norm's epsilon decides), and one sequence past
// 2^16 + 1 tokens of small heads (16-bit position counters, states dropped every 32K tokens).
// K = V = 64, not smaller: the speed verdict is judged on every case, and at K = V = 32 the chunk
// kernel is honestly slower than the recurrent one (0.85x), a shape no production model uses.
namespace {
constexpr const char* gva_tiny = "kda(T=1024,H=2,HV=4,K=64,V=64,regime=tiny_norm,dtype=bf16,seed=0)";
constexpr const char* past_64k = "kda(T=66000,H=1,K=64,V=64,regime=long_memory,dtype=bf16,seed=0)";
}  // namespace

DG_REGISTER_SUITE(kda_gate_quick,
                  Suite{"kda-gate-quick", "the KDA merge gate in under a minute: production gates, long memory, varlen, GVA, past 64K",
                        {
                            "kda(T=4096,H=2,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)",
                            "kda(T=4096,H=2,K=128,V=128,regime=glm_safe_gate,dtype=bf16,seed=0)",
                            "kda(T=16384,H=2,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)",
                            "kda(T=4096,H=2,K=64,V=64,regime=varlen_ragged,dtype=bf16,seed=0)",
                            gva_tiny,
                            past_64k,
                            // bursts of forgetting: the reverse-cumsum pitfall (kda_mutant_chunk_gamma_diff)
                            "kda(T=1024,H=2,K=64,V=64,regime=forget_burst,dtype=bf16,seed=0)",
                        }});

DG_REGISTER_SUITE(kda_gate, [] {
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
  return gate;
}());

// kda-gate-long: one sequence past 2^20 + 1 tokens (1M, the production context) of one small head,
// on the regime where rounding accumulates (long_memory: the drift rule judges its growth) and on
// the production gate; f64 reference, as kda-long (its certification is measured there).
DG_REGISTER_SUITE(kda_gate_long,
                  Suite{"kda-gate-long", "the KDA merge gate past 2^20 + 1 tokens: one small head, long memory and production gates; f64 reference",
                        {
                            "kda(T=1048577,H=1,K=64,V=64,regime=long_memory,dtype=bf16,seed=0)",
                            "kda(T=1048577,H=1,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)",
                        },
                        "f64"});

// kda-decode-gate: the merge gate of the decode step (`gate --base kda_decode_cpu_f32 --suite
// kda-decode-gate`): several sequences on reversed pool slots (a slot mistake shows), GVA with two
// key heads, the l2norm epsilon's regime, a non-symmetric carried state in a V-first pool (a
// transposed pool shows), a long decode past 1024 steps (the drift rule applies), the lower-bound
// gate and odd dims, then every other value of the op once (list suites --coverage: none missing);
// seconds on 2 cores. It kills every kda_decode mutant (datasets/kill_rates.json).
DG_REGISTER_SUITE(kda_decode_gate,
                  Suite{"kda-decode-gate", "the KDA decode-step merge gate: pool slots, GVA, eps, V-first carried state, 2K steps, every value (seconds)",
                        {
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

// kda-selftest: small cases on which `driftgate selftest` proves every canary is caught quickly.
DG_REGISTER_SUITE(kda_selftest,
                  Suite{"kda-selftest", "two small KDA cases for driftgate selftest (seconds)",
                        {
                            "kda(T=512,H=2,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)",
                            "kda(T=1024,H=2,K=64,V=64,regime=long_memory,dtype=bf16,seed=0)",
                        }});

}  // namespace dg
