// The sampler CPU candidates (candidates/cpu/sampler.cpp) through verify against the dd reference: on
// every smoke case no flip at a wide margin and no invalid token; the top-p edge flips legitimately
// and passes; the measures' analysis; bad cases and inputs refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "datasets/suites.h"
#include "harness/ops/sampler.h"
#include "harness/report/report.h"
#include "reference/sampler.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

TEST(SamplerCandidates, EverySmokeCasePassesWithoutWideFlipsOrInvalidTokens) {
  for (const char* cand : {"sampler_cpu_naive_f32", "sampler_cpu_vllm_f32"})
    for (const std::string& cs : find_suite("sampler-smoke")->cases) {
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << cs << ": " << r.reason;
      EXPECT_EQ(measure_value(r, "flips_wide"), 0.0) << cand << " " << cs;
      EXPECT_EQ(measure_value(r, "invalid_ids"), 0.0) << cand << " " << cs;
      EXPECT_GE(measure_value(r, "token_agreement"), 0.75) << cand << " " << cs;
    }
}

// The ids are allocated in i32 and the row is its measures (no tensor metrics); the greedy rows of
// the greedy regime agree exactly.
TEST(SamplerCandidates, IdsAreI32AndGreedyAgreesExactly) {
  const CandidateInfo& info = require_candidate("sampler_cpu_vllm_f32").info();
  EXPECT_EQ(output_dtype("token_ids", info), DType::i32);
  const Record r = verify_one("sampler_cpu_vllm_f32", "sampler(B=32,V=4096,temperature=0,regime=greedy,dtype=bf16,seed=0)");
  EXPECT_EQ(r.disposition, Disposition::PASSED) << r.reason;
  EXPECT_TRUE(r.outputs.empty());
  EXPECT_EQ(r.measures.size(), 7u);
  EXPECT_EQ(measure_value(r, "token_agreement"), 1.0);
  EXPECT_NE(drift_table({r}).find("flips_wide 0, invalid_ids 0, token_agreement 1"), std::string::npos) << drift_table({r});
}

// The analysis: a token of a tie group straddling the top-p cut is undecided; a token dropped for sure
// by top-k is invalid; a flip to a rival far behind is wide.
TEST(SamplerCandidates, TheAnalysisSortsTokensIntoKeptDroppedAndUndecided) {
  SamplerParams p;
  p.B = 1, p.V = 4, p.top_p = 0.6;
  const std::vector<double> l = {0, 0, 0, 0}, u = {0.5, 0.4, 0.3, 0.2};
  const SamplerRow r = sampler_analyze(p, l.data(), u.data(), 0);
  for (SamplerStatus s : r.status) EXPECT_EQ(s, SamplerStatus::undecided);   // the cut falls inside the tie group
  EXPECT_FALSE(r.wide);
  p.top_p = 1.0, p.top_k = 1;
  const std::vector<double> l2 = {3, 0, 0, 0};
  const SamplerRow k = sampler_analyze(p, l2.data(), u.data(), 0);
  EXPECT_EQ(k.status[1], SamplerStatus::dropped);
  const SamplerMeasures m = sampler_measure(p, l2, u, {0}, {1});
  EXPECT_EQ(m.invalid_ids, 1);
  p.top_k = 0;
  const SamplerMeasures wide = sampler_measure(p, {5, 0, 0, 0}, {0.5, 0.5, 0.5, 0.5}, {0}, {2});
  EXPECT_EQ(wide.flips_wide, 1);
  EXPECT_EQ(wide.invalid_ids, 0);
}

TEST(SamplerCandidates, TheTopPEdgeFlipsOnlyAtNarrowMarginsAndPasses) {
  const std::string cs = "sampler(B=64,V=4096,top_p=0.9,regime=top_p_edge,dtype=f32,seed=0)";
  for (const char* cand : {"sampler_cpu_naive_f32", "sampler_cpu_vllm_f32"}) {
    const Record r = verify_one(cand, cs, Tier::dd);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << ": " << r.reason;
    EXPECT_EQ(measure_value(r, "flips_wide"), 0.0) << cand;
    EXPECT_EQ(measure_value(r, "invalid_ids"), 0.0) << cand;
  }
}

// Counts over V tokens of `n` inverse-CDF draws from `probs` (a sampler that draws differently from the race).
std::vector<int64_t> inverse_cdf_counts(const std::vector<double>& probs, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  std::vector<int64_t> counts(probs.size(), 0);
  for (int64_t d = 0; d < n; ++d) {
    double u = unif(rng), c = 0;
    size_t i = 0;
    for (; i + 1 < probs.size(); ++i)
      if (probs[i] > 0 && (c += probs[i]) > u) break;
    while (probs[i] == 0) --i;   // u past the rounded total: the last kept token
    ++counts[i];
  }
  return counts;
}

