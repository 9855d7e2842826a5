// The CPU candidates of swiglu (candidates/cpu/swiglu.cpp) against the reference through verify, as
// a user runs them; bad cases refused.
#include <gtest/gtest.h>

#include <string>

#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

// Every candidate passes every smoke case: the f32 one at 21+ bits (an exp, a division, a product),
// the bf16 one at 7+ (its inputs and output in bf16).
TEST(SwigluCpu, EveryCandidatePassesEverySmokeCase) {
  for (const std::string& cs : find_suite("swiglu-smoke")->cases)
    for (const char* cand : {"swiglu_cpu_naive_f32", "swiglu_cpu_fused_bf16"}) {
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " on " << cs << ": " << r.reason;
      EXPECT_GT(output(r, "y").metrics.bits, std::string(cand).find("bf16") != std::string::npos ? 7.0 : 21.0)
          << cand << " on " << cs;
    }
}

TEST(SwigluCpu, BadCasesAreRefused) {
  for (const char* bad : {"swiglu(N=0,I=8)", "swiglu(N=2,I=0)", "swiglu(N=2,I=8,limit=-1)", "swiglu(N=2,I=8,limit=1e9)",
                          "swiglu(N=2,I=8,dtype=e5m2)", "swiglu(N=2,I=8,regime=hidden)"})
    expect_refused(bad);
}

}  // namespace
}  // namespace dg
