// The sampler CPU candidates (candidates/cpu/sampler.cpp) through verify against the dd reference: on
// every smoke case no flip at a wide margin and no invalid token; the top-p edge flips legitimately
// and passes; the measures' analysis; bad cases and inputs refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "datasets/suites.h"
#include "harness/ops/sampler.h"
#include "harness/report/report.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

double measure(const Record& r, const std::string& name) {
  for (const OpMeasure& m : r.measures)
    if (m.name == name) return m.value;
  ADD_FAILURE() << "no measure " << name << " in " << r.case_str;
  return std::nan("");
}

TEST(SamplerCandidates, EverySmokeCasePassesWithoutWideFlipsOrInvalidTokens) {
  for (const char* cand : {"sampler_cpu_naive_f32", "sampler_cpu_vllm_f32"})
    for (const std::string& cs : find_suite("sampler-smoke")->cases) {
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << cs << ": " << r.reason;
      EXPECT_EQ(measure(r, "flips_wide"), 0.0) << cand << " " << cs;
      EXPECT_EQ(measure(r, "invalid_ids"), 0.0) << cand << " " << cs;
      EXPECT_GE(measure(r, "token_agreement"), 0.75) << cand << " " << cs;
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
  EXPECT_EQ(measure(r, "token_agreement"), 1.0);
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
    EXPECT_EQ(measure(r, "flips_wide"), 0.0) << cand;
    EXPECT_EQ(measure(r, "invalid_ids"), 0.0) << cand;
  }
}

TEST(SamplerCandidates, BadCasesAndInputsAreRefused) {
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
