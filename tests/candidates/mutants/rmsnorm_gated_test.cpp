// The rmsnorm_gated mutants and equivalent variants (candidates/mutants/rmsnorm_gated.cpp), judged
// in this process by harness/judge/mutants.h: each mutant is rejected on the case named for it,
// each equivalent variant merges on every case.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "harness/judge/mutants.h"

namespace dg {
namespace {

struct OpUnderTest {
  std::string base;
  std::vector<std::string> cases;
  std::map<std::string, std::string> exercising;   // mutant -> the case that exercises its bug
};

void check(const OpUnderTest& t) {
  std::vector<Case> cases;
  for (const std::string& c : t.cases) cases.push_back(parse_case(c));
  MutantOptions opt;
  opt.isolate = false;
  const KillMatrix m = run_mutants(require_candidate(t.base), cases, default_policy(), opt);
  int mutants = 0;
  for (const VariantRow& r : m.rows) {
    if (r.kind == "mutant") {
      ++mutants;
      ASSERT_TRUE(t.exercising.count(r.candidate)) << r.candidate << " has no exercising case in this test";
      const std::string& c = t.exercising.at(r.candidate);
      const size_t i = static_cast<size_t>(std::find(m.cases.begin(), m.cases.end(), c) - m.cases.begin());
      ASSERT_LT(i, m.cases.size()) << c;
      EXPECT_EQ(r.cells[i].verdict, Verdict::REJECT) << r.candidate << " survived " << c;
    } else {
      for (size_t i = 0; i < r.cells.size(); ++i)
        EXPECT_EQ(r.cells[i].verdict, Verdict::MERGE) << r.candidate << " on " << m.cases[i] << ": " << r.cells[i].detail;
    }
  }
  EXPECT_EQ(mutants, static_cast<int>(t.exercising.size()));
  EXPECT_EQ(m.false_rejects(), 0);
  EXPECT_GE(m.equivalents(), 2);
}

TEST(LayerMutants, RmsNormGated) {
  const std::string plain = "rmsnorm_gated(N=256,D=128,regime=kimi_linear,dtype=bf16,seed=0)";
  const std::string tiny = "rmsnorm_gated(N=256,D=128,regime=tiny_rms,dtype=bf16,seed=0)";
  check({"rmsnorm_gated_cpu_f32",
         {plain, tiny},
         {{"rmsnorm_gated_mutant_eps_outside_sqrt", tiny},
          {"rmsnorm_gated_mutant_silu_gate", plain},
          {"rmsnorm_gated_mutant_double_round", plain},
          {"rmsnorm_gated_mutant_sum_bf16", plain}}});
}

}  // namespace
}  // namespace dg
