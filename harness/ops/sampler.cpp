// OpSpec of sampler (reference/sampler.h): vLLM V1's temperature, min-p, top-k, top-p and exponential
// race on injected uniforms, and its measures (sampler.h). Its regimes and suites are in
// datasets/sampler.cpp, its CPU candidates in candidates/cpu/sampler.cpp.
#include "harness/ops/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/core/threads.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"

namespace dg {

SamplerParams sampler_params(const Case& c) {
  SamplerParams p;
  p.B = c.integer("B");
  p.V = c.integer("V");
  p.temperature = c.real("temperature");
  p.top_k = c.integer("top_k");
  p.top_p = c.real("top_p");
  p.min_p = c.real("min_p");
  return p;
}

int64_t sampler_draws(const Case& c) { return c.integer("draws"); }

bool sampler_judged_by_distribution(const CandidateInfo& info) { return info.judged_by == "distribution"; }

namespace {

constexpr double kU = 0x1p-24;   // f32 unit roundoff

// Top-p over the tokens where `in` holds (the rest dropped), with its undecided band and straddling ties.
std::vector<SamplerStatus> top_p_status(const SamplerParams& p, const std::vector<double>& s, const std::vector<double>& x,
                                        const std::vector<char>& in) {
  std::vector<SamplerStatus> st(s.size(), SamplerStatus::dropped);
  std::vector<int64_t> order;
  for (int64_t i = 0; i < p.V; ++i)
    if (in[static_cast<size_t>(i)]) order.push_back(i), st[static_cast<size_t>(i)] = SamplerStatus::kept;
  if (p.top_p >= 1.0 || order.size() < 2) return st;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double u = s[static_cast<size_t>(a)], v = s[static_cast<size_t>(b)];
    return u < v || (u == v && a > b);
  });
  double z = 0;
  for (int64_t i : order) z += std::exp(x[static_cast<size_t>(i)]);
  const double threshold = 1.0 - p.top_p, tol = (3.0 * static_cast<double>(order.size()) + 16.0) * kU;
  std::set<double> blurred;   // values s whose tie group is undecided
  double c = 0;
  size_t cut = order.size() - 1;
  for (size_t j = 0; j + 1 < order.size(); ++j) {
    const size_t i = static_cast<size_t>(order[j]);
    c += std::exp(x[i]) / z;
    if (c <= threshold) st[i] = SamplerStatus::dropped;
    else cut = std::min(cut, j);
    if (std::fabs(c - threshold) <= tol) blurred.insert(s[i]);
  }
  if (cut > 0 && s[static_cast<size_t>(order[cut - 1])] == s[static_cast<size_t>(order[cut])])
    blurred.insert(s[static_cast<size_t>(order[cut])]);
  for (int64_t i : order)   // the last one too: in another order of its tie group another member is last
    if (blurred.count(s[static_cast<size_t>(i)])) st[static_cast<size_t>(i)] = SamplerStatus::undecided;
  return st;
}

// The statuses of the filters (see sampler.h): min-p with its band, exact top-k, top-p on both sides of the band.
std::vector<SamplerStatus> filter_status(const SamplerParams& p, const std::vector<double>& s, const std::vector<double>& x) {
  double kth = -INFINITY;
  if (p.top_k > 0 && p.top_k < p.V) {
    std::vector<double> sorted = s;
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<double>());
    kth = sorted[static_cast<size_t>(p.top_k - 1)];
  }
  std::vector<char> sure(s.size()), possible(s.size());
  bool band = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const double d = p.min_p > 0 ? x[i] - std::log(p.min_p) : INFINITY, tol = 16.0 * kU * (4.0 + std::fabs(x[i]));
    sure[i] = s[i] >= kth && d > tol;
    possible[i] = s[i] >= kth && d >= -tol;
    band = band || sure[i] != possible[i];
  }
  std::vector<SamplerStatus> a = top_p_status(p, s, x, sure);
  if (!band) return a;
  const std::vector<SamplerStatus> b = top_p_status(p, s, x, possible);
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) a[i] = SamplerStatus::undecided;
  return a;
}

}  // namespace

