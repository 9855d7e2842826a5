// libFuzzer target: parse_case on arbitrary text. Every input must either parse or throw
// InputError; a parsed case's canonical string must parse back to the same case (the identity the
// JSON keys, the replay commands and the RNG rely on).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "harness/cases/case.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const dg::Case c = dg::parse_case(text);
    const std::string canonical = c.str();
    const dg::Case again = dg::parse_case(canonical);
    if (again.str() != canonical) std::abort();
  } catch (const dg::InputError&) {
  }
  return 0;
}
