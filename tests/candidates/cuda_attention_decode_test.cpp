// The CUDA split-KV decode attention candidate, attention_decode_cuda_splitkv_f32
// (candidates/cuda/attention_decode.h). Without a device (or without CUDA) it is a NOT_SUPPORTED row
// carrying the reason; with one, it passes every case of the op's smoke and gate suites against the
// dd reference and the gate's precision rules with attention_decode_cpu_splitkv_f32 (the same
// algorithm in f32) as base and the policy's naive; its split count changes nothing beyond f32's
// error; an empty context gives o = 0 and lse = -inf exactly, whatever the split; and each call is
// one timed launch (both kernels). The GPU half skips here with the reason; scripts/gpu-check.sh
// runs it. This file is also built as cuda_attention_decode_emu_test against the CUDA emulator
// (candidates/cuda/emu): the kernels then run on every machine, in both thread orders.
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
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/gate.h"
#include "harness/judge/policy.h"
#include "harness/judge/verify.h"
#include "harness/ops/attention_decode.h"
#include "harness/timing/device_timing.h"
#ifdef DRIFTGATE_CUDA_EMULATED
#include "candidates/cuda/emu/cuda_emu.h"
#endif

namespace dg {
namespace {

using ::testing::HasSubstr;

constexpr const char* kCuda = "attention_decode_cuda_splitkv_f32";
constexpr const char* kCpu = "attention_decode_cpu_splitkv_f32";

using namespace cuda_test;

Record verify_dd(const std::string& cand, const std::string& case_str) { return verify_at(cand, case_str, Tier::dd); }

TEST(CudaAttentionDecode, IsRegisteredOnEveryBuildAsTheCpuSplitKvsTwin) {
  expect_cpu_twin(kCuda, kCpu, "attention_decode");
}

TEST(CudaAttentionDecode, WithoutADeviceItIsNotSupportedWithTheReason) {
  const CudaStatus s = cuda_status();
  if (s.available) GTEST_SKIP() << "a GPU is here (" << s.device << "): the GPU tests below cover it";
  const Record r = verify_dd(kCuda, suite_cases("attention-decode-smoke").front());
  EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED) << r.reason;
  EXPECT_EQ(r.reason, s.reason);
#ifdef DRIFTGATE_HAVE_CUDA
  EXPECT_THAT(r.reason, HasSubstr("device"));
#endif
}

// --- with a GPU (or the emulator) ------------------------------------------------------------------

// Every case of `name` PASSED against the dd reference, and every precision check of the gate
// passed with the CPU split-KV candidate as base and the policy's naive; the bits of o and lse are
// printed per case (the figures the README quotes).
void expect_gate_rules(const char* name) {
  const Policy policy = default_policy();
  for (const std::string& cs : suite_cases(name)) {
    const Record patch = verify_dd(kCuda, cs), base = verify_dd(kCpu, cs);
    const Record naive = verify_dd(policy.naive_for("attention_decode", DType::f32), cs);
    EXPECT_EQ(patch.disposition, Disposition::PASSED) << cs << ": " << patch.reason;
    for (const Check& chk : precision_checks(base, patch, &naive, policy))
      EXPECT_TRUE(chk.passed) << cs << ": " << chk.name << ": " << chk.detail;
    std::printf("%s: o %.1f bits (cpu %.1f), lse %.1f bits (cpu %.1f)\n", cs.c_str(), output_bits(patch, "o"), output_bits(base, "o"),
                output_bits(patch, "lse"), output_bits(base, "lse"));
  }
}

TEST(CudaAttentionDecodeGpu, PassesTheGateRulesOnEverySmokeCase) {
  SKIP_WITHOUT_GPU();
  expect_gate_rules("attention-decode-smoke");
}

TEST(CudaAttentionDecodeGpu, PassesTheGateRulesOnEveryGateCase) {
  SKIP_WITHOUT_GPU();
  expect_gate_rules("attention-decode-gate");
}

// Shapes outside the suites' that change the kernel's tiling: a group of 20 (two blocks of q heads
// per kv head, 16 and 4), d = 512 (8 heads a block: 12 heads in blocks of 8 and 4; 5 tokens a
// tile), d = dv = 1024 (4 heads a block, 2 tokens a tile) and d = 8 with dv = 200 (more tokens a
// tile than the page): each PASSED and within the gate's precision rules against the CPU split-KV.
TEST(CudaAttentionDecodeGpu, HeadBlocksAndTileSizesPassTheGateRules) {
  SKIP_WITHOUT_GPU();
  const Policy policy = default_policy();
  for (const std::string cs :
       {"attention_decode(B=2,n_h=40,n_kv=2,d=128,page=16,split=3,ctx=200,regime=ragged,dtype=bf16,seed=0)",
        "attention_decode(B=2,n_h=12,n_kv=1,d=512,page=16,split=2,ctx=100,regime=typical,dtype=bf16,seed=0)",
        "attention_decode(B=1,n_h=8,n_kv=2,d=1024,page=4,split=2,ctx=37,regime=few_dominant,dtype=f16,seed=0)",
        "attention_decode(B=3,n_h=6,n_kv=3,d=8,dv=200,page=4,split=5,ctx=90,regime=large_logits,dtype=f32,seed=0)"}) {
    const Record patch = verify_dd(kCuda, cs), base = verify_dd(kCpu, cs);
    const Record naive = verify_dd(policy.naive_for("attention_decode", DType::f32), cs);
    EXPECT_EQ(patch.disposition, Disposition::PASSED) << cs << ": " << patch.reason;
    for (const Check& chk : precision_checks(base, patch, &naive, policy))
      EXPECT_TRUE(chk.passed) << cs << ": " << chk.name << ": " << chk.detail;
  }
}

// On the same inputs (a case's inputs are drawn from its whole string, so the split's cases get the
// split = 1 case's), splits of 3, 7 and 16 (most of them empty for the ragged batch's short
// sequences) give the o and lse of no split within f32's error of a softmax over <= 300 keys:
// |o_a - o_b| <= 2^-17 max|o| of the row, |lse_a - lse_b| <= 2^-20 max(1, |lse|); and each split's
// own case keeps the bits of no split against the reference within 1.
TEST(CudaAttentionDecodeGpu, SplitCountChangesNothingBeyondTheFormatsError) {
  SKIP_WITHOUT_GPU();
  const std::string base = "attention_decode(B=5,n_h=8,n_kv=2,d=128,page=16,split=1,ctx=300,regime=ragged,dtype=bf16,seed=3)";
  const TensorMap in = generate_inputs(parse_case(base));
  const TensorMap one = run_candidate(require_candidate(kCuda), parse_case(base), in);
  const std::vector<float> o1 = f32_values(one.at("o")), l1 = f32_values(one.at("lse"));
  const Record r1 = verify_dd(kCuda, base);
  const int64_t dv = 128;
  for (const char* split : {"3", "7", "16"}) {
    const std::string cs = parse_case(base).with("split", split).str();
    const TensorMap many = run_candidate(require_candidate(kCuda), parse_case(cs), in);
    const std::vector<float> o = f32_values(many.at("o")), l = f32_values(many.at("lse"));
    ASSERT_EQ(o.size(), o1.size());
    for (size_t r = 0; r < l.size(); ++r) {
      if (std::isinf(l1[r])) {
        EXPECT_EQ(l[r], l1[r]) << cs << ": row " << r;
        continue;
      }
      EXPECT_LE(std::abs(l[r] - l1[r]), 0x1p-20f * std::max(1.0f, std::abs(l1[r]))) << cs << ": lse of row " << r;
      float mx = 0;
      for (int64_t c = 0; c < dv; ++c) mx = std::max(mx, std::abs(o1[r * dv + c]));
      for (int64_t c = 0; c < dv; ++c)
        EXPECT_LE(std::abs(o[r * dv + c] - o1[r * dv + c]), 0x1p-17f * mx) << cs << ": o[" << r << "][" << c << "]";
    }
    const Record rs = verify_dd(kCuda, cs);
    EXPECT_EQ(rs.disposition, Disposition::PASSED) << cs << ": " << rs.reason;
    for (const char* out : {"o", "lse"}) EXPECT_NEAR(output_bits(rs, out), output_bits(r1, out), 1.0) << cs << ": " << out;
  }
}

// A sequence of length 0 gets o = 0 and lse = -inf exactly (no NaN from -inf - -inf), with one split
// and with several (all empty); the other rows are finite.
TEST(CudaAttentionDecodeGpu, AnEmptyContextGivesZeroAndMinusInfinity) {
  SKIP_WITHOUT_GPU();
  const std::string base = "attention_decode(B=4,n_h=4,n_kv=1,d=64,page=16,split=1,ctx=64,regime=empty_splits,dtype=bf16,seed=0)";
  for (const char* split : {"1", "4", "9"}) {
    const std::string cs = parse_case(base).with("split", split).str();
    const std::vector<int64_t> lens = attention_decode_lens(parse_case(cs));
    ASSERT_EQ(lens[0], 0);
    const TensorMap out = run_on_case(kCuda, cs);
    const std::vector<float> o = f32_values(out.at("o")), lse = f32_values(out.at("lse"));
    const int64_t n_h = 4, dv = 64;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t h = 0; h < n_h; ++h) {
        const float l = lse[static_cast<size_t>(b * n_h + h)];
        if (lens[static_cast<size_t>(b)] == 0) EXPECT_TRUE(std::isinf(l) && l < 0) << cs << ": lse[" << b << "][" << h << "] = " << l;
        else EXPECT_TRUE(std::isfinite(l)) << cs << ": lse[" << b << "][" << h << "] = " << l;
        for (int64_t c = 0; c < dv; ++c) {
          const float x = o[static_cast<size_t>((b * n_h + h) * dv + c)];
          if (lens[static_cast<size_t>(b)] == 0) EXPECT_EQ(std::memcmp(&x, "\0\0\0\0", 4), 0) << cs << ": o[" << b << "][" << h << "] = " << x;
          else EXPECT_TRUE(std::isfinite(x)) << cs;
        }
      }
  }
}

