// OpSpecs of rmsnorm and add_rmsnorm (reference/rmsnorm.h): the norms of every layer, QK-norm (rows
// of one head, N = tokens x heads) and the fused residual add + norm of the decoder layers. Their
// regimes and suites are in datasets/rmsnorm.cpp, their CPU candidates in candidates/cpu/rmsnorm.cpp.
#include "harness/ops/rmsnorm.h"

#include <cmath>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"
#include "reference/rmsnorm.h"

namespace dg {

RmsNormParams rmsnorm_params(const Case& c) {
  RmsNormParams p;
  p.N = c.integer("N");
  p.D = c.integer("D");
  p.eps = c.real("eps");
  p.dtype = c.dtype();
  return p;
}

namespace {

bool fused(const Case& c) { return c.op() == "add_rmsnorm"; }

void validate(const Case& c) {
  const std::string op = c.op();
  for (const char* n : {"N", "D"})
    if (c.integer(n) < 1) throw InputError(fmt::format("{}: {} must be >= 1, got {}", op, n, c.integer(n)));
  if (!(c.real("eps") > 0) || c.real("eps") > 1)
    throw InputError(fmt::format("{}: eps must be in (0, 1], got {}", op, c.real("eps")));
  checked_product(op + ": N*D", {c.integer("N"), c.integer("D")});
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const RmsNormParams p = rmsnorm_params(c);
  std::map<std::string, InputSpec> in = {{"x", {c.dtype(), {p.N, p.D}}}, {"weight", {c.dtype(), {p.D}}}};
  if (fused(c)) in["residual"] = {c.dtype(), {p.N, p.D}};
  return in;
}

std::map<std::string, std::vector<int64_t>> output_shapes(const Case& c) {
  const RmsNormParams p = rmsnorm_params(c);
  std::map<std::string, std::vector<int64_t>> out = {{"y", {p.N, p.D}}};
  if (fused(c)) out["residual_out"] = {p.N, p.D};
  return out;
}

// Rows [0, rows) of the case's inputs through the reference.
RmsNormReferenceResult run_rows(const Case& c, const TensorMap& in, Tier tier, int64_t rows, bool tails) {
  RmsNormParams p = rmsnorm_params(c);
  const bool all = rows == p.N;
  p.N = rows;
  const Tensor x = all ? in.at("x") : leading_slice(in.at("x"), 0, rows);
  if (!fused(c)) return rmsnorm_reference(tier, p, x, nullptr, in.at("weight"), tails);
  const Tensor res = all ? in.at("residual") : leading_slice(in.at("residual"), 0, rows);
  return rmsnorm_reference(tier, p, x, &res, in.at("weight"), tails);
}

RefOutputs reference(const Case& c, const TensorMap& in, Tier tier, int64_t) {
  RmsNormReferenceResult r = run_rows(c, in, tier, c.integer("N"), false);
  RefOutputs out{{"y", std::move(r.y)}};
  if (fused(c)) out["residual_out"] = std::move(r.residual);
  return out;
}

// The residual output is exact in every tier (one rounding of a double sum), so only y is certified.
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  return certify_leading_rows(tier, c.integer("N"), 3.0 * static_cast<double>(c.integer("D")), [&](Tier t, int64_t rows) {
    RmsNormReferenceResult r = run_rows(c, in, t, rows, true);
    return SampleOutputs{std::move(r.y), std::move(r.y_tail)};
  });
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // The eps a norm site uses: a constant swapped between sites shows only where mean(x^2) is near it.
      {"eps", {"1e-05", "1e-06"},
       [](const Case& c) { return std::vector<std::string>{fmt::format("{:g}", c.real("eps"))}; }},
      // Row lengths: one head (QK-norm, 64-256), a hidden state (2048-7168), and a length that is
      // no multiple of a vector width or a warp's 32 lanes (tails of a blocked reduction).
      {"D", {"head (<= 256)", "hidden (>= 2048)", "D % 32 != 0"},
       [](const Case& c) {
         const int64_t D = c.integer("D");
         std::vector<std::string> v;
         if (D <= 256) v.push_back("head (<= 256)");
         if (D >= 2048) v.push_back("hidden (>= 2048)");
         if (D % 32 != 0) v.push_back("D % 32 != 0");
         return v;
       }},
  };
}

OpSpec spec(bool add) {
  OpSpec s;
  s.name = add ? "add_rmsnorm" : "rmsnorm";
  s.doc = add ? "fused residual add + RMSNorm: s = round_dtype(x + residual) (the new residual), "
                "y = s / sqrt(mean(s^2) + eps) * w"
              : "RMSNorm per row: y = x / sqrt(mean(x^2) + eps) * w (layer norms; QK-norm with D = head_dim)";
  s.params = {{"N", ParamKind::integer, "64", "rows (tokens, or tokens x heads for QK-norm)", true},
              {"D", ParamKind::integer, "4096", "row length (hidden size, or head_dim for QK-norm)", true},
              {"eps", ParamKind::real, "1e-05", "inside the square root (1e-5 text norms, 1e-6 elsewhere)"},
              {"regime", ParamKind::text, "hidden", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the stored activations and weight", true,
               {"f64", "f32", "bf16", "f16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"x", TensorRole::input, add ? "[N,D] the sublayer's output" : "[N,D]"},
               {"weight", TensorRole::input, "[D] in the activations' dtype"}};
  if (add) s.tensors.push_back({"residual", TensorRole::input, "[N,D] the residual stream"});
  s.tensors.push_back({"y", TensorRole::output, "[N,D]"});
  if (add) s.tensors.push_back({"residual_out", TensorRole::output, "[N,D] round_dtype(x + residual), exact"});
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = output_shapes;
  s.reference = reference;
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.flops = [add](const Case& c) {   // square and add, scale, weight (+ the residual add)
    return static_cast<double>(c.integer("N") * c.integer("D")) * (add ? 5.0 : 4.0);
  };
  s.bytes = [add](const Case& c, const Storage& st) {   // x (+ residual) in, y (+ residual_out) out, the weight
    const double n = static_cast<double>(c.integer("N") * c.integer("D"));
    const double io = st.input_bytes(c.dtype()) + st.output_bytes(c.dtype());
    return n * io * (add ? 2.0 : 1.0) + static_cast<double>(c.integer("D")) * st.input_bytes(c.dtype());
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(rmsnorm, spec(false));
DG_REGISTER_OP(add_rmsnorm, spec(true));

}  // namespace dg