// The distribution test (sampler_tv_plan) on one row of 40 tokens at T = 0.8, top_k = 20, top_p = 0.9,
// planned for a distortion of 0.05: the race on fresh uniforms and an inverse-CDF sampler (other tokens,
// the same distribution) stay under its threshold; an inverse-CDF sampler of the row at T = 1 (the
// temperature lost, TV > 0.05 from the reference's distribution) exceeds it.
TEST(SamplerCandidates, TheDistributionTestSeparatesAnHonestSamplerFromADistortedOne) {
  SamplerParams p;
  p.B = 1, p.V = 40, p.temperature = 0.8, p.top_k = 20, p.top_p = 0.9;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 2.0);
  Tensor l(DType::f32, {1, p.V});
  for (int64_t i = 0; i < p.V; ++i) l.set(i, normal(rng));
  const std::vector<double> probs = sampler_probabilities(Tier::f64, p, l);
  SamplerParams hot = p;
  hot.temperature = 1.0;
  const std::vector<double> q = sampler_probabilities(Tier::f64, hot, l);
  int64_t support = 0;
  double delta = 0;
  for (int64_t i = 0; i < p.V; ++i) support += probs[i] > 0 || q[i] > 0, delta += 0.5 * std::fabs(probs[i] - q[i]);
  ASSERT_GT(delta, 0.05);
  const SamplerTvPlan plan = sampler_tv_plan(support, 0.05);
  EXPECT_GT(plan.draws, 10000);
  // the race, one row per draw
  SamplerParams many = p;
  many.B = plan.draws;
  Tensor ls(DType::f32, {many.B, p.V}), us(DType::f32, {many.B, p.V});
  std::uniform_real_distribution<double> unif(0x1p-24, 1.0 - 0x1p-24);
  for (int64_t i = 0; i < many.B * p.V; ++i) ls.set(i, l.get(i % p.V)), us.set(i, unif(rng));
  std::vector<int64_t> race(static_cast<size_t>(p.V), 0);
  for (double t : sampler_reference(Tier::f64, many, ls, us)) ++race[static_cast<size_t>(t)];
  EXPECT_LT(sampler_tv(probs, race), plan.threshold);
  EXPECT_LT(sampler_tv(probs, inverse_cdf_counts(probs, plan.draws, 11)), plan.threshold);
  EXPECT_GT(sampler_tv(probs, inverse_cdf_counts(q, plan.draws, 12)), plan.threshold);
}

const OpMeasure* find(const Record& r, const std::string& name) {
  for (const OpMeasure& m : r.measures)
    if (m.name == name) return &m;
  return nullptr;
}

// The rejection sampler (candidates/cpu/sampler_rejection.h) draws other tokens than the race for the
// same uniforms, and its op judges it by the distribution of its draws: on groups of 4096 rows with the
// same logits it passes the TV test (below the threshold, the power stated), draws no invalid token,
// and agrees with the reference's token on far fewer rows than the race does; its row has no
// flips_wide. On a case with draws = 1 the distribution is not judged (NaN, no limit) and it passes on
// invalid_ids.
TEST(SamplerCandidates, RejectionSamplerIsJudgedByTheDistributionOfItsDraws) {
  ASSERT_EQ(require_candidate("sampler_cpu_rejection_f32").info().judged_by, "distribution");
  for (const char* cs : {"sampler(B=4096,V=1024,temperature=0.7,top_k=50,draws=4096,regime=typical,dtype=bf16,seed=0)",
                         "sampler(B=4096,V=1024,top_k=20,top_p=0.9,draws=4096,regime=flat,dtype=bf16,seed=0)"}) {
    const Record r = verify_one("sampler_cpu_rejection_f32", cs);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cs << ": " << r.reason;
    const OpMeasure* tv = find(r, "distribution_tv");
    ASSERT_NE(tv, nullptr) << cs;
    EXPECT_LT(tv->value, 1.0) << cs << ": " << tv->detail;
    EXPECT_GT(tv->value, 0.0) << cs;
    EXPECT_EQ(tv->limit, 1.0);
    EXPECT_NE(tv->detail.find("power 95%"), std::string::npos) << tv->detail;
    EXPECT_EQ(find(r, "flips_wide"), nullptr);
    EXPECT_EQ(measure_value(r, "invalid_ids"), 0.0) << cs;
    const Record race = verify_one("sampler_cpu_vllm_f32", cs);
    EXPECT_EQ(race.disposition, Disposition::PASSED) << cs << ": " << race.reason;
    EXPECT_EQ(find(race, "distribution_tv"), nullptr);
    EXPECT_GT(measure_value(race, "token_agreement"), 0.8) << cs;   // the flat rows' bf16 ties flip legitimately
    EXPECT_LT(measure_value(r, "token_agreement"), measure_value(race, "token_agreement") - 0.3) << cs;
  }
  const Record one = verify_one("sampler_cpu_rejection_f32", "sampler(B=8,V=4096,top_k=20,top_p=0.9,regime=flat,dtype=bf16,seed=0)");
  EXPECT_EQ(one.disposition, Disposition::PASSED) << one.reason;
  ASSERT_NE(find(one, "distribution_tv"), nullptr);
  EXPECT_TRUE(std::isnan(find(one, "distribution_tv")->value));
  EXPECT_TRUE(std::isnan(find(one, "distribution_tv")->limit));
}

