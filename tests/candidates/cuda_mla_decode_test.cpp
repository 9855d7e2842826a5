// The CUDA MLA decode candidate, mla_decode_cuda_packed_f32 (candidates/cuda/mla_decode.h). Without a
// device (or without CUDA) it is a NOT_SUPPORTED row carrying the reason; with one, it passes every
// case of the op's smoke and gate suites against the dd reference and the gate's precision rules
// with mla_decode_cpu_packed_f32 (the same algorithm in f32) as base and the policy's naive; head
// groups and tile sizes outside the suites' shapes do too; its split count changes nothing beyond
// f32's error, dense and sparse; an empty context, an index row of only -1 and one of only
// positions past the length give o~ = 0 and lse = -inf exactly, whatever the split; and each call
// is one timed launch (all its kernels). The GPU half skips here with the reason;
// scripts/gpu-check.sh runs it. This file is also built as cuda_mla_decode_emu_test against the
// CUDA emulator (candidates/cuda/emu): the kernels then run on every machine, in both thread orders,
// and give the CPU packed candidate's bits (the host's expf and logf on both sides).
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
#include "harness/ops/mla_decode.h"
#include "harness/timing/device_timing.h"
#ifdef DRIFTGATE_CUDA_EMULATED
#include "candidates/cuda/emu/cuda_emu.h"
#endif