SamplerRow sampler_analyze(const SamplerParams& p, const double* logits, const double* uniforms, int64_t w) {
  SamplerRow r;
  r.status.assign(static_cast<size_t>(p.V), SamplerStatus::kept);
  if (p.greedy()) return r;
  std::vector<double> s(static_cast<size_t>(p.V)), x(s.size()), le(s.size());
  for (int64_t i = 0; i < p.V; ++i) s[static_cast<size_t>(i)] = sampler_scaled(logits[i], p.temperature);
  const double m = *std::max_element(s.begin(), s.end());
  for (size_t i = 0; i < s.size(); ++i) x[i] = s[i] - m, le[i] = std::log(-std::log(uniforms[i]));
  r.status = filter_status(p, s, x);
  for (SamplerStatus st : r.status) r.undecided += st == SamplerStatus::undecided;
  const size_t W = static_cast<size_t>(w);
  if (r.status[W] != SamplerStatus::kept) {
    r.margin = 0, r.wide = false;
    return r;
  }
  const double rw = x[W] - le[W];
  for (size_t j = 0; j < s.size(); ++j) {
    if (j == W || r.status[j] == SamplerStatus::dropped) continue;
    const double gap = rw - (x[j] - le[j]);
    r.margin = std::min(r.margin, std::max(gap, 0.0));
    if (!(gap > 16.0 * kU * (4.0 + std::fabs(x[W]) + std::fabs(x[j]) + std::fabs(le[W]) + std::fabs(le[j])))) r.wide = false;
  }
  return r;
}

const char* SamplerMeasures::bucket_name(int i) {
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

}  // namespace

std::vector<SamplerRow> sampler_analyze_rows(const SamplerParams& p, const std::vector<double>& logits,
                                             const std::vector<double>& uniforms, const std::vector<double>& ref_ids) {
  std::vector<SamplerRow> rows(static_cast<size_t>(p.B));
  parallel_for(p.B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      rows[static_cast<size_t>(b)] = sampler_analyze(p, logits.data() + b * p.V, uniforms.data() + b * p.V,
                                                     static_cast<int64_t>(ref_ids[static_cast<size_t>(b)]));
  });
  return rows;
}

SamplerMeasures sampler_measure(const SamplerParams& p, const std::vector<SamplerRow>& rows,
                                const std::vector<double>& ref_ids, const std::vector<double>& ids) {
  SamplerMeasures m;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t w = static_cast<int64_t>(ref_ids[static_cast<size_t>(b)]);
    const SamplerRow& r = rows[static_cast<size_t>(b)];
    const double t = ids[static_cast<size_t>(b)];
    const bool in_range = t >= 0 && t < static_cast<double>(p.V) && t == std::floor(t);
    ++m.rows;
    ++m.bucket_rows[bucket_of(r.margin)];
    m.undecided_rows += r.undecided > 0;
    if (!in_range || r.status[static_cast<size_t>(t)] == SamplerStatus::dropped) ++m.invalid_ids;
    if (in_range && static_cast<int64_t>(t) == w) {
      ++m.agree;
      continue;
    }
    ++m.flips;
    ++m.bucket_flips[bucket_of(r.margin)];
    m.widest_flip_margin = std::max(m.widest_flip_margin, r.margin);
    if (r.wide) ++m.flips_wide;
  }
  return m;
}

SamplerTvPlan sampler_tv_plan(int64_t support, double distortion) {
  const double a = std::sqrt(std::log(100.0) / 2.0), b = std::sqrt(std::log(20.0) / 2.0);
  const double root = (std::sqrt(static_cast<double>(support)) + a + b) / distortion;
  SamplerTvPlan plan;
  plan.draws = static_cast<int64_t>(std::ceil(root * root));
  const double n = static_cast<double>(plan.draws);
  plan.threshold = 0.5 * std::sqrt(static_cast<double>(support) / n) + a / std::sqrt(n);
  return plan;
}

SamplerTvTest sampler_tv_test(const std::vector<double>& probs, const std::vector<int64_t>& counts, int64_t support,
                              double false_alarm) {
  SamplerTvTest t;
  for (int64_t c : counts) t.draws += c;
  t.support = support;
  t.tv = sampler_tv(probs, counts);
  const double n = static_cast<double>(t.draws), spread = 0.5 * std::sqrt(static_cast<double>(support) / n);
  t.threshold = spread + std::sqrt(std::log(1.0 / false_alarm) / (2.0 * n));
  t.detectable = t.threshold + spread + std::sqrt(std::log(20.0) / (2.0 * n));
  return t;
}

