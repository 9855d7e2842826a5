// The CUDA layer-op candidates: rmsnorm_cuda_bf16, add_rmsnorm_cuda_bf16 (candidates/cuda/rmsnorm.h),
// swiglu_cuda_bf16 (swiglu.h), rope_cuda_bf16 (rope.h), moe_router_cuda_f32 (moe_router.h),
// gemm_cuda_cublaslt_bf16 and gemm_fp8_block_cuda_cublaslt (gemm_cublaslt.h; the FP8 one on
// compute capability 9.x only). Without a device (or without CUDA) each is a
// NOT_SUPPORTED row carrying the reason; with one, each passes its op's smoke suite against the
// reference, and agrees with the CPU candidate of the same arithmetic: bit for bit where the order
// is the same (the norms and rope everywhere; swiglu and the router under the emulator, whose expf
// is the host's), within one bf16 ulp on a few elements (swiglu on a GPU: CUDA's expf), with the
// router's sets judged by its measures (flips_wide and ties 0) on a GPU, or by the gate's precision
// rule with the CPU candidate as base (cuBLASLt's summation order is its own); and each call is one
// launch timed by the device rules. The GPU half skips here with the reason; scripts/gpu-check.sh
// runs it.
// This file is also built as cuda_layer_ops_emu_test against the CUDA emulator (candidates/cuda/emu):
// the kernels then run on every machine, in both thread orders (a missing barrier changes the bits);
// cuBLASLt is not emulated, and its candidate is NOT_SUPPORTED there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "candidates/cuda/device.h"
#include "tests/candidates/cuda_test_util.h"
#include "candidates/cuda/rmsnorm.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/gate.h"
#include "harness/judge/policy.h"
#include "harness/judge/verify.h"
#include "harness/ops/moe_router.h"
#include "harness/timing/device_timing.h"
#include "tests/candidates/cpu/gemm_fp8_block_bound.h"
#ifdef DRIFTGATE_CUDA_EMULATED
#include "candidates/cuda/emu/cuda_emu.h"
#endif

