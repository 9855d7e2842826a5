// OpSpec of dsa_indexer (reference/dsa_indexer.h): the DSA lightning indexer of DeepSeek-V3.2 and
// GLM-5.x, weighted ReLU scores and the top-2048 causal keys of every row, and its measures
// (dsa_indexer.h). Its regimes and suites are in datasets/dsa_indexer.cpp, its CPU candidates in
// candidates/cpu/dsa_indexer.cpp.
#include "harness/ops/dsa_indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "harness/ops/op_common.h"
#include "harness/ops/topk_set.h"
#include "reference/certify.h"

namespace dg {

DsaIndexerParams dsa_indexer_params(const Case& c) {
  DsaIndexerParams p;
  p.B = c.integer("B");
  p.L = c.integer("L");
  p.H = c.integer("H");
  p.D = c.integer("D");
  p.topk = c.integer("topk");
  return p;
}

std::vector<int64_t> dsa_indexer_lens(const Case& c) {
  std::vector<int64_t> lens = c.int_list("lens");
  if (!lens.empty()) return lens;
  const int64_t B = c.integer("B"), L = c.integer("L"), k = c.integer("topk");
  for (int64_t b = 0; b < B; ++b) {
    if (c.text("regime") == "ragged") {
      const int64_t cycle[] = {L, 1, k, k + 1, L / 2 + 3, L - 1};
      lens.push_back(std::clamp<int64_t>(cycle[b % 6], 1, L));
    } else {
      lens.push_back(std::max<int64_t>(1, L - (B - 1 - b)));
    }
  }
  return lens;
}

std::vector<double> dsa_indexer_scores(const DsaIndexerParams& p, const double* q, const double* k, const double* w,
                                       int64_t b, int64_t n, std::vector<double>* scale) {
  const double sc = 1.0 / std::sqrt(static_cast<double>(p.H * p.D));
  std::vector<double> s(static_cast<size_t>(n));
  if (scale) scale->assign(static_cast<size_t>(n), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0, mag = 0;
    for (int64_t h = 0; h < p.H; ++h) {
      const double* qh = q + (b * p.H + h) * p.D;
      double dot = 0, abs = 0;
      for (int64_t d = 0; d < p.D; ++d) {
        dot += qh[d] * k[t * p.D + d];
        abs += std::fabs(qh[d] * k[t * p.D + d]);
      }
      const double wh = w[b * p.H + h] * sc;
      if (dot > 0) sum += wh * dot;
      mag += std::fabs(wh) * abs;
    }
    s[static_cast<size_t>(t)] = sum;
    if (scale) (*scale)[static_cast<size_t>(t)] = mag;
  }
  return s;
}

namespace {

// The candidate's keys of one row, or false when its slots are not distinct integers in [0, ctx)
// plus exactly topk - min(topk, ctx) sentinels -1; `why` counts the kinds of fault.
struct IdFaults {
  int64_t out_of_range = 0, future = 0, duplicate = 0, sentinels = 0;
};
bool row_ids(const double* ids, int64_t topk, int64_t ctx, int64_t L, std::vector<int64_t>& keys, IdFaults& why) {
  keys.clear();
  int64_t minus = 0;
  bool ok = true;
  for (int64_t j = 0; j < topk; ++j) {
    const double x = ids[j];
    if (x == -1.0) { ++minus; continue; }
    if (!(x >= 0 && x < static_cast<double>(L)) || x != std::floor(x)) { ++why.out_of_range; ok = false; continue; }
    if (x >= static_cast<double>(ctx)) { ++why.future; ok = false; continue; }
    keys.push_back(static_cast<int64_t>(x));
  }
  std::vector<int64_t> s = keys;
  std::sort(s.begin(), s.end());
  if (std::adjacent_find(s.begin(), s.end()) != s.end()) { ++why.duplicate; ok = false; }
  if (minus != topk - std::min(topk, ctx)) { ++why.sentinels; ok = false; }
  return ok;
}

// The double scores and error scales of every row of the last case measured (topk_set.h's LastResult).
struct RowScores {
  std::vector<std::vector<double>> s, mag;
};
std::shared_ptr<const RowScores> scores_of(const DsaIndexerParams& p, const std::vector<int64_t>& ctx, const std::vector<double>& q,
                                           const std::vector<double>& k, const std::vector<double>& w) {
  using Key = std::tuple<int64_t, std::vector<int64_t>, std::vector<double>, std::vector<double>, std::vector<double>>;
  static LastResult<Key, RowScores> last;
  return last.get(Key{p.H, ctx, q, k, w}, [&] {
    RowScores r;
    for (int64_t b = 0; b < p.B; ++b) {
      r.mag.emplace_back();
      r.s.push_back(dsa_indexer_scores(p, q.data(), k.data(), w.data(), b, ctx[static_cast<size_t>(b)], &r.mag.back()));
    }
    return r;
  });
}

}  // namespace

std::vector<OpMeasure> dsa_indexer_measure(const DsaIndexerParams& p, const std::vector<int64_t>& ctx,
                                           const std::vector<double>& q, const std::vector<double>& k,
                                           const std::vector<double>& w, const std::vector<double>& ref_ids,
                                           const std::vector<double>& ids, const std::vector<double>& scores, double u,
                                           double u_in) {
  const std::vector<int64_t> ties = identical_rows(k, p.L, p.D);
  const double terms = static_cast<double>(p.D + p.H + 3);
  TopkSetTotals totals;
  int64_t invalid = 0;
  double score_err = 0;
  IdFaults why;
  std::vector<int64_t> ref, cand;
  const std::shared_ptr<const RowScores> all_ptr = scores_of(p, ctx, q, k, w);
  const RowScores& all = *all_ptr;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t n = ctx[static_cast<size_t>(b)], kk = std::min(n, p.topk);
    const std::vector<double>& s = all.s[static_cast<size_t>(b)];
    const std::vector<double>& mag = all.mag[static_cast<size_t>(b)];
    std::vector<double> tol(mag.size());
    for (size_t i = 0; i < mag.size(); ++i) tol[i] = (terms * u + 2.0 * u_in) * mag[i];
    ref.clear();
    for (int64_t j = 0; j < kk; ++j) ref.push_back(static_cast<int64_t>(ref_ids[static_cast<size_t>(b * p.topk + j)]));
    if (!row_ids(ids.data() + b * p.topk, p.topk, n, p.L, cand, why)) ++invalid;
    for (int64_t j = 0; j < p.topk; ++j) {
      const double x = ids[static_cast<size_t>(b * p.topk + j)];
      if (!(x >= 0 && x < static_cast<double>(n)) || x != std::floor(x)) continue;
      const size_t i = static_cast<size_t>(x);
      const double e = std::fabs(scores[static_cast<size_t>(b * p.topk + j)] - s[i]) / std::max(mag[i], std::numeric_limits<double>::min());
      score_err = std::isnan(e) ? INFINITY : std::max(score_err, e);
    }
    std::sort(cand.begin(), cand.end());
    cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
    const std::vector<int64_t> row_ties(ties.begin(), ties.begin() + n);
    totals.add(judge_topk_row(s, tol, ref, cand, row_ties));
  }
  TopkSetDetails detail;
  detail.misses_wide = fmt::format("keys selected or left out that no score error within ((D + H + 3) u + 2 u_in) A explains, u = "
                                   "2^{:.1f}, u_in = {:.3g}; {} misses in all, the farthest {:.3g} bounds past",
                                   std::log2(u), u_in, totals.misses, totals.widest);
  detail.tie_breaks = "rows selecting key j over a visible i < j with an identical key row (the tie rule: lower index)";
  detail.invalid_ids = fmt::format("rows whose ids are not distinct keys in [0, ctx) and topk - min(topk, ctx) sentinels -1 "
                                   "({} out of range, {} future, {} rows with duplicates, {} with a wrong sentinel count)",
                                   why.out_of_range, why.future, why.duplicate, why.sentinels);
  detail.recall = "mean over the rows of |C n R| / |R|";
  detail.jaccard = "mean over the rows of |C n R| / |C u R|";
  detail.misses = "keys in the symmetric differences of the rows' sets";
  return topk_set_measures(totals, invalid, detail,
                           {{"score_err", score_err, 2.0 * (terms * u + 2.0 * u_in), true, 16.0 * u,
                             "max |score - I| / A over the valid slots, I in double, A = (H D)^-0.5 sum_h |w_h| sum_d |q k| of the key"}});
}

