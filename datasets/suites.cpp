#include "datasets/suites.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

namespace dg {
namespace {

// The order of all_suites(), and so of `driftgate list suites` and of the names an unknown suite's
// message lists. Suites register themselves during static initialisation, whose order across
// translation units is unspecified, so the registry sorts by this list instead; a suite not in it
// comes after these, by name. Add a new suite here only to place it among these.
constexpr std::string_view kSuiteOrder[] = {
    "kda-smoke",
    "kda-regimes",
    "kda-long",
    "kda-gate-quick",
    "kda-gate",
    "kda-gate-long",
    "layer-smoke",
    "layer-gate",
    "kda-decode-gate",
    "kda-decode-gpu",
    "kda-selftest",
};

size_t rank(std::string_view name) {
  return static_cast<size_t>(std::find(std::begin(kSuiteOrder), std::end(kSuiteOrder), name) - std::begin(kSuiteOrder));
}
bool before(const Suite& a, const Suite& b) {
  const size_t ra = rank(a.name), rb = rank(b.name);
  return ra != rb ? ra < rb : a.name < b.name;
}

// Function-local static: registration runs during static initialisation of other translation units.
// Kept sorted (before), so all_suites() is the registry itself.
std::vector<Suite>& suites() {
  static std::vector<Suite> v;
  return v;
}

}  // namespace

// The suites that mix ops; each op's own suites are in datasets/<op>.cpp.

// layer-smoke: the ops around KDA in the decode layer (reference/causal_conv1d.h,
// reference/rmsnorm_gated.h) and the fused decode step, every regime of each; seconds.
DG_REGISTER_SUITE(layer_smoke,
                  Suite{"layer-smoke", "causal_conv1d, rmsnorm_gated and the fused KDA decode step, every regime (seconds)",
                        {
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

// layer-gate: one GLM-5.3-Flash decode step of a linear-attention layer at production shapes
// (hidden 4096; 64 KDA heads of 128, conv width 4; MLA latent norms 1536 and 512; 288 experts of
// intermediate 2048, top-8 (about 4 tokens an expert), one shared, SwiGLU clamped at 10, routed
// scaling 2.5; routed experts in FP8 with block scales, the shared expert in bf16), 16 tokens
// decoded together: each op of the layer, in the layer's order. f64 reference (the gemm rows
// need its Dot2 speed; the KDA state is f32 in every candidate). `gate --suite layer-gate` judges a
// patch on the cases of its own op; `verify --suite layer-gate` runs every op's kernels.
// Then the whole layer composed (decode_layer, kind=linear): a reduced layer over 4 steps, and the
// production attention (hidden 4096, 64 heads of 128) with 16 of the 288 experts over 2 steps (the
// stored experts of 288 would be 14 GiB); and an MLA layer (kind=mla) at GLM-5.3-Flash's NoPE
// geometry (q_lora 1536, kv_lora 512, nope 256, v 256; 8 of the 64 heads, hidden 1024) over 2 steps
// after 128 cached tokens.
DG_REGISTER_SUITE(layer_gate,
                  Suite{"layer-gate",
                        "one GLM-5.3-Flash decode step at production shapes, every op of the layer, 16 tokens (f64 reference)",
                        {
                            "add_rmsnorm(N=16,D=4096,regime=hidden,dtype=bf16,seed=0)",
                            "gemm(M=16,N=8192,K=4096,regime=activations,dtype=bf16,seed=0)",
                            "kda_decode_fused(T=4,B=16,H=64,K=128,V=128,layout=vfirst,regime=glm_safe_gate,dtype=bf16,seed=0)",
                            "gemm(M=16,N=4096,K=8192,regime=activations,dtype=bf16,seed=0)",
                            "add_rmsnorm(N=16,D=4096,regime=large_residual,dtype=bf16,seed=0)",
                            "rmsnorm(N=16,D=1536,regime=hidden,dtype=bf16,seed=0)",
                            "rmsnorm(N=16,D=512,regime=hidden,dtype=bf16,seed=0)",
                            "moe_router(T=16,E=288,k=8,regime=production,dtype=f32,seed=0)",
                            "gemm(M=16,N=4096,K=4096,regime=activations,dtype=bf16,seed=0)",
                            "gemm_fp8_block(M=4,N=4096,K=4096,regime=production,dtype=e4m3,seed=0)",
                            "swiglu(N=144,I=2048,regime=clamp_edge,dtype=bf16,seed=0)",
                            "gemm(M=16,N=4096,K=2048,regime=activations,dtype=bf16,seed=0)",
                            "gemm_fp8_block(M=4,N=4096,K=2048,regime=production,dtype=e4m3,seed=0)",
                            "moe_combine(T=16,topk=8,H=4096,rsf=2.5,regime=production,dtype=bf16,seed=0)",
                            "swiglu(N=16,I=12288,regime=expert,dtype=bf16,seed=0)",
                            "rmsnorm(N=16,D=4096,regime=hidden,dtype=bf16,seed=0)",
                            "decode_layer(kind=linear,T=4,B=4,D=1024,H=8,K=128,E=32,k=8,I=512,regime=glm_flash,dtype=bf16,seed=0)",
                            "decode_layer(kind=linear,T=2,B=2,D=4096,H=64,K=128,E=16,k=8,I=2048,regime=massive_residual,dtype=bf16,seed=0)",
                            "decode_layer(kind=mla,T=2,B=2,D=1024,H=8,K=64,E=16,k=8,I=512,ctx=128,regime=glm_flash,dtype=bf16,seed=0)",
                        },
                        "f64"});

// kda-decode-gpu: the production decode shape (H=32 heads of K = V = 128, V-first state pools) at
// B = 1, 8, 64 and 256 sequences, 8 steps each, plain and fused, and the plain step on K-first
// pools at B=64; what scripts/gpu-check.sh gates and benches (state read + write: 4 MiB per
// sequence per step). f64 reference: the candidates hold f32 states.
DG_REGISTER_SUITE(kda_decode_gpu, [] {
  Suite decode_gpu{"kda-decode-gpu",
                   "KDA decode at B = 1, 8, 64, 256, H=32, K=V=128, V-first pools, plain and fused; K-first at B=64",
                   {}, "f64"};
  for (const char* op : {"kda_decode", "kda_decode_fused"})
    for (const char* b : {"", "B=8,", "B=64,", "B=256,"})   // (B=1 is the default: canonical strings omit it)
      decode_gpu.cases.push_back(
          fmt::format("{}(T=8,{}H=32,K=128,V=128,layout=vfirst,regime=kimi_linear,dtype=bf16,seed=0)", op, b));
  decode_gpu.cases.push_back("kda_decode(T=8,B=64,H=32,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)");
  return decode_gpu;
}());

void register_suite(Suite s) {
  if (find_suite(s.name)) throw std::logic_error("suite registered twice: " + s.name);
  std::vector<Suite>& v = suites();
  const auto at = std::upper_bound(v.begin(), v.end(), s, before);
  v.insert(at, std::move(s));
}

const std::vector<Suite>& all_suites() { return suites(); }

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