namespace dg {
namespace {

using ::testing::HasSubstr;

constexpr const char* kCuda = "mla_decode_cuda_packed_f32";
constexpr const char* kCpu = "mla_decode_cpu_packed_f32";

using namespace cuda_test;

Record verify_dd(const std::string& cand, const std::string& case_str) { return verify_at(cand, case_str, Tier::dd); }

TEST(CudaMlaDecode, IsRegisteredOnEveryBuildAsTheCpuPackedsTwin) {
  expect_cpu_twin(kCuda, kCpu, "mla_decode");
}

TEST(CudaMlaDecode, WithoutADeviceItIsNotSupportedWithTheReason) {
  const CudaStatus s = cuda_status();
  if (s.available) GTEST_SKIP() << "a GPU is here (" << s.device << "): the GPU tests below cover it";
  for (const std::string& cs : {suite_cases("mla-decode-smoke").front(), suite_cases("mla-decode-gate").back()}) {
    const Record r = verify_dd(kCuda, cs);
    EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED) << cs << ": " << r.reason;
    EXPECT_EQ(r.reason, s.reason) << cs;
#ifdef DRIFTGATE_HAVE_CUDA
    EXPECT_THAT(r.reason, HasSubstr("device")) << cs;
#endif
  }
}

// --- with a GPU (or the emulator) ------------------------------------------------------------------

// Case `cs` PASSED against the dd reference, and every precision check of the gate passed with the
// CPU packed candidate as base and the policy's naive; the bits of o and lse are printed (the
// figures the README quotes).
void expect_gate_rules(const std::string& cs, const Policy& policy) {
  const Record patch = verify_dd(kCuda, cs), base = verify_dd(kCpu, cs);
  const Record naive = verify_dd(policy.naive_for("mla_decode", DType::f32), cs);
  EXPECT_EQ(patch.disposition, Disposition::PASSED) << cs << ": " << patch.reason;
  for (const Check& chk : precision_checks(base, patch, &naive, policy))
    EXPECT_TRUE(chk.passed) << cs << ": " << chk.name << ": " << chk.detail;
  std::printf("%s: o %.1f bits (cpu %.1f), lse %.1f bits (cpu %.1f)\n", cs.c_str(), output_bits(patch, "o"), output_bits(base, "o"),
              output_bits(patch, "lse"), output_bits(base, "lse"));
}

TEST(CudaMlaDecodeGpu, PassesTheGateRulesOnEverySmokeCase) {
  SKIP_WITHOUT_GPU();
  const Policy policy = default_policy();
  for (const std::string& cs : suite_cases("mla-decode-smoke")) expect_gate_rules(cs, policy);
}

TEST(CudaMlaDecodeGpu, PassesTheGateRulesOnEveryGateCase) {
  SKIP_WITHOUT_GPU();
  const Policy policy = default_policy();
  for (const std::string& cs : suite_cases("mla-decode-gate")) expect_gate_rules(cs, policy);
}

// Shapes outside the suites' that change the kernel's tiling: 20 heads (blocks of 8, 8 and 4),
// d_c 1024 with rope 128 (4 heads a block; f32 rows 4 to a tile, so a block of 64 keys is re-read
// in 16 tiles for the values), f32 latent at 576 (8 rows a tile), d_c 200 in f32 (23 rows a tile,
// and a value channel not a multiple of the block's 128 threads: each thread reads rows other
// threads load), FP8 (35 rows a tile) with sparse indices on pages of 1, a block of keys smaller
// than a tile (d_c 32).
const std::vector<std::string> kTilingCases = {
    "mla_decode(B=2,n_h=20,d_c=512,rope=64,page=64,split=3,ctx=300,regime=ragged,dtype=bf16,seed=0)",
    "mla_decode(B=2,n_h=5,d_c=1024,rope=128,page=16,split=2,ctx=150,regime=typical,dtype=f32,seed=0)",
    "mla_decode(B=2,n_h=9,d_c=512,rope=64,page=64,split=2,ctx=200,regime=few_dominant,dtype=f32,seed=0)",
    "mla_decode(B=2,n_h=3,d_c=200,rope=16,page=8,split=2,ctx=150,regime=typical,dtype=f32,seed=0)",
    "mla_decode(B=3,n_h=20,d_c=512,rope=64,page=1,split=3,ctx=400,topk=300,kv=fp8,kv_scale=0.05,regime=sparse_mixed,dtype=bf16,seed=0)",
    "mla_decode(B=2,n_h=3,d_c=32,rope=0,page=4,split=5,ctx=90,regime=large_logits,dtype=f16,seed=0)"};

// Each tiling case PASSED and within the gate's precision rules against the CPU packed candidate.
TEST(CudaMlaDecodeGpu, HeadGroupsAndTileSizesPassTheGateRules) {
  SKIP_WITHOUT_GPU();
  const Policy policy = default_policy();
  for (const std::string& cs : kTilingCases) expect_gate_rules(cs, policy);
}

// On the same inputs (a case's inputs are drawn from its whole string, so the split's cases get the
// split = 1 case's), splits of 3, 7 and 16 (many empty for the short sequences) give the o~ and lse
// of no split within f32's error of a softmax over <= 700 keys: |o_a - o_b| <= 2^-16 max|o| of the
// row, |lse_a - lse_b| <= 2^-20 max(1, |lse|); -inf rows stay -inf.
void expect_split_agrees(const std::string& base) {
  const TensorMap in = generate_inputs(parse_case(base));
  const TensorMap one = run_candidate(require_candidate(kCuda), parse_case(base), in);
  const std::vector<float> o1 = f32_values(one.at("o")), l1 = f32_values(one.at("lse"));
  const int64_t dv = parse_case(base).integer("d_c");
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
        EXPECT_LE(std::abs(o[r * dv + c] - o1[r * dv + c]), 0x1p-16f * mx) << cs << ": o[" << r << "][" << c << "]";
    }
  }
}

TEST(CudaMlaDecodeGpu, SplitCountChangesNothingBeyondTheFormatsError) {
  SKIP_WITHOUT_GPU();
  expect_split_agrees("mla_decode(B=5,n_h=8,d_c=512,rope=64,page=16,split=1,ctx=700,regime=ragged,dtype=bf16,seed=3)");
  expect_split_agrees("mla_decode(B=5,n_h=4,d_c=512,rope=0,page=1,split=1,ctx=600,topk=500,regime=sparse_mixed,dtype=bf16,seed=3)");
  expect_split_agrees("mla_decode(B=3,n_h=4,d_c=512,rope=64,page=64,split=1,ctx=700,kv=fp8,kv_scale=0.037,regime=ragged,dtype=bf16,seed=3)");
}

