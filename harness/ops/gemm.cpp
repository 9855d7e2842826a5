// OpSpec of gemm (reference/gemm.h): y = x W^T (+ bias), the linear layers (QKV and output
// projections, dense MLPs, experts, the lm_head) as nn.Linear stores their weights. Its regimes and
// suites are in datasets/gemm.cpp, its CPU candidates in candidates/cpu/gemm.cpp.
#include "harness/ops/gemm.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"
#include "reference/gemm.h"

namespace dg {

void gemm_check_size(const char* op, int64_t M, int64_t N, int64_t K) {
  checked_product(fmt::format("{}: M*K", op), {M, K});
  checked_product(fmt::format("{}: N*K", op), {N, K});
  checked_product(fmt::format("{}: M*N", op), {M, N});
  const double macs = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (macs > kGemmMaxMacs)
    throw InputError(fmt::format("{}: M*N*K = {:g} multiply-adds is over the limit of 2^34 = {:g} per case "
                                 "(reference work); split the case",
                                 op, macs, kGemmMaxMacs));
}

GemmSample gemm_certify_sample(int64_t M, int64_t N, double output_cost) {
  const double row_cost = static_cast<double>(N) * output_cost;
  GemmSample s;
  s.rows = std::clamp<int64_t>(static_cast<int64_t>(kCertifyOps / row_cost), 1, M);
  s.cols = s.rows > 1 || row_cost <= kCertifyOps
               ? N
               : std::clamp<int64_t>(static_cast<int64_t>(kCertifyOps / output_cost), 1, N);
  s.what = s.rows == M && s.cols == N ? "full case"
           : s.cols == N              ? fmt::format("rows [0,{})", s.rows)
                                      : fmt::format("row 0, columns [0,{})", s.cols);
  return s;
}

GemmParams gemm_params(const Case& c) {
  GemmParams p;
  p.M = c.integer("M");
  p.N = c.integer("N");
  p.K = c.integer("K");
  p.bias = c.boolean("bias");
  return p;
}

namespace {

void validate(const Case& c) {
  for (const char* n : {"M", "N", "K"})
    if (c.integer(n) < 1) throw InputError(fmt::format("gemm: {} must be >= 1, got {}", n, c.integer(n)));
  gemm_check_size("gemm", c.integer("M"), c.integer("N"), c.integer("K"));
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const GemmParams p = gemm_params(c);
  std::map<std::string, InputSpec> in = {{"x", {c.dtype(), {p.M, p.K}}}, {"w", {c.dtype(), {p.N, p.K}}}};
  if (p.bias) in["bias"] = {c.dtype(), {p.N}};
  return in;
}

// Rows [0, rows) and output columns [0, cols) of the case through the reference.
GemmReferenceResult run_part(const Case& c, const TensorMap& in, Tier tier, int64_t rows, int64_t cols, bool tails) {
  GemmParams p = gemm_params(c);
  const Tensor x = rows == p.M ? in.at("x") : leading_slice(in.at("x"), 0, rows);
  const Tensor w = cols == p.N ? in.at("w") : leading_slice(in.at("w"), 0, cols);
  p.M = rows;
  p.N = cols;
  if (!p.bias) return gemm_reference(tier, p, x, w, nullptr, tails);
  const Tensor b = cols == c.integer("N") ? in.at("bias") : leading_slice(in.at("bias"), 0, cols);
  return gemm_reference(tier, p, x, w, &b, tails);
}

// A sample of rows [0, rows) within kCertifyOps at the next tier (a row costs N*K*tier_cost); when
// not even one row fits, row 0's first `cols` outputs (each K*tier_cost).
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const std::optional<Tier> up = next_tier(tier);
  if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
  const GemmParams p = gemm_params(c);
  const GemmSample smp = gemm_certify_sample(p.M, p.N, static_cast<double>(p.K) * tier_cost(*up));
  const int64_t rows = smp.rows, cols = smp.cols;
  Certification cert;
  cert.tier = tier;
  cert.against = *up;
  cert.sample = smp.what;
  const GemmReferenceResult lo = run_part(c, in, tier, rows, cols, true), hi = run_part(c, in, *up, rows, cols, true);
  cert.ref_bits = agreement_bits(lo.y, hi.y, lo.y_tail, hi.y_tail);
  cert.ref_bits_max_elem = agreement_bits_max_elem(lo.y, hi.y, lo.y_tail, hi.y_tail);
  return cert;
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // The reduction length: no multiple of a vector or a warp (a k-tail loop), and the hidden sizes.
      {"K", {"K % 32 != 0", "K >= 4096"},
       [](const Case& c) {
         std::vector<std::string> v;
         if (c.integer("K") % 32 != 0) v.push_back("K % 32 != 0");
         if (c.integer("K") >= 4096) v.push_back("K >= 4096");
         return v;
       }},
      // Rows: one token (decode: a matrix-vector product, kernels split K or N) or many.
      {"M", {"M = 1 (decode)", "M > 1"},
       [](const Case& c) { return std::vector<std::string>{c.integer("M") == 1 ? "M = 1 (decode)" : "M > 1"}; }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "gemm";
  s.doc = "y = x W^T (+ bias): a linear layer, x [M,K], w [N,K] as nn.Linear stores it, sums in increasing k";
  s.params = {{"M", ParamKind::integer, "16", "rows (tokens)", true},
              {"N", ParamKind::integer, "4096", "output features (the weight's rows)", true},
              {"K", ParamKind::integer, "4096", "input features (the reduction length)", true},
              {"bias", ParamKind::boolean, "0", "a bias [N] is added (GLM-4.5's attention_bias on QKV)"},
              {"regime", ParamKind::text, "activations", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the stored activations, weight and bias", true,
               {"f64", "f32", "bf16", "f16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"x", TensorRole::input, "[M,K] the activations"},
               {"w", TensorRole::input, "[N,K] the weight (out_features x in_features)"},
               {"bias", TensorRole::input, "[N] when bias=1"},
               {"y", TensorRole::output, "[M,N]"}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = [](const Case& c) {
    return std::map<std::string, std::vector<int64_t>>{{"y", {c.integer("M"), c.integer("N")}}};
  };
  s.check_inputs = [](const Case& c, const TensorMap& in) { check_inputs_exact(c, in, inputs(c)); };
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    return RefOutputs{{"y", run_part(c, in, tier, c.integer("M"), c.integer("N"), false).y}};
  };
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.flops = [](const Case& c) {   // a multiply and an add per term
    return 2.0 * static_cast<double>(c.integer("M")) * static_cast<double>(c.integer("N")) *
           static_cast<double>(c.integer("K"));
  };
  s.bytes = [](const Case& c, const Storage& st) {   // x, w (and bias) in, y out
    const double M = static_cast<double>(c.integer("M")), N = static_cast<double>(c.integer("N")),
                 K = static_cast<double>(c.integer("K"));
    const double in = M * K + N * K + (c.boolean("bias") ? N : 0.0);
    return in * st.input_bytes(c.dtype()) + M * N * st.output_bytes(c.dtype());
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(gemm, spec());

}  // namespace dg
