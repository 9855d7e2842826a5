// The gate's rules on constructed records, and its renderers.
#include "harness/gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dg {
namespace {

using ::testing::HasSubstr;

Record record(const std::string& cand, double rms, double max_abs, double growth, DType t = DType::f32) {
  Record r;
  r.case_str = "kda(T=4096,H=1,K=8,V=8,regime=kimi_linear,dtype=bf16,seed=0)";
  r.candidate = cand;
  r.disposition = Disposition::PASSED;
  for (const char* name : {"ht", "o"}) {
    OutputResult o;
    o.name = name;
    o.dtype = t;
    o.metrics.rms_ratio = rms;
    o.metrics.bits = -std::log2(rms);
    o.metrics.max_abs = max_abs;
    o.metrics.ref_max_abs = 1.0;
    if (std::string(name) == "o") {
      DriftCurve d;
      d.buckets.push_back({0, 2048, 100, 0, rms, rms});
      d.buckets.push_back({2048, 4096, 100, 0, rms, rms});
      d.growth_exponent = growth;
      o.drift = d;
    }
    r.outputs.push_back(o);
  }
  return r;
}

bool passed(const std::vector<Check>& cs, const std::string& name) {
  for (const Check& c : cs)
    if (c.name == name) return c.passed;
  ADD_FAILURE() << "no check " << name;
  return false;
}

TEST(Gate, AsGoodAsTheBasePasses) {
  Policy p = default_policy();
  Record base = record("b", 3e-7, 1e-7, 0.1), patch = record("p", 4e-7, 1.2e-7, 0.12);
  for (const Check& c : precision_checks(base, patch, &base, p)) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
}

TEST(Gate, ThePrecisionRuleIsRelativeToBaseAndNaive) {
  Policy p = default_policy();
  Record base = record("b", 1e-6, 1e-6, 0), naive = record("n", 4e-6, 4e-6, 0);
  // 3x the base but within 2x the naive kernel: passes.
  EXPECT_TRUE(passed(precision_checks(base, record("p", 3e-6, 3e-6, 0), &naive, p), "precision.o.rms"));
  // 9x the base and above 2x naive: fails, and the detail gives the numbers.
  std::vector<Check> cs = precision_checks(base, record("p", 9e-6, 9e-6, 0), &naive, p);
  EXPECT_FALSE(passed(cs, "precision.o.rms"));
  for (const Check& c : cs) {
    if (c.name == "precision.o.rms") {
      EXPECT_THAT(c.detail, HasSubstr("patch 9e-06 vs limit"));
    }
  }
  // Without a naive kernel the base alone sets the limit: 1.8x the base fails at slack 0.5.
  EXPECT_FALSE(passed(precision_checks(base, record("p", 1.8e-6, 1e-6, 0), nullptr, p), "precision.o.rms"));
}

TEST(Gate, FloorComesFromTheOutputFormat) {
  Policy p = default_policy();
  Record base = record("b", 0, 0, 0);       // an exact base: the limit is the floor alone
  EXPECT_TRUE(passed(precision_checks(base, record("p", 1e-7, 1e-7, 0), nullptr, p), "precision.o.rms"));   // < 2^-23
  EXPECT_FALSE(passed(precision_checks(base, record("p", 1e-6, 1e-6, 0), nullptr, p), "precision.o.rms"));
}

TEST(Gate, NanMinBitsAndDriftRules) {
  Policy p = default_policy();
  Record base = record("b", 1e-6, 1e-6, 0.1);
  Record nan = record("p", 1e-6, 1e-6, 0.1);
  nan.outputs[1].metrics.nonfinite_mismatch = 3;
  EXPECT_FALSE(passed(precision_checks(base, nan, nullptr, p), "nonfinite.o"));
  Record low = record("p", 1e-3, 1e-3, 0.1, DType::bf16);
  p.min_bits["bf16"] = 12;
  EXPECT_FALSE(passed(precision_checks(base, low, nullptr, p), "min_bits.o"));
  Record fast_growth = record("p", 1e-6, 1e-6, 0.5);
  EXPECT_FALSE(passed(precision_checks(base, fast_growth, nullptr, default_policy()), "drift.o"));
  EXPECT_TRUE(passed(precision_checks(base, record("p", 1e-6, 1e-6, 0.2), nullptr, default_policy()), "drift.o"));
}

TEST(Gate, BrokenBaseOrPatchRejects) {
  Policy p = default_policy();
  Record base = record("b", 1e-6, 1e-6, 0), patch = record("p", 1e-6, 1e-6, 0);
  patch.disposition = Disposition::INVALID;
  patch.reason = "rule guard: o";
  std::vector<Check> cs = precision_checks(base, patch, nullptr, p);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_FALSE(cs[0].passed);
  EXPECT_THAT(cs[0].detail, HasSubstr("INVALID: rule guard"));
  base.disposition = Disposition::ERRORED;
  EXPECT_EQ(precision_checks(base, record("p", 1e-6, 1e-6, 0), nullptr, p)[0].name, "base");
}

TEST(Gate, SpeedRules) {
  Policy p = default_policy();
  SpeedRow s;
  s.estimate = 1.8, s.lo = 1.7, s.hi = 1.9, s.verdict = "FASTER";
  for (const Check& c : speed_checks(s, 1.71, p)) EXPECT_TRUE(c.passed) << c.name;
  EXPECT_FALSE(speed_checks(s, 2.0, p).back().passed);   // claim: 1.7 < 2.0 - 0.02
  s.verdict = "SLOWER";
  bool throughput_failed = false;
  for (const Check& c : speed_checks(s, std::nullopt, p)) throughput_failed |= c.name == "throughput" && !c.passed;
  EXPECT_TRUE(throughput_failed);
  s.verdict = "FASTER";
  s.below_physical_bound = true;
  EXPECT_FALSE(speed_checks(s, std::nullopt, p)[0].passed);
  s.below_physical_bound = false;
  s.inconsistent = "call 7: o differs";
  bool timed_failed = false;
  for (const Check& c : speed_checks(s, std::nullopt, p)) timed_failed |= c.name == "timed_outputs" && !c.passed;
  EXPECT_TRUE(timed_failed);
}

TEST(Gate, RenderersCarryVerdictReasonsAndReproduce) {
  GateReport rep;
  rep.base = "b";
  rep.patch = "p";
  rep.policy_source = "default";
  GateRow ok;
  ok.case_str = "kda(A)";
  ok.base = record("b", 1e-6, 1e-6, 0);
  ok.patch = record("p", 1e-6, 1e-6, 0);
  ok.checks = {{"precision.o.rms", true, "fine"}};
  ok.verdict = Verdict::MERGE;
  ok.reproduce = "driftgate gate --case 'kda(A)'";
  SpeedRow fast;
  fast.estimate = 1.5;
  fast.lo = 1.4;
  fast.hi = 1.6;
  fast.verdict = "FASTER";
  ok.speed = fast;
  GateRow bad = ok;
  bad.case_str = "kda(B)";
  bad.checks = {{"precision.o.rms", false, "patch 1 vs limit 2"}};
  bad.verdict = Verdict::REJECT;
  bad.speed.reset();
  rep.rows = {ok, bad};
  rep.verdict = Verdict::REJECT;
  std::string md = gate_markdown(rep);
  EXPECT_THAT(md, HasSubstr("# driftgate gate: REJECT"));
  EXPECT_THAT(md, HasSubstr("1.500 [1.400, 1.600] FASTER"));
  EXPECT_THAT(md, HasSubstr("not timed"));   // no speedup for a rejected patch
  EXPECT_THAT(md, HasSubstr("precision.o.rms: patch 1 vs limit 2"));
  nlohmann::json j = nlohmann::json::parse(gate_json(rep));
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["verdict"], "REJECT");
  EXPECT_EQ(j["rows"][1]["reasons"], "precision.o.rms: patch 1 vs limit 2");
  EXPECT_TRUE(j["rows"][1]["speed"].is_null());
  std::string x = gate_junit(rep);
  EXPECT_THAT(x, HasSubstr("tests=\"2\" failures=\"1\""));
  EXPECT_THAT(x, HasSubstr("<failure message=\"patch 1 vs limit 2\">"));
}

}  // namespace
}  // namespace dg
