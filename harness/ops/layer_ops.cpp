// OpSpecs of the small ops around KDA (reference/layer_ops.h): causal_conv1d (the short conv before
// q, k, v) and rmsnorm_gated (the sigmoid-gated output norm). Their regimes are in
// datasets/layer_regimes.cpp, their CPU candidates in candidates/cpu/layer_ops.cpp.
#include "harness/ops/layer_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "reference/certify.h"
#include "reference/layer_ops.h"

namespace dg {

ConvParams conv_params(const Case& c) {
  ConvParams p;
  p.B = c.integer("B");
  p.T = c.integer("T");
  p.D = c.integer("D");
  p.W = c.integer("W");
  p.silu = c.boolean("silu");
  return p;
}

NormParams norm_params(const Case& c) {
  NormParams p;
  p.N = c.integer("N");
  p.D = c.integer("D");
  p.eps = c.real("eps");
  return p;
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? "," : "", shape[i]);
  return s + "]";
}

void check_finite(const Tensor& t, const std::string& name) {
  std::vector<double> buf(4096);
  for (int64_t off = 0; off < t.numel(); off += static_cast<int64_t>(buf.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), t.numel() - off);
    t.read(off, std::span<double>(buf.data(), static_cast<size_t>(n)));
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(buf[static_cast<size_t>(i)]))
        throw InputError(fmt::format("input tensor '{}' holds {} at flat index {}", name, buf[static_cast<size_t>(i)], off + i));
  }
}

}  // namespace

void check_inputs_exact(const Case& c, const TensorMap& in, const std::map<std::string, InputSpec>& want) {
  std::string extra;
  for (const auto& [name, t] : in)
    if (!want.count(name)) extra += fmt::format("{}'{}'", extra.empty() ? "" : ", ", name);
  if (!extra.empty()) {
    std::string known;
    for (const auto& [name, spec] : want) known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
    throw InputError(fmt::format("unexpected input tensor(s) {} for {} (it reads exactly: {})", extra, c.str(), known));
  }
  for (const auto& [name, spec] : want) {
    auto it = in.find(name);
    if (it == in.end()) throw InputError(fmt::format("input tensor '{}' is missing for {}", name, c.str()));
    const Tensor& t = it->second;
    if (t.dtype() != spec.dtype)
      throw InputError(fmt::format("input tensor '{}' is stored as {}, but {} reads it as {} (inputs are never converted)",
                                   name, dg::name(t.dtype()), c.str(), dg::name(spec.dtype)));
    if (t.shape() != spec.shape)
      throw InputError(fmt::format("input tensor '{}' has shape {}, expected {}", name, t.shape_str(), shape_text(spec.shape)));
    if (info(t.dtype()).is_float) check_finite(t, name);
  }
}

Tensor leading_slice(const Tensor& t, int axis, int64_t keep) {
  std::vector<int64_t> shape = t.shape();
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
  const int64_t rows = shape[static_cast<size_t>(axis)];
  const size_t row_bytes = rows * outer == 0 ? 0 : t.nbytes() / static_cast<size_t>(outer * rows);
  shape[static_cast<size_t>(axis)] = keep;
  Tensor s(t.dtype(), shape);
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(s.bytes() + static_cast<size_t>(o * keep) * row_bytes, t.bytes() + static_cast<size_t>(o * rows) * row_bytes,
                static_cast<size_t>(keep) * row_bytes);
  return s;
}

