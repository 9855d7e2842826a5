// OpSpec of moe_router (reference/moe_router.h): the sigmoid router with correction bias and grouped
// top-k of DeepSeek-V3, GLM-4.5 ... GLM-5.3-Flash and Kimi Linear, and its measures (moe_router.h).
// Its regimes and suites are in datasets/moe_router.cpp, its CPU candidates in
// candidates/cpu/moe_router.cpp.
#include "harness/ops/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"

namespace dg {

MoeRouterParams moe_router_params(const Case& c) {
  MoeRouterParams p;
  p.T = c.integer("T");
  p.E = c.integer("E");
  p.k = c.integer("k");
  p.n_group = c.integer("n_group");
  p.topk_group = c.integer("topk_group");
  p.renorm = c.integer("renorm") != 0;
  p.rsf = c.real("rsf");
  return p;
}

namespace {

bool before(double a, int64_t ia, double b, int64_t ib) { return a > b || (!(a < b) && ia < ib); }

// `idx` sorted by `score` (larger first, lower index on ties).
void rank_by(std::vector<int64_t>& idx, const std::vector<double>& score) {
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    return before(score[static_cast<size_t>(a)], a, score[static_cast<size_t>(b)], b);
  });
}

}  // namespace

MoeRouterRank moe_router_rank(const MoeRouterParams& p, const double* z, const double* b) {
  MoeRouterRank r;
  const int64_t G = p.E / p.n_group;
  r.sel.resize(static_cast<size_t>(p.E));
  for (int64_t e = 0; e < p.E; ++e) r.sel[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-z[e])) + b[e];
  r.group_score.assign(static_cast<size_t>(p.n_group), 0.0);
  for (int64_t g = 0; g < p.n_group; ++g) {
    if (p.n_group == 1) break;
    std::vector<int64_t> in(static_cast<size_t>(G));
    for (int64_t i = 0; i < G; ++i) in[static_cast<size_t>(i)] = g * G + i;
    rank_by(in, r.sel);
    r.group_score[static_cast<size_t>(g)] = r.sel[static_cast<size_t>(in[0])] + r.sel[static_cast<size_t>(in[1])];
  }
  for (int64_t g = 0; g < p.n_group; ++g) r.groups.push_back(g);
  rank_by(r.groups, r.group_score);
  if (p.topk_group < p.n_group)
    r.group_margin = r.group_score[static_cast<size_t>(r.groups[static_cast<size_t>(p.topk_group - 1)])] -
                     r.group_score[static_cast<size_t>(r.groups[static_cast<size_t>(p.topk_group)])];
  for (int64_t j = 0; j < p.topk_group; ++j)
    for (int64_t i = 0; i < G; ++i) r.experts.push_back(r.groups[static_cast<size_t>(j)] * G + i);
  rank_by(r.experts, r.sel);
  if (static_cast<int64_t>(r.experts.size()) > p.k)
    r.expert_margin = r.sel[static_cast<size_t>(r.experts[static_cast<size_t>(p.k - 1)])] -
                      r.sel[static_cast<size_t>(r.experts[static_cast<size_t>(p.k)])];
  return r;
}

const char* MoeRouterMeasures::bucket_name(int i) {
  static const char* names[kBuckets] = {"margin<2^-20", "margin<2^-16", "margin<2^-12", "margin>=2^-12"};
  return names[i];
}