double indexer_unit_roundoff(const CandidateInfo& cand) {
  return std::ldexp(1.0, -info(info(cand.state_dtype).is_float ? cand.state_dtype : DType::f32).precision);
}

double indexer_input_roundoff(const CandidateInfo& cand, DType stored) {
  const FormatInfo& in = info(cand.input_dtype);
  return in.is_float && in.precision < info(stored).precision ? std::ldexp(1.0, -in.precision) : 0.0;
}

void indexer_check_positive(const char* op, const Case& c) {
  for (const char* n : {"B", "L", "H", "D", "topk"})
    if (c.integer(n) < 1) throw InputError(fmt::format("{}: {} must be >= 1, got {}", op, n, c.integer(n)));
}

void indexer_check_lens_and_sizes(const char* op, const Case& c) {
  const std::vector<int64_t> lens = c.int_list("lens");
  if (!lens.empty() && static_cast<int64_t>(lens.size()) != c.integer("B"))
    throw InputError(fmt::format("{}: lens has {} lengths for B = {}", op, lens.size(), c.integer("B")));
  for (int64_t n : lens)
    if (n < 1 || n > c.integer("L")) throw InputError(fmt::format("{}: lens must be in [1, L = {}], got {}", op, c.integer("L"), n));
  checked_product(fmt::format("{}: B*H*D", op), {c.integer("B"), c.integer("H"), c.integer("D")});
  checked_product(fmt::format("{}: L*D", op), {c.integer("L"), c.integer("D")});
}

