// The CPU candidates of rmsnorm and add_rmsnorm (candidates/cpu/rmsnorm.cpp) against their
// references through verify, as a user runs them; the gate between them; bad cases refused.
#include <gtest/gtest.h>

#include <string>

#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

// Every candidate passes every smoke case of its op, at the bits its arithmetic allows: f32
// candidates 18+ bits of y (a sequential f32 sum of 4096 squares, one of them massive, keeps 18.7), bf16 ones 7+, and the residual
// output of add_rmsnorm exact in a candidate whose output dtype holds the case's dtype.
TEST(RmsNormCpu, EveryCandidatePassesEverySmokeCase) {
  for (const char* suite : {"rmsnorm-smoke", "add-rmsnorm-smoke"})
    for (const std::string& cs : find_suite(suite)->cases) {
      const Case c = parse_case(cs);
      for (const char* algo : {"_cpu_naive_f32", "_cpu_blocked_f32", "_cpu_blocked_bf16"}) {
        const std::string cand = c.op() + algo;
        const Record r = verify_one(cand, cs, Tier::dd);
        EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " on " << cs << ": " << r.reason;
        const bool bf16 = std::string(algo).find("bf16") != std::string::npos;
        EXPECT_GT(output(r, "y").metrics.bits, bf16 ? 7.0 : 18.0) << cand << " on " << cs;
        if (c.op() == "add_rmsnorm" && (!bf16 || c.dtype() == DType::bf16) && c.dtype() != DType::f64) {
          EXPECT_GT(output(r, "residual_out").metrics.bits, 60.0) << cand << " on " << cs;
        }
      }
    }
}

// The blocked reduction keeps more bits than the sequential one where every square is alike and
// large (the offset regime): the sequential f32 sum's error grows with D, the tree's with log D.
TEST(RmsNormCpu, TheBlockedSumBeatsTheSequentialOneOnOffsetRows) {
  const std::string c = "rmsnorm(N=64,D=7168,regime=offset,dtype=f32,seed=0)";
  const double naive = output(verify_one("rmsnorm_cpu_naive_f32", c, Tier::dd), "y").metrics.bits;
  const double blocked = output(verify_one("rmsnorm_cpu_blocked_f32", c, Tier::dd), "y").metrics.bits;
  EXPECT_GT(blocked, naive + 1.0) << "naive " << naive << " bits, blocked " << blocked;
}

TEST(RmsNormCpu, CandidatesOfTheOtherOpAreSkipped) {
  const Record r = verify_one("rmsnorm_cpu_naive_f32", "add_rmsnorm(N=2,D=8,regime=hidden,dtype=bf16,seed=0)", Tier::dd);
  EXPECT_EQ(r.disposition, Disposition::SKIPPED);
}

TEST(RmsNormCpu, BadCasesAreRefused) {
  for (const char* bad : {"rmsnorm(N=0,D=8)", "rmsnorm(N=2,D=8,eps=0)", "rmsnorm(N=2,D=8,eps=-1e-5)",
                          "add_rmsnorm(N=2,D=8,eps=2)", "rmsnorm(N=2,D=8,dtype=e4m3)",
                          "rmsnorm(N=2,D=8,regime=nope)", "add_rmsnorm(N=2,D=8,regime=qk_norm)"})
    expect_refused(bad);
}

}  // namespace
}  // namespace dg