// sampler_tv_test at a given number of draws: the threshold and the detectable distortion as
// sampler.h states them (K = 50, N = 4096, alpha = 1%).
TEST(SamplerCandidates, TheTvTestAtGivenDrawsStatesItsThresholdAndPower) {
  std::vector<double> probs(50, 1.0 / 50);
  std::vector<int64_t> counts(50, 4096 / 50);
  counts[0] += 4096 - 50 * (4096 / 50);
  const SamplerTvTest t = sampler_tv_test(probs, counts, 50, 0.01);
  EXPECT_EQ(t.draws, 4096);
  const double spread = 0.5 * std::sqrt(50.0 / 4096.0);
  EXPECT_NEAR(t.threshold, spread + std::sqrt(std::log(100.0) / 8192.0), 1e-12);
  EXPECT_NEAR(t.detectable, t.threshold + spread + std::sqrt(std::log(20.0) / 8192.0), 1e-12);
  EXPECT_NEAR(t.tv, 0.5 * (127.0 / 4096.0 - 0.02 + 49 * (0.02 - 81.0 / 4096.0)), 1e-12);   // 127 draws of token 0, 81 of the others
  EXPECT_LT(t.tv, t.threshold);
}

TEST(SamplerCandidates, BadCasesAndInputsAreRefused) {
  expect_refused("sampler(B=6,V=64,draws=4,regime=typical,dtype=bf16,seed=0)");
  expect_refused("sampler(B=6,V=64,draws=0,regime=typical,dtype=bf16,seed=0)");
  {
    const Case g = parse_case("sampler(B=4,V=64,draws=2,regime=typical,dtype=bf16,seed=0)");
    TensorMap in = generate_inputs(g);
    EXPECT_NO_THROW(find_op("sampler")->check_inputs(g, in));
    in.at("logits").set(64 + 7, 1000.0);
    try {
      find_op("sampler")->check_inputs(g, in);
      ADD_FAILURE() << "a group with two different rows accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("differs from row 0 of its group"), std::string::npos) << e.what();
    }
  }
  expect_refused("sampler(B=2,V=64,top_p=0,regime=typical,dtype=bf16,seed=0)");
  expect_refused("sampler(B=2,V=64,top_p=1.5,regime=typical,dtype=bf16,seed=0)");
  expect_refused("sampler(B=2,V=64,top_k=-1,regime=typical,dtype=bf16,seed=0)");
  expect_refused("sampler(B=2,V=64,top_k=65,regime=typical,dtype=bf16,seed=0)");
  expect_refused("sampler(B=2,V=64,min_p=1.5,regime=typical,dtype=bf16,seed=0)");
  expect_refused("sampler(B=2,V=64,temperature=-1,regime=typical,dtype=bf16,seed=0)");
  expect_refused("sampler(B=0,V=64,regime=typical,dtype=bf16,seed=0)");
  expect_refused("sampler(B=2,V=64,regime=typical,dtype=f16,seed=0)");
  const Case c = parse_case("sampler(B=2,V=64,regime=typical,dtype=bf16,seed=0)");
  TensorMap in = generate_inputs(c);
  in.at("uniforms").set(5, 1.0);
  EXPECT_THROW(find_op("sampler")->check_inputs(c, in), InputError);
  in.at("uniforms").set(5, 0.0);
  try {
    find_op("sampler")->check_inputs(c, in);
    ADD_FAILURE() << "uniform 0 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'uniforms' must lie in (0, 1)"), std::string::npos) << e.what();
  }
  TensorMap nan_in = generate_inputs(c);
  nan_in.at("logits").set(3, NAN);
  EXPECT_THROW(find_op("sampler")->check_inputs(c, nan_in), InputError);
}

}  // namespace
}  // namespace dg