namespace dg {
namespace {

using ::testing::HasSubstr;

struct Pair {
  const char* cuda;
  const char* cpu;     // the CPU candidate of the same arithmetic
  const char* suite;   // the op's smoke suite
};
const Pair kKernels[] = {{"rmsnorm_cuda_bf16", "rmsnorm_cpu_blocked_bf16", "rmsnorm-smoke"},
                         {"add_rmsnorm_cuda_bf16", "add_rmsnorm_cpu_blocked_bf16", "add-rmsnorm-smoke"},
                         {"swiglu_cuda_bf16", "swiglu_cpu_fused_bf16", "swiglu-smoke"},
                         {"rope_cuda_bf16", "rope_cpu_cache_bf16", "rope-smoke"}};
const Pair kRouter = {"moe_router_cuda_f32", "moe_router_cpu_naive_f32", "moe-router-smoke"};
const Pair kGemm = {"gemm_cuda_cublaslt_bf16", "gemm_cpu_blocked_bf16", "gemm-smoke"};
const Pair kGemmFp8 = {"gemm_fp8_block_cuda_cublaslt", "gemm_fp8_block_cpu_deepgemm_bf16", "gemm-fp8-block-smoke"};

Record verify_one(const std::string& cand, const std::string& case_str) { return cuda_test::verify_at(cand, case_str, Tier::f64); }
const std::vector<std::string>& smoke(const char* suite) { return cuda_test::suite_cases(suite); }
// The outputs of `cand` on case `cs` (generated inputs), run in this process.
TensorMap run(const std::string& cand, const std::string& cs) { return cuda_test::run_on_case(cand, cs); }

// The bf16 outputs of two runs, element by element: how many differ, and whether every difference
// is at most `max_ulps` bf16 ulps (adjacent encodings of the same sign).
struct Diff {
  int64_t differ = 0, total = 0;
  bool within = true;
};
Diff compare_bf16(const TensorMap& a, const TensorMap& b) {
  Diff d;
  for (const auto& [name, ta] : a) {
    const Tensor& tb = b.at(name);
    EXPECT_EQ(ta.dtype(), DType::bf16) << name;
    EXPECT_EQ(ta.nbytes(), tb.nbytes()) << name;
    const auto* pa = ta.data<uint16_t>();
    const auto* pb = tb.data<uint16_t>();
    for (int64_t i = 0; i < ta.numel(); ++i) {
      ++d.total;
      if (pa[i] == pb[i]) continue;
      ++d.differ;
      const bool same_sign = (pa[i] & 0x8000) == (pb[i] & 0x8000);
      if (!same_sign || std::abs(int{pa[i]} - int{pb[i]}) > 1) d.within = false;
    }
  }
  return d;
}


TEST(CudaLayerOps, CandidatesAreRegisteredOnEveryBuild) {
  for (const Pair& k : {kKernels[0], kKernels[1], kKernels[2], kKernels[3], kRouter, kGemm}) {
    const Candidate* c = find_candidate(k.cuda);
    ASSERT_NE(c, nullptr) << k.cuda;
    const Candidate* cpu = find_candidate(k.cpu);
    ASSERT_NE(cpu, nullptr) << k.cpu;
    EXPECT_EQ(c->info().backend, "cuda");
    EXPECT_EQ(c->info().op, cpu->info().op) << k.cuda;
    const DType want = std::string(k.cuda) == kRouter.cuda ? DType::f32 : DType::bf16;   // the router: f32, as GLM's
    EXPECT_EQ(c->info().input_dtype, want) << k.cuda;
    EXPECT_EQ(c->info().output_dtype, want) << k.cuda;
  }
  // The FP8 GEMM: e4m3 read exactly as f32 (as the CPU candidates declare), Hopper's accumulator as
  // tf32, bf16 y: gemm_fp8_block_cpu_deepgemm_bf16's declaration.
  const Candidate* fp8 = find_candidate(kGemmFp8.cuda);
  ASSERT_NE(fp8, nullptr);
  const Candidate* twin = find_candidate(kGemmFp8.cpu);
  ASSERT_NE(twin, nullptr);
  EXPECT_EQ(fp8->info().backend, "cuda");
  EXPECT_EQ(fp8->info().op, "gemm_fp8_block");
  EXPECT_EQ(fp8->info().storage().input, twin->info().storage().input);
  EXPECT_EQ(fp8->info().state_dtype, twin->info().state_dtype);
  EXPECT_EQ(fp8->info().output_dtype, DType::bf16);
}

TEST(CudaLayerOps, WithoutADeviceEveryCandidateIsNotSupportedWithTheReason) {
  const CudaStatus s = cuda_status();
  if (s.available) GTEST_SKIP() << "a GPU is here (" << s.device << "): the GPU tests below cover it";
  for (const Pair& k : {kKernels[0], kKernels[1], kKernels[2], kKernels[3], kRouter, kGemm, kGemmFp8}) {
    const Record r = verify_one(k.cuda, smoke(k.suite).front());
    EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED) << k.cuda << ": " << r.reason;
    EXPECT_EQ(r.reason, s.reason) << k.cuda;
#ifdef DRIFTGATE_HAVE_CUDA
    EXPECT_THAT(r.reason, HasSubstr("device")) << k.cuda;
#endif
  }
}

#ifdef DRIFTGATE_CUDA_EMULATED
TEST(CudaLayerOps, TheCublasLtGemmsAreNotEmulated) {
  for (const Pair& k : {kGemm, kGemmFp8}) {
    const Record r = verify_one(k.cuda, smoke(k.suite).front());
    EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED) << k.cuda << ": " << r.reason;
    EXPECT_THAT(r.reason, HasSubstr("CUDA device")) << k.cuda;
  }
}
#endif

// --- with a GPU (or the emulator) ------------------------------------------------------------------

