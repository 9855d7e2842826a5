// OpSpec of mhc (reference/mhc.h): GLM-5.3-Flash's manifold-constrained hyper-connection mix at one
// site, with its measure (the doubly-stochastic residual of C). Its regimes and suites are in
// datasets/mhc.cpp, its CPU candidates in candidates/cpu/mhc.cpp.
#include "harness/ops/mhc.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"

namespace dg {

MhcParams mhc_params(const Case& c) {
  MhcParams p;
  p.T = c.integer("T");
  p.H = c.integer("H");
  p.iters = c.integer("iters");
  p.dtype = c.dtype();
  return p;
}

double mhc_doubly_stochastic_residual(const std::vector<double>& C, int64_t T) {
  const int64_t n = kMhcStreams;
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const double* c = C.data() + t * n * n;
    for (int64_t a = 0; a < n; ++a) {
      double row = 0, col = 0;
      for (int64_t b = 0; b < n; ++b) {
        row += c[a * n + b];
        col += c[b * n + a];
      }
      const double e = std::max(std::fabs(row - 1), std::fabs(col - 1));
      if (!std::isfinite(row) || !std::isfinite(col)) return std::numeric_limits<double>::quiet_NaN();
      worst = std::max(worst, e);
    }
  }
  return worst;
}

namespace {

constexpr int64_t n = kMhcStreams;

void validate(const Case& c) {
  for (const char* p : {"T", "H", "iters"})
    if (c.integer(p) < 1) throw InputError(fmt::format("mhc: {} must be >= 1, got {}", p, c.integer(p)));
  if (c.integer("iters") > 1000)
    throw InputError(fmt::format("mhc: iters must be at most 1000 (the model runs 20), got {}", c.integer("iters")));
  checked_product("mhc: T*4*H", {c.integer("T"), n, c.integer("H")});
  checked_product("mhc: 24*4*H", {kMhcMaps, n, c.integer("H")});
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const MhcParams p = mhc_params(c);
  return {{"x", {c.dtype(), {p.T, n, p.H}}},
          {"f_out", {c.dtype(), {p.T, p.H}}},
          {"phi", {DType::f32, {kMhcMaps, n * p.H}}},
          {"scale", {DType::f32, {3}}},
          {"bias", {DType::f32, {kMhcMaps}}}};
}

MhcReferenceResult run_rows(const Case& c, const TensorMap& in, Tier tier, int64_t rows, bool tails) {
  MhcParams p = mhc_params(c);
  const bool all = rows == p.T;
  const auto cut = [&](const Tensor& t) { return all ? t : leading_slice(t, 0, rows); };
  p.T = rows;
  return mhc_reference(tier, p, cut(in.at("x")), cut(in.at("f_out")), in.at("phi"), in.at("scale"), in.at("bias"), tails);
}

RefOutputs reference(const Case& c, const TensorMap& in, Tier tier, int64_t) {
  MhcReferenceResult r = run_rows(c, in, tier, c.integer("T"), false);
  return {{"x_in", std::move(r.x_in)}, {"x_out", std::move(r.x_out)}, {"C", std::move(r.C)}};
}

// C and x_in are certified (everything the tier computes beyond a sum of 5 products: the norm, the
// projection, the gates and Sinkhorn; x_out is those sums over the casts of post and C). A token
// costs 25 dot products of 4H and about 40 operations per Sinkhorn iteration.
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const double per_row = 2.0 * 25.0 * static_cast<double>(n * c.integer("H")) + 40.0 * static_cast<double>(c.integer("iters"));
  return certify_leading_rows(tier, c.integer("T"), per_row, [&](Tier t, int64_t rows) {
    MhcReferenceResult r = run_rows(c, in, t, rows, true);
    SampleOutputs s{std::move(r.C), std::move(r.C_tail)};
    s.y.insert(s.y.end(), r.x_in.begin(), r.x_in.end());
    s.y_tail.insert(s.y_tail.end(), r.x_in_tail.begin(), r.x_in_tail.end());
    return s;
  });
}

