// OpSpec of kda_decode_fused: the production decode path of a Kimi Linear / GLM-5.3-Flash KDA layer
// in one op (notes/model-ops.md section 1.5), per decode step and sequence:
//   q, k, v = silu(causal_conv1d_W(xq, xk, xv))            conv states updated (the last W-1 inputs)
//   o_kda   = one KDA step on q, k, v with g, beta         (the kda_decode op: gates, l2norm, state)
//   o       = rmsnorm_gated(o_kda, ogate, nweight)          per value head, eps inside the sqrt
// Shapes: xq, xk [B,T,H,K]; xv [B,T,HV,V]; wq, wk [H*K,W]; wv [HV*V,W]; conv_q0, conv_k0 [B,H*K,W-1];
// conv_v0 [B,HV*V,W-1]; g, beta, A_log, dt_bias, h0 as kda_decode; ogate [B,T,HV,V]; nweight [V].
// Outputs o [B,T,HV,V], ht, and the final conv states conv_q, conv_k, conv_v.
//
// The reference is the composition of the three references at the tier (reference/causal_conv1d.h,
// reference/kda.h, reference/rmsnorm_gated.h); the values passed between them are doubles (rounded
// to odd), so the composed reference carries about a double's precision, 20 bits and more beyond any
// f32 candidate.
// Certification measures both sources: the tier against the tier above, and the interfaces by
// composing again with every passed value moved to the double on the other side of the exact one.
// The driver runs T steps against pools that live in the candidate between steps: the KDA state in
// its state dtype ("state"), the three conv states in f32 ("conv_q", "conv_k", "conv_v"), sequence b
// in slot kda_decode_slot(b) as kda_decode does.
// Its regimes are in datasets/kda_decode_fused.cpp, its CPU candidate in
// candidates/cpu/kda_decode_fused.cpp.
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "harness/ops/kda.h"
#include "harness/ops/op_common.h"
#include "harness/cases/registry.h"
#include "reference/causal_conv1d.h"
#include "reference/certify.h"
#include "reference/kda.h"
#include "reference/rmsnorm_gated.h"

