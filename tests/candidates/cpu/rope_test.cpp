// The CPU candidates of rope (candidates/cpu/rope.cpp) against the reference through verify, as a
// user runs them; the phase-error view (the drift curve over position); bad cases refused.
#include <gtest/gtest.h>

#include <string>

#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "harness/ops/rope.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

// Every candidate passes every smoke case, positions to 2^20 + 4093 and 2^24 included: the f32
// ones at 23+ bits (cos/sin rounded to f32 and three f32 roundings per output), the bf16 one at 7+
// (its cache, inputs, products and sums in bf16).
TEST(RopeCpu, EveryCandidatePassesEverySmokeCase) {
  for (const std::string& cs : find_suite("rope-smoke")->cases)
    for (const char* cand : {"rope_cpu_naive_f32", "rope_cpu_cache_f32", "rope_cpu_cache_bf16"}) {
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " on " << cs << ": " << r.reason;
      EXPECT_GT(output(r, "y").metrics.bits, std::string(cand).find("bf16") != std::string::npos ? 7.0 : 23.0)
          << cand << " on " << cs;
    }
}

// The drift curve of y buckets the tokens by position (harness/ops/rope.cpp): a spread case from 0
// to 2^20 + 4093 has one bucket per octave, the naive candidate's error is flat over them (growth
// exponent near 0) and its rms_ratio, the rms phase error in radians, stays near f32's 2^-24.
TEST(RopeCpu, TheDriftCurveIsThePhaseErrorPerOctaveOfPosition) {
  const std::string cs = "rope(T=256,H=4,D=64,d_rope=64,style=gptj,regime=long_positions,dtype=f32,seed=0)";
  const std::vector<int64_t> pos = rope_positions(parse_case(cs));
  EXPECT_EQ(pos.front(), 0);
  EXPECT_EQ(pos.back(), (1 << 20) + 4093);
  const Record r = verify_one("rope_cpu_naive_f32", cs, Tier::dd);
  const OutputResult& y = output(r, "y");
  ASSERT_TRUE(y.drift.has_value());
  EXPECT_GE(y.drift->buckets.size(), 15u);
  EXPECT_EQ(y.drift->buckets.back().end, (1 << 20) + 4094);
  EXPECT_LT(std::fabs(y.drift->growth_exponent), 0.1);
  for (const DriftBucket& b : y.drift->buckets) {
    if (b.begin == 0) continue;
    EXPECT_LT(b.rms_ratio, 0x1p-22) << "positions [" << b.begin << ", " << b.end << ")";
  }
}

TEST(RopeCpu, BadCasesAreRefused) {
  for (const char* bad : {"rope(T=0,H=1,D=64,d_rope=64)", "rope(T=2,H=0,D=64,d_rope=64)", "rope(T=2,H=1,D=64,d_rope=63)",
                          "rope(T=2,H=1,D=64,d_rope=128)", "rope(T=2,H=1,D=64,d_rope=0)", "rope(T=2,H=1,D=64,d_rope=64,theta=1)",
                          "rope(T=2,H=1,D=64,d_rope=64,theta=1e10)", "rope(T=2,H=1,D=64,d_rope=64,pos0=-1)",
                          "rope(T=2,H=1,D=64,d_rope=64,pos0=16777216)", "rope(T=2,H=1,D=64,d_rope=64,pos_max=100)",
                          "rope(T=1,H=1,D=64,d_rope=64,layout=spread,pos_max=100)",
                          "rope(T=4,H=1,D=64,d_rope=64,layout=spread,pos0=50,pos_max=50)",
                          "rope(T=4,H=1,D=64,d_rope=64,layout=spread,pos_max=16777217)", "rope(T=2,H=1,D=64,d_rope=64,style=rotate)",
                          "rope(T=2,H=1,D=64,d_rope=64,dtype=f16)", "rope(T=2,H=1,D=64,d_rope=64,regime=hidden)"})
    expect_refused(bad);
}

// Stored positions must be the case's layout (the drift curve buckets by it).
TEST(RopeCpu, PositionsThatDisagreeWithTheCaseAreRefused) {
  const Case c = parse_case("rope(T=4,H=1,D=8,d_rope=8,pos0=10,regime=glm4,dtype=f32,seed=0)");
  TensorMap in = generate_inputs(c);
  EXPECT_NO_THROW(find_op("rope")->check_inputs(c, in));
  in.at("positions").data<int64_t>()[2] = 99;
  EXPECT_THROW(find_op("rope")->check_inputs(c, in), InputError);
}

}  // namespace
}  // namespace dg
