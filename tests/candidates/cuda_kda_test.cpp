// The CUDA KDA candidates (candidates/cuda/kda_cuda.h). Without a device (or without CUDA) every one
// of them is a NOT_SUPPORTED row carrying the reason; with one, they are verified against the
// references and against the CPU candidates of the same algorithms, and their launches are timed by
// the device timing rules. The GPU half skips here with the reason; scripts/gpu-check.sh runs it.
// This file is also built as cuda_kda_emu_test against the CUDA emulator (candidates/cuda/emu),
// where the "GPU" is the host: the GPU half then runs on every machine (times are host times).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "candidates/cuda/device.h"
#include "tests/candidates/cuda_test_util.h"
#include "harness/timing/device_timing.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"

namespace dg {
namespace {

using ::testing::HasSubstr;

const char* kCuda[] = {"kda_decode_cuda_f32state", "kda_decode_cuda_f32state_fused", "kda_cuda_chunk_bf16"};

std::string case_for(const std::string& cand) {
  if (cand == "kda_decode_cuda_f32state") return "kda_decode(T=16,B=3,H=2,K=64,V=64,layout=vfirst,regime=kimi_linear,seed=0)";
  if (cand == "kda_decode_cuda_f32state_fused")
    return "kda_decode_fused(T=16,B=3,H=2,K=64,V=64,layout=vfirst,regime=kimi_linear,seed=0)";
  return "kda(T=200,H=2,K=64,V=64,regime=kimi_linear,seed=0)";
}

Record verify_one(const std::string& cand, const std::string& case_str) { return cuda_test::verify_at(cand, case_str, Tier::f64); }
double bits(const Record& r, const std::string& out) { return cuda_test::output_bits(r, out); }


TEST(CudaKda, CandidatesAreRegisteredOnEveryBuild) {
  for (const char* name : kCuda) {
    const Candidate* c = find_candidate(name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(c->info().backend, "cuda");
    EXPECT_EQ(c->info().state_dtype, DType::f32);
  }
}

TEST(CudaKda, WithoutADeviceEveryCandidateIsNotSupportedWithTheReason) {
  const CudaStatus s = cuda_status();
  if (s.available) GTEST_SKIP() << "a GPU is here (" << s.device << "): the GPU tests below cover it";
  for (const char* name : kCuda) {
    Record r = verify_one(name, case_for(name));
    EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED) << name << ": " << r.reason;
    EXPECT_EQ(r.reason, s.reason) << name;
  }
}

// --- with a GPU ----------------------------------------------------------------------------------

TEST(CudaKdaGpu, DecodeMatchesTheReferenceInEveryGateModeAndLayout) {
  SKIP_WITHOUT_GPU();
  for (const char* c : {"kda_decode(T=32,B=4,H=2,K=128,V=128,layout=vfirst,regime=kimi_linear,seed=1)",
                        "kda_decode(T=32,B=4,H=2,K=128,V=128,regime=kimi_linear,seed=2)",
                        "kda_decode(T=32,B=2,H=1,HV=4,K=64,V=64,layout=vfirst,regime=glm_safe_gate,seed=3)",
                        "kda_decode(T=64,B=2,H=1,K=128,V=128,layout=vfirst,regime=long_memory,seed=4)",
                        "kda_decode(T=16,B=2,H=1,K=60,V=100,layout=vfirst,regime=odd_dims,seed=5)",
                        "kda_decode(T=16,B=2,H=1,K=256,V=64,layout=vfirst,regime=kimi_linear,seed=6)"}) {
    Record gpu = verify_one("kda_decode_cuda_f32state", c), cpu = verify_one("kda_decode_cpu_f32", c);
    EXPECT_EQ(gpu.disposition, Disposition::PASSED) << c << ": " << gpu.reason;
    // Same algorithm, same f32 state; only the order of the two K-reductions differs.
    EXPECT_NEAR(bits(gpu, "o"), bits(cpu, "o"), 1.5) << c;
    EXPECT_NEAR(bits(gpu, "ht"), bits(cpu, "ht"), 1.5) << c;
  }
}

TEST(CudaKdaGpu, FusedMatchesTheComposedReference) {
  SKIP_WITHOUT_GPU();
  for (const char* c : {"kda_decode_fused(T=32,B=4,H=2,K=128,V=128,layout=vfirst,regime=kimi_linear,seed=1)",
                        "kda_decode_fused(T=32,B=2,H=1,HV=2,K=64,V=64,regime=glm_safe_gate,seed=2)",
                        "kda_decode_fused(T=64,B=1,H=1,K=128,V=128,W=3,layout=vfirst,regime=long_memory,seed=3)",
                        "kda_decode_fused(T=8,B=2,H=1,HV=2,K=256,V=40,layout=kfirst,regime=kimi_linear,seed=4)"}) {
    Record gpu = verify_one("kda_decode_cuda_f32state_fused", c), cpu = verify_one("kda_decode_fused_cpu_f32", c);
    EXPECT_EQ(gpu.disposition, Disposition::PASSED) << c << ": " << gpu.reason;
    for (const char* out : {"o", "ht", "conv_q", "conv_k", "conv_v"}) EXPECT_NEAR(bits(gpu, out), bits(cpu, out), 1.5) << c << " " << out;
  }
}

TEST(CudaKdaGpu, ChunkBf16MatchesTheCpuEmulationRowByRow) {
  SKIP_WITHOUT_GPU();
  for (const char* c : {"kda(T=1024,H=2,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)",
                        "kda(T=1024,H=1,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)",
                        "kda(T=200,H=1,K=64,V=64,regime=strong_decay,dtype=bf16,seed=0)",
                        "kda(T=130,H=1,K=60,V=100,regime=odd_dims,dtype=bf16,seed=0)",
                        "kda(T=1208,H=1,K=64,V=64,regime=varlen_ragged,dtype=bf16,seed=0)",
                        "kda(T=200,H=1,K=64,V=64,layout=vfirst,regime=nonsymmetric_h0,dtype=bf16,seed=0)"}) {
    Record gpu = verify_one("kda_cuda_chunk_bf16", c), cpu = verify_one("kda_cpu_chunk_bf16", c);
    EXPECT_EQ(gpu.disposition, Disposition::PASSED) << c << ": " << gpu.reason;
    EXPECT_NEAR(bits(gpu, "o"), bits(cpu, "o"), 1.0) << c;
    EXPECT_NEAR(bits(gpu, "ht"), bits(cpu, "ht"), 1.0) << c;
  }
}

TEST(CudaKdaGpu, LaunchesAreTimedByTheDeviceRules) {
  SKIP_WITHOUT_GPU();
#ifdef DRIFTGATE_CUDA_EMULATED
  const Case c = parse_case("kda_decode(T=4,B=8,H=4,K=128,V=128,layout=vfirst,regime=kimi_linear,seed=0)");
#else
  const Case c = parse_case("kda_decode(T=4,B=64,H=32,K=128,V=128,layout=vfirst,regime=kimi_linear,seed=0)");
#endif
  const OpSpec& op = *find_op(c.op());
  TensorMap in = generate_inputs(c);
  DeviceTimingScope scope;
  TensorMap out = run_candidate(require_candidate("kda_decode_cuda_f32state"), c, in);
  const DeviceCall& d = scope.call();
  EXPECT_EQ(d.launches, 4);   // one per step
  EXPECT_GT(d.device_s, 0.0);
  EXPECT_GE(d.launch_wall_s, d.device_s);
  EXPECT_GT(d.clock_mhz, 300.0);
  EXPECT_GT(d.peak_gbs, 1000.0);   // any HBM device
  EXPECT_FALSE(d.device.empty());
  // The state traffic of the steps cannot have moved faster than the memory allows.
  EXPECT_LT(op.bytes(c, Storage{}) / d.device_s / 1e9, d.peak_gbs);
}

}  // namespace
}  // namespace dg