namespace dg {
namespace {

struct FusedShapes {
  KdaParams p;
  int64_t W, Cq, Cv;   // conv width; channels of q/k and of v
};
FusedShapes shapes(const Case& c) {
  FusedShapes s{kda_params(c), c.integer("W"), 0, 0};
  s.Cq = s.p.H * s.p.K;
  s.Cv = s.p.HV * s.p.V;
  return s;
}

std::vector<int64_t> state_shape(const KdaParams& p) {
  return p.state_v_first ? std::vector<int64_t>{p.B, p.HV, p.V, p.K} : std::vector<int64_t>{p.B, p.HV, p.K, p.V};
}

Tensor f64_tensor(std::vector<int64_t> shape, const std::vector<double>& values) {
  Tensor t(DType::f64, std::move(shape));
  std::memcpy(t.bytes(), values.data(), t.nbytes());
  return t;
}

// Each value passed between the references is the tier's value rounded to a double; with `other` it
// is the double on the other side of the tier's value (its neighbour towards the tail), so that the
// two compositions bracket the interface roundings and their difference measures what they cost.
void other_side(std::vector<double>& v, const std::vector<double>& tail) {
  for (size_t i = 0; i < v.size(); ++i) {
    const double t = tail[2 * i] + tail[2 * i + 1];
    if (t != 0.0 && std::isfinite(v[i])) v[i] = std::nextafter(v[i], t > 0 ? INFINITY : -INFINITY);
  }
}

// The composition on the first T' steps (T' = T when max_tokens < 0); outputs of a cut case: o past
// T' NaN, the final states NaN.
RefOutputs fused_ref(const Case& c, const TensorMap& in, Tier tier, int64_t max_tokens, bool other = false) {
  FusedShapes s = shapes(c);
  KdaParams p = s.p;
  const int64_t T = p.T, Tc = max_tokens >= 0 ? std::min(max_tokens, T) : T;
  auto cut = [&](const char* name) { return Tc == T ? in.at(name) : leading_slice(in.at(name), 1, Tc); };
  ConvParams cq{p.B, Tc, s.Cq, s.W, true}, cv{p.B, Tc, s.Cv, s.W, true};
  ConvReferenceResult q = causal_conv1d_reference(tier, cq, cut("xq"), in.at("wq"), &in.at("conv_q0"), other);
  ConvReferenceResult k = causal_conv1d_reference(tier, cq, cut("xk"), in.at("wk"), &in.at("conv_k0"), other);
  ConvReferenceResult v = causal_conv1d_reference(tier, cv, cut("xv"), in.at("wv"), &in.at("conv_v0"), other);
  if (other) {
    other_side(q.y, q.y_tail);
    other_side(k.y, k.y_tail);
    other_side(v.y, v.y_tail);
  }
  KdaParams pc = p;
  pc.T = Tc;
  TensorMap kin;
  kin["q"] = f64_tensor({p.B, Tc, p.H, p.K}, q.y);
  kin["k"] = f64_tensor({p.B, Tc, p.H, p.K}, k.y);
  kin["v"] = f64_tensor({p.B, Tc, p.HV, p.V}, v.y);
  kin["g"] = cut("g");
  kin["beta"] = cut("beta");
  for (const char* name : {"A_log", "dt_bias", "h0"})
    if (in.count(name)) kin[name] = in.at(name);
  KdaReferenceOptions opt;
  opt.threads = 1;
  opt.tails = other;
  KdaReferenceResult kr = kda_reference(tier, pc, kin, opt);
  if (other) other_side(kr.o, kr.o_tail);
  NormParams np{p.B * Tc * p.HV, p.V, c.real("eps")};
  NormReferenceResult nr = rmsnorm_gated_reference(tier, np, f64_tensor({np.N, np.D}, kr.o), cut("ogate"), in.at("nweight"));
  RefOutputs out;
  if (Tc == T) {
    out["o"] = std::move(nr.y);
    out["ht"] = std::move(kr.ht);
    out["conv_q"] = std::move(q.state);
    out["conv_k"] = std::move(k.state);
    out["conv_v"] = std::move(v.state);
    return out;
  }
  const int64_t row = p.HV * p.V;
  std::vector<double> o(static_cast<size_t>(p.B * T * row), NAN);
  for (int64_t b = 0; b < p.B; ++b) std::copy_n(nr.y.begin() + b * Tc * row, Tc * row, o.begin() + b * T * row);
  out["o"] = std::move(o);
  out["ht"] = std::vector<double>(static_cast<size_t>(p.B * p.HV * p.K * p.V), NAN);
  out["conv_q"] = std::vector<double>(q.state.size(), NAN);
  out["conv_k"] = std::vector<double>(k.state.size(), NAN);
  out["conv_v"] = std::vector<double>(v.state.size(), NAN);
  return out;
}

std::map<std::string, InputSpec> fused_inputs(const Case& c) {
  FusedShapes s = shapes(c);
  const KdaParams& p = s.p;
  const DType dt = c.dtype();
  std::map<std::string, InputSpec> in = {
      {"xq", {dt, {p.B, p.T, p.H, p.K}}},         {"xk", {dt, {p.B, p.T, p.H, p.K}}},
      {"xv", {dt, {p.B, p.T, p.HV, p.V}}},        {"wq", {DType::f32, {s.Cq, s.W}}},
      {"wk", {DType::f32, {s.Cq, s.W}}},          {"wv", {DType::f32, {s.Cv, s.W}}},
      {"conv_q0", {DType::f32, {p.B, s.Cq, s.W - 1}}}, {"conv_k0", {DType::f32, {p.B, s.Cq, s.W - 1}}},
      {"conv_v0", {DType::f32, {p.B, s.Cv, s.W - 1}}}, {"g", {dt, {p.B, p.T, p.HV, p.K}}},
      {"beta", {dt, {p.B, p.T, p.HV}}},           {"ogate", {dt, {p.B, p.T, p.HV, p.V}}},
      {"nweight", {DType::f32, {p.V}}}};
  if (p.gate != KdaGate::pregated) {
    if (p.use_A_log) in["A_log"] = {DType::f32, {p.HV}};
    in["dt_bias"] = {DType::f32, {p.HV * p.K}};
  }
  if (p.has_h0) in["h0"] = {DType::f32, state_shape(p)};
  return in;
}

void fused_drive(const Candidate& cand, const Case& c, const TensorMap& in, TensorMap& out) {
  FusedShapes s = shapes(c);
  const KdaParams& p = s.p;
  Tensor& o = out.at("o");
  Tensor state(cand.info().state_dtype, out.at("ht").shape());
  if (p.has_h0) kda_to_slots(in.at("h0"), state, p.B, true);
  std::map<std::string, Tensor> conv;
  for (const char* name : {"conv_q", "conv_k", "conv_v"}) {
    conv[name] = Tensor(DType::f32, out.at(name).shape());
    kda_to_slots(in.at(std::string(name) + "0"), conv[name], p.B, true);
  }
  const Device dev = pool_device(cand.info());   // device pools for a CUDA candidate
  if (dev != Device::host) {
    state = state.to(dev);
    for (auto& [_, pool] : conv) pool = pool.to(dev);
  }
  Tensor indices(DType::i64, {p.B});
  for (int64_t b = 0; b < p.B; ++b) indices.data<int64_t>()[b] = kda_decode_slot(b, p.B);
  const Case step = c.with("T", "1");
  TensorMap step_in;
  step_in["state_indices"] = indices;
  for (const char* name : {"wq", "wk", "wv", "A_log", "dt_bias", "nweight"})
    if (in.count(name)) step_in[name] = in.at(name);
  const size_t o_row = static_cast<size_t>(p.HV * p.V) * static_cast<size_t>(info(o.dtype()).storage_bytes);
  for (int64_t t = 0; t < p.T; ++t) {
    for (const char* name : {"xq", "xk", "xv", "g", "beta", "ogate"}) step_in[name] = token_slice(in.at(name), t);
    TensorMap step_out;
    step_out["o"] = Tensor(o.dtype(), {p.B, 1, p.HV, p.V});
    step_out["state"] = state;   // shared storage: updated in place by the candidate
    for (auto& [name, pool] : conv) step_out[name] = pool;
    cand.run(step, step_in, step_out);
    for (int64_t b = 0; b < p.B; ++b)
      std::memcpy(o.bytes() + static_cast<size_t>(b * p.T + t) * o_row, step_out["o"].bytes() + static_cast<size_t>(b) * o_row,
                  o_row);
  }
  if (dev != Device::host) {
    state = state.to(Device::host);
    for (auto& [_, pool] : conv) pool = pool.to(Device::host);
  }
  kda_to_slots(out.at("ht"), state, p.B, false);
  for (auto& [name, pool] : conv) kda_to_slots(out.at(name), pool, p.B, false);
}

OpSpec fused_spec() {
  OpSpec s;
  s.name = "kda_decode_fused";
  s.doc = "KDA decode as the production layer runs it: short conv (width W, SiLU) on q, k, v, one KDA step, "
          "sigmoid-gated RMSNorm of the output; T steps for B sequences against state and conv-state pools";
  s.params = kda_param_specs(false);
  s.coverage = kda_coverage_axes(false);
  s.params.insert(s.params.end() - 3, {{"W", ParamKind::integer, "4", "conv width (1..8)"},
                                       {"eps", ParamKind::real, "1e-05", "of the output RMSNorm"}});
  s.tensors = {{"xq", TensorRole::input, "[B,T,H,K] q before the conv"}, {"xk", TensorRole::input, "[B,T,H,K]"},
               {"xv", TensorRole::input, "[B,T,HV,V]"}, {"wq", TensorRole::input, "[H*K,W] f32"},
               {"wk", TensorRole::input, "[H*K,W] f32"}, {"wv", TensorRole::input, "[HV*V,W] f32"},
               {"conv_q0", TensorRole::input, "[B,H*K,W-1] f32"}, {"conv_k0", TensorRole::input, "[B,H*K,W-1] f32"},
               {"conv_v0", TensorRole::input, "[B,HV*V,W-1] f32"}, {"g", TensorRole::input, "[B,T,HV,K]"},
               {"beta", TensorRole::input, "[B,T,HV]"}, {"A_log", TensorRole::input, "[HV] f32"},
               {"dt_bias", TensorRole::input, "[HV*K] f32"}, {"h0", TensorRole::input, "[B,HV,K,V] f32"},
               {"ogate", TensorRole::input, "[B,T,HV,V] output gate, pre-sigmoid"},
               {"nweight", TensorRole::input, "[V] f32 norm weight"},
               {"o", TensorRole::output, "[B,T,HV,V]"}, {"ht", TensorRole::output, "[B,HV,K,V] (state dtype)"},
               {"conv_q", TensorRole::output, "[B,H*K,W-1] f32"}, {"conv_k", TensorRole::output, "[B,H*K,W-1] f32"},
               {"conv_v", TensorRole::output, "[B,HV*V,W-1] f32"}};
  s.validate = [](const Case& c) {
    kda_validate(c);
    if (c.integer("W") < 1 || c.integer("W") > 8)
      throw InputError(fmt::format("kda_decode_fused: W must be in [1, 8], got {}", c.integer("W")));
    if (!(c.real("eps") > 0)) throw InputError(fmt::format("kda_decode_fused: eps must be > 0, got {}", c.real("eps")));
    checked_product("kda_decode_fused: B*H*K*W", {c.integer("B"), c.integer("H"), c.integer("K"), c.integer("W")});
    checked_product("kda_decode_fused: B*HV*V*W", {c.integer("B"), kda_params(c).HV, c.integer("V"), c.integer("W")});
  };
  s.output_shapes = [](const Case& c) -> std::map<std::string, std::vector<int64_t>> {
    FusedShapes f = shapes(c);
    const KdaParams& p = f.p;
    return {{"o", {p.B, p.T, p.HV, p.V}}, {"ht", state_shape(p)}, {"conv_q", {p.B, f.Cq, f.W - 1}},
            {"conv_k", {p.B, f.Cq, f.W - 1}}, {"conv_v", {p.B, f.Cv, f.W - 1}}};
  };
  s.inputs = fused_inputs;
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t max_tokens) { return fused_ref(c, in, tier, max_tokens); };
  s.certify = [](const Case& c, const TensorMap& in, Tier tier) {
    const std::optional<Tier> up = next_tier(tier);
    if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
    const KdaParams p = kda_params(c);
    const double per_step = static_cast<double>(p.B * p.HV) * tier_cost(*up);
    const int64_t steps = std::clamp<int64_t>(static_cast<int64_t>(double(int64_t{1} << 16) / std::max(per_step, 1.0)), 1, p.T);
    Certification cert;
    cert.tier = tier;
    cert.against = *up;
    const std::string what = "; the worse of the tier above and the doubles passed between the references moved to their other neighbours";
    cert.sample = (steps == p.T ? std::string("full case") : fmt::format("steps [0,{})", steps)) + what;
    const int64_t cut = steps == p.T ? -1 : steps;
    const RefOutputs lo = fused_ref(c, in, tier, cut), hi = fused_ref(c, in, *up, cut), alt = fused_ref(c, in, tier, cut, true);
    cert.ref_bits = kAgreementCapBits;
    cert.ref_bits_max_elem = kAgreementCapBits;
    for (const auto& [name, values] : lo) {
      if (cut >= 0 && name != "o") continue;   // a cut case has no final states
      for (const RefOutputs* other : {&hi, &alt}) {
        cert.ref_bits = std::min(cert.ref_bits, agreement_bits(values, other->at(name)));
        cert.ref_bits_max_elem = std::min(cert.ref_bits_max_elem, agreement_bits_max_elem(values, other->at(name)));
      }
    }
    return cert;
  };
  s.positions = [](const Case& c) {
    KdaParams p = kda_params(c);
    Positions pos;
    pos.inner = p.HV * p.V;
    pos.token_position.resize(static_cast<size_t>(p.B * p.T));
    for (int64_t i = 0; i < p.B * p.T; ++i) pos.token_position[static_cast<size_t>(i)] = i % p.T;
    return std::map<std::string, Positions>{{"o", pos}};
  };
  s.drive = fused_drive;
  s.flops = [](const Case& c) {
    FusedShapes f = shapes(c);
    const double tokens = static_cast<double>(f.p.B * f.p.T);
    return tokens * (f.p.flops_per_token_head() * static_cast<double>(f.p.HV) +
                     static_cast<double>(2 * f.Cq + f.Cv) * (2.0 * static_cast<double>(f.W) + 4) + 10.0 * static_cast<double>(f.Cv));
  };
  s.bytes = [](const Case& c, const Storage& st) {
    FusedShapes f = shapes(c);
    const KdaParams& p = f.p;
    const double tokens = static_cast<double>(p.B * p.T);
    const double per_token = st.input_bytes(c.dtype()) * static_cast<double>(2 * f.Cq + 2 * f.Cv + p.HV * p.K + p.HV) +
                             st.output_bytes(c.dtype()) * static_cast<double>(f.Cv);   // x, g, beta, ogate; o
    // every step reads and writes each sequence's KDA state (state dtype) and conv states (f32)
    const double state = 2.0 * static_cast<double>(p.B) *
                         (static_cast<double>(p.HV * p.K * p.V) * st.state_bytes() +
                          4.0 * static_cast<double>((2 * f.Cq + f.Cv) * (f.W - 1)));
    return tokens * per_token + static_cast<double>(p.T) * state;
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(kda_decode_fused, fused_spec());

}  // namespace dg