// Rows whose `dead` flag is set hold o~ = 0 (+0.0, bit for bit) and lse = -inf; the others finite.
void expect_dead_rows(const std::string& cs, const TensorMap& out, const std::vector<bool>& dead, int64_t n_h, int64_t dv) {
  const std::vector<float> o = f32_values(out.at("o")), lse = f32_values(out.at("lse"));
  for (size_t b = 0; b < dead.size(); ++b)
    for (int64_t h = 0; h < n_h; ++h) {
      const float l = lse[b * static_cast<size_t>(n_h) + static_cast<size_t>(h)];
      if (dead[b]) EXPECT_TRUE(std::isinf(l) && l < 0) << cs << ": lse[" << b << "][" << h << "] = " << l;
      else EXPECT_TRUE(std::isfinite(l)) << cs << ": lse[" << b << "][" << h << "] = " << l;
      for (int64_t c = 0; c < dv; ++c) {
        const float x = o[(b * static_cast<size_t>(n_h) + static_cast<size_t>(h)) * static_cast<size_t>(dv) + static_cast<size_t>(c)];
        if (dead[b]) EXPECT_EQ(std::memcmp(&x, "\0\0\0\0", 4), 0) << cs << ": o[" << b << "][" << h << "] = " << x;
        else EXPECT_TRUE(std::isfinite(x)) << cs;
      }
    }
}

// A sequence of length 0 (dense) gets o~ = 0 and lse = -inf exactly (no NaN from -inf - -inf), with
// one split and with several (all empty); the other rows are finite.
TEST(CudaMlaDecodeGpu, AnEmptyContextGivesZeroAndMinusInfinity) {
  SKIP_WITHOUT_GPU();
  const std::string base = "mla_decode(B=4,n_h=4,d_c=512,rope=64,page=16,split=1,ctx=64,regime=empty_splits,dtype=bf16,seed=0)";
  for (const char* split : {"1", "4", "9"}) {
    const std::string cs = parse_case(base).with("split", split).str();
    const std::vector<int64_t> lens = attention_decode_lens(parse_case(cs));
    ASSERT_EQ(lens[0], 0);
    std::vector<bool> dead;
    for (int64_t L : lens) dead.push_back(L == 0);
    expect_dead_rows(cs, run_on_case(kCuda, cs), dead, 4, 512);
  }
}

// Sparse rows with no valid index: b = 0's row all -1, b = 1's all past its length of 37 (inside
// the page table), b = 2 of length 0; b = 3 keeps its drawn indices. The three give o~ = 0 and
// lse = -inf exactly whatever the split; b = 3 is finite.
TEST(CudaMlaDecodeGpu, AllInvalidIndexRowsGiveZeroAndMinusInfinity) {
  SKIP_WITHOUT_GPU();
  const std::string base = "mla_decode(B=4,n_h=4,d_c=512,rope=64,page=16,split=1,ctx=300,lens=100/37/0/300,topk=80,"
                           "regime=typical,dtype=bf16,seed=0)";
  for (const char* split : {"1", "3", "8"}) {
    const std::string cs = parse_case(base).with("split", split).str();
    const Case c = parse_case(cs);
    TensorMap in = generate_inputs(c);
    int32_t* idx = in.at("indices").data<int32_t>();
    for (int64_t t = 0; t < 80; ++t) idx[t] = -1, idx[80 + t] = static_cast<int32_t>(37 + (t * 7) % 250);
    expect_dead_rows(cs, run_candidate(require_candidate(kCuda), c, in), {true, true, true, false}, 4, 512);
  }
}