namespace {

std::vector<double> read(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  t.read(0, v);
  return v;
}

void validate(const Case& c) {
  indexer_check_positive("dsa_indexer", c);
  dsa_indexer_check_params(dsa_indexer_params(c));
  indexer_check_lens_and_sizes("dsa_indexer", c);
  checked_product("dsa_indexer: B*topk", {c.integer("B"), c.integer("topk")});
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const DsaIndexerParams p = dsa_indexer_params(c);
  return {{"q", {c.dtype(), {p.B, p.H, p.D}}}, {"k", {c.dtype(), {p.L, p.D}}}, {"w", {DType::f32, {p.B, p.H}}},
          {"ctx", {DType::i32, {p.B}}}};
}

std::vector<int64_t> ints(const Tensor& t) {
  const std::vector<double> v = read(t);
  return std::vector<int64_t>(v.begin(), v.end());
}

void check_inputs(const Case& c, const TensorMap& in) {
  check_inputs_exact(c, in, inputs(c));
  const std::vector<int64_t> got = ints(in.at("ctx")), want = dsa_indexer_lens(c);
  for (size_t b = 0; b < want.size(); ++b)
    if (got[b] != want[b])
      throw InputError(fmt::format("dsa_indexer: ctx[{}] = {} disagrees with the case's length {}", b, got[b], want[b]));
}

RefOutputs reference(const Case& c, const TensorMap& in, Tier tier, int64_t) {
  DsaIndexerReferenceResult r = dsa_indexer_reference(tier, dsa_indexer_params(c), in.at("q"), in.at("k"), in.at("w"),
                                                      ints(in.at("ctx")));
  return {{"indices", std::move(r.indices)}, {"scores", std::move(r.scores)}};
}

// The scores of row 0's first keys that kCertifyOps buys at the next tier (2 D + 2 operations per
// head and key); the selection is made from these scores in the same tier.
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const DsaIndexerParams p = dsa_indexer_params(c);
  const int64_t keys = std::max<int64_t>(1, dsa_indexer_lens(c)[0]);
  Certification cert = certify_leading_rows(tier, keys, static_cast<double>(p.H * (2 * p.D + 2)), [&](Tier t, int64_t n) {
    SampleOutputs s;
    dsa_indexer_row_scores(t, p, in.at("q"), in.at("k"), in.at("w"), n, s.y, s.y_tail);
    return s;
  });
  cert.sample = "scores of row 0, " + cert.sample + " (keys)";
  return cert;
}