TEST(CudaLayerOpsGpu, EveryKernelPassesItsSmokeSuite) {
  SKIP_WITHOUT_GPU();
  for (const Pair& k : kKernels)
    for (const std::string& cs : smoke(k.suite)) {
      const Record r = verify_one(k.cuda, cs);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << k.cuda << " on " << cs << ": " << r.reason;
    }
}

// The norms and rope: the same operations in the same order, nothing transcendental on the GPU
// (rope's cos/sin cache is built on the host).
TEST(CudaLayerOpsGpu, TheNormsAndRopeAgreeWithTheCpuCandidatesBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const Pair& k : {kKernels[0], kKernels[1], kKernels[3]})
    for (const std::string& cs : smoke(k.suite)) {
      const Diff d = compare_bf16(run(k.cuda, cs), run(k.cpu, cs));
      EXPECT_GT(d.total, 0) << cs;
      EXPECT_EQ(d.differ, 0) << k.cuda << " on " << cs << ": " << d.differ << " of " << d.total << " elements differ";
    }
}

// Same arithmetic in the same order; only expf differs on a GPU (CUDA's within 2 ulp, the host's
// within 1): an output may then land one bf16 ulp away, and only rarely.
TEST(CudaLayerOpsGpu, SwigluAgreesWithTheCpuCandidate) {
  SKIP_WITHOUT_GPU();
  const Pair& k = kKernels[2];
  for (const std::string& cs : smoke(k.suite)) {
    const Diff d = compare_bf16(run(k.cuda, cs), run(k.cpu, cs));
    EXPECT_GT(d.total, 0) << cs;
#ifdef DRIFTGATE_CUDA_EMULATED
    EXPECT_EQ(d.differ, 0) << cs << ": the emulator's expf is the host's, so every bit agrees";
#else
    EXPECT_TRUE(d.within) << cs << ": a difference of more than one bf16 ulp";
    EXPECT_LE(d.differ * 100, d.total) << cs << ": " << d.differ << " of " << d.total << " elements differ";
#endif
  }
}

const OpMeasure* find_measure(const Record& r, const std::string& name) {
  for (const OpMeasure& m : r.measures)
    if (m.name == name) return &m;
  return nullptr;
}

#ifndef DRIFTGATE_CUDA_EMULATED
// Token t's decision margin on case cs (moe_router_rank, in double) less the op's tol for f32 weights,
// 32 u (1 + max_e |s_e + b_e|) with u = 2^-24: > 0 where an honest f32 kernel cannot flip the set.
double router_margin(const std::string& cs, int64_t t) {
  const Case c = parse_case(cs);
  const TensorMap in = generate_inputs(c);
  const MoeRouterParams p = moe_router_params(c);
  std::vector<double> z(static_cast<size_t>(p.T * p.E)), b(static_cast<size_t>(p.E));
  in.at("logits").read(0, z);
  in.at("bias").read(0, b);
  const MoeRouterRank r = moe_router_rank(p, z.data() + t * p.E, b.data());
  double mx = 0;
  for (double v : r.sel) mx = std::max(mx, std::abs(v));
  return r.margin() - 0x1p-19 * (1 + mx);
}
#endif

// The router's ids are judged by the op's measures (harness/ops/moe_router.h): no set that differs
// from the reference's at a margin wider than tol, no exact tie decided against the rule.
TEST(CudaLayerOpsGpu, TheRouterPassesItsSmokeSuiteWithNoWideFlipsOrTies) {
  SKIP_WITHOUT_GPU();
  for (const std::string& cs : smoke(kRouter.suite)) {
    const Record r = verify_one(kRouter.cuda, cs);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cs << ": " << r.reason;
    for (const char* name : {"flips_wide", "ties", "invalid_ids"}) {
      const OpMeasure* m = find_measure(r, name);
      ASSERT_NE(m, nullptr) << cs << ": no measure " << name;
      EXPECT_EQ(m->value, 0.0) << cs << ": " << name;
    }
  }
}