// Both kernels run inside one timed call (cuda_rt.h's device rules): one launch counted.
TEST(CudaAttentionDecodeGpu, EachCallIsOneTimedLaunch) {
  SKIP_WITHOUT_GPU();
  const Case c = parse_case(suite_cases("attention-decode-smoke").front());
  const TensorMap in = generate_inputs(c);
  DeviceTimingScope scope;
  run_candidate(require_candidate(kCuda), c, in);
  const DeviceCall& d = scope.call();
  EXPECT_EQ(d.launches, 1);
  EXPECT_GT(d.device_s, 0.0);
  EXPECT_GE(d.launch_wall_s, d.device_s);
  EXPECT_FALSE(d.device.empty());
}

#ifdef DRIFTGATE_CUDA_EMULATED
// A missing barrier reads what another thread wrote in the same phase: the bits change with the
// order the emulator runs a phase's threads in.
TEST(CudaAttentionDecodeEmu, GivesTheSameBitsInBothThreadOrders) {
  for (const std::string& cs : suite_cases("attention-decode-smoke")) {
    if (parse_case(cs).integer("ctx") > 4096) continue;   // the 32K case: the gate test runs it
    dg::cuda_emu::set_thread_order(false);
    const TensorMap fwd = run_on_case(kCuda, cs);
    dg::cuda_emu::set_thread_order(true);
    const TensorMap rev = run_on_case(kCuda, cs);
    dg::cuda_emu::set_thread_order(false);
    for (const char* name : {"o", "lse"}) {
      const Tensor &a = fwd.at(name), &b = rev.at(name);
      ASSERT_EQ(a.nbytes(), b.nbytes()) << cs;
      EXPECT_GT(a.nbytes(), 0u) << cs;
      EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.nbytes()), 0) << cs << ": " << name;
    }
  }
}

// A tensor that does not match the case is refused by name before any launch.
TEST(CudaAttentionDecodeEmu, RejectsTensorsThatDoNotMatchTheCase) {
  const Case c = parse_case("attention_decode(B=2,n_h=4,n_kv=2,d=8,page=4,split=2,ctx=10,regime=typical,dtype=bf16,seed=0)");
  TensorMap in = generate_inputs(c);
  in.at("page_table") = Tensor(DType::i32, {2, 1});
  TensorMap out;
  out["o"] = Tensor(DType::f32, {2, 4, 8});
  out["lse"] = Tensor(DType::f32, {2, 4});
  try {
    require_candidate(kCuda).run(c, in, out);
    FAIL() << "a page table of 2 entries for B=2 and 3 pages each was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("page_table"));
  }
}
#endif

}  // namespace
}  // namespace dg
