// The dsa_indexer CPU candidates (candidates/cpu/dsa_indexer.cpp) through verify against the dd
// reference: on every smoke case no wide miss, no tie against the rule, no invalid id, scores within
// their bound; near ties miss legitimately and pass; the ids are i32 and the row is its measures;
// bad cases refused.
#include <gtest/gtest.h>

#include <string>

#include "datasets/suites.h"
#include "harness/report/report.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

TEST(DsaIndexerCandidates, EverySmokeCasePassesWithoutWideMissesOrTiesAgainstTheRule) {
  for (const char* cand : {"dsa_indexer_cpu_naive_f32", "dsa_indexer_cpu_blocked_f32"})
    for (const std::string& cs : find_suite("dsa-indexer-smoke")->cases) {
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << cs << ": " << r.reason;
      EXPECT_EQ(measure_value(r, "misses_wide"), 0.0) << cand << " " << cs;
      EXPECT_EQ(measure_value(r, "tie_breaks"), 0.0) << cand << " " << cs;
      EXPECT_EQ(measure_value(r, "invalid_ids"), 0.0) << cand << " " << cs;
      EXPECT_LT(measure_value(r, "score_err"), 0x1p-18) << cand << " " << cs;
      EXPECT_GT(measure_value(r, "recall"), 0.99) << cand << " " << cs;
    }
}

// Near ties: copies of the boundary keys a few ulps apart, below an f32 kernel's resolution of the
// scores. The kernels may miss there (and only there) and pass.
TEST(DsaIndexerCandidates, NearTiesMissOnlyInsideTheBoundsAndPass) {
  const std::string cs = "dsa_indexer(B=4,L=8192,topk=2048,regime=near_ties,dtype=bf16,seed=0)";
  for (const char* cand : {"dsa_indexer_cpu_naive_f32", "dsa_indexer_cpu_blocked_f32"}) {
    const Record r = verify_one(cand, cs, Tier::dd);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << ": " << r.reason;
    EXPECT_EQ(measure_value(r, "misses_wide"), 0.0) << cand;
    EXPECT_EQ(measure_value(r, "tie_breaks"), 0.0) << cand;
  }
}

// The FP8 path's scores are off by up to ~2^-3 of sum |q k|: it misses keys near rank k, each
// within its bound ((D + H + 3) u + 2 u_in with u_in = 2^-4), and passes.
TEST(DsaIndexerCandidates, Fp8MissesKeysNearRankKLegitimately) {
  const Record r = verify_one("dsa_indexer_cpu_fp8_f32", "dsa_indexer(B=2,L=4096,topk=2048,regime=production,dtype=bf16,seed=0)", Tier::dd);
  EXPECT_EQ(r.disposition, Disposition::PASSED) << r.reason;
  EXPECT_GT(measure_value(r, "misses"), 0.0);
  EXPECT_EQ(measure_value(r, "misses_wide"), 0.0);
  EXPECT_LT(measure_value(r, "recall"), 1.0);
  EXPECT_GT(measure_value(r, "recall"), 0.8);
  EXPECT_EQ(measure_value(r, "invalid_ids"), 0.0);
}

TEST(DsaIndexerCandidates, IdsAreI32AndTheRowIsItsMeasures) {
  const CandidateInfo& info = require_candidate("dsa_indexer_cpu_blocked_f32").info();
  EXPECT_EQ(output_dtype("indices", info), DType::i32);
  const Record r = verify_one("dsa_indexer_cpu_blocked_f32", "dsa_indexer(B=2,L=600,topk=512,regime=ragged,dtype=bf16,seed=0)");
  EXPECT_EQ(r.disposition, Disposition::PASSED) << r.reason;
  EXPECT_TRUE(r.outputs.empty());
  EXPECT_EQ(r.measures.size(), 7u);
  EXPECT_NE(drift_table({r}).find("misses_wide 0, tie_breaks 0, invalid_ids 0, score_err "), std::string::npos) << drift_table({r});
}

TEST(DsaIndexerCandidates, BadCasesAreRefused) {
  expect_refused("dsa_indexer(B=0,L=4096,topk=2048,regime=production,dtype=bf16,seed=0)");
  expect_refused("dsa_indexer(B=2,L=4096,topk=0,regime=production,dtype=bf16,seed=0)");
  expect_refused("dsa_indexer(B=2,L=4096,H=0,topk=2048,regime=production,dtype=bf16,seed=0)");
  expect_refused("dsa_indexer(B=2,L=4096,topk=2048,lens=5/6/7,regime=production,dtype=bf16,seed=0)");   // 3 lengths for B=2
  expect_refused("dsa_indexer(B=2,L=4096,topk=2048,lens=5/4097,regime=production,dtype=bf16,seed=0)");  // beyond L
  expect_refused("dsa_indexer(B=2,L=4096,topk=2048,lens=0/5,regime=production,dtype=bf16,seed=0)");
  expect_refused("dsa_indexer(B=2,L=4096,topk=2048,regime=production,dtype=f16,seed=0)");
  expect_refused("dsa_indexer(B=2,L=4096,topk=2048,regime=no_such_regime,dtype=bf16,seed=0)");
}

}  // namespace
}  // namespace dg
