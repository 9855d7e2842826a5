// The CPU candidate of rmsnorm_gated against its reference (through verify, as a user runs it). (The
// broken norm kernel that must be caught is checked with the other ops of the layer in
// kda_decode_fused_test.cpp.)
#include <gtest/gtest.h>

#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

TEST(LayerOpsCpu, NormMatchesTheReferenceInEveryRegime) {
  for (const char* regime : {"kimi_linear", "tiny_rms", "saturated_gate"}) {
    Record r = verify_one("rmsnorm_gated_cpu_f32", std::string("rmsnorm_gated(N=64,D=100,regime=") + regime + ")");
    EXPECT_EQ(r.disposition, Disposition::PASSED) << regime << ": " << r.reason;
    EXPECT_GT(output(r, "y").metrics.bits, 21.0) << regime;
  }
}

}  // namespace
}  // namespace dg
