// The CPU candidates of gemm_fp8_block (candidates/cpu/gemm_fp8_block.cpp) against the reference
// through verify, as a user runs them; the op's format bound (harness/ops/gemm_fp8_block.h) held by
// every honest kernel over seeds and growing with K; bad cases refused.
#include "harness/ops/gemm_fp8_block.h"

#include <gtest/gtest.h>

#include <string>

#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/gemm_fp8_block_bound.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

const char* const kHonest[] = {"gemm_fp8_block_cpu_naive_f32", "gemm_fp8_block_cpu_blocked_f32",
                               "gemm_fp8_block_cpu_deepgemm_bf16"};

// Every candidate passes every smoke case: the f32 ones at 20+ bits, the bf16 one at 7+ (its output
// in bf16, its partials in 14 bits).
TEST(GemmFp8BlockCpu, EveryCandidatePassesEverySmokeCase) {
  for (const std::string& cs : find_suite("gemm-fp8-block-smoke")->cases)
    for (const char* cand : kHonest) {
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " on " << cs << ": " << r.reason;
      const bool bf16 = std::string(cand).find("bf16") != std::string::npos;
      EXPECT_GT(output(r, "y").metrics.bits, bf16 ? 7.0 : 20.0) << cand << " on " << cs;
    }
}

// The bound never fails an honest kernel: every smoke case over seeds 0-2, each candidate at its
// declared accumulator (f32, or the Hopper kernel's tf32 lower bound) and output dtype.
TEST(GemmFp8BlockCpu, HonestKernelsStayWithinTheFormatBound) {
  for (const std::string& cs : find_suite("gemm-fp8-block-smoke")->cases)
    for (int seed = 0; seed < 3; ++seed) {
      const std::string s = parse_case(cs).with("seed", std::to_string(seed)).str();
      for (const char* cand : kHonest) {
        std::string where;
        const double ratio = bound_ratio(cand, s, &where);
        EXPECT_LE(ratio, 1.0) << cand << " on " << s << ": " << where;
        EXPECT_GT(ratio, 0.0) << cand << " on " << s;
      }
    }
}

// The bound grows with K (more blocks promoted and summed in f32), loosens for a narrower declared
// accumulator and includes the output format's rounding. x = w = 1 and unit scales: S = K, r = K.
TEST(GemmFp8BlockCpu, TheBoundGrowsWithKAndLoosensWithNarrowerFormats) {
  const auto per_term = [](int64_t K, DType state, DType out) {
    const GemmFp8BlockParams p{1, 1, K};
    TensorMap in;
    in["x"] = Tensor(DType::e4m3, {1, K});
    in["w"] = Tensor(DType::e4m3, {1, K});
    in["x_scale"] = Tensor(DType::f32, {1, p.kb()});
    in["w_scale"] = Tensor(DType::f32, {1, p.kb()});
    for (const char* n : {"x", "w", "x_scale", "w_scale"})
      for (int64_t i = 0; i < in[n].numel(); ++i) in[n].set(i, 1.0);
    std::vector<double> b;
    gemm_fp8_block_bound(p, in, state, out, {static_cast<double>(K)}, b);
    return b.at(0) / static_cast<double>(K);
  };
  // f32 accumulation: 127 inner adds at 2^-23 and K/128 + 1 f32 operations at 2^-24, plus r's
  // rounding (to first order: the products of the factors add 2^-32 relative).
  EXPECT_NEAR(per_term(128, DType::f32, DType::f32), 127 * 0x1p-23 + 2 * 0x1p-24 + 0x1p-24 + 0x1p-52, 1e-9);
  EXPECT_NEAR(per_term(7168, DType::f32, DType::f32) - per_term(128, DType::f32, DType::f32), 55 * 0x1p-24, 1e-9);
  EXPECT_GT(per_term(128, DType::tf32, DType::f32), 100 * per_term(128, DType::f32, DType::f32));
  EXPECT_GT(per_term(128, DType::f32, DType::bf16), 0x1p-8);
}

TEST(GemmFp8BlockCpu, BadCasesAreRefused) {
  for (const char* bad : {"gemm_fp8_block(M=0,N=8,K=128)", "gemm_fp8_block(M=2,N=0,K=128)", "gemm_fp8_block(M=2,N=8,K=0)",
                          "gemm_fp8_block(M=2,N=8,K=100)", "gemm_fp8_block(M=2,N=8,K=4100)",
                          "gemm_fp8_block(M=2,N=8,K=128,dtype=bf16)", "gemm_fp8_block(M=2,N=8,K=128,regime=activations)",
                          "gemm_fp8_block(M=65536,N=65536,K=8192)"})
    expect_refused(bad);
}

// The block constraint is named in the message.
TEST(GemmFp8BlockCpu, TheBlockConstraintIsNamed) {
  try {
    find_op("gemm_fp8_block")->validate(parse_case("gemm_fp8_block(M=1,N=8,K=200)"));
    FAIL() << "K = 200 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("K must be a multiple of the scale block 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dg