namespace {

// Budget of certification, in tier operations: about a second at mpfr127.
constexpr double kCertifyOps = 2e6;

std::vector<ParamSpec> common_tail(const char* regime_doc) {
  return {{"regime", ParamKind::text, "kimi_linear", regime_doc, true},
          {"dtype", ParamKind::text, "bf16", "dtype of the stored activations", true, {"f64", "f32", "bf16", "f16"}},
          {"seed", ParamKind::integer, "0", "RNG seed", true}};
}

// --- causal_conv1d --------------------------------------------------------------------------------
OpSpec conv_spec() {
  OpSpec s;
  s.name = "causal_conv1d";
  s.doc = "causal depthwise conv1d of width W, no bias, then SiLU (the short conv before KDA's q, k, v)";
  s.params = {{"T", ParamKind::integer, "64", "tokens per sequence", true},
              {"B", ParamKind::integer, "1", "sequences"},
              {"D", ParamKind::integer, "256", "channels", true},
              {"W", ParamKind::integer, "4", "kernel width (1..8)"},
              {"silu", ParamKind::boolean, "1", "SiLU after the convolution"},
              {"state", ParamKind::boolean, "1", "an initial conv state (the last W-1 inputs) is given"}};
  for (ParamSpec& p : common_tail("input regime (driftgate list regimes)")) s.params.push_back(p);
  s.tensors = {{"x", TensorRole::input, "[B,T,D]"}, {"weight", TensorRole::input, "[D,W] f32"},
               {"state0", TensorRole::input, "[B,D,W-1] f32, oldest first"},
               {"y", TensorRole::output, "[B,T,D]"}, {"state", TensorRole::output, "[B,D,W-1] the last W-1 inputs"}};
  s.validate = [](const Case& c) {
    for (const char* n : {"T", "B", "D"})
      if (c.integer(n) < 1) throw InputError(fmt::format("causal_conv1d: {} must be >= 1, got {}", n, c.integer(n)));
    if (c.integer("W") < 1 || c.integer("W") > 8)
      throw InputError(fmt::format("causal_conv1d: W must be in [1, 8], got {}", c.integer("W")));
    checked_product("causal_conv1d: B*T*D", {c.integer("B"), c.integer("T"), c.integer("D")});
    checked_product("causal_conv1d: B*D*W", {c.integer("B"), c.integer("D"), c.integer("W")});
  };
  s.output_shapes = [](const Case& c) -> std::map<std::string, std::vector<int64_t>> {
    ConvParams p = conv_params(c);
    return {{"y", {p.B, p.T, p.D}}, {"state", {p.B, p.D, p.W - 1}}};
  };
  s.inputs = [](const Case& c) {
    ConvParams p = conv_params(c);
    std::map<std::string, InputSpec> in = {{"x", {c.dtype(), {p.B, p.T, p.D}}}, {"weight", {DType::f32, {p.D, p.W}}}};
    if (c.boolean("state")) in["state0"] = {DType::f32, {p.B, p.D, p.W - 1}};
    return in;
  };
  s.check_inputs = [](const Case& c, const TensorMap& in) { check_inputs_exact(c, in, find_op(c.op())->inputs(c)); };
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t max_tokens) {
    ConvParams p = conv_params(c);
    const Tensor* st = c.boolean("state") ? &in.at("state0") : nullptr;
    RefOutputs out;
    if (max_tokens >= 0 && max_tokens < p.T) {   // a prefix: the rest NaN, the state NaN
      ConvParams q = p;
      q.T = max_tokens;
      ConvReferenceResult r = causal_conv1d_reference(tier, q, leading_slice(in.at("x"), 1, q.T), in.at("weight"), st);
      std::vector<double> y(static_cast<size_t>(p.B * p.T * p.D), NAN);
      for (int64_t b = 0; b < p.B; ++b)
        std::copy_n(r.y.begin() + b * q.T * p.D, q.T * p.D, y.begin() + b * p.T * p.D);
      out["y"] = std::move(y);
      out["state"] = std::vector<double>(static_cast<size_t>(p.B * p.D * (p.W - 1)), NAN);
      return out;
    }
    ConvReferenceResult r = causal_conv1d_reference(tier, p, in.at("x"), in.at("weight"), st);
    out["y"] = std::move(r.y);
    out["state"] = std::move(r.state);
    return out;
  };
  s.certify = [](const Case& c, const TensorMap& in, Tier tier) {
    const std::optional<Tier> up = next_tier(tier);
    if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
    ConvParams p = conv_params(c);
    Certification cert;
    cert.tier = tier;
    cert.against = *up;
    const double per_token = static_cast<double>(p.B * p.D * p.W) * tier_cost(*up);
    ConvParams q = p;
    q.T = std::clamp<int64_t>(static_cast<int64_t>(kCertifyOps / std::max(per_token, 1.0)), 1, p.T);
    cert.sample = q.T == p.T ? "full case" : fmt::format("tokens [0,{}) of each sequence", q.T);
    const Tensor x = q.T == p.T ? in.at("x") : leading_slice(in.at("x"), 1, q.T);
    const Tensor* st = c.boolean("state") ? &in.at("state0") : nullptr;
    ConvReferenceResult lo = causal_conv1d_reference(tier, q, x, in.at("weight"), st, true);
    ConvReferenceResult hi = causal_conv1d_reference(*up, q, x, in.at("weight"), st, true);
    cert.ref_bits = agreement_bits(lo.y, hi.y, lo.y_tail, hi.y_tail);
    cert.ref_bits_max_elem = agreement_bits_max_elem(lo.y, hi.y, lo.y_tail, hi.y_tail);
    return cert;
  };
  s.positions = [](const Case& c) {
    ConvParams p = conv_params(c);
    Positions pos;
    pos.inner = p.D;
    pos.token_position.resize(static_cast<size_t>(p.B * p.T));
    for (int64_t i = 0; i < p.B * p.T; ++i) pos.token_position[static_cast<size_t>(i)] = i % p.T;
    return std::map<std::string, Positions>{{"y", pos}};
  };
  s.flops = [](const Case& c) {
    ConvParams p = conv_params(c);
    return static_cast<double>(p.B * p.T * p.D) * (2.0 * static_cast<double>(p.W) + 4.0);
  };
  s.bytes = [](const Case& c, const Storage& st) {   // x in, y out; weights and conv states f32
    ConvParams p = conv_params(c);
    return static_cast<double>(p.B * p.T * p.D) * (st.input_bytes(c.dtype()) + st.output_bytes(c.dtype())) +
           static_cast<double>(p.D * p.W + 2 * p.B * p.D * (p.W - 1)) * 4;
  };
  return s;
}

