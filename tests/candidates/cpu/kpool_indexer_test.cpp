// The kpool_indexer CPU candidates (candidates/cpu/kpool_indexer.cpp) through verify against the dd
// reference: on every smoke case no wide pool miss, no tie against the rule, no invalid id; near ties
// miss legitimately and pass; bad cases refused.
#include <gtest/gtest.h>

#include <string>

#include "datasets/suites.h"
#include "harness/report/report.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

TEST(KpoolIndexerCandidates, EverySmokeCasePassesWithoutWideMissesOrTiesAgainstTheRule) {
  for (const char* cand : {"kpool_indexer_cpu_naive_f32", "kpool_indexer_cpu_pooled_f32"})
    for (const std::string& cs : find_suite("kpool-indexer-smoke")->cases) {
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << cs << ": " << r.reason;
      EXPECT_EQ(measure_value(r, "misses_wide"), 0.0) << cand << " " << cs;
      EXPECT_EQ(measure_value(r, "tie_breaks"), 0.0) << cand << " " << cs;
      EXPECT_EQ(measure_value(r, "invalid_ids"), 0.0) << cand << " " << cs;
      EXPECT_GT(measure_value(r, "recall"), 0.99) << cand << " " << cs;
    }
}

TEST(KpoolIndexerCandidates, NearTiesMissOnlyInsideTheBoundsAndPass) {
  const std::string cs = "kpool_indexer(B=4,L=8192,topk=512,regime=near_ties,dtype=bf16,seed=0)";
  for (const char* cand : {"kpool_indexer_cpu_naive_f32", "kpool_indexer_cpu_pooled_f32"}) {
    const Record r = verify_one(cand, cs, Tier::dd);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << ": " << r.reason;
    EXPECT_EQ(measure_value(r, "misses_wide"), 0.0) << cand;
  }
}

TEST(KpoolIndexerCandidates, IdsAreI32AndTheRowIsItsMeasures) {
  const CandidateInfo& info = require_candidate("kpool_indexer_cpu_pooled_f32").info();
  EXPECT_EQ(output_dtype("indices", info), DType::i32);
  const Record r = verify_one("kpool_indexer_cpu_pooled_f32", "kpool_indexer(B=6,L=2200,topk=64,regime=ragged,dtype=bf16,seed=0)");
  EXPECT_EQ(r.disposition, Disposition::PASSED) << r.reason;
  EXPECT_TRUE(r.outputs.empty());
  EXPECT_EQ(r.measures.size(), 6u);
  EXPECT_NE(drift_table({r}).find("misses_wide 0, tie_breaks 0, invalid_ids 0"), std::string::npos) << drift_table({r});
}

TEST(KpoolIndexerCandidates, BadCasesAreRefused) {
  expect_refused("kpool_indexer(B=0,L=4096,topk=512,regime=production,dtype=bf16,seed=0)");
  expect_refused("kpool_indexer(B=2,L=4096,topk=0,regime=production,dtype=bf16,seed=0)");
  expect_refused("kpool_indexer(B=2,L=4096,D=0,topk=512,regime=production,dtype=bf16,seed=0)");
  expect_refused("kpool_indexer(B=2,L=4096,topk=512,lens=5,regime=production,dtype=bf16,seed=0)");        // 1 length for B=2
  expect_refused("kpool_indexer(B=2,L=4096,topk=512,lens=5/4097,regime=production,dtype=bf16,seed=0)");   // beyond L
  expect_refused("kpool_indexer(B=2,L=4096,topk=512,regime=production,dtype=f16,seed=0)");
  expect_refused("kpool_indexer(B=2,L=4096,topk=512,regime=no_such_regime,dtype=bf16,seed=0)");
}

}  // namespace
}  // namespace dg