// All kernels run inside one timed call (cuda_rt.h's device rules): one launch counted, dense and
// sparse (the compaction kernel too).
TEST(CudaMlaDecodeGpu, EachCallIsOneTimedLaunch) {
  SKIP_WITHOUT_GPU();
  for (const std::string& cs : {suite_cases("mla-decode-smoke").at(1), suite_cases("mla-decode-smoke").at(6)}) {
    const Case c = parse_case(cs);
    const TensorMap in = generate_inputs(c);
    DeviceTimingScope scope;
    run_candidate(require_candidate(kCuda), c, in);
    const DeviceCall& d = scope.call();
    EXPECT_EQ(d.launches, 1) << cs;
    EXPECT_GT(d.device_s, 0.0) << cs;
    EXPECT_GE(d.launch_wall_s, d.device_s) << cs;
    EXPECT_FALSE(d.device.empty()) << cs;
  }
}

#ifdef DRIFTGATE_CUDA_EMULATED
// The smoke cases the emulator runs in well under a second each (not the 32K context: the gate test
// runs it), and the tiling cases.
std::vector<std::string> short_smoke_cases() {
  std::vector<std::string> v;
  for (const std::string& cs : suite_cases("mla-decode-smoke"))
    if (parse_case(cs).integer("ctx") <= 4096) v.push_back(cs);
  v.insert(v.end(), kTilingCases.begin(), kTilingCases.end());
  return v;
}

// A missing barrier reads what another thread wrote in the same phase: the bits change with the
// order the emulator runs a phase's threads in.
TEST(CudaMlaDecodeEmu, GivesTheSameBitsInBothThreadOrders) {
  for (const std::string& cs : short_smoke_cases()) {
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

// The kernels do the CPU packed candidate's operations in its order; with the host's expf and logf
// on both sides (the emulator's) the outputs are its bits exactly.
TEST(CudaMlaDecodeEmu, GivesTheCpuPackedCandidatesBitsOnTheHost) {
  for (const std::string& cs : short_smoke_cases()) {
    const TensorMap gpu = run_on_case(kCuda, cs), cpu = run_on_case(kCpu, cs);
    for (const char* name : {"o", "lse"}) {
      const Tensor &a = gpu.at(name), &b = cpu.at(name);
      ASSERT_EQ(a.nbytes(), b.nbytes()) << cs;
      EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.nbytes()), 0) << cs << ": " << name;
    }
  }
}

// A tensor that does not match the case is refused by name before any launch; a missing one is
// refused as the CPU candidates refuse it (std::invalid_argument naming it).
TEST(CudaMlaDecodeEmu, RejectsTensorsThatDoNotMatchTheCase) {
  const Case c = parse_case("mla_decode(B=2,n_h=4,d_c=32,rope=8,page=4,split=2,ctx=10,topk=6,regime=typical,dtype=bf16,seed=0)");
  const TensorMap good = generate_inputs(c);
  const auto refusal = [&](const std::string& cand, const TensorMap& in) -> std::string {
    TensorMap out;
    out["o"] = Tensor(DType::f32, {2, 4, 32});
    out["lse"] = Tensor(DType::f32, {2, 4});
    try {
      require_candidate(cand).run(c, in, out);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  for (const char* name : {"q_pe", "indices", "latent", "page_table"}) {
    TensorMap in = good;
    in.erase(name);
    EXPECT_THAT(refusal(kCuda, in), HasSubstr(std::string("'") + name + "' is missing"));
    EXPECT_THAT(refusal(kCpu, in), HasSubstr(std::string("'") + name + "' is missing"));
  }
  for (const auto& [name, shape] : std::vector<std::pair<const char*, std::vector<int64_t>>>{
           {"page_table", {2, 1}}, {"indices", {2, 5}}, {"q_pe", {2, 4, 4}}, {"latent", {3, 4, 32}}}) {
    TensorMap in = good;
    in.at(name) = Tensor(in.at(name).dtype(), shape);
    EXPECT_THAT(refusal(kCuda, in), HasSubstr(name)) << name << " of shape " << in.at(name).shape_str() << " was accepted";
  }
}
#endif

}  // namespace
}  // namespace dg
