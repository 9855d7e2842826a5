// Named suites: fixed lists of case strings, so a table can be reproduced by name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harness/cases/case.h"
#include "reference/real/tier.h"

namespace dg {

struct Suite {
  std::string name;
  std::string doc;
  std::vector<std::string> cases;
  std::string tier = {};   // the reference tier verify uses for this suite unless --ref-tier is given
};

const std::vector<Suite>& all_suites();
const Suite* find_suite(std::string_view name);

// The cases a verb runs: a suite's (InputError for an unknown suite) or the given case strings,
// exactly one of the two; `verb` names the command in the message.
std::vector<Case> resolve_cases(const std::string& suite, const std::vector<std::string>& case_strs, const char* verb);
// The reference tier: the one asked for, else the suite's own, else dd (the default oracle for f32
// candidates). InputError for an unknown name.
Tier resolve_tier(const std::string& asked, const std::string& suite);

}  // namespace dg