std::vector<OpMeasure> measure(const Case& c, const CandidateInfo& cand, const TensorMap& in, const RefOutputs& ref,
                               const TensorMap& out) {
  return dsa_indexer_measure(dsa_indexer_params(c), ints(in.at("ctx")), read(in.at("q")), read(in.at("k")), read(in.at("w")),
                             ref.at("indices"), read(out.at("indices")), read(out.at("scores")),
                             indexer_unit_roundoff(cand), indexer_input_roundoff(cand, c.dtype()));
}

std::vector<std::string> one(const std::string& v) { return {v}; }

std::vector<CoverageAxis> coverage_axes() {
  return {
      // Selection happens only past topk keys (notes/model-ops.md section 5: test at contexts > 2048).
      {"context", {"<= topk", "> topk", "ragged"},
       [](const Case& c) {
         std::vector<std::string> v;
         const std::vector<int64_t> lens = dsa_indexer_lens(c);
         bool below = false, above = false;
         for (int64_t n : lens) (n <= c.integer("topk") ? below : above) = true;
         if (below) v.push_back("<= topk");
         if (above) v.push_back("> topk");
         if (below && above) v.push_back("ragged");
         return v;
       }},
      {"topk", {"2048", "other"}, [](const Case& c) { return one(c.integer("topk") == 2048 ? "2048" : "other"); }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "dsa_indexer";
  s.doc = "DSA lightning indexer (DeepSeek-V3.2, GLM-5.x): I_s = sum_h w_h (H D)^-0.5 ReLU(q_h . k_s), the top-k "
          "causal keys per row (lower index first on ties), -1 beyond the context";
  s.params = {{"B", ParamKind::integer, "4", "rows (prefill tokens or decode sequences)", true},
              {"L", ParamKind::integer, "4096", "keys in the cache", true},
              {"H", ParamKind::integer, "32", "indexer heads (32 in DeepSeek-V3.2 and GLM-5.x)"},
              {"D", ParamKind::integer, "128", "indexer head dim (128)"},
              {"topk", ParamKind::integer, "2048", "keys selected per row (2048)", true},
              {"lens", ParamKind::int_list, "", "per-row context lengths, '/'-separated, B of them, each in [1, L] "
               "(default: the last B tokens of a prefill of L; regime ragged: a cycle)"},
              {"regime", ParamKind::text, "production", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the stored q and k (bf16: the projections' output)", true,
               {"f32", "bf16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"q", TensorRole::input, "[B,H,D] indexer queries (after RoPE)"},
               {"k", TensorRole::input, "[L,D] indexer key cache (LayerNormed, after RoPE)"},
               {"w", TensorRole::input, "[B,H] f32 raw head weights W_w h; the op scales them by (H D)^-0.5"},
               {"ctx", TensorRole::input, "[B] i32 visible keys of each row: [0, ctx)"},
               {"indices", TensorRole::output, "[B,topk] i32 the selected keys in any slot order, -1 in the rest", DType::i32},
               {"scores", TensorRole::output, "[B,topk] slot j: the score of indices[j] (judged by the measures)",
                std::nullopt, true}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.check_inputs = check_inputs;
  s.output_shapes = [](const Case& c) {
    const DsaIndexerParams p = dsa_indexer_params(c);
    return std::map<std::string, std::vector<int64_t>>{{"indices", {p.B, p.topk}}, {"scores", {p.B, p.topk}}};
  };
  s.reference = reference;
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.measure = measure;
  s.flops = [](const Case& c) {   // 2 D per head and key, a ReLU, a multiply-add per head; over the visible keys
    double keys = 0;
    for (int64_t n : dsa_indexer_lens(c)) keys += static_cast<double>(n);
    return keys * static_cast<double>(c.integer("H")) * static_cast<double>(2 * c.integer("D") + 3);
  };
  s.bytes = [](const Case& c, const Storage& st) {   // q, k and w in, ids (4 bytes) and scores out
    const double B = static_cast<double>(c.integer("B")), L = static_cast<double>(c.integer("L"));
    const double H = static_cast<double>(c.integer("H")), D = static_cast<double>(c.integer("D"));
    const double k = static_cast<double>(c.integer("topk"));
    return (B * H * D + L * D) * st.input_bytes(c.dtype()) + 4.0 * B * (H + 1) + B * k * (4.0 + st.output_bytes(DType::f32));
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(dsa_indexer, spec());

}  // namespace dg
