// OpSpec of gemm_fp8_block (reference/gemm_fp8_block.h): y = x W^T with e4m3 operands and block
// scales as multipliers (1 x 128 on the activations, 128 x 128 on the weight), each 128-block's
// partial promoted to f32, scaled and accumulated across blocks, as DeepGEMM and vLLM's block-FP8
// kernels compute the FP8 checkpoints' linear layers. Its regimes and suites are in
// datasets/gemm_fp8_block.cpp, its CPU candidates in candidates/cpu/gemm_fp8_block.cpp.
#include "harness/ops/gemm_fp8_block.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/core/threads.h"
#include "harness/ops/gemm.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"

namespace dg {

GemmFp8BlockParams gemm_fp8_block_params(const Case& c) {
  GemmFp8BlockParams p;
  p.M = c.integer("M");
  p.N = c.integer("N");
  p.K = c.integer("K");
  return p;
}

namespace {

// S[m][n] = sum_b |x_scale w_scale| sum_k |x w| of gemm_fp8_block_bound. It depends on the inputs
// only, and every candidate of a case is measured on the same ones: the last inputs' S is kept,
// keyed by the shapes and a digest of every input's bytes (as gemm's magnitudes).
std::vector<double> abs_sums(const GemmFp8BlockParams& p, const TensorMap& in) {
  const int64_t K = p.K, KB = p.kb();
  std::vector<double> x(static_cast<size_t>(p.M * K)), xs(static_cast<size_t>(p.M * KB)),
      ws(static_cast<size_t>(p.nb() * KB));
  in.at("x").read(0, x);
  in.at("x_scale").read(0, xs);
  in.at("w_scale").read(0, ws);
  std::vector<double> S(static_cast<size_t>(p.M * p.N));
  parallel_for(p.N, [&](int64_t n0, int64_t n1) {
    std::vector<double> wn(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      in.at("w").read(n * K, wn);
      const double* wsn = ws.data() + (n / kFp8Block) * KB;
      for (int64_t m = 0; m < p.M; ++m) {
        double s = 0.0;
        for (int64_t b = 0; b < KB; ++b)
          s += std::fabs(xs[static_cast<size_t>(m * KB + b)] * wsn[b]) *
               fp8_block_partial<true>(x.data() + m * K + b * kFp8Block, wn.data() + b * kFp8Block);
        S[static_cast<size_t>(m * p.N + n)] = s;
      }
    }
  });
  return S;
}

const std::vector<double>& cached_abs_sums(const GemmFp8BlockParams& p, const TensorMap& in) {
  static std::mutex mu;
  static std::string key;
  static std::vector<double> S;
  const auto digest = [&](const char* name) {
    const Tensor& t = in.at(name);
    return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(t.bytes()), t.nbytes()));
  };
  const std::string k = fmt::format("{},{},{}|{}|{}|{}|{}", p.M, p.N, p.K, digest("x"), digest("x_scale"), digest("w"),
                                    digest("w_scale"));
  std::lock_guard<std::mutex> lock(mu);
  if (k != key) {
    S = abs_sums(p, in);
    key = k;
  }
  return S;
}

// The inner accumulator's format: the candidate's state dtype where it keeps fewer bits than f32.
DType inner_format(DType state) { return narrower(state, DType::f32) ? state : DType::f32; }

}  // namespace

void gemm_fp8_block_bound(const GemmFp8BlockParams& p, const TensorMap& in, DType input, DType state, DType out,
                          const std::vector<double>& ref, std::vector<double>& bound) {
  const std::vector<double>& S = cached_abs_sums(p, in);
  const double kb = static_cast<double>(p.kb());
  const double d_in = 2 * unit_roundoff(inner_format(state)), u = unit_roundoff(DType::f32);
  const double u_in = narrower(input, DType::f32) ? unit_roundoff(input) : 0.0;
  const double g = std::expm1(127.0 * std::log1p(d_in) + (kb + 1.0) * std::log1p(u) + 2.0 * std::log1p(u_in));
  const double u_out = unit_roundoff(out);
  const double under = (kb + 1.0) * half_subnormal(DType::f32) + half_subnormal(out);
  bound.resize(S.size());
  for (size_t i = 0; i < S.size(); ++i)
    bound[i] = ((1 + u_out) * g * S[i] + (u_out + 0x1p-52) * std::fabs(ref[i]) + under) * (1 + 0x1p-40);
}

