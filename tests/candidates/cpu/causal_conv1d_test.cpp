// The CPU candidate of causal_conv1d against its reference (through verify, as a user runs it), and
// a candidate of another op skipped on its cases. (The broken conv kernel that must be caught is
// checked with the other ops of the layer in kda_decode_fused_test.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

using ::testing::HasSubstr;

TEST(LayerOpsCpu, ConvMatchesTheReferenceInEveryRegime) {
  for (const char* c : {"causal_conv1d(T=64,B=2,D=96,regime=kimi_linear,dtype=bf16,seed=1)",
                        "causal_conv1d(T=5,B=3,D=17,W=8,regime=kimi_linear,dtype=f32,seed=2)",
                        "causal_conv1d(T=40,D=32,W=2,silu=0,state=0,regime=kimi_linear,dtype=f16,seed=3)"}) {
    Record r = verify_one("causal_conv1d_cpu_direct_f32", c, Tier::dd);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << c << ": " << r.reason;
    EXPECT_GT(output(r, "y").metrics.bits, 22.0) << c;    // f32 arithmetic on W <= 8 taps
    EXPECT_GT(output(r, "state").metrics.bits, 60.0) << c; // the state is a copy of inputs
  }
  // Cancellation costs the f32 kernel bits relative to its output, as the regime intends.
  Record cancel = verify_one("causal_conv1d_cpu_direct_f32", "causal_conv1d(T=64,D=64,regime=cancel,seed=0)");
  EXPECT_EQ(cancel.disposition, Disposition::PASSED) << cancel.reason;
  EXPECT_LT(output(cancel, "y").metrics.bits, 20.0);
  EXPECT_GT(output(cancel, "y").metrics.bits, 10.0);
}

TEST(LayerOpsCpu, CandidatesOfOtherOpsAreSkipped) {
  Record r = verify_one("kda_decode_cpu_f32", "causal_conv1d(T=4,D=8)");
  EXPECT_EQ(r.disposition, Disposition::SKIPPED);
  EXPECT_THAT(r.reason, HasSubstr("candidate implements kda_decode, not causal_conv1d"));
}

}  // namespace
}  // namespace dg
