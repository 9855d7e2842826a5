// OpSpec of gemm (reference/gemm.h): y = x W^T (+ bias), the linear layers (QKV and output
// projections, dense MLPs, experts, the lm_head) as nn.Linear stores their weights. Its regimes and
// suites are in datasets/gemm.cpp, its CPU candidates in candidates/cpu/gemm.cpp.
#include "harness/ops/gemm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/core/threads.h"
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

// --- the format bound -----------------------------------------------------------------------------
// What f32 accumulation allows at this K, element by element, for any summation order (Higham,
// Accuracy and Stability of Numerical Algorithms, 2nd ed., §3.1): with n = K (+1 with a bias) and
// u the accumulator's unit roundoff, gamma_n = n u / (1 - n u),
//   |y_hat - y| <= gamma_n T,   T = sum_k |x_ik w_jk| + |b_j|.
// Inputs a candidate reads in a narrower dtype than the case's add e_in = (1 + u_in)^2 - 1 to each
// product; the output's rounding adds u_out |y_hat|. So
//   B = ((1 + gamma_n)(1 + e_in) - 1) T (1 + u_out) + u_out |r| + tiny,
// tiny covering underflow: n half-subnormals of the accumulator, half an output subnormal, and with
// narrower inputs their half-subnormal times sum_k (|x_ik| + |w_jk|). The accumulator is f32 for
// bf16/f16/f32 cases and f64 for f64 cases, or the candidate's state dtype where that is wider in
// error. The measure is max_i |c_i - r_i| / B_i, limit 1: no honest kernel exceeds it, whatever its
// order, blocking or FMA use. It grows with K; the typical error grows with sqrt(K), which
// `format_bound_sqrtk.y` (report only) shows: max_i |c_i - r_i| / (u sqrt(n) T_i + u_out |r_i|),
// the probabilistic bound of Higham and Mary (SIAM J. Sci. Comput. 41(5), 2019) with lambda = 1
// plus the output's rounding.

// T_ij = sum_k |x_ik| |w_jk| + |b_j| and R_ij = sum_k (|x_ik| + |w_jk|), in double (relative error
// below K 2^-53, covered by the bound's 2^-20 margin). Kept for the last case: the gate measures
// base, patch and naive on the same inputs.
struct Magnitudes {
  std::vector<double> T, R;
};
const Magnitudes& magnitudes(const Case& c, const TensorMap& in) {
  static std::mutex mu;
  static std::string key;
  static Magnitudes cached;
  std::lock_guard<std::mutex> lock(mu);
  const GemmParams p = gemm_params(c);
  auto digest = [&](const char* name) {
    const Tensor& t = in.at(name);
    return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(t.bytes()), t.nbytes()));
  };
  const std::string k = fmt::format("{}|{}|{}|{}", c.str(), digest("x"), digest("w"), p.bias ? digest("bias") : 0);
  if (k == key) return cached;
  std::vector<double> x(static_cast<size_t>(p.M * p.K)), w(static_cast<size_t>(p.N * p.K)), b(static_cast<size_t>(p.N), 0.0);
  in.at("x").read(0, x);
  in.at("w").read(0, w);
  if (p.bias) in.at("bias").read(0, b);
  for (double& v : x) v = std::fabs(v);
  for (double& v : w) v = std::fabs(v);
  cached.T.assign(static_cast<size_t>(p.M * p.N), 0.0);
  cached.R.assign(static_cast<size_t>(p.M * p.N), 0.0);
  parallel_for(p.M * p.N, [&](int64_t lo, int64_t hi) {
    for (int64_t e = lo; e < hi; ++e) {
      const double* xi = &x[static_cast<size_t>((e / p.N) * p.K)];
      const double* wj = &w[static_cast<size_t>((e % p.N) * p.K)];
      double t = 0, r = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        t += xi[k] * wj[k];
        r += xi[k] + wj[k];
      }
      cached.T[static_cast<size_t>(e)] = t + std::fabs(b[static_cast<size_t>(e % p.N)]);
      cached.R[static_cast<size_t>(e)] = r;
    }
  });
  key = k;
  return cached;
}

std::vector<OpMeasure> measure(const Case& c, const CandidateInfo& cand, const TensorMap& in, const RefOutputs& ref,
                               const TensorMap& out) {
  const GemmParams p = gemm_params(c);
  const Magnitudes& mg = magnitudes(c, in);
  const DType acc0 = c.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const DType acc = narrower(cand.state_dtype, acc0) ? cand.state_dtype : acc0;
  const DType y_dtype = out.at("y").dtype();
  const double u = unit_roundoff(acc), n = static_cast<double>(p.K + (p.bias ? 1 : 0));
  const double gamma = n * u / (1 - n * u);
  const double u_in = narrower(cand.input_dtype, c.dtype()) ? unit_roundoff(cand.input_dtype) : 0.0;
  const double e_in = (1 + u_in) * (1 + u_in) - 1, u_out = unit_roundoff(y_dtype);
  const double rel = ((1 + gamma) * (1 + e_in) - 1) * (1 + u_out) * (1 + 0x1p-20);
  const double tiny = 2 * n * half_subnormal(acc) + half_subnormal(y_dtype);
  const double tiny_in = u_in > 0 ? half_subnormal(cand.input_dtype) * (1 + u_in) : 0.0;
  std::vector<double> cv(static_cast<size_t>(p.M * p.N));
  out.at("y").read(0, cv);
  const std::vector<double>& r = ref.at("y");
  double worst = 0, worst_sqrt = 0;
  for (size_t e = 0; e < cv.size(); ++e) {
    if (!std::isfinite(r[e])) continue;   // the tensor metrics judge non-finite positions
    const double err = std::isfinite(cv[e]) ? std::fabs(cv[e] - r[e]) : std::numeric_limits<double>::infinity();
    const double bound = rel * mg.T[e] + u_out * std::fabs(r[e]) + tiny + tiny_in * mg.R[e];
    worst = std::max(worst, err <= bound ? err / bound : (bound > 0 ? err / bound : std::numeric_limits<double>::infinity()));
    const double typical = u * std::sqrt(n) * mg.T[e] + u_out * std::fabs(r[e]);
    if (typical > 0) worst_sqrt = std::max(worst_sqrt, err / typical);
  }
  const std::string fmt_text = fmt::format("{} accumulation over K = {}, {} output{}", name(acc), p.K, name(y_dtype),
                                           u_in > 0 ? fmt::format(", {} inputs", name(cand.input_dtype)) : "");
  OpMeasure bound{"format_bound.y", worst, 1.0, false, 0.0,
                  "max |c - r| / B, B the worst-case bound of " + fmt_text + " (gamma_K sum|x w|)"};
  OpMeasure sqrtk{"format_bound_sqrtk.y", worst_sqrt, std::numeric_limits<double>::quiet_NaN(), false, 0.0,
                  "max |c - r| / (u sqrt(K) sum|x w| + u_out |r|), the typical growth; report only"};
  return {bound, sqrtk};
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
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    return RefOutputs{{"y", run_part(c, in, tier, c.integer("M"), c.integer("N"), false).y}};
  };
  s.certify = certify;
  s.measure = measure;
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