// --- rmsnorm_gated --------------------------------------------------------------------------------
OpSpec norm_spec() {
  OpSpec s;
  s.name = "rmsnorm_gated";
  s.doc = "sigmoid-gated RMSNorm per row: y = x / sqrt(mean(x^2) + eps) * w * sigmoid(gate) (KDA's output norm)";
  s.params = {{"N", ParamKind::integer, "64", "rows (tokens x heads)", true},
              {"D", ParamKind::integer, "128", "row length (the head's V)", true},
              {"eps", ParamKind::real, "1e-05", "inside the square root"}};
  for (ParamSpec& p : common_tail("input regime (driftgate list regimes)")) s.params.push_back(p);
  s.tensors = {{"x", TensorRole::input, "[N,D]"}, {"gate", TensorRole::input, "[N,D] pre-sigmoid"},
               {"weight", TensorRole::input, "[D] f32"}, {"y", TensorRole::output, "[N,D]"}};
  s.validate = [](const Case& c) {
    for (const char* n : {"N", "D"})
      if (c.integer(n) < 1) throw InputError(fmt::format("rmsnorm_gated: {} must be >= 1, got {}", n, c.integer(n)));
    if (!(c.real("eps") > 0)) throw InputError(fmt::format("rmsnorm_gated: eps must be > 0, got {}", c.real("eps")));
    checked_product("rmsnorm_gated: N*D", {c.integer("N"), c.integer("D")});
  };
  s.output_shapes = [](const Case& c) -> std::map<std::string, std::vector<int64_t>> {
    NormParams p = norm_params(c);
    return {{"y", {p.N, p.D}}};
  };
  s.inputs = [](const Case& c) {
    NormParams p = norm_params(c);
    return std::map<std::string, InputSpec>{
        {"x", {c.dtype(), {p.N, p.D}}}, {"gate", {c.dtype(), {p.N, p.D}}}, {"weight", {DType::f32, {p.D}}}};
  };
  s.check_inputs = [](const Case& c, const TensorMap& in) { check_inputs_exact(c, in, find_op(c.op())->inputs(c)); };
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    NormReferenceResult r = rmsnorm_gated_reference(tier, norm_params(c), in.at("x"), in.at("gate"), in.at("weight"));
    return RefOutputs{{"y", std::move(r.y)}};
  };
  s.certify = [](const Case& c, const TensorMap& in, Tier tier) {
    const std::optional<Tier> up = next_tier(tier);
    if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
    NormParams p = norm_params(c), q = p;
    q.N = std::clamp<int64_t>(static_cast<int64_t>(kCertifyOps / (static_cast<double>(4 * p.D) * tier_cost(*up))), 1, p.N);
    Certification cert;
    cert.tier = tier;
    cert.against = *up;
    cert.sample = q.N == p.N ? "full case" : fmt::format("rows [0,{})", q.N);
    const Tensor x = leading_slice(in.at("x"), 0, q.N), g = leading_slice(in.at("gate"), 0, q.N);
    NormReferenceResult lo = rmsnorm_gated_reference(tier, q, x, g, in.at("weight"), true);
    NormReferenceResult hi = rmsnorm_gated_reference(*up, q, x, g, in.at("weight"), true);
    cert.ref_bits = agreement_bits(lo.y, hi.y, lo.y_tail, hi.y_tail);
    cert.ref_bits_max_elem = agreement_bits_max_elem(lo.y, hi.y, lo.y_tail, hi.y_tail);
    return cert;
  };
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.flops = [](const Case& c) {
    NormParams p = norm_params(c);
    return static_cast<double>(p.N * p.D) * 8.0;
  };
  s.bytes = [](const Case& c, const Storage& st) {   // x and gate in, y out; the weight f32
    NormParams p = norm_params(c);
    return static_cast<double>(p.N * p.D) * (2 * st.input_bytes(c.dtype()) + st.output_bytes(c.dtype())) +
           static_cast<double>(p.D) * 4;
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(causal_conv1d, conv_spec());
DG_REGISTER_OP(rmsnorm_gated, norm_spec());

}  // namespace dg
