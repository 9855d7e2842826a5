// OpSpec of moe_combine (reference/moe_combine.h): y = sum_j a_j E_j + S, the routed experts' outputs
// weighted by the router's top-k weights and the routed scaling factor, plus the shared expert's
// output. Its regimes and suites are in datasets/moe_combine.cpp, its CPU candidates in
// candidates/cpu/moe_combine.cpp.
#include "harness/ops/moe_combine.h"

#include <cmath>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"

namespace dg {

MoeCombineParams moe_combine_params(const Case& c) {
  MoeCombineParams p;
  p.T = c.integer("T");
  p.k = c.integer("topk");
  p.H = c.integer("H");
  p.rsf = c.real("rsf");
  p.rsf_on_output = c.text("rsf_on") == "output";
  p.shared = c.boolean("shared");
  return p;
}

namespace {

void validate(const Case& c) {
  for (const char* n : {"T", "topk", "H"})
    if (c.integer(n) < 1) throw InputError(fmt::format("moe_combine: {} must be >= 1, got {}", n, c.integer(n)));
  if (c.integer("topk") > 64)
    throw InputError(fmt::format("moe_combine: topk must be at most 64 (the configs route to 4 or 8), got {}",
                                 c.integer("topk")));
  if (!(c.real("rsf") > 0) || c.real("rsf") > 100)
    throw InputError(fmt::format("moe_combine: rsf must be in (0, 100] (the configs: 1 .. 2.5), got {}", c.real("rsf")));
  checked_product("moe_combine: T*topk*H", {c.integer("T"), c.integer("topk"), c.integer("H")});
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const MoeCombineParams p = moe_combine_params(c);
  std::map<std::string, InputSpec> in = {{"expert_out", {c.dtype(), {p.T, p.k, p.H}}}, {"weights", {DType::f32, {p.T, p.k}}}};
  if (p.shared) in["shared"] = {c.dtype(), {p.T, p.H}};
  return in;
}

MoeCombineReferenceResult run_rows(const Case& c, const TensorMap& in, Tier tier, int64_t rows, bool tails) {
  MoeCombineParams p = moe_combine_params(c);
  const bool all = rows == p.T;
  const auto cut = [&](const Tensor& t) { return all ? t : leading_slice(t, 0, rows); };
  p.T = rows;
  if (!p.shared) return moe_combine_reference(tier, p, cut(in.at("expert_out")), cut(in.at("weights")), nullptr, tails);
  const Tensor s = cut(in.at("shared"));
  return moe_combine_reference(tier, p, cut(in.at("expert_out")), cut(in.at("weights")), &s, tails);
}

Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const double per_row = 2.0 * static_cast<double>((c.integer("topk") + 1) * c.integer("H"));
  return certify_leading_rows(tier, c.integer("T"), per_row, [&](Tier t, int64_t rows) {
    MoeCombineReferenceResult r = run_rows(c, in, t, rows, true);
    return SampleOutputs{std::move(r.y), std::move(r.y_tail)};
  });
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // The routed scaling factor: 1 (GLM-4.5-Air) leaves no rounding to place; the others do.
      {"rsf", {"rsf = 1", "rsf != 1"},
       [](const Case& c) { return std::vector<std::string>{c.real("rsf") == 1.0 ? "rsf = 1" : "rsf != 1"}; }},
      // Routed experts per token: the configs' 8 and GLM-4.7-Flash's 4.
      {"topk", {"topk = 8", "topk != 8"},
       [](const Case& c) { return std::vector<std::string>{c.integer("topk") == 8 ? "topk = 8" : "topk != 8"}; }},
      // Hidden widths: no multiple of a vector (a tail loop), and the configs' sizes.
      {"H", {"H % 32 != 0", "H >= 4096"},
       [](const Case& c) {
         std::vector<std::string> v;
         if (c.integer("H") % 32 != 0) v.push_back("H % 32 != 0");
         if (c.integer("H") >= 4096) v.push_back("H >= 4096");
         return v;
       }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "moe_combine";
  s.doc = "y = sum_j a_j E_j + S: top-k experts' outputs [T,k,H] weighted by the router's weights [T,k] (f32) "
          "and rsf (on the weights, rounded to f32, or on the routed sum), plus the shared expert's [T,H]";
  s.params = {{"T", ParamKind::integer, "64", "tokens", true},
              {"topk", ParamKind::integer, "8", "routed experts per token (k)", true},
              {"H", ParamKind::integer, "4096", "hidden size", true},
              {"rsf", ParamKind::real, "1", "routed_scaling_factor (GLM-4.5 and GLM-5.x 2.5, GLM-4.7-Flash 1.8, "
               "Kimi-Linear 2.446, GLM-4.5-Air 1), held in f32"},
              {"rsf_on", ParamKind::text, "weights", "where rsf applies: the router's f32 weights (rounded there) or "
               "the routed sum", false, {"weights", "output"}},
              {"shared", ParamKind::boolean, "1", "the shared expert's output is added (every config has one)"},
              {"regime", ParamKind::text, "production", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the stored expert and shared outputs (the weights are f32)",
               true, {"f64", "f32", "bf16", "f16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"expert_out", TensorRole::input, "[T,k,H] the routed experts' outputs, in slot order"},
               {"weights", TensorRole::input, "[T,k] f32 router weights (renormalised, before rsf)"},
               {"shared", TensorRole::input, "[T,H] the shared expert's output, when shared=1"},
               {"y", TensorRole::output, "[T,H]"}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = [](const Case& c) {
    return std::map<std::string, std::vector<int64_t>>{{"y", {c.integer("T"), c.integer("H")}}};
  };
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    return RefOutputs{{"y", run_rows(c, in, tier, c.integer("T"), false).y}};
  };
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.flops = [](const Case& c) {   // a multiply and an add per routed term, the shared add
    return static_cast<double>(c.integer("T") * c.integer("H")) * (2.0 * static_cast<double>(c.integer("topk")) + 1.0);
  };
  s.bytes = [](const Case& c, const Storage& st) {   // k + 1 rows of H in (k without shared), one out
    const double T = static_cast<double>(c.integer("T")), k = static_cast<double>(c.integer("topk")),
                 H = static_cast<double>(c.integer("H"));
    const double rows_in = k + (c.boolean("shared") ? 1.0 : 0.0);
    return T * H * (rows_in * st.input_bytes(c.dtype()) + st.output_bytes(c.dtype())) + T * k * 4.0;
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(moe_combine, spec());

}  // namespace dg
