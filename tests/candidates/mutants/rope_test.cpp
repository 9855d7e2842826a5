// The rope mutants and equivalent variants (candidates/mutants/rope.cpp), judged in this process
// against the naive f32 candidate: each mutant is rejected on the case named for it, each equivalent
// variant merges on every case; f32 angles show as phase error growing linearly with position.
#include <gtest/gtest.h>

#include <string>

#include "tests/candidates/cpu/verify_one.h"
#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(RopeMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string glm4 = "rope(T=16,H=4,D=128,d_rope=64,regime=glm4,dtype=bf16,seed=0)";
  const std::string mla = "rope(T=16,H=4,D=64,d_rope=64,regime=glm5_mla,dtype=f32,seed=0)";
  const std::string lng = "rope(T=64,H=2,D=128,d_rope=64,regime=long_positions,dtype=bf16,seed=0)";
  const std::string edge = "rope(T=64,H=2,D=96,d_rope=32,theta=10000,regime=counter_edges,dtype=bf16,seed=0)";
  check_variants("rope_cpu_naive_f32", {glm4, mla, lng, edge},
                 {{"rope_mutant_f32_angle", lng},
                  {"rope_mutant_f32_inv_freq", lng},
                  {"rope_mutant_tf32_angle", glm4},
                  {"rope_mutant_fast_sincos", mla},
                  {"rope_mutant_pairing_swapped", glm4},
                  {"rope_mutant_exponent_over_D", glm4},
                  {"rope_mutant_rotate_all_dims", glm4},
                  {"rope_mutant_sin_flipped", mla},
                  {"rope_mutant_positions_wrap16", edge},
                  {"rope_mutant_cache_bf16", glm4},
                  {"rope_mutant_token_index", edge},
                  {"rope_mutant_gptj_cache_index", mla}},
                 5);
}

double measure_of(const Record& r, const std::string& name) {
  for (const OpMeasure& m : r.measures)
    if (m.name == name) return m.value;
  ADD_FAILURE() << r.candidate << " has no measure " << name;
  return 0;
}

// An angle formed in f32 is off by about pos 2^-24 rad: the drift curve's phase error grows as
// position^1 (the naive candidate's stays flat) and passes 2^-8 rad (rms over the pairs) in the
// octave past 2^20. The op's measures split it: all phase (phase.y 2^10 times the naive's, the
// top octave's past 2^-8 rad), no magnitude (the norms as exact as the naive's); cos/sin rounded to
// bf16 leave the unit circle, so that bug shows in magnitude.y too.
TEST(RopeMutants, F32AnglesGrowLinearlyWithPosition) {
  const std::string cs = "rope(T=256,H=4,D=64,d_rope=64,style=gptj,regime=long_positions,dtype=f32,seed=0)";
  const Record naive = verify_one("rope_cpu_naive_f32", cs, Tier::dd);
  const Record f32 = verify_one("rope_mutant_f32_angle", cs, Tier::dd);
  const DriftCurve& d = *output(f32, "y").drift;
  EXPECT_GT(d.growth_exponent, 0.8);
  EXPECT_LT(d.growth_exponent, 1.2);
  EXPECT_LT(std::fabs(output(naive, "y").drift->growth_exponent), 0.1);
  EXPECT_GT(d.buckets.back().rms_ratio, 0x1p-8);
  EXPECT_EQ(f32.disposition, Disposition::INCORRECT);
  EXPECT_GT(measure_of(f32, "phase.y"), 1024 * measure_of(naive, "phase.y"));
  EXPECT_GT(measure_of(f32, "phase_top_octave.y"), 0x1p-8);
  EXPECT_LT(measure_of(f32, "magnitude.y"), 2 * measure_of(naive, "magnitude.y"));
  const Record bf16 = verify_one("rope_mutant_cache_bf16", cs, Tier::dd);
  EXPECT_GT(measure_of(bf16, "magnitude.y"), 1024 * measure_of(naive, "magnitude.y"));
}

}  // namespace
}  // namespace dg
