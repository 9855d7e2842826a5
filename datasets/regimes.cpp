// KDA input regimes: named, documented input distributions from the precision pitfalls of KDA
// kernels (../shared/notes/kda-numerics.md, "Precision pitfalls checklist"). Every regime is one
// table entry: the parameter defaults it implies and how it draws each tensor. Unlisted tensors use
// the baseline below. Element i of tensor X is a pure function of (seed, case string, X, i).
//
// Baseline: q, k, v ~ N(0,1); pregated g = logsigmoid(N(0,1)); raw gate f ~ N(0,1); beta =
// sigmoid(N(0,1)); beta logit b ~ N(0,1); A_log = log U(1,16); dt_bias = softplus^-1(dt) with dt
// log-uniform in [1e-3, 1e-1] (Kimi Linear's initialisation); h0 ~ N(0,1).
// Stored dtypes: q, k, v, g, beta in the case's dtype; A_log, dt_bias, h0 in f32 (as FLA requires).
#include <cmath>
#include <algorithm>
#include <functional>
#include <span>

#include "harness/ops/kda_op.h"
#include "harness/cases/registry.h"
#include "harness/core/rng.h"
#include "harness/core/threads.h"
#include "datasets/dists.h"

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
}  // namespace dg
