// OpSpec of swiglu (reference/swiglu.h): the activation of the dense MLPs, shared experts and routed
// experts, with GLM-5.3-Flash's asymmetric clamp. Its regimes and suites are in datasets/swiglu.cpp,
// its CPU candidates in candidates/cpu/swiglu.cpp.
#include "harness/ops/swiglu.h"

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"
#include "reference/swiglu.h"

namespace dg {

SwigluParams swiglu_params(const Case& c) {
  SwigluParams p;
  p.N = c.integer("N");
  p.I = c.integer("I");
  p.limit = c.real("limit");
  return p;
}

namespace {

void validate(const Case& c) {
  for (const char* n : {"N", "I"})
    if (c.integer(n) < 1) throw InputError(fmt::format("swiglu: {} must be >= 1, got {}", n, c.integer(n)));
  if (!(c.real("limit") >= 0) || c.real("limit") > 1e4)
    throw InputError(fmt::format("swiglu: limit must be 0 (no clamp) or in (0, 1e4], got {}", c.real("limit")));
  checked_product("swiglu: N*2*I", {c.integer("N"), 2, c.integer("I")});
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  return {{"x", {c.dtype(), {c.integer("N"), 2 * c.integer("I")}}}};
}

SwigluReferenceResult run_rows(const Case& c, const TensorMap& in, Tier tier, int64_t rows, bool tails) {
  SwigluParams p = swiglu_params(c);
  const bool all = rows == p.N;
  p.N = rows;
  return swiglu_reference(tier, p, all ? in.at("x") : leading_slice(in.at("x"), 0, rows), tails);
}

Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  return certify_leading_rows(tier, c.integer("N"), 4.0 * static_cast<double>(c.integer("I")), [&](Tier t, int64_t rows) {
    SwigluReferenceResult r = run_rows(c, in, t, rows, true);
    return SampleOutputs{std::move(r.y), std::move(r.y_tail)};
  });
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // The clamp: absent (every model but GLM-5.3-Flash) or present (its swiglu_limit = 10).
      {"clamp", {"none", "limit > 0"},
       [](const Case& c) { return std::vector<std::string>{c.real("limit") > 0 ? "limit > 0" : "none"}; }},
      // Widths: no multiple of a vector or a warp (a tail loop), and the experts' sizes.
      {"I", {"I % 32 != 0", "I >= 1024"},
       [](const Case& c) {
         std::vector<std::string> v;
         if (c.integer("I") % 32 != 0) v.push_back("I % 32 != 0");
         if (c.integer("I") >= 1024) v.push_back("I >= 1024");
         return v;
       }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "swiglu";
  s.doc = "y = silu(min(gate, L)) * clamp(up, -L, L) on rows [gate | up] (no clamp when L = 0; GLM-5.3-Flash L = 10)";
  s.params = {{"N", ParamKind::integer, "64", "rows (tokens)", true},
              {"I", ParamKind::integer, "2048", "intermediate size (the output's row length; the input's is 2I)", true},
              {"limit", ParamKind::real, "0", "swiglu_limit L: gate <= L, up in [-L, L]; 0 = no clamp"},
              {"regime", ParamKind::text, "expert", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the stored activations", true, {"f64", "f32", "bf16", "f16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"x", TensorRole::input, "[N,2I] the gate/up projection: gate = x[:, :I], up = x[:, I:]"},
               {"y", TensorRole::output, "[N,I]"}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = [](const Case& c) {
    return std::map<std::string, std::vector<int64_t>>{{"y", {c.integer("N"), c.integer("I")}}};
  };
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    return RefOutputs{{"y", run_rows(c, in, tier, c.integer("N"), false).y}};
  };
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.flops = [](const Case& c) {   // clamps, exp, add, divide, two products
    return static_cast<double>(c.integer("N") * c.integer("I")) * 8.0;
  };
  s.bytes = [](const Case& c, const Storage& st) {   // 2I in, I out per row
    return static_cast<double>(c.integer("N") * c.integer("I")) *
           (2 * st.input_bytes(c.dtype()) + st.output_bytes(c.dtype()));
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(swiglu, spec());

}  // namespace dg