// The same sets as moe_router_cpu_naive_f32, slot by slot (both write rank order). Under the
// emulator every bit of the ids and weights agrees; on a GPU CUDA's expf may move a score by an ulp,
// which can flip a token only where its decision margin (moe_router_rank, in double) is within the
// op's tol, 32 u (1 + max |s + b|) with u = 2^-24; the weights of the other tokens agree within a few
// f32 ulps.
TEST(CudaLayerOpsGpu, TheRouterSelectsTheSetsOfTheNaiveCpuCandidate) {
  SKIP_WITHOUT_GPU();
  for (const std::string& cs : smoke(kRouter.suite)) {
    const TensorMap g = run(kRouter.cuda, cs), c = run(kRouter.cpu, cs);
    const Tensor &gi = g.at("topk_ids"), &ci = c.at("topk_ids"), &gw = g.at("topk_weights"), &cw = c.at("topk_weights");
    ASSERT_EQ(gi.dtype(), DType::i32);
    ASSERT_EQ(gi.numel(), ci.numel());
    const int64_t k = parse_case(cs).integer("k"), T = gi.numel() / k;
    int64_t differ = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* a = gi.data<int32_t>() + t * k;
      const int32_t* b = ci.data<int32_t>() + t * k;
      if (!std::equal(a, a + k, b)) {
        ++differ;
#ifndef DRIFTGATE_CUDA_EMULATED
        const double margin = router_margin(cs, t);
        EXPECT_LE(margin, 0.0) << cs << ": token " << t << " selects other experts at a margin above tol (by " << margin << ")";
#endif
        continue;
      }
      for (int64_t j = t * k; j < (t + 1) * k; ++j) {
        const float x = gw.data<float>()[j], y = cw.data<float>()[j];
#ifdef DRIFTGATE_CUDA_EMULATED
        EXPECT_EQ(std::memcmp(&x, &y, sizeof x), 0) << cs << ": weight " << j << ": " << x << " vs " << y;
#else
        EXPECT_LE(std::abs(x - y), 0x1p-20f * std::abs(y)) << cs << ": weight " << j;
#endif
      }
    }
#ifdef DRIFTGATE_CUDA_EMULATED
    EXPECT_EQ(differ, 0) << cs << ": " << differ << " of " << T << " tokens select other experts";
#endif
  }
}

TEST(CudaLayerOpsGpu, TheCublasLtGemmPassesTheGateRuleAgainstTheCpuCandidate) {
  SKIP_WITHOUT_GPU();
#ifdef DRIFTGATE_CUDA_EMULATED
  GTEST_SKIP() << "cuBLASLt is not emulated";
#endif
  const Policy policy = default_policy();
  for (const std::string& cs : smoke(kGemm.suite)) {
    const Record patch = verify_one(kGemm.cuda, cs), base = verify_one(kGemm.cpu, cs);
    EXPECT_EQ(patch.disposition, Disposition::PASSED) << cs << ": " << patch.reason;
    const std::string naive_name = policy.naive_for("gemm", DType::bf16);
    const Record naive = verify_one(naive_name.empty() ? "gemm_cpu_naive_f32" : naive_name, cs);
    for (const Check& chk : precision_checks(base, patch, &naive, policy))
      EXPECT_TRUE(chk.passed) << cs << ": " << chk.name << ": " << chk.detail;
  }
}

