// Named suites: fixed lists of case strings, so a table can be reproduced by name. A suite that
// judges one op registers itself beside that op's regimes (datasets/<op>.cpp); suites that mix ops
// are in datasets/suites.cpp.
#pragma once

#include <string>
#include <string_view>
#include <utility>
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

// Adds a suite (static initialisation: DG_REGISTER_SUITE); throws std::logic_error on a name
// registered twice.
void register_suite(Suite s);
// Every suite, in a fixed order whatever the order of registration: the suites suites.cpp lists
// first, in its order, then any other by name.
const std::vector<Suite>& all_suites();
const Suite* find_suite(std::string_view name);

// The cases a verb runs: a suite's (InputError for an unknown suite) or the given case strings,
// exactly one of the two; `verb` names the command in the message.
std::vector<Case> resolve_cases(const std::string& suite, const std::vector<std::string>& case_strs, const char* verb);
// The reference tier: the one asked for, else the suite's own, else dd (the default oracle for f32
// candidates). InputError for an unknown name.
Tier resolve_tier(const std::string& asked, const std::string& suite);

// Static-init registration, one statement beside the definition (as DG_REGISTER_REGIME):
//   DG_REGISTER_SUITE(kda_smoke, Suite{"kda-smoke", "small, odd KDA cases ...", {"kda(T=1,...)", ...}});
struct SuiteRegistrar {
  explicit SuiteRegistrar(Suite s) { register_suite(std::move(s)); }
};
#define DG_REGISTER_SUITE(id, ...) static const ::dg::SuiteRegistrar dg_registrar_suite_##id(__VA_ARGS__)

}  // namespace dg