// doubly_stochastic.C: the residual of the candidate's C (mhc.h), judged against the base's and the
// naive's (the reference's own is not 0: the +1e-6 in every denominator leaves column sums of
// 1 - O(1e-6), and 20 iterations leave what Sinkhorn has not converged in the row sums). Its floor
// is 8 ulps of f32 at 1 (a row of 4 values rounded to f32, and the sum's own rounding).
std::vector<OpMeasure> measure(const Case& c, const CandidateInfo&, const TensorMap&, const RefOutputs& ref,
                               const TensorMap& out) {
  const int64_t T = c.integer("T");
  std::vector<double> C(static_cast<size_t>(out.at("C").numel()));
  out.at("C").read(0, C);
  const double value = mhc_doubly_stochastic_residual(C, T), want = mhc_doubly_stochastic_residual(ref.at("C"), T);
  return {{"doubly_stochastic.C", value, std::numeric_limits<double>::quiet_NaN(), true, 8.0 * 0x1p-24,
           fmt::format("max over tokens of max(|row sum - 1|, |column sum - 1|) of C; the reference's: {:.3g}", want)}};
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // Hidden sizes: a head-sized and mid-sized H, and GLM-5.3-Flash's 4096 (4H = 16384 summed
      // per token, where a narrow accumulator of the norm fails first).
      {"H", {"64", "256", "1024", "4096"}, [](const Case& c) { return std::vector<std::string>{std::to_string(c.integer("H"))}; }},
      // The model's 20 Sinkhorn iterations, and another count (an off-by-one shows only against it).
      {"iters", {"20", "!= 20"},
       [](const Case& c) { return std::vector<std::string>{c.integer("iters") == 20 ? "20" : "!= 20"}; }},
      // Decode (one token) and prefill (several).
      {"T", {"T = 1", "T > 1"}, [](const Case& c) { return std::vector<std::string>{c.integer("T") == 1 ? "T = 1" : "T > 1"}; }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "mhc";
  s.doc = "mHC at one site (GLM-5.3-Flash): f = RMSNorm(flatten X), [a_pre|a_post|a_comb] = F f, pre/post sigmoid "
          "gates, C = Sinkhorn(softmax(a_comb s2 + b) + 1e-6); x_in = sum_j pre_j X_j, X'_k = bf(post_k) Fo + "
          "sum_j bf(C[j,k]) X_j";
  s.params = {{"T", ParamKind::integer, "16", "tokens", true},
              {"H", ParamKind::integer, "4096", "hidden size (GLM-5.3-Flash: 4096, 4H = 16384 normalized dims)", true},
              {"iters", ParamKind::integer, "20", "Sinkhorn iterations: 1 column normalization + iters - 1 row+column passes"},
              {"regime", ParamKind::text, "typical", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the streams X and of Fo, and of the casts of post and C", true,
               {"f32", "bf16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"x", TensorRole::input, "[T,4,H] the residual's 4 streams"},
               {"f_out", TensorRole::input, "[T,H] the sublayer's output Fo"},
               {"phi", TensorRole::input, "[24,4H] f32 F: pre (4) | post (4) | comb (16, row-major 4x4)"},
               {"scale", TensorRole::input, "[3] f32 s0, s1, s2"},
               {"bias", TensorRole::input, "[24] f32 b_pre | b_post | b_comb"},
               {"x_in", TensorRole::output, "[T,H] the sublayer input sum_j pre_j X_j"},
               {"x_out", TensorRole::output, "[T,4,H] the new streams X'_k = bf(post_k) Fo + sum_j bf(C[j,k]) X_j"},
               {"C", TensorRole::output, "[T,4,4] f32 the Sinkhorn-normalized comb (row j, column k), before the cast",
                DType::f32}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = [](const Case& c) {
    const int64_t T = c.integer("T"), H = c.integer("H");
    return std::map<std::string, std::vector<int64_t>>{{"x_in", {T, H}}, {"x_out", {T, n, H}}, {"C", {T, n, n}}};
  };
  s.reference = reference;
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.measure = measure;
  // Per token: the sum of squares and 24 dot products over 4H (2 flops each), the mixes (x_in: 2 per
  // stream; x_out: 2 per stream and the post term, per output stream), the gates and Sinkhorn
  // (about 100 + 70 per iteration).
  s.flops = [](const Case& c) {
    const double T = static_cast<double>(c.integer("T")), H = static_cast<double>(c.integer("H"));
    return T * (2.0 * 25.0 * 4.0 * H + 8.0 * H + 4.0 * 10.0 * H + 100.0 + 70.0 * static_cast<double>(c.integer("iters")));
  };
  // X and Fo in, x_in and x_out out, F read once (f32), C out (f32).
  s.bytes = [](const Case& c, const Storage& st) {
    const double T = static_cast<double>(c.integer("T")), H = static_cast<double>(c.integer("H"));
    return T * H * (5.0 * st.input_bytes(c.dtype()) + 5.0 * st.output_bytes(c.dtype())) + 4.0 * (96.0 * H + 27.0) +
           T * 16.0 * 4.0;
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(mhc, spec());

}  // namespace dg