// On a Hopper device the block-scaled FP8 GEMM passes its smoke suite, and its error stays within the
// op's format bound (gemm_fp8_block_bound_ratio <= 1: f32 promotion over an accumulator of the
// declared tf32 state) on every case, which a wrong scale layout misses by orders of magnitude.
// Elsewhere it is NOT_SUPPORTED and says why.
TEST(CudaLayerOpsGpu, TheBlockScaledFp8GemmPassesItsSmokeSuiteOnHopper) {
  SKIP_WITHOUT_GPU();
#ifdef DRIFTGATE_CUDA_EMULATED
  GTEST_SKIP() << "cuBLASLt is not emulated";
#endif
  for (const std::string& cs : smoke(kGemmFp8.suite)) {
    const Record r = verify_one(kGemmFp8.cuda, cs);
    if (r.disposition == Disposition::NOT_SUPPORTED && r.reason.find("compute capability 9.x") != std::string::npos)
      GTEST_SKIP() << r.reason;
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cs << ": " << r.reason;
    std::string where;
    EXPECT_LE(bound_ratio(kGemmFp8.cuda, cs, &where), 1.0) << cs << ": the worst output " << where;
  }
}

// Under bench and gate each call is one launch, timed by the device rules (cuda_rt.h), as the KDA
// kernels' are.
TEST(CudaLayerOpsGpu, EachCallIsOneTimedLaunch) {
  SKIP_WITHOUT_GPU();
  for (const Pair& k : {kKernels[0], kKernels[1], kKernels[2], kKernels[3], kRouter}) {
    const Case c = parse_case(smoke(k.suite).front());
    const TensorMap in = generate_inputs(c);
    DeviceTimingScope scope;
    run_candidate(require_candidate(k.cuda), c, in);
    const DeviceCall& d = scope.call();
    EXPECT_EQ(d.launches, 1) << k.cuda;
    EXPECT_GT(d.device_s, 0.0) << k.cuda;
    EXPECT_GE(d.launch_wall_s, d.device_s) << k.cuda;
    EXPECT_FALSE(d.device.empty()) << k.cuda;
  }
}

#ifdef DRIFTGATE_CUDA_EMULATED
// A missing barrier reads what another thread wrote in the same phase: the bits change with the
// order the emulator runs a phase's threads in.
TEST(CudaLayerOpsEmu, EveryKernelGivesTheSameBitsInBothThreadOrders) {
  for (const Pair& k : kKernels)
    for (const std::string& cs : smoke(k.suite)) {
      dg::cuda_emu::set_thread_order(false);
      const TensorMap fwd = run(k.cuda, cs);
      dg::cuda_emu::set_thread_order(true);
      const TensorMap rev = run(k.cuda, cs);
      dg::cuda_emu::set_thread_order(false);
      const Diff d = compare_bf16(fwd, rev);
      EXPECT_GT(d.total, 0) << cs;
      EXPECT_EQ(d.differ, 0) << k.cuda << " on " << cs;
    }
}

TEST(CudaLayerOpsEmu, TheRouterGivesTheSameBitsInBothThreadOrders) {
  for (const std::string& cs : smoke(kRouter.suite)) {
    dg::cuda_emu::set_thread_order(false);
    const TensorMap fwd = run(kRouter.cuda, cs);
    dg::cuda_emu::set_thread_order(true);
    const TensorMap rev = run(kRouter.cuda, cs);
    dg::cuda_emu::set_thread_order(false);
    for (const char* name : {"topk_ids", "topk_weights"}) {
      const Tensor &a = fwd.at(name), &b = rev.at(name);
      ASSERT_EQ(a.nbytes(), b.nbytes()) << cs << ": " << name;
      EXPECT_GT(a.nbytes(), 0u) << cs;
      EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.nbytes()), 0) << cs << ": " << name;
    }
  }
}

TEST(CudaLayerOpsEmu, KernelsRejectTensorsThatDoNotMatchTheCase) {
  const Case c = parse_case("rmsnorm(N=4,D=64,regime=hidden,dtype=bf16,seed=0)");
  TensorMap in = generate_inputs(c);
  in.at("weight") = Tensor(DType::bf16, {32});
  TensorMap out;
  out["y"] = Tensor(DType::bf16, {4, 64});
  try {
    rmsnorm_cuda_bf16(c, in, out);
    FAIL() << "a 32-element weight for D=64 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("weight"));
  }
}
#endif

}  // namespace
}  // namespace dg
