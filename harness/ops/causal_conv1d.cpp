// OpSpec of causal_conv1d (reference/causal_conv1d.h), the short conv before KDA's q, k, v. Its
// regimes and suites are in datasets/causal_conv1d.cpp, its CPU candidates in
// candidates/cpu/causal_conv1d.cpp.
#include "harness/ops/causal_conv1d.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"

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

namespace {

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
  for (ParamSpec& p : layer_params_tail("input regime (driftgate list regimes)")) s.params.push_back(p);
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

}  // namespace

DG_REGISTER_OP(causal_conv1d, conv_spec());

}  // namespace dg
