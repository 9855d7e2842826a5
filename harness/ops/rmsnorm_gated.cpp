// OpSpec of rmsnorm_gated (reference/rmsnorm_gated.h), the sigmoid-gated output norm of the KDA
// layer. Its regimes are in datasets/rmsnorm_gated.cpp, its CPU candidates in
// candidates/cpu/rmsnorm_gated.cpp.
#include "harness/ops/rmsnorm_gated.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"

namespace dg {

NormParams norm_params(const Case& c) {
  NormParams p;
  p.N = c.integer("N");
  p.D = c.integer("D");
  p.eps = c.real("eps");
  return p;
}

namespace {

OpSpec norm_spec() {
  OpSpec s;
  s.name = "rmsnorm_gated";
  s.doc = "sigmoid-gated RMSNorm per row: y = x / sqrt(mean(x^2) + eps) * w * sigmoid(gate) (KDA's output norm)";
  s.params = {{"N", ParamKind::integer, "64", "rows (tokens x heads)", true},
              {"D", ParamKind::integer, "128", "row length (the head's V)", true},
              {"eps", ParamKind::real, "1e-05", "inside the square root"}};
  for (ParamSpec& p : layer_params_tail("input regime (driftgate list regimes)")) s.params.push_back(p);
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
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    NormReferenceResult r = rmsnorm_gated_reference(tier, norm_params(c), in.at("x"), in.at("gate"), in.at("weight"));
    return RefOutputs{{"y", std::move(r.y)}};
  };
  s.certify = [](const Case& c, const TensorMap& in, Tier tier) {
    const NormParams p = norm_params(c);
    return certify_leading_rows(tier, p.N, static_cast<double>(4 * p.D), [&](Tier t, int64_t rows) {
      NormParams q = p;
      q.N = rows;
      const Tensor x = leading_slice(in.at("x"), 0, rows), g = leading_slice(in.at("gate"), 0, rows);
      NormReferenceResult r = rmsnorm_gated_reference(t, q, x, g, in.at("weight"), true);
      return SampleOutputs{std::move(r.y), std::move(r.y_tail)};
    });
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

DG_REGISTER_OP(rmsnorm_gated, norm_spec());

}  // namespace dg
