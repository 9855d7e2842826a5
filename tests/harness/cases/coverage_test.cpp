// Coverage of an op's axes by a suite's cases (harness/cases/coverage.h).
#include "harness/cases/coverage.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "datasets/suites.h"
#include "harness/cases/case.h"

namespace dg {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::Not;

std::vector<Case> parse_all(const std::vector<std::string>& v) {
  std::vector<Case> out;
  for (const std::string& s : v) out.push_back(parse_case(s));
  return out;
}

std::vector<Case> suite_cases(const std::string& name) {
  for (const Suite& s : all_suites())
    if (s.name == name) return parse_all(s.cases);
  ADD_FAILURE() << "no suite " << name;
  return {};
}

const AxisCoverage& axis(const std::vector<AxisCoverage>& all, const std::string& name) {
  auto it = std::find_if(all.begin(), all.end(), [&](const AxisCoverage& a) { return a.axis == name; });
  if (it == all.end()) throw std::runtime_error("no axis " + name);
  return *it;
}

// The promise: every value of every axis of kda appears in kda-gate at least once.
TEST(Coverage, KdaGateExercisesEveryValueOfKda) { EXPECT_THAT(coverage_gaps("kda", suite_cases("kda-gate")), IsEmpty()); }

// And of kda_decode in its gate suite.
TEST(Coverage, KdaDecodeGateExercisesEveryValueOfKdaDecode) {
  EXPECT_THAT(coverage_gaps("kda_decode", suite_cases("kda-decode-gate")), IsEmpty());
}

// decode_layer's smoke and gate suites: every regime and dtype, one token and several, one step and
// several (a state carried or not).
TEST(Coverage, DecodeLayerSuitesExerciseEveryValueOfDecodeLayer) {
  EXPECT_THAT(coverage_gaps("decode_layer", suite_cases("decode-layer-smoke")), IsEmpty());
  EXPECT_THAT(coverage_gaps("decode_layer", suite_cases("decode-layer-gate")), IsEmpty());
}

// rope's smoke and gate suites: both pairings and layouts, every regime and dtype, full and partial
// rotary, positions below 2^16, past 2^16, past 2^20 and near 2^24, theta 1e4, 1e6 and 8e6.
TEST(Coverage, RopeSuitesExerciseEveryValueOfRope) {
  EXPECT_THAT(coverage_gaps("rope", suite_cases("rope-smoke")), IsEmpty());
  EXPECT_THAT(coverage_gaps("rope", suite_cases("rope-gate")), IsEmpty());
  const auto cov = op_coverage("rope", parse_all({"rope(T=16,H=4,D=64,d_rope=64,regime=glm5_mla,dtype=f32,seed=0)"}));
  EXPECT_THAT(axis(cov, "style").covered, Contains("gptj"));   // glm5_mla's pairing
  EXPECT_THAT(axis(cov, "max position").missing, Contains(">= 2^16"));
}

TEST(Coverage, TheQuickGateNamesWhatItLeavesOut) {
  const std::vector<std::string> gaps = coverage_gaps("kda", suite_cases("kda-gate-quick"));
  EXPECT_THAT(gaps, Contains("B=>1"));
  EXPECT_THAT(gaps, Contains("layout=vfirst"));
  EXPECT_THAT(gaps, Not(Contains("gate=softplus")));   // kimi_linear's gate
}

// A regime's implied parameters count: kimi_linear is gate=softplus, beta=sigmoid without saying so.
TEST(Coverage, ValuesARegimeImpliesAreCovered) {
  const auto cov = op_coverage("kda", parse_all({"kda(T=64,H=1,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)"}));
  EXPECT_THAT(axis(cov, "gate").covered, Contains("softplus"));
  EXPECT_THAT(axis(cov, "beta").covered, Contains("sigmoid"));
  EXPECT_THAT(axis(cov, "gate").missing, Contains("lower_bound"));
}

// A GVA case with one key head cannot show a wrong head map: it does not cover a GVA ratio.
TEST(Coverage, GvaAtOneKeyHeadCoversNoRatio) {
  auto gva = [](const std::string& c) { return axis(op_coverage("kda", parse_all({c})), "GVA (HV/H, H >= 2)"); };
  EXPECT_THAT(gva("kda(T=64,H=1,HV=2,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)").covered, IsEmpty());
  EXPECT_THAT(gva("kda(T=64,H=2,HV=8,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)").covered, Contains("4"));
}

TEST(Coverage, LengthsAndVarlenEdges) {
  const auto cov = op_coverage(
      "kda", parse_all({"kda(T=100,H=1,K=32,V=32,seqlens=1/0/50,regime=varlen_ragged,dtype=bf16,seed=0)"}));
  EXPECT_THAT(axis(cov, "T").covered, Contains("T % 64 != 0"));
  EXPECT_THAT(axis(cov, "T").missing, Contains("> 2^16"));
  EXPECT_THAT(axis(cov, "varlen segments").covered, Contains("empty"));
  EXPECT_THAT(axis(cov, "varlen segments").covered, Contains("1 token"));
}

// Cases of other ops are ignored; an op's own decode op has no length axis (T counts steps).
TEST(Coverage, OnlyTheOpsOwnCasesCount) {
  const std::vector<Case> cases = parse_all({"kda_decode(T=8,B=2,H=1,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)"});
  EXPECT_THAT(axis(op_coverage("kda", cases), "B").covered, IsEmpty());
  EXPECT_THAT(axis(op_coverage("kda_decode", cases), "B").covered, Contains(">1"));
  const auto dec = op_coverage("kda_decode", cases);
  EXPECT_TRUE(std::none_of(dec.begin(), dec.end(), [](const AxisCoverage& a) { return a.axis == "T"; }));
  const nlohmann::json j = suite_coverage_json(cases);
  EXPECT_TRUE(j.contains("kda_decode"));
  EXPECT_FALSE(j.contains("kda"));
}

}  // namespace
}  // namespace dg
