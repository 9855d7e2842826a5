// The CPU candidates of moe_combine (candidates/cpu/moe_combine.cpp) against the reference through
// verify, as a user runs them; bad cases refused.
#include <gtest/gtest.h>

#include <string>

#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

// Every candidate passes every smoke case in its own format: the naive f32 one everywhere, at 20+
// bits (15+ on cancellation, where the result is ~1e-3 of its terms), the fused bf16 one on the bf16
// cases at 8+ bits. The fused kernel reads its inputs as bf16: on the f16 cancellation case that
// rounding alone (2^-9 of each term) is larger than the result, and verify says so.
TEST(MoeCombineCpu, EveryCandidatePassesEverySmokeCaseInItsFormat) {
  for (const std::string& cs : find_suite("moe-combine-smoke")->cases) {
    const bool cancel = cs.find("regime=cancel") != std::string::npos;
    const Record naive = verify_one("moe_combine_cpu_naive_f32", cs, Tier::dd);
    EXPECT_EQ(naive.disposition, Disposition::PASSED) << cs << ": " << naive.reason;
    EXPECT_GT(output(naive, "y").metrics.bits, cancel ? 15.0 : 20.0) << cs;
    const Record fused = verify_one("moe_combine_cpu_fused_bf16", cs, Tier::dd);
    if (cs.find("dtype=bf16") != std::string::npos) {
      EXPECT_EQ(fused.disposition, Disposition::PASSED) << cs << ": " << fused.reason;
      EXPECT_GT(output(fused, "y").metrics.bits, 8.0) << cs;
    } else if (cancel) {
      EXPECT_EQ(fused.disposition, Disposition::INCORRECT) << cs;
    }
  }
}

TEST(MoeCombineCpu, BadCasesAreRefused) {
  for (const char* bad : {"moe_combine(T=0,topk=8,H=8)", "moe_combine(T=2,topk=0,H=8)", "moe_combine(T=2,topk=8,H=0)",
                          "moe_combine(T=2,topk=65,H=8)", "moe_combine(T=2,topk=8,H=8,rsf=0)",
                          "moe_combine(T=2,topk=8,H=8,rsf=-2.5)", "moe_combine(T=2,topk=8,H=8,rsf_on=shared)",
                          "moe_combine(T=2,topk=8,H=8,dtype=e4m3)", "moe_combine(T=2,topk=8,H=8,regime=hidden)",
                          "moe_combine(T=4294967296,topk=8,H=4294967296)"})
    expect_refused(bad);
}

}  // namespace
}  // namespace dg
