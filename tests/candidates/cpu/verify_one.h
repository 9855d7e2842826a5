// One candidate on one case through verify, as a user runs it, for the tests of the CPU candidates
// (tests/candidates/cpu/*_test.cpp), one output or op measure of its record by name, and a bad case
// or bad stored inputs refused.
#pragma once

#include <cmath>
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

// A case string that must be refused as bad input: parsing it, the op's validate or generating its
// inputs throws InputError (what every verb does before any work).
inline void expect_refused(const std::string& bad) {
  EXPECT_THROW(
      {
        const Case c = parse_case(bad);
        find_op(c.op())->validate(c);
        generate_inputs(c);
      },
      InputError)
      << bad;
}

// Stored inputs `in` of case `c` that the op's check_inputs must refuse with an InputError whose
// message contains `what`.
inline void expect_stored_refused(const Case& c, const TensorMap& in, const std::string& what) {
  try {
    find_op(c.op())->check_inputs(c, in);
    ADD_FAILURE() << "accepted: " << what;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// The output `name` of `r`; throws std::runtime_error when it has none.
inline const OutputResult& output(const Record& r, const std::string& name) {
  for (const OutputResult& o : r.outputs)
    if (o.name == name) return o;
  throw std::runtime_error("no output " + name);
}

// The value of the op measure `name` of `r`; a test failure and NaN when it has none.
inline double measure_value(const Record& r, const std::string& name) {
  for (const OpMeasure& m : r.measures)
    if (m.name == name) return m.value;
  ADD_FAILURE() << "no measure " << name << " in " << r.case_str;
  return std::nan("");
}

}  // namespace dg