namespace {

int bucket_of(double margin) {
  if (margin < 0x1p-20) return 0;
  if (margin < 0x1p-16) return 1;
  if (margin < 0x1p-12) return 2;
  return 3;
}

// The candidate's ids of one token as expert indices, or empty when they are not k distinct
// integers in [0, E).
std::vector<int64_t> valid_ids(const double* ids, int64_t k, int64_t E) {
  std::vector<int64_t> v;
  for (int64_t j = 0; j < k; ++j) {
    const double x = ids[j];
    if (!(x >= 0 && x < static_cast<double>(E)) || x != std::floor(x)) return {};
    v.push_back(static_cast<int64_t>(x));
  }
  std::vector<int64_t> s = v;
  std::sort(s.begin(), s.end());
  if (std::adjacent_find(s.begin(), s.end()) != s.end()) return {};
  return v;
}

// True when the candidate selected an expert j and left out an i < j with the same logit and bias
// whose group scored exactly as j's (the same group, or a tied copy of it).
bool tie_against_rule(const MoeRouterParams& p, const MoeRouterRank& r, const double* z, const double* b,
                      const std::vector<int64_t>& chosen) {
  const int64_t G = p.E / p.n_group;
  std::vector<char> in(static_cast<size_t>(p.E), 0);
  for (int64_t e : chosen) in[static_cast<size_t>(e)] = 1;
  for (int64_t j : chosen)
    for (int64_t i = 0; i < j; ++i)
      if (!in[static_cast<size_t>(i)] && z[i] == z[j] && b[i] == b[j] &&
          r.group_score[static_cast<size_t>(i / G)] == r.group_score[static_cast<size_t>(j / G)])
        return true;
  return false;
}

// max over the k slots of |w_c - w_r| / max(|w_r|, tiny), the candidate's slots matched by id.
double weight_error(const double* rid, const double* rw, const double* cid, const double* cw, int64_t k, double tiny) {
  double worst = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t r = std::find(rid, rid + k, cid[j]) - rid;
    const double e = std::fabs(cw[j] - rw[r]) / std::max(std::fabs(rw[r]), tiny);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

}  // namespace

MoeRouterMeasures moe_router_measure(const MoeRouterParams& p, const std::vector<double>& logits,
                                     const std::vector<double>& bias, const std::vector<double>& ref_ids,
                                     const std::vector<double>& ref_weights, const std::vector<double>& ids,
                                     const std::vector<double>& weights, double u, double tiny) {
  MoeRouterMeasures m;
  const int64_t k = p.k;
  for (int64_t t = 0; t < p.T; ++t) {
    const double* z = logits.data() + t * p.E;
    const MoeRouterRank r = moe_router_rank(p, z, bias.data());
    double scale = 0;
    for (double s : r.sel) scale = std::max(scale, std::fabs(s));
    const double tol = 32.0 * u * (1.0 + scale), margin = r.margin();
    const std::vector<int64_t> chosen = valid_ids(ids.data() + t * k, k, p.E);
    std::vector<int64_t> want, got = chosen;
    for (int64_t j = 0; j < k; ++j) want.push_back(static_cast<int64_t>(ref_ids[static_cast<size_t>(t * k + j)]));
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    const bool agree = got == want;
    ++m.tokens;
    ++m.bucket_tokens[bucket_of(margin)];
    if (chosen.empty()) ++m.invalid_ids;
    else if (tie_against_rule(p, r, z, bias.data(), chosen)) ++m.ties;
    if (agree) {
      ++m.agree;
      m.weight_err = std::max(m.weight_err, weight_error(ref_ids.data() + t * k, ref_weights.data() + t * k,
                                                         ids.data() + t * k, weights.data() + t * k, k, tiny));
      continue;
    }
    ++m.flips;
    ++m.bucket_flips[bucket_of(margin)];
    m.widest_flip_margin = std::max(m.widest_flip_margin, margin);
    if (margin > tol) ++m.flips_wide;
  }
  return m;
}

namespace {

void validate(const Case& c) {
  for (const char* n : {"T", "E", "k", "n_group", "topk_group"})
    if (c.integer(n) < 1) throw InputError(fmt::format("moe_router: {} must be >= 1, got {}", n, c.integer(n)));
  if (c.integer("renorm") != 0 && c.integer("renorm") != 1)
    throw InputError(fmt::format("moe_router: renorm must be 0 or 1, got {}", c.integer("renorm")));
  moe_router_check_params(moe_router_params(c));
  checked_product("moe_router: T*E", {c.integer("T"), c.integer("E")});
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const MoeRouterParams p = moe_router_params(c);
  return {{"logits", {c.dtype(), {p.T, p.E}}}, {"bias", {DType::f32, {p.E}}}};
}

std::map<std::string, std::vector<int64_t>> output_shapes(const Case& c) {
  const MoeRouterParams p = moe_router_params(c);
  return {{"topk_ids", {p.T, p.k}}, {"topk_weights", {p.T, p.k}}};
}

MoeRouterReferenceResult run_rows(const Case& c, const TensorMap& in, Tier tier, int64_t rows, bool tails) {
  MoeRouterParams p = moe_router_params(c);
  const bool all = rows == p.T;
  p.T = rows;
  return moe_router_reference(tier, p, all ? in.at("logits") : leading_slice(in.at("logits"), 0, rows), in.at("bias"), tails);
}

RefOutputs reference(const Case& c, const TensorMap& in, Tier tier, int64_t) {
  MoeRouterReferenceResult r = run_rows(c, in, tier, c.integer("T"), false);
  return {{"topk_ids", std::move(r.ids)}, {"topk_weights", std::move(r.weights)}};
}

// The weights are certified (the ids are integers, the same in every tier but at margins below a
// double's resolution); a sigmoid is about 20 operations, the ranking k comparisons per expert.
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const double per_row = static_cast<double>(c.integer("E")) * (20.0 + static_cast<double>(c.integer("k")));
  return certify_leading_rows(tier, c.integer("T"), per_row, [&](Tier t, int64_t rows) {
    MoeRouterReferenceResult r = run_rows(c, in, t, rows, true);
    return SampleOutputs{std::move(r.weights), std::move(r.weights_tail)};
  });
}

// The op's measures of one candidate output (moe_router.h): the candidate's output format sets the
// flip tolerance, the floor of weight_err and its absolute limit, 4096 u (12 bits in f32, the
// policy's f32 floor).
std::vector<OpMeasure> measure(const Case& c, const CandidateInfo& cand, const TensorMap& in, const RefOutputs& ref,
                               const TensorMap& out) {
  const MoeRouterParams p = moe_router_params(c);
  auto read = [](const Tensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    t.read(0, v);
    return v;
  };
  const FormatInfo& f = info(info(cand.output_dtype).is_float ? cand.output_dtype : DType::f32);
  const double u = std::ldexp(1.0, -f.precision), tiny = std::ldexp(1.0, f.emin);
  const MoeRouterMeasures m = moe_router_measure(p, read(in.at("logits")), read(in.at("bias")), ref.at("topk_ids"),
                                                 ref.at("topk_weights"), read(out.at("topk_ids")),
                                                 read(out.at("topk_weights")), u, tiny);
  const double nan = std::numeric_limits<double>::quiet_NaN(), T = static_cast<double>(m.tokens);
  std::vector<OpMeasure> r;
  r.push_back({"flips_wide", static_cast<double>(m.flips_wide), 0.0, false, 0.0,
               fmt::format("tokens whose expert set differs at a margin > 32 u (1 + max|s + b|), u = 2^{}; {} flips in all, "
                           "the widest at margin {:.3g}", std::ilogb(u), m.flips, m.widest_flip_margin)});
  r.push_back({"ties", static_cast<double>(m.ties), 0.0, false, 0.0,
               "tokens selecting expert j over an i < j with the same logit and bias (the tie rule: lower index)"});
  r.push_back({"invalid_ids", static_cast<double>(m.invalid_ids), 0.0, false, 0.0,
               "tokens whose ids are not k distinct integers in [0, E)"});
  r.push_back({"weight_err", m.weight_err, 4096.0 * u, true, 16.0 * u,
               fmt::format("max |w - w_ref| / |w_ref| over the {} tokens with the reference's set, slots matched by id", m.agree)});
  r.push_back({"set_agreement", static_cast<double>(m.agree) / T, nan, false, 0.0,
               fmt::format("{} of {} tokens with exactly the reference's set", m.agree, m.tokens)});
  for (int i = 0; i < MoeRouterMeasures::kBuckets; ++i) {
    const double n = static_cast<double>(m.bucket_tokens[i]);
    r.push_back({std::string("flip_rate.") + MoeRouterMeasures::bucket_name(i),
                 n > 0 ? static_cast<double>(m.bucket_flips[i]) / n : nan, nan, false, 0.0,
                 fmt::format("{} flips among the {} tokens whose reference margin is {}", m.bucket_flips[i],
                             m.bucket_tokens[i], MoeRouterMeasures::bucket_name(i) + 6)});
  }
  return r;
}

std::vector<std::string> one(const std::string& v) { return {v}; }

std::vector<CoverageAxis> coverage_axes() {
  return {
      // The experts of each config (notes/model-ops.md section 2): GLM-4.7-Flash 64, GLM-4.5-Air 128, GLM-4.5/4.6/4.7 160,
      // DeepSeek-V3/GLM-5.x/Kimi Linear 256, GLM-5.3-Flash 288.
      {"E", {"64", "128", "160", "256", "288"}, [](const Case& c) { return one(std::to_string(c.integer("E"))); }},
      {"k", {"4", "8"}, [](const Case& c) { return one(std::to_string(c.integer("k"))); }},
      // DeepSeek-V3's groups (n_group 8, topk_group 4) against the GLM/Kimi configs' single group.
      {"groups", {"one group", "grouped"},
       [](const Case& c) { return one(c.integer("n_group") > 1 ? "grouped" : "one group"); }},
      {"renorm", {"0", "1"}, [](const Case& c) { return one(std::to_string(c.integer("renorm"))); }},
      // rsf = 1 hides a missing or doubled scaling; the configs' 1.8, 2.446 and 2.5 show it.
      {"rsf", {"1", "!= 1"}, [](const Case& c) { return one(c.real("rsf") == 1.0 ? "1" : "!= 1"); }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "moe_router";
  s.doc = "MoE router: s = sigmoid(logits), top-k of s + bias (grouped: top topk_group groups by the sum of their "
          "two best), weights from the unbiased s, optional w / (sum w + 1e-20), times rsf";
  s.params = {{"T", ParamKind::integer, "64", "tokens", true},
              {"E", ParamKind::integer, "256", "routed experts (64 to 288 in the configs)", true},
              {"k", ParamKind::integer, "8", "experts per token (4 for GLM-4.7-Flash, 8 elsewhere)", true},
              {"n_group", ParamKind::integer, "1", "expert groups (DeepSeek-V3: 8; GLM and Kimi: 1)"},
              {"topk_group", ParamKind::integer, "1", "groups kept per token (DeepSeek-V3: 4)"},
              {"renorm", ParamKind::integer, "1", "norm_topk_prob: 1 divides the weights by their sum + 1e-20"},
              {"rsf", ParamKind::real, "2.5", "routed_scaling_factor (GLM-4.5/5.x 2.5, 4.5-Air 1, 4.7-Flash 1.8, Kimi 2.446)"},
              {"regime", ParamKind::text, "production", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "f32", "dtype of the stored logits (f32: the GLM gate; bf16: vLLM's Kimi gate)",
               true, {"f32", "bf16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"logits", TensorRole::input, "[T,E] the router GEMM's output"},
               {"bias", TensorRole::input, "[E] f32 e_score_correction_bias (selection only)"},
               {"topk_ids", TensorRole::output, "[T,k] i32: the selected experts, slots in any order", DType::i32},
               {"topk_weights", TensorRole::output, "[T,k] slot j: the weight of expert topk_ids[j] (judged by the measures)",
                std::nullopt, true}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = output_shapes;
  s.reference = reference;
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.measure = measure;
  s.flops = [](const Case& c) {   // a sigmoid (~4) and a bias add per score, k comparisons per expert
    return static_cast<double>(c.integer("T") * c.integer("E")) * (5.0 + static_cast<double>(c.integer("k")));
  };
  s.bytes = [](const Case& c, const Storage& st) {   // logits in, the bias, ids (4 bytes) and weights out
    const double T = static_cast<double>(c.integer("T")), E = static_cast<double>(c.integer("E"));
    const double k = static_cast<double>(c.integer("k"));
    return T * E * st.input_bytes(c.dtype()) + 4.0 * E + T * k * (4.0 + st.output_bytes(DType::f32));
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(moe_router, spec());

}  // namespace dg
