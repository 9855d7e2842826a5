// The CPU candidates of mhc (candidates/cpu/mhc.cpp) against the f64 reference through verify, as a
// user runs them: every smoke case passes in the candidate's format, the doubly-stochastic residual
// of their C is the reference's within f32 noise; bad cases and a NaN stream refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "datasets/suites.h"
#include "harness/cases/registry.h"
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