double sampler_tv(const std::vector<double>& probs, const std::vector<int64_t>& counts) {
  double n = 0, tv = 0;
  for (int64_t c : counts) n += static_cast<double>(c);
  for (size_t i = 0; i < probs.size(); ++i) tv += std::fabs(static_cast<double>(counts[i]) / n - probs[i]);
  return 0.5 * tv;
}

namespace {

void validate(const Case& c) {
  sampler_check_params(sampler_params(c));
  checked_product("sampler: B*V", {c.integer("B"), c.integer("V")});
  const int64_t n = sampler_draws(c);
  if (n < 1 || c.integer("B") % n != 0)
    throw InputError(fmt::format("sampler: draws = {} must be >= 1 and divide B = {}", n, c.integer("B")));
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const SamplerParams p = sampler_params(c);
  return {{"logits", {c.dtype(), {p.B, p.V}}}, {"uniforms", {DType::f32, {p.B, p.V}}}};
}

// Every row of a group of `draws` rows holds its group's first row of logits.
void check_groups(const Case& c, const Tensor& logits) {
  const int64_t n = sampler_draws(c), V = c.integer("V");
  if (n == 1) return;
  std::vector<double> first(static_cast<size_t>(V)), row(first.size());
  for (int64_t b = 0; b < c.integer("B"); ++b) {
    if (b % n == 0) {
      logits.read(b * V, first);
      continue;
    }
    logits.read(b * V, row);
    for (int64_t i = 0; i < V; ++i)
      if (!(row[static_cast<size_t>(i)] == first[static_cast<size_t>(i)]))
        throw InputError(fmt::format("sampler: logits row {} differs from row {} of its group of draws = {} at token {}", b,
                                     b - b % n, n, i));
  }
}

void check_inputs(const Case& c, const TensorMap& in) {
  check_inputs_exact(c, in, inputs(c));
  const Tensor& u = in.at("uniforms");
  std::vector<double> v(static_cast<size_t>(u.numel()));
  u.read(0, v);
  for (size_t i = 0; i < v.size(); ++i)
    if (!(v[i] > 0.0 && v[i] < 1.0))
      throw InputError(fmt::format("sampler: input 'uniforms' must lie in (0, 1); element {} of shape {} is {}", i,
                                   u.shape_str(), v[i]));
  check_groups(c, in.at("logits"));
}

std::vector<double> run_rows(const Case& c, const TensorMap& in, Tier tier, int64_t rows) {
  SamplerParams p = sampler_params(c);
  const bool all = rows == p.B;
  p.B = rows;
  return sampler_reference(tier, p, all ? in.at("logits") : leading_slice(in.at("logits"), 0, rows),
                           all ? in.at("uniforms") : leading_slice(in.at("uniforms"), 0, rows));
}

// The token ids are certified as values (equal ids: full agreement); a row costs about 60 tier
// operations a token (an exp, a log, two divisions, the sort's comparisons).
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  return certify_leading_rows(tier, c.integer("B"), 60.0 * static_cast<double>(c.integer("V")), [&](Tier t, int64_t rows) {
    std::vector<double> ids = run_rows(c, in, t, rows);
    std::vector<double> tails(2 * ids.size(), 0.0);
    return SampleOutputs{std::move(ids), std::move(tails)};
  });
}

// The analyses of a case's rows depend on its inputs and the reference's tokens only, not on the
// candidate, and cost a sort of the vocabulary per row: `mutants` and `gate` judge many candidates on
// one case, so the last few are kept, keyed by the case and a hash of the inputs and tokens.
std::shared_ptr<const std::vector<SamplerRow>> analyses(const Case& c, const TensorMap& in, const RefOutputs& ref) {
  auto read = [](const Tensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    t.read(0, v);
    return v;
  };
  const std::vector<double> l = read(in.at("logits")), u = read(in.at("uniforms"));
  const std::vector<double>& ids = ref.at("token_ids");
  uint64_t h = 1469598103934665603ull;
  for (const std::vector<double>* v : {&l, &u, &ids})
    for (double x : *v) {
      uint64_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
    }
  const std::string key = fmt::format("{}#{:016x}", c.str(), h);
  static std::mutex mu;
  static std::deque<std::pair<std::string, std::shared_ptr<const std::vector<SamplerRow>>>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, rows] : cache)
      if (k == key) return rows;
  }
  auto rows = std::make_shared<const std::vector<SamplerRow>>(sampler_analyze_rows(sampler_params(c), l, u, ids));
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace_back(key, rows);
  if (cache.size() > 4) cache.pop_front();
  return rows;
}

