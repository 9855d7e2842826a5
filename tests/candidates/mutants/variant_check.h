// The check of an op's mutants and equivalent variants (candidates/mutants/<op>.cpp), judged in this
// process by harness/judge/mutants.h, for tests/candidates/mutants/*_test.cpp.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/judge/mutants.h"

namespace dg {

// The variants of `base`'s op on `cases`: every mutant is listed in `exercising` (mutant -> the case
// that exercises its bug) and rejected on that case; every equivalent variant merges on every case,
// and there are exactly `equivalents` of them.
inline void check_variants(const std::string& base, const std::vector<std::string>& cases,
                           const std::map<std::string, std::string>& exercising, int equivalents) {
  std::vector<Case> parsed;
  for (const std::string& c : cases) parsed.push_back(parse_case(c));
  MutantOptions opt;
  opt.isolate = false;
  const KillMatrix m = run_mutants(require_candidate(base), parsed, default_policy(), opt);
  int mutants = 0;
  for (const VariantRow& r : m.rows) {
    if (r.kind == "mutant") {
      ++mutants;
      ASSERT_TRUE(exercising.count(r.candidate)) << r.candidate << " has no exercising case in this test";
      const std::string& c = exercising.at(r.candidate);
      const size_t i = static_cast<size_t>(std::find(m.cases.begin(), m.cases.end(), c) - m.cases.begin());
      ASSERT_LT(i, m.cases.size()) << c;
      EXPECT_EQ(r.cells[i].verdict, Verdict::REJECT) << r.candidate << " survived " << c;
    } else {
      for (size_t i = 0; i < r.cells.size(); ++i)
        EXPECT_EQ(r.cells[i].verdict, Verdict::MERGE) << r.candidate << " on " << m.cases[i] << ": " << r.cells[i].detail;
    }
  }
  EXPECT_EQ(mutants, static_cast<int>(exercising.size()));
  EXPECT_EQ(m.false_rejects(), 0);
  EXPECT_EQ(m.equivalents(), equivalents);
}

}  // namespace dg
