// The moe_router CPU candidates (candidates/cpu/moe_router.cpp) through verify against the dd
// reference: on every smoke case no flip at a wide margin, no tie against the rule, weights within a
// few f32 ulps of the reference's on the agreeing tokens; near ties flip legitimately and pass; bad
// cases refused.
#include <gtest/gtest.h>

#include <string>

#include "datasets/suites.h"
#include "harness/report/report.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

TEST(MoeRouterCandidates, EverySmokeCasePassesWithoutWideFlipsOrTiesAgainstTheRule) {
  for (const char* cand : {"moe_router_cpu_naive_f32", "moe_router_cpu_grouped_f32"})
    for (const std::string& cs : find_suite("moe-router-smoke")->cases) {
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << cs << ": " << r.reason;
      EXPECT_EQ(measure_value(r, "flips_wide"), 0.0) << cand << " " << cs;
      EXPECT_EQ(measure_value(r, "ties"), 0.0) << cand << " " << cs;
      EXPECT_EQ(measure_value(r, "invalid_ids"), 0.0) << cand << " " << cs;
      EXPECT_LT(measure_value(r, "weight_err"), 0x1p-20) << cand << " " << cs;
      EXPECT_GT(measure_value(r, "set_agreement"), 0.4) << cand << " " << cs;
    }
}

// Near ties: margins down to 2^-30, where f32 scores cannot order the experts. Both kernels flip
// there (and only there) and pass; the flip rate is visible per margin bucket.
TEST(MoeRouterCandidates, NearTiesFlipOnlyAtNarrowMarginsAndPass) {
  const std::string cs = "moe_router(T=256,E=256,k=8,n_group=8,topk_group=4,regime=near_ties,dtype=f32,seed=0)";
  for (const char* cand : {"moe_router_cpu_naive_f32", "moe_router_cpu_grouped_f32"}) {
    const Record r = verify_one(cand, cs, Tier::dd);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << ": " << r.reason;
    EXPECT_LT(measure_value(r, "set_agreement"), 1.0) << cand;
    EXPECT_GT(measure_value(r, "flip_rate.margin<2^-20"), 0.0) << cand;
    EXPECT_EQ(measure_value(r, "flip_rate.margin>=2^-12"), 0.0) << cand;
    EXPECT_EQ(measure_value(r, "flips_wide"), 0.0) << cand;
  }
}

// The ids are allocated in i32 whatever the candidate's output dtype (TensorSpec::dtype) and the
// weights have no slot-wise tensor metrics (TensorSpec::measured_only): the row is its measures,
// and verify's table prints them.
TEST(MoeRouterCandidates, IdsAreI32AndTheRowIsItsMeasures) {
  const CandidateInfo& info = require_candidate("moe_router_cpu_grouped_f32").info();
  EXPECT_EQ(output_dtype("topk_ids", info), DType::i32);
  EXPECT_EQ(output_dtype("topk_weights", info), DType::f32);
  const Record r = verify_one("moe_router_cpu_grouped_f32", "moe_router(T=16,E=64,k=4,regime=production,dtype=f32,seed=0)");
  EXPECT_EQ(r.disposition, Disposition::PASSED) << r.reason;
  EXPECT_TRUE(r.outputs.empty());
  EXPECT_EQ(r.measures.size(), 9u);
  EXPECT_NE(drift_table({r}).find("flips_wide 0, ties 0, invalid_ids 0, weight_err "), std::string::npos) << drift_table({r});
}

TEST(MoeRouterCandidates, BadCasesAreRefused) {
  expect_refused("moe_router(T=4,E=256,k=8,n_group=3,topk_group=1,regime=production,dtype=f32,seed=0)");   // 3 does not divide 256
  expect_refused("moe_router(T=4,E=256,k=8,n_group=8,topk_group=9,regime=production,dtype=f32,seed=0)");   // topk_group > n_group
  expect_refused("moe_router(T=4,E=64,k=9,n_group=8,topk_group=1,regime=production,dtype=f32,seed=0)");    // k > 1 group of 8
  expect_refused("moe_router(T=4,E=64,k=4,renorm=2,regime=production,dtype=f32,seed=0)");
  expect_refused("moe_router(T=4,E=64,k=4,rsf=0,regime=production,dtype=f32,seed=0)");
  expect_refused("moe_router(T=0,E=64,k=4,regime=production,dtype=f32,seed=0)");
  expect_refused("moe_router(T=4,E=64,k=4,regime=production,dtype=f16,seed=0)");
  expect_refused("moe_router(T=4,E=64,k=4,regime=no_such_regime,dtype=f32,seed=0)");
}

}  // namespace
}  // namespace dg
