// libFuzzer target: parse_policy on arbitrary text. Every input must either parse or throw
// InputError; an accepted policy must hold every number inside its documented range
// (policies/default.toml), so that no policy file can make the gate merge a null candidate.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "harness/cases/case.h"
#include "harness/judge/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const dg::Policy p = dg::parse_policy(text, "fuzz");
    if (!dg::policy_problem(p).empty()) std::abort();
  } catch (const dg::InputError&) {
  }
  return 0;
}
