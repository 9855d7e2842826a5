// The CPU candidate of kda_decode_fused against its composed reference (through verify, as a user
// runs it), and kernels that break each op of the decode layer being caught: a conv that drops its
// initial state, a norm with eps outside the square root, a fused step that forgets its conv states
// between steps. (One test, LayerOpsCpu.BrokenKernelsAreCaught, checks the three together, so the
// broken conv and norm kernels are registered here too.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

using ::testing::HasSubstr;

void conv_without_state(const Case& c, const TensorMap& in, TensorMap& out) {
  TensorMap no_state = in;   // tensors share storage on copy: replace state0, never write through it
  if (in.count("state0")) no_state["state0"] = Tensor(DType::f32, in.at("state0").shape());
  find_candidate("causal_conv1d_cpu_direct_f32")->run(c, no_state, out);
}
// eps added to the root instead of under it: y = x / (rms + eps). Harmless when rms >> eps.
void norm_eps_outside(const Case& c, const TensorMap& in, TensorMap& out) {
  const Tensor &x = in.at("x"), &g = in.at("gate"), &w = in.at("weight");
  const int64_t D = c.integer("D"), N = c.integer("N");
  Tensor& y = out.at("y");
  for (int64_t n = 0; n < N; ++n) {
    float ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += static_cast<float>(x.get(n * D + i) * x.get(n * D + i));
    const float r = 1.0f / (std::sqrt(ss / static_cast<float>(D)) + static_cast<float>(c.real("eps")));
    for (int64_t i = 0; i < D; ++i)
      y.set(n * D + i, x.get(n * D + i) * r * w.get(i) / (1 + std::exp(-g.get(n * D + i))));
  }
}
void fused_forgets_conv_state(const Case& c, const TensorMap& in, TensorMap& out) {
  for (const char* pool : {"conv_q", "conv_k", "conv_v"}) {
    Tensor& t = out.at(pool);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, 0.0);
  }
  find_candidate("kda_decode_fused_cpu_f32")->run(c, in, out);
}

DG_REGISTER_CANDIDATE(conv_no_state, {"causal_conv1d_test_nostate_f32", "causal_conv1d", "cpu", "broken", DType::f32,
                                      DType::f32, DType::f32, "ignores state0"}, conv_without_state);
DG_REGISTER_CANDIDATE(norm_bad_eps, {"rmsnorm_gated_test_epsout_f32", "rmsnorm_gated", "cpu", "broken", DType::f32,
                                     DType::f32, DType::f32, "eps outside the sqrt"}, norm_eps_outside);
DG_REGISTER_CANDIDATE(fused_forget, {"kda_decode_fused_test_forget_f32", "kda_decode_fused", "cpu", "broken",
                                     DType::f32, DType::f32, DType::f32, "conv states reset each step"},
                      fused_forgets_conv_state);

TEST(LayerOpsCpu, FusedStepMatchesTheComposedReference) {
  for (const char* c : {"kda_decode_fused(T=24,B=3,H=2,K=32,V=32,regime=kimi_linear,seed=1)",
                        "kda_decode_fused(T=24,B=2,H=1,HV=2,K=32,V=16,regime=glm_safe_gate,seed=2)",
                        "kda_decode_fused(T=40,B=1,H=1,K=64,V=64,W=3,regime=long_memory,seed=3)",
                        "kda_decode_fused(T=16,B=2,H=1,K=32,V=32,layout=vfirst,regime=kimi_linear,seed=4)"}) {
    Record r = verify_one("kda_decode_fused_cpu_f32", c);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << c << ": " << r.reason;
    for (const char* out : {"o", "ht", "conv_q", "conv_k", "conv_v"}) EXPECT_GT(output(r, out).metrics.bits, 18.0) << c << " " << out;
  }
}

TEST(LayerOpsCpu, BrokenKernelsAreCaught) {
  Record conv = verify_one("causal_conv1d_test_nostate_f32", "causal_conv1d(T=16,D=32,regime=kimi_linear)");
  EXPECT_EQ(conv.disposition, Disposition::INCORRECT);
  // Without an initial state the broken kernel is right: the regime decides what is seen.
  EXPECT_EQ(verify_one("causal_conv1d_test_nostate_f32", "causal_conv1d(T=16,D=32,state=0)").disposition,
            Disposition::PASSED);

  Record norm = verify_one("rmsnorm_gated_test_epsout_f32", "rmsnorm_gated(N=32,D=64,regime=tiny_rms)");
  EXPECT_EQ(norm.disposition, Disposition::INCORRECT);
  EXPECT_THAT(norm.reason, HasSubstr("bits < floor"));

  Record fused = verify_one("kda_decode_fused_test_forget_f32", "kda_decode_fused(T=8,B=2,H=1,K=16,V=16)");
  EXPECT_EQ(fused.disposition, Disposition::INCORRECT);
  EXPECT_LT(output(fused, "conv_v").metrics.bits, 5.0);
}

}  // namespace
}  // namespace dg
