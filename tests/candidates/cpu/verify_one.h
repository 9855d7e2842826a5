// One candidate on one case through verify, as a user runs it, for the tests of the CPU candidates
// (tests/candidates/cpu/*_test.cpp), and one output of its record by name.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/cases/registry.h"
#include "harness/judge/verify.h"

namespace dg {

// The record of candidate `cand` on `case_str` against the reference at `tier` (exactly one).
inline Record verify_one(const std::string& cand, const std::string& case_str, Tier tier = Tier::f64) {
  VerifyOptions opt;
  opt.tier = tier;
  std::vector<Record> r = verify_case(parse_case(case_str), {find_candidate(cand)}, opt);
  EXPECT_EQ(r.size(), 1u);
  return r.at(0);
}

// The output `name` of `r`; throws std::runtime_error when it has none.
inline const OutputResult& output(const Record& r, const std::string& name) {
  for (const OutputResult& o : r.outputs)
    if (o.name == name) return o;
  throw std::runtime_error("no output " + name);
}

}  // namespace dg
