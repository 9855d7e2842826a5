// The CPU candidates of mhc (candidates/cpu/mhc.cpp) against the f64 reference through verify, as a
// user runs them: every smoke case passes in the candidate's format, the doubly-stochastic residual
// of their C is the reference's within f32 noise; bad cases and a NaN stream refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/ops/mhc.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

const OpMeasure& measure(const Record& r, const std::string& name) {
  for (const OpMeasure& m : r.measures)
    if (m.name == name) return m;
  throw std::runtime_error("no measure " + name + " in " + r.case_str);
}

// The naive f32 candidate keeps 18+ bits of C everywhere (its sequential f32 sums over 4H = 16384
// lose the most), the fused one (bf16 streams) 5+ bits of the streams on every case and 18+ of C on
// the bf16 cases (on an f32 case it reads the streams rounded to bf16, which moves C by ~2^-9 of its
// sensitivity: 8+); both C's doubly-stochastic residuals are the reference's within 2^-20.
TEST(MhcCpu, EveryCandidatePassesEverySmokeCaseInItsFormat) {
  for (const std::string& cs : find_suite("mhc-smoke")->cases) {
    const Record naive = verify_one("mhc_cpu_naive_f32", cs);
    EXPECT_EQ(naive.disposition, Disposition::PASSED) << cs << ": " << naive.reason;
    EXPECT_GT(output(naive, "C").metrics.bits, 18.0) << cs;
    EXPECT_GT(output(naive, "x_in").metrics.bits, 16.0) << cs;
    const Record fused = verify_one("mhc_cpu_fused_f32", cs);
    EXPECT_EQ(fused.disposition, Disposition::PASSED) << cs << ": " << fused.reason;
    EXPECT_GT(output(fused, "C").metrics.bits, cs.find("dtype=bf16") != std::string::npos ? 18.0 : 8.0) << cs;
    for (const char* o : {"x_in", "x_out"}) EXPECT_GT(output(fused, o).metrics.bits, 5.0) << cs << " " << o;
    EXPECT_NEAR(measure(naive, "doubly_stochastic.C").value, measure(fused, "doubly_stochastic.C").value, 0x1p-20) << cs;
  }
}

TEST(MhcCpu, BadCasesAreRefused) {
  for (const char* bad : {"mhc(T=0,H=64)", "mhc(T=2,H=0)", "mhc(T=2,H=-64)", "mhc(T=2,H=64,iters=0)",
                          "mhc(T=2,H=64,iters=1001)", "mhc(T=2,H=64,dtype=f16)", "mhc(T=2,H=64,regime=hidden)",
                          "mhc(T=4294967296,H=4294967296)"})
    expect_refused(bad);
}

// The message names the parameter and its constraint (exit code 2 in the CLI).
TEST(MhcCpu, BadParametersAreNamed) {
  for (const auto& [bad, what] : std::vector<std::pair<std::string, std::string>>{
           {"mhc(T=2,H=0)", "mhc: H must be >= 1, got 0"},
           {"mhc(T=2,H=64,iters=0)", "mhc: iters must be >= 1, got 0"},
           {"mhc(T=2,H=64,iters=5000)", "mhc: iters must be at most 1000"}}) {
    try {
      find_op("mhc")->validate(parse_case(bad));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

// The measure: 0 for a permutation matrix, the worst row or column of any token otherwise, NaN
// (the rule fails) for a non-finite C.
TEST(MhcCpu, DoublyStochasticResidualIsTheWorstRowOrColumn) {
  std::vector<double> C(32, 0.0);
  for (int i = 0; i < 4; ++i) C[static_cast<size_t>(i * 4 + (i + 1) % 4)] = 1.0;   // token 0: a permutation
  for (int i = 0; i < 16; ++i) C[static_cast<size_t>(16 + i)] = 0.25;             // token 1: uniform ...
  C[16 + 6] = 0.25 + 0x1p-10;                                                     // ... row 1 and column 2 off
  EXPECT_EQ(mhc_doubly_stochastic_residual({C.begin(), C.begin() + 16}, 1), 0.0);
  EXPECT_EQ(mhc_doubly_stochastic_residual(C, 2), 0x1p-10);
  C[3] = std::nan("");
  EXPECT_TRUE(std::isnan(mhc_doubly_stochastic_residual(C, 2)));
}

TEST(MhcCpu, ANonFiniteStreamIsRefusedByName) {
  const Case c = parse_case("mhc(T=2,H=64,regime=typical,dtype=bf16,seed=0)");
  TensorMap in = generate_inputs(c);
  in.at("x").set(70, std::nan(""));
  try {
    find_op("mhc")->check_inputs(c, in);
    FAIL() << "a NaN in x was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("x"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dg