// The distribution test of a candidate that draws differently (sampler.h): per group of `draws` rows
// with the same logits, the TV between its tokens' histogram and the reference's probabilities of the
// row (f64 tier), against the threshold at a 1% false-alarm rate shared by the case's groups.
OpMeasure distribution_measure(const Case& c, const TensorMap& in, const std::vector<SamplerRow>& rows,
                               const std::vector<double>& ids) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), alpha = 0.01;
  const int64_t n = sampler_draws(c), V = c.integer("V"), groups = c.integer("B") / n;
  if (n == 1)
    return {"distribution_tv", nan, nan, false, 0.0,
            "not judged on this case: draws = 1 (a candidate that draws differently is judged by the distribution of "
            "its tokens on cases with draws > 1)"};
  SamplerParams one = sampler_params(c);
  one.B = 1;
  double worst = -1;
  SamplerTvTest at;
  int64_t at_g = 0;
  std::vector<double> l(static_cast<size_t>(V));
  for (int64_t g = 0; g < groups; ++g) {
    Tensor row(c.dtype(), {1, V});
    in.at("logits").read(g * n * V, l);
    row.write(0, l);
    const std::vector<double> probs = sampler_probabilities(Tier::f64, one, row);
    std::vector<int64_t> counts(static_cast<size_t>(V), 0);
    for (int64_t b = g * n; b < (g + 1) * n; ++b)
      if (ids[static_cast<size_t>(b)] >= 0 && ids[static_cast<size_t>(b)] < static_cast<double>(V)) ++counts[static_cast<size_t>(ids[static_cast<size_t>(b)])];
    const std::vector<SamplerStatus>& st = rows[static_cast<size_t>(g * n)].status;
    const int64_t support = V - std::count(st.begin(), st.end(), SamplerStatus::dropped);
    const SamplerTvTest t = sampler_tv_test(probs, counts, support, alpha / static_cast<double>(groups));
    if (t.tv / t.threshold > worst) worst = t.tv / t.threshold, at = t, at_g = g;
  }
  return {"distribution_tv", worst, 1.0, false, 0.0,
          fmt::format("the largest TV / threshold of the {} groups: group {}, TV {:.4f} vs threshold {:.4f} over {} draws "
                      "of a row of {} kept or undecided tokens; false alarm < {:.0f}% over the case (McDiarmid), power "
                      "95% against a distribution at TV >= {:.3f} from the reference's",
                      groups, at_g, at.tv, at.threshold, at.draws, at.support, 100 * alpha, at.detectable)};
}

std::vector<OpMeasure> measure(const Case& c, const CandidateInfo& info, const TensorMap& in, const RefOutputs& ref,
                               const TensorMap& out) {
  const SamplerParams p = sampler_params(c);
  auto read = [](const Tensor& t) {
    std::vector<double> v(static_cast<size_t>(t.numel()));
    t.read(0, v);
    return v;
  };
  const std::shared_ptr<const std::vector<SamplerRow>> rows = analyses(c, in, ref);
  const std::vector<double> ids = read(out.at("token_ids"));
  const SamplerMeasures m = sampler_measure(p, *rows, ref.at("token_ids"), ids);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<OpMeasure> r;
  // A candidate that draws differently flips token by token by design: its draws' distribution judges it.
  if (sampler_judged_by_distribution(info))
    r.push_back(distribution_measure(c, in, *rows, ids));
  else
    r.push_back({"flips_wide", static_cast<double>(m.flips_wide), 0.0, false, 0.0,
                 fmt::format("rows whose token differs although every rival trails the reference's by more than a few "
                             "f32 ulps and the filters decide it; {} flips in all, the widest at margin {:.3g}",
                             m.flips, m.widest_flip_margin)});
  r.push_back({"invalid_ids", static_cast<double>(m.invalid_ids), 0.0, false, 0.0,
               "rows whose token is not in [0, V) or is dropped for sure by min-p, top-k or top-p"});
  r.push_back({"token_agreement", static_cast<double>(m.agree) / static_cast<double>(m.rows), nan, false, 0.0,
               fmt::format("{} of {} rows with the reference's token; {} rows with undecided filter tokens", m.agree,
                           m.rows, m.undecided_rows)});
  for (int i = 0; i < SamplerMeasures::kBuckets; ++i) {
    const double n = static_cast<double>(m.bucket_rows[i]);
    r.push_back({std::string("flip_rate.") + SamplerMeasures::bucket_name(i),
                 n > 0 ? static_cast<double>(m.bucket_flips[i]) / n : nan, nan, false, 0.0,
                 fmt::format("{} flips among the {} rows whose reference margin is {}", m.bucket_flips[i],
                             m.bucket_rows[i], SamplerMeasures::bucket_name(i) + 6)});
  }
  return r;
}

