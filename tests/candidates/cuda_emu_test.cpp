// The CUDA emulator (candidates/cuda/emu/cuda_emu.h) and what it lets us check of the CUDA
// candidates on a machine without a GPU: barrier and shuffle semantics, the errors it reports
// (deadlock, a shuffle with an exited lane, a bad launch configuration), a missing barrier caught by
// running the threads of each phase in the other order, and the candidates' host-side checks, which
// a machine without a device never reaches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "candidates/cuda/emu/cuda_emu.h"
#include "candidates/cuda/kda_cuda.h"
#include "harness/timing/device_timing.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "harness/ops/kda.h"

namespace dg {
namespace {

using ::testing::HasSubstr;

// --- kernels written against the emulator ----------------------------------------------------------

// Block-wide tree sum of blockIdx.x * 1000 + threadIdx.x; out[blockIdx.x] = the sum.
__global__ void block_sum_kernel(float* out) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x;
  s[t] = static_cast<float>(blockIdx.x * 1000 + t);
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Each thread reads its neighbour's slot: with the barrier (synced = 1) or without it (a race).
__global__ void shift_kernel(float* out, float base, int synced) {
  __shared__ float s[64];
  const unsigned t = threadIdx.x;
  s[t] = base + static_cast<float>(t);
  if (synced) __syncthreads();
  out[t] = s[(t + 1) % blockDim.x];
}

// A butterfly over the warp: every lane ends with the warp's sum.
__global__ void warp_sum_kernel(float* out) {
  float x = static_cast<float>(threadIdx.x);
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  out[threadIdx.x] = x;
}

// Threads of warps 1.. leave at once; warp 0 keeps meeting at __syncthreads (they count as arrived).
__global__ void early_exit_kernel(float* out) {
  if (threadIdx.x >= 32) return;
  __syncthreads();
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

// Odd lanes wait at __syncthreads, even lanes at a shuffle: neither can complete.
__global__ void divergent_kernel(float* out) {
  float x = static_cast<float>(threadIdx.x);
  if (threadIdx.x % 2) __syncthreads();
  else x = __shfl_xor_sync(0xffffffffu, x, 2);
  out[threadIdx.x] = x;
}

// Lane 5 leaves while its warp shuffles: undefined on the hardware.
__global__ void exited_lane_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// Thread i copies in[i * stride] to out[i * stride] with streaming accesses.
__global__ void stream_copy_kernel(const float* in, float* out, int stride) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  __stcs(out + i * stride, __ldcs(in + i * stride));
}

// The streaming trace of f's launches on this thread.
template <class F>
cuda_emu::StreamingTrace traced(F&& f) {
  struct Off {
    ~Off() { cuda_emu::trace_streaming(false); }
  } off;
  cuda_emu::trace_streaming(true);
  f();
  return cuda_emu::streaming_trace();
}

struct Order {   // runs a scope's launches in the given thread order, then restores forward order
  explicit Order(bool reverse) { cuda_emu::set_thread_order(reverse); }
  ~Order() { cuda_emu::set_thread_order(false); }
};

TEST(CudaEmu, BarriersOrderEveryBlocksThreads) {
  for (bool reverse : {false, true}) {
    Order order(reverse);
    std::vector<float> out(3, -1.0f);
    cuda_emu::launch(block_sum_kernel, dim3(3), dim3(256), nullptr, out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (int b = 0; b < 3; ++b) EXPECT_EQ(out[b], 256.0f * 1000 * b + 255.0f * 256 / 2) << "block " << b;
  }
}

TEST(CudaEmu, ShufflesExchangeWithinTheWarp) {
  std::vector<float> out(64, -1.0f);
  cuda_emu::launch(warp_sum_kernel, dim3(1), dim3(64), nullptr, out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[t], t < 32 ? 496.0f : 32.0f * 32 + 496.0f) << "thread " << t;
}

// cuda_fp16.h's conversions: round to nearest even (ties to the even encoding), overflow to Inf
// from 65520 (the midpoint past the largest finite 65504), subnormals down to 2^-24 exact.
TEST(CudaEmu, HalfConversionsRoundAsCudaFp16) {
  const struct {
    float x;
    uint16_t bits;
  } cases[] = {{1.0f, 0x3c00},
               {1.0f + 0x1p-11f, 0x3c00},          // a tie: to the even 1.0
               {1.0f + 3 * 0x1p-11f, 0x3c02},      // a tie: to the even 1 + 2^-9
               {65504.0f, 0x7bff},
               {65519.99f, 0x7bff},
               {65520.0f, 0x7c00},                 // rounds past the largest finite: Inf
               {-65520.0f, 0xfc00},
               {0x1p-24f, 0x0001},                 // the smallest subnormal
               {0x1p-25f, 0x0000},                 // a tie between 0 and it: to 0
               {1.5f * 0x1p-25f, 0x0001},
               {-0.0f, 0x8000}};
  for (const auto& c : cases) {
    EXPECT_EQ(__float2half_rn(c.x).bits, c.bits) << c.x;
    if ((c.bits & 0x7c00) != 0x7c00) {   // finite: the round trip is exact
      EXPECT_EQ(__float2half_rn(__half2float(__half{c.bits})).bits, c.bits) << c.x;
    }
  }
  EXPECT_EQ(__half2float(__half{0x0001}), 0x1p-24f);
  EXPECT_TRUE(std::isinf(__half2float(__half{0x7c00})));
}

TEST(CudaEmu, ExitedThreadsCountAsArrivedAtSyncthreads) {
  std::vector<float> out(96, 0.0f);
  cuda_emu::launch(early_exit_kernel, dim3(2), dim3(96), nullptr, out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[31], 1.0f);
  EXPECT_EQ(out[32], 0.0f);
}

TEST(CudaEmu, AMissingBarrierChangesTheResultWithTheThreadOrder) {
  auto run = [](bool reverse, int synced, float base) {
    Order order(reverse);
    std::vector<float> out(64);
    cuda_emu::launch(shift_kernel, dim3(1), dim3(64), nullptr, out.data(), base, synced);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return out;
  };
  const std::vector<float> fwd = run(false, 1, 100.0f), rev = run(true, 1, 100.0f);
  EXPECT_EQ(fwd, rev);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(fwd[t], 100.0f + static_cast<float>((t + 1) % 64));
  // Without the barrier, forward order reads the slots before their writers ran (the last launch's
  // values); reverse order reads this launch's: the two differ, so the race is seen.
  EXPECT_NE(run(false, 0, 200.0f), run(true, 0, 200.0f));
}

TEST(CudaEmu, DivergentBarriersAreReportedAsADeadlock) {
  std::vector<float> out(64);
  cuda_emu::launch(divergent_kernel, dim3(1), dim3(64), nullptr, out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(cudaGetErrorString(cudaErrorLaunchFailure), HasSubstr("deadlock"));
  EXPECT_THAT(cudaGetErrorString(cudaErrorLaunchFailure), HasSubstr("block (0,0,0)"));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);   // read once, then cleared, as the runtime does
}

TEST(CudaEmu, AShuffleWithAnExitedLaneIsAnError) {
  for (bool reverse : {false, true}) {
    Order order(reverse);
    std::vector<float> out(32);
    cuda_emu::launch(exited_lane_kernel, dim3(1), dim3(32), nullptr, out.data());
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
    EXPECT_THAT(cudaGetErrorString(cudaErrorLaunchFailure), HasSubstr("__shfl_xor_sync"));
  }
}

TEST(CudaEmu, ABadLaunchConfigurationIsAnError) {
  std::vector<float> out(1);
  cuda_emu::launch(warp_sum_kernel, dim3(1), dim3(2048), nullptr, out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cuda_emu::launch(warp_sum_kernel, dim3(0), dim3(32), nullptr, out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

TEST(CudaEmu, TheStreamingTraceCountsTheSectorsOfEveryWarpRequest) {
  void *in = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMalloc(&in, 128 * 8 * sizeof(float) + 64), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, 128 * 8 * sizeof(float) + 64), cudaSuccess);
  auto copy = [&](int offset, int stride) {
    return traced([&] {
      cuda_emu::launch(stream_copy_kernel, dim3(2), dim3(64), nullptr, static_cast<const float*>(in) + offset,
                       static_cast<float*>(out) + offset, stride);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    });
  };
  // Coalesced: each of the 4 warps reads and writes 128 contiguous, aligned bytes: 4 sectors.
  const cuda_emu::StreamingTrace dense = copy(0, 1);
  EXPECT_TRUE(dense.uniform);
  EXPECT_EQ(dense.load.requests, 4u);
  EXPECT_EQ(dense.load.sectors, 16u);
  EXPECT_EQ(dense.load.bytes, 512u);
  EXPECT_EQ(dense.load.efficiency(), 1.0);
  EXPECT_EQ(dense.store.sectors, 16u);
  // Misaligned by one float: 5 sectors a request.
  EXPECT_EQ(copy(1, 1).load.sectors, 20u);
  // Strided by 32 bytes: a sector per lane, an eighth of each sector used.
  const cuda_emu::StreamingTrace strided = copy(0, 8);
  EXPECT_EQ(strided.load.sectors, 128u);
  EXPECT_EQ(strided.store.efficiency(), 0.125);
  // Tracing is off again: nothing more is counted, and a new trace starts at zero.
  cuda_emu::launch(stream_copy_kernel, dim3(1), dim3(32), nullptr, static_cast<const float*>(in), static_cast<float*>(out), 1);
  EXPECT_EQ(cuda_emu::streaming_trace().load.requests, 4u);
  EXPECT_EQ(copy(0, 1).load.requests, 4u);
  cudaFree(in);
  cudaFree(out);
}

// --- the CUDA candidates on the emulator -------------------------------------------------------------

// The decode kernels are bound by the state's read and write. The trace holds them to reading and
// writing each state element of each step exactly once, in whole sectors, in either layout, and to
// the bytes the bench divides by the time: no more than it counts, and at least 90% of it (the
// rest: q/k/v/g/beta/o and the fused kernel's conv states, which the trace does not see). A kernel
// that walks a column with a stride uses part of each sector, and the trace says so (the strided
// copy above).
TEST(CudaEmuKda, DecodeKernelsMoveTheStateOnceInWholeSectors) {
  const std::pair<const char*, const char*> cases[] = {
      {"kda_decode_cuda_f32state", "kda_decode(T=2,B=3,H=2,HV=4,K=128,V=128,layout=vfirst,regime=kimi_linear,seed=7)"},
      {"kda_decode_cuda_f32state", "kda_decode(T=1,B=2,H=1,HV=2,K=256,V=64,layout=vfirst,regime=glm_safe_gate,seed=8)"},
      {"kda_decode_cuda_f32state", "kda_decode(T=2,B=2,H=1,HV=2,K=128,V=96,layout=kfirst,regime=kimi_linear,seed=7)"},
      {"kda_decode_cuda_f32state", "kda_decode(T=1,B=1,H=1,K=256,V=64,layout=kfirst,regime=glm_safe_gate,seed=8)"},
      {"kda_decode_cuda_f32state_fused", "kda_decode_fused(T=2,B=2,H=1,HV=2,K=128,V=128,layout=vfirst,regime=kimi_linear,seed=9)"},
      {"kda_decode_cuda_f32state_fused", "kda_decode_fused(T=1,B=2,H=1,HV=2,K=128,V=128,layout=kfirst,regime=kimi_linear,seed=9)"}};
  for (const auto& [name, case_str] : cases) {
    const Case c = parse_case(case_str);
    const TensorMap in = generate_inputs(c);
    const cuda_emu::StreamingTrace t = traced([&] { run_candidate(require_candidate(name), c, in); });
    const KdaParams p = kda_params(c);
    const uint64_t state_bytes = static_cast<uint64_t>(p.T * p.B * p.HV * p.K * p.V) * sizeof(float);
    EXPECT_TRUE(t.uniform) << case_str;
    EXPECT_EQ(t.load.bytes, state_bytes) << case_str;
    EXPECT_EQ(t.store.bytes, state_bytes) << case_str;
    EXPECT_EQ(t.load.efficiency(), 1.0) << case_str;
    EXPECT_EQ(t.store.efficiency(), 1.0) << case_str;
    const double counted = find_op(c.op())->bytes(c, require_candidate(name).info().storage());
    EXPECT_LE(static_cast<double>(2 * state_bytes), counted) << case_str;
    EXPECT_GT(static_cast<double>(2 * state_bytes), 0.9 * counted) << case_str;
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::host), y = b.to(Device::host);
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.bytes(), y.bytes(), x.nbytes()) == 0;
}

TEST(CudaEmuKda, EveryCandidateGivesTheSameBitsInBothThreadOrders) {
  const std::pair<const char*, const char*> cases[] = {
      {"kda_decode_cuda_f32state", "kda_decode(T=3,B=3,H=2,HV=4,K=64,V=40,layout=vfirst,regime=kimi_linear,seed=7)"},
      {"kda_decode_cuda_f32state", "kda_decode(T=2,B=2,H=1,K=48,V=33,regime=glm_safe_gate,seed=8)"},
      {"kda_decode_cuda_f32state_fused", "kda_decode_fused(T=3,B=2,H=1,HV=2,K=64,V=48,layout=vfirst,regime=kimi_linear,seed=9)"},
      {"kda_decode_cuda_f32state_fused", "kda_decode_fused(T=2,B=2,H=1,HV=2,K=40,V=40,layout=kfirst,regime=kimi_linear,seed=9)"},
      {"kda_cuda_chunk_bf16", "kda(T=150,H=1,HV=2,K=32,V=48,regime=kimi_linear,dtype=bf16,seed=10)"}};
  for (const auto& [name, case_str] : cases) {
    const Case c = parse_case(case_str);
    const TensorMap in = generate_inputs(c);
    TensorMap fwd, rev;
    {
      Order order(false);
      fwd = run_candidate(require_candidate(name), c, in);
    }
    {
      Order order(true);
      rev = run_candidate(require_candidate(name), c, in);
    }
    ASSERT_EQ(fwd.size(), rev.size()) << case_str;
    for (const auto& [out, t] : fwd) EXPECT_TRUE(same_bits(t, rev.at(out))) << case_str << ": output " << out;
  }
}

// --- the candidates' host-side checks (a machine without a device stops before them) --------------

// One decode step of `case_str` (T=1): the generator's inputs, sequence b in pool slot b.
struct Step {
  Case c;
  TensorMap in, out;
};
Step decode_step(const std::string& case_str) {
  Step s{parse_case(case_str), {}, {}};
  s.in = generate_inputs(s.c);
  const KdaParams p = kda_params(s.c);
  Tensor idx(DType::i64, {p.B});
  for (int64_t b = 0; b < p.B; ++b) idx.data<int64_t>()[b] = b;
  s.in["state_indices"] = idx;
  s.out["o"] = Tensor(DType::f32, {p.B, 1, p.HV, p.V});
  s.out["state"] = Tensor(DType::f32, {p.B, p.HV, p.K, p.V});
  if (s.c.op() == "kda_decode_fused")
    for (const char* name : {"conv_q", "conv_k", "conv_v"}) s.out[name] = s.in.at(std::string(name) + "0").clone();
  return s;
}

// The message of what f throws as E, or "" when it throws nothing.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

const char* kStep = "kda_decode(T=1,B=2,H=1,HV=2,K=32,V=32,regime=kimi_linear,seed=0)";
const char* kFusedStep = "kda_decode_fused(T=1,B=2,H=1,HV=2,K=32,V=32,regime=kimi_linear,seed=0)";

TEST(CudaEmuKdaChecks, AWellFormedStepRuns) {
  Step s = decode_step(kStep);
  EXPECT_EQ(error_of<std::exception>([&] { kda_decode_cuda_f32state(s.c, s.in, s.out); }), "");
  Step f = decode_step(kFusedStep);
  EXPECT_EQ(error_of<std::exception>([&] { kda_decode_cuda_f32state_fused(f.c, f.in, f.out); }), "");
}

// A launch whose SM clock dropped is measured again from the state it started from. With the
// emulated clock at a quarter of its rate after a first timed step, the launch is re-measured three
// times and the last attempt kept and counted at the low clock; the pool then holds one step, the
// same bits as an untimed step.
TEST(CudaEmuKdaChecks, AThrottledLaunchIsMeasuredAgainFromTheStateItStartedFrom) {
  Step untimed = decode_step(kStep), first = decode_step(kStep), slow = decode_step(kStep);
  kda_decode_cuda_f32state(untimed.c, untimed.in, untimed.out);
  {
    DeviceTimingScope scope;   // the fastest clock seen, at the full rate
    kda_decode_cuda_f32state(first.c, first.in, first.out);
    EXPECT_EQ(scope.call().launches, 1);
  }
  struct Restore {
    ~Restore() { cuda_emu::set_clock_scale(1.0); }
  } restore;
  cuda_emu::set_clock_scale(0.25);
  DeviceTimingScope scope;
  kda_decode_cuda_f32state(slow.c, slow.in, slow.out);
  EXPECT_EQ(scope.call().launches, 1);
  EXPECT_EQ(scope.call().throttled, 3);
  EXPECT_EQ(scope.call().low_clock, 1);
  EXPECT_TRUE(same_bits(slow.out.at("state"), untimed.out.at("state")));
  EXPECT_TRUE(same_bits(slow.out.at("o"), untimed.out.at("o")));
}

TEST(CudaEmuKdaChecks, DecodeRejectsTensorsThatDoNotMatchTheCase) {
  auto err = [](const std::function<void(Step&)>& spoil) {
    Step s = decode_step(kStep);
    spoil(s);
    return error_of<std::invalid_argument>([&] { kda_decode_cuda_f32state(s.c, s.in, s.out); });
  };
  EXPECT_THAT(err([](Step& s) { s.out["state"] = Tensor(DType::f32, {2, 2, 32, 33}); }), HasSubstr("state pool shape [2,2,32,33]"));
  EXPECT_THAT(err([](Step& s) { s.out["state"] = Tensor(DType::f32, {0, 2, 32, 32}); }), HasSubstr("state pool shape"));
  EXPECT_THAT(err([](Step& s) { s.out["o"] = Tensor(DType::f32, {2, 1, 2, 31}); }),
              HasSubstr("tensor 'o' has shape [2,1,2,31] (124 elements); the case needs 128"));
  EXPECT_THAT(err([](Step& s) { s.in.erase("q"); }), HasSubstr("tensor 'q' is missing"));
  EXPECT_THAT(err([](Step& s) { s.in["beta"] = Tensor(DType::f32, {2, 1}); }), HasSubstr("tensor 'beta' has shape"));
  EXPECT_THAT(err([](Step& s) { s.in["state_indices"].data<int64_t>()[1] = 2; }), HasSubstr("outside the pool"));
  EXPECT_THAT(err([](Step& s) { s.out["state"] = Tensor(DType::f64, {2, 2, 32, 32}); }), HasSubstr("must be f32"));
  Step two = decode_step(kStep);
  two.c = two.c.with("T", "2");
  EXPECT_THAT(error_of<std::invalid_argument>([&] { kda_decode_cuda_f32state(two.c, two.in, two.out); }),
              HasSubstr("one token per sequence"));
}

TEST(CudaEmuKdaChecks, FusedRejectsConvPoolsOfAnotherSlotCount) {
  Step s = decode_step(kFusedStep);
  s.out["conv_v"] = Tensor(DType::f32, {3, 64, 3});   // three slots beside a state pool of two
  EXPECT_THAT(error_of<std::invalid_argument>([&] { kda_decode_cuda_f32state_fused(s.c, s.in, s.out); }),
              HasSubstr("tensor 'conv_v' has shape [3,64,3] (576 elements); the case needs 384"));
}

TEST(CudaEmuKdaChecks, ChunkRejectsOutputsThatDoNotMatchTheCase) {
  const Case c = parse_case("kda(T=70,H=1,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)");
  const TensorMap in = generate_inputs(c);
  TensorMap out{{"o", Tensor(DType::bf16, {1, 70, 1, 32})}, {"ht", Tensor(DType::f32, {1, 1, 32, 32})}};
  EXPECT_EQ(error_of<std::exception>([&] { kda_cuda_chunk_bf16(c, in, out); }), "");
  out["ht"] = Tensor(DType::f32, {1, 1, 32, 16});
  EXPECT_THAT(error_of<std::invalid_argument>([&] { kda_cuda_chunk_bf16(c, in, out); }), HasSubstr("tensor 'ht' has shape"));
}

}  // namespace
}  // namespace dg
