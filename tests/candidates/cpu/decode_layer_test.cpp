// The CPU candidates of decode_layer (candidates/cpu/decode_layer.cpp) against the composed reference
// through verify, as a user runs them: every output (the hidden state and the carried KDA and conv
// states) within f32's reach of it, the error by step reported (a drift curve of y) and the step
// growth measured; a kernel that runs one op wrong inside the chain caught.
#include <gtest/gtest.h>

#include <cmath>

#include "candidates/cpu/decode_layer.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

const char* kCases[] = {
    "decode_layer(kind=linear,T=6,B=2,D=64,H=2,K=16,E=4,k=2,I=32,regime=glm_flash,dtype=bf16,seed=1)",
    "decode_layer(kind=linear,T=4,B=1,D=96,H=1,K=24,E=6,k=3,I=40,regime=massive_residual,dtype=bf16,seed=2)",
    "decode_layer(kind=linear,T=8,B=2,D=64,H=2,K=16,E=4,k=1,I=32,regime=long_memory,dtype=f32,seed=3)",
};

TEST(DecodeLayerCpu, ChainsMatchTheComposedReference) {
  for (const char* cand : {"decode_layer_cpu_chain_f32", "decode_layer_cpu_blocked_f32", "decode_layer_cpu_fused_f32"})
    for (const char* c : kCases) {
      Record r = verify_one(cand, c);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << c << ": " << r.reason;
      EXPECT_GT(output(r, "y").metrics.bits, 18.0) << cand << " " << c;
      for (const char* s : {"ht", "conv_q", "conv_k", "conv_v"}) EXPECT_GT(output(r, s).metrics.bits, 16.0) << cand << " " << c << " " << s;
      ASSERT_TRUE(output(r, "y").drift.has_value()) << c;   // the error by step
      ASSERT_EQ(r.measures.size(), 1u);
      EXPECT_EQ(r.measures[0].name, "step_growth.y");
      EXPECT_LT(r.measures[0].value, 4.0) << c << ": " << r.measures[0].detail;
    }
}

// kind=mla: the chains against the composed reference, the latent cache (kv0's rows and each step's
// appended row) within f32's reach.
TEST(DecodeLayerCpu, MlaChainsMatchTheComposedReference) {
  const char* cases[] = {
      "decode_layer(kind=mla,T=5,B=2,D=64,H=2,ql=48,dc=32,dn=16,dv=24,ctx=6,E=4,k=2,I=32,regime=glm_flash,dtype=bf16,seed=1)",
      "decode_layer(kind=mla,T=3,B=3,D=64,H=3,ql=32,dc=48,dn=16,dv=16,ctx=0,E=4,k=1,I=32,regime=massive_residual,dtype=f32,seed=2)",
  };
  for (const char* cand : {"decode_layer_cpu_chain_f32", "decode_layer_cpu_blocked_f32", "decode_layer_cpu_fused_f32"})
    for (const char* c : cases) {
      Record r = verify_one(cand, c);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << c << ": " << r.reason;
      EXPECT_GT(output(r, "y").metrics.bits, 18.0) << cand << " " << c;
      EXPECT_GT(output(r, "latent").metrics.bits, 18.0) << cand << " " << c;
      ASSERT_TRUE(output(r, "y").drift.has_value()) << c;
      ASSERT_EQ(r.measures.size(), 1u);
      EXPECT_LT(r.measures[0].value, 4.0) << c << ": " << r.measures[0].detail;
    }
}

// The KDA state kept in bf16 between steps: its error grows with the steps where the chain's does not.
void bf16_state(const Case& c, const TensorMap& in, TensorMap& out) {
  decode_layer_cpu::Chain ch;
  ch.bf16_state = true;
  decode_layer_cpu::step(ch, c, in, out);
}
DG_REGISTER_CANDIDATE(layer_bf16_state, {"decode_layer_test_bf16state_f32", "decode_layer", "cpu", "broken", DType::f32,
                                         DType::f32, DType::f32, "KDA state rounded to bf16 each step"},
                      bf16_state);

TEST(DecodeLayerCpu, AStateRoundedToBf16IsSeenInTheStateAndItsGrowth) {
  const char* c = "decode_layer(kind=linear,T=8,B=2,D=64,H=2,K=16,E=4,k=1,I=32,regime=long_memory,dtype=f32,seed=3)";
  Record bad = verify_one("decode_layer_test_bf16state_f32", c), good = verify_one("decode_layer_cpu_chain_f32", c);
  EXPECT_LT(output(bad, "ht").metrics.bits, 10.0);
  EXPECT_GT(output(good, "ht").metrics.bits, 18.0);
  EXPECT_GT(bad.measures.at(0).value, good.measures.at(0).value);
}

TEST(DecodeLayerCpu, OneStepPerCall) {
  const Candidate& chain = require_candidate("decode_layer_cpu_chain_f32");
  const Case two = parse_case("decode_layer(kind=linear,T=2,B=1,D=32,H=1,K=8,E=4,k=2,I=16,regime=glm_flash,dtype=bf16,seed=0)");
  TensorMap in = generate_inputs(two), out;
  EXPECT_THROW(chain.run(two, in, out), std::invalid_argument);
}

}  // namespace
}  // namespace dg