std::vector<std::string> one(const std::string& v) { return {v}; }

std::vector<CoverageAxis> coverage_axes() {
  auto on_off = [](bool on) { return one(on ? "on" : "off"); };
  return {
      {"mode", {"greedy", "sampling"}, [](const Case& c) { return one(sampler_params(c).greedy() ? "greedy" : "sampling"); }},
      {"top_k", {"off", "on"}, [on_off](const Case& c) { return on_off(c.integer("top_k") > 0); }},
      {"top_p", {"off", "on"}, [on_off](const Case& c) { return on_off(c.real("top_p") < 1.0); }},
      {"min_p", {"off", "on"}, [on_off](const Case& c) { return on_off(c.real("min_p") > 0.0); }},
      {"batch", {"B=1", "B>1"}, [](const Case& c) { return one(c.integer("B") > 1 ? "B>1" : "B=1"); }},
      // Vocabularies (notes/model-ops.md section 2): Llama-2 32000 .. GLM 151552 / 154880.
      {"V", {"< 65536", ">= 65536"}, [](const Case& c) { return one(c.integer("V") >= 65536 ? ">= 65536" : "< 65536"); }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "sampler";
  s.doc = "token sampler (vLLM V1 order): l / T in f32 (T < 1e-5: greedy argmax), min-p, top-k (ties kept), top-p "
          "(ascending cumsum <= 1 - p dropped), f32 softmax, exponential race argmax p / E on injected uniforms";
  s.params = {{"B", ParamKind::integer, "4", "rows (sequences decoded together)", true},
              {"V", ParamKind::integer, "32000", "vocabulary (32000 .. 154880 in the configs)", true},
              {"temperature", ParamKind::real, "1", "T: logits / T in f32; below 1e-5 greedy"},
              {"top_k", ParamKind::integer, "0", "keep the values >= the top_k-th largest (0: off)"},
              {"top_p", ParamKind::real, "1", "nucleus: drop the ascending prefix with cumsum <= 1 - top_p (1: off)"},
              {"min_p", ParamKind::real, "0", "keep p >= min_p * max p (0: off)"},
              {"draws", ParamKind::integer, "1", "rows per group with the same logits, each with its own uniforms (B a "
               "multiple of it): the distribution test of samplers that draw differently (1: every row its own)"},
              {"regime", ParamKind::text, "typical", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the stored logits (bf16: the lm_head output in production)",
               true, {"bf16", "f32"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"logits", TensorRole::input, "[B,V] the lm_head output"},
               {"uniforms", TensorRole::input, "[B,V] f32 in (0,1): the draws, E = -log u"},
               {"token_ids", TensorRole::output, "[B] i32: the sampled token of every row", DType::i32}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = [](const Case& c) { return std::map<std::string, std::vector<int64_t>>{{"token_ids", {c.integer("B")}}}; };
  s.check_inputs = check_inputs;
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    return RefOutputs{{"token_ids", run_rows(c, in, tier, c.integer("B"))}};
  };
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.measure = measure;
  s.flops = [](const Case& c) {   // per token: a division, an exp (~10), a log (~10), a division, the sort's log2 V compares
    const double V = static_cast<double>(c.integer("V"));
    return static_cast<double>(c.integer("B")) * V * (22.0 + std::log2(V));
  };
  s.bytes = [](const Case& c, const Storage& st) {   // logits and f32 uniforms in, one i32 id a row out
    const double B = static_cast<double>(c.integer("B")), V = static_cast<double>(c.integer("V"));
    return B * V * (st.input_bytes(c.dtype()) + 4.0) + 4.0 * B;
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(sampler, spec());

}  // namespace dg