double gemm_fp8_block_bound_ratio(const GemmFp8BlockParams& p, const TensorMap& in, DType input, DType state,
                                  const Tensor& y, const std::vector<double>& ref, std::string* where) {
  std::vector<double> bound, c(static_cast<size_t>(y.numel()));
  gemm_fp8_block_bound(p, in, input, state, y.dtype(), ref, bound);
  y.read(0, c);
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double e = std::isfinite(c[i]) ? std::fabs(c[i] - ref[i]) / bound[i] : std::numeric_limits<double>::infinity();
    if (i == 0 || e > worst) {
      worst = e;
      at = i;
    }
  }
  if (where)
    *where = fmt::format("y[{},{}]: |c - r| = {:.3g}, bound {:.3g}", static_cast<int64_t>(at) / p.N,
                         static_cast<int64_t>(at) % p.N, std::fabs(c[at] - ref[at]), bound[at]);
  return worst;
}

namespace {

// format_bound.y (limit 1) and, for reports, format_bound_sqrtk.y: the error against the typical
// (probabilistic, Higham and Mary 2019) growth, sqrt(127) d_in + sqrt(K/128 + 1) u per unit of S,
// plus the output's rounding.
std::vector<OpMeasure> measure(const Case& c, const CandidateInfo& cand, const TensorMap& in, const RefOutputs& ref,
                               const TensorMap& out) {
  const GemmFp8BlockParams p = gemm_fp8_block_params(c);
  const Tensor& y = out.at("y");
  const std::vector<double>& r = ref.at("y");
  std::string where;
  const double worst = gemm_fp8_block_bound_ratio(p, in, cand.input_dtype, cand.state_dtype, y, r, &where);
  const std::vector<double>& S = cached_abs_sums(p, in);
  const DType acc = inner_format(cand.state_dtype);
  const double per_s = std::sqrt(127.0) * 2 * unit_roundoff(acc) +
                       std::sqrt(static_cast<double>(p.kb()) + 1.0) * unit_roundoff(DType::f32);
  const double u_out = unit_roundoff(y.dtype());
  std::vector<double> cv(static_cast<size_t>(y.numel()));
  y.read(0, cv);
  double typical = 0.0;
  for (size_t i = 0; i < cv.size(); ++i) {
    const double t = per_s * S[i] + u_out * std::fabs(r[i]);
    const double err = std::isfinite(cv[i]) ? std::fabs(cv[i] - r[i]) : std::numeric_limits<double>::infinity();
    if (t > 0) typical = std::max(typical, err / t);
  }
  const std::string scheme = fmt::format("{} partials of 128, f32 promotion over K = {}, {} output", name(acc), p.K,
                                         name(y.dtype()));
  return {OpMeasure{"format_bound.y", worst, 1.0, false, 0.0,
                    "max |c - r| / B, B the worst-case bound of " + scheme + "; worst at " + where},
          OpMeasure{"format_bound_sqrtk.y", typical, std::numeric_limits<double>::quiet_NaN(), false, 0.0,
                    "max |c - r| / ((sqrt(127) d_in + sqrt(K/128 + 1) u) S + u_out |r|), the typical growth; report only"}};
}

void validate(const Case& c) {
  for (const char* n : {"M", "N", "K"})
    if (c.integer(n) < 1) throw InputError(fmt::format("gemm_fp8_block: {} must be >= 1, got {}", n, c.integer(n)));
  if (c.integer("K") % kFp8Block != 0)
    throw InputError(fmt::format("gemm_fp8_block: K must be a multiple of the scale block 128 (as DeepGEMM and vLLM's "
                                 "block-FP8 kernels require), got K={}",
                                 c.integer("K")));
  gemm_check_size("gemm_fp8_block", c.integer("M"), c.integer("N"), c.integer("K"));
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const GemmFp8BlockParams p = gemm_fp8_block_params(c);
  return {{"x", {DType::e4m3, {p.M, p.K}}},
          {"x_scale", {DType::f32, {p.M, p.kb()}}},
          {"w", {DType::e4m3, {p.N, p.K}}},
          {"w_scale", {DType::f32, {p.nb(), p.kb()}}}};
}

// Rows [0, rows) and output columns [0, cols) of the case through the reference.
GemmFp8BlockReferenceResult run_part(const Case& c, const TensorMap& in, Tier tier, int64_t rows, int64_t cols,
                                     bool tails) {
  const GemmFp8BlockParams full = gemm_fp8_block_params(c);
  GemmFp8BlockParams p = full;
  p.M = rows;
  p.N = cols;
  const auto cut = [](const Tensor& t, int64_t keep, int64_t all) { return keep == all ? t : leading_slice(t, 0, keep); };
  return gemm_fp8_block_reference(tier, p, cut(in.at("x"), rows, full.M), cut(in.at("x_scale"), rows, full.M),
                                  cut(in.at("w"), cols, full.N), cut(in.at("w_scale"), p.nb(), full.nb()), tails);
}

// gemm's sample (harness/ops/gemm.h): an output costs K exact double multiply-adds (counted at the
// f64 tier's cost) and K/128 products and sums at the upper tier.
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const std::optional<Tier> up = next_tier(tier);
  if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
  const GemmFp8BlockParams p = gemm_fp8_block_params(c);
  const double cost = static_cast<double>(p.K) * tier_cost(Tier::f64) + static_cast<double>(p.kb()) * tier_cost(*up);
  const GemmSample smp = gemm_certify_sample(p.M, p.N, cost);
  Certification cert;
  cert.tier = tier;
  cert.against = *up;
  cert.sample = smp.what;
  const GemmFp8BlockReferenceResult lo = run_part(c, in, tier, smp.rows, smp.cols, true),
                                    hi = run_part(c, in, *up, smp.rows, smp.cols, true);
  cert.ref_bits = agreement_bits(lo.y, hi.y, lo.y_tail, hi.y_tail);
  cert.ref_bits_max_elem = agreement_bits_max_elem(lo.y, hi.y, lo.y_tail, hi.y_tail);
  return cert;
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // The reduction: one scale block, or the hidden sizes' 32 .. 56 blocks.
      {"K", {"K = 128 (one block)", "K >= 4096"},
       [](const Case& c) {
         std::vector<std::string> v;
         if (c.integer("K") == kFp8Block) v.push_back("K = 128 (one block)");
         if (c.integer("K") >= 4096) v.push_back("K >= 4096");
         return v;
       }},
      // The weight-scale rows: whole 128-row blocks, or a last partial one.
      {"N", {"N % 128 = 0", "N % 128 != 0 (a partial weight-scale block)"},
       [](const Case& c) {
         return std::vector<std::string>{c.integer("N") % kFp8Block == 0 ? "N % 128 = 0"
                                                                        : "N % 128 != 0 (a partial weight-scale block)"};
       }},
      {"M", {"M = 1 (decode)", "M > 1"},
       [](const Case& c) { return std::vector<std::string>{c.integer("M") == 1 ? "M = 1 (decode)" : "M > 1"}; }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "gemm_fp8_block";
  s.doc = "y = x W^T on e4m3 x [M,K] and w [N,K] with block scales as multipliers (x_scale [M,K/128], w_scale "
          "[ceil(N/128),K/128]): per 128-block partials, scaled, summed over blocks; K % 128 = 0";
  s.params = {{"M", ParamKind::integer, "16", "rows (tokens)", true},
              {"N", ParamKind::integer, "4096", "output features (the weight's rows)", true},
              {"K", ParamKind::integer, "4096", "input features, a multiple of 128 (the reduction length)", true},
              {"regime", ParamKind::text, "production", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "e4m3", "dtype of the stored x and w (the scales are f32; y is in each "
               "candidate's output dtype: bf16 in production)", true, {"e4m3"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"x", TensorRole::input, "[M,K] e4m3 activations, quantized per 1 x 128 block"},
               {"x_scale", TensorRole::input, "[M,K/128] f32 multipliers of x's blocks"},
               {"w", TensorRole::input, "[N,K] e4m3 weight (out_features x in_features)"},
               {"w_scale", TensorRole::input, "[ceil(N/128),K/128] f32 multipliers of w's 128 x 128 blocks (weight_scale_inv)"},
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
  s.bytes = [](const Case& c, const Storage& st) {   // x, w and their scales in, y out
    const GemmFp8BlockParams p = gemm_fp8_block_params(c);
    const double M = static_cast<double>(p.M), N = static_cast<double>(p.N), K = static_cast<double>(p.K);
    const double scales = static_cast<double>((p.M + p.nb()) * p.kb());
    return (M * K + N * K) * st.input_bytes(DType::e4m3) + 4.0 * scales + M * N * st.output_bytes(DType::f32);
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(gemm_fp8_block, spec());

}  // namespace dg
