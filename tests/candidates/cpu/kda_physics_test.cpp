// The qualitative physics of KDA precision: in the long_memory regime (almost no decay, small writes,
// a carried state) a decode state rounded to bf16 after every token drifts away from the reference
// much faster as context grows than an f32 state: bf16 cannot represent the per-token decay
// exp(g) ~ 1 - 5e-5 (it rounds to 1) nor small writes, so its error grows almost linearly, while the
// f32 state's rounding error only random-walks. We measure bits (-log2 rms_ratio of o) in the first 1K positions
// and in the last bucket before 64K, for both decode candidates on the same inputs.
#include <gtest/gtest.h>

#include "harness/judge/verify.h"

namespace dg {
namespace {

// rms_ratio of the drift bucket that covers `position`.
double bits_at(const Record& r, int64_t position) {
  for (const OutputResult& o : r.outputs) {
    if (o.name != "o") continue;
    for (const DriftBucket& b : o.drift->buckets)
      if (b.begin <= position && position < b.end) return -std::log2(b.rms_ratio);
  }
  ADD_FAILURE() << "no bucket at " << position;
  return 0;
}

TEST(KdaPhysics, Bf16StateDecodeLosesMoreBitsWithContextThanF32) {
  Case c = parse_case("kda_decode(T=65536,H=1,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)");
  VerifyOptions opt;
  opt.tier = Tier::f64;
  std::vector<Record> rows =
      verify_case(c, {find_candidate("kda_decode_cpu_f32"), find_candidate("kda_decode_cpu_bf16state")}, opt);
  ASSERT_EQ(rows.size(), 2u);
  const Record& f32 = rows[0];
  const Record& bf16 = rows[1];
  // Early: positions [512, 1024); late: the last bucket, [32768, 65536).
  double f32_loss = bits_at(f32, 600) - bits_at(f32, 40000);
  double bf16_loss = bits_at(bf16, 600) - bits_at(bf16, 40000);
  RecordProperty("f32_bits_1k", std::to_string(bits_at(f32, 600)));
  RecordProperty("f32_bits_64k", std::to_string(bits_at(f32, 40000)));
  RecordProperty("bf16_bits_1k", std::to_string(bits_at(bf16, 600)));
  RecordProperty("bf16_bits_64k", std::to_string(bits_at(bf16, 40000)));
  std::printf("f32 state:  %.2f bits at 1K, %.2f bits at 64K (loss %.2f)\n", bits_at(f32, 600), bits_at(f32, 40000), f32_loss);
  std::printf("bf16 state: %.2f bits at 1K, %.2f bits at 64K (loss %.2f)\n", bits_at(bf16, 600), bits_at(bf16, 40000), bf16_loss);
  EXPECT_GT(bf16_loss, f32_loss + 1.0);
  EXPECT_GT(bits_at(f32, 40000), bits_at(bf16, 40000) + 4.0);
  // The growth exponent tells the same story.
  double f32_growth = f32.outputs[1].drift->growth_exponent;
  double bf16_growth = bf16.outputs[1].drift->growth_exponent;
  EXPECT_GT(bf16_growth, f32_growth);
}

}  // namespace
}  // namespace dg
