// libFuzzer target: gate_rows_from_json, the reader of verdict.json behind `gate --resume`, on
// arbitrary text, as the gate calls it. Every input must either read or throw
// (nlohmann::json::exception, std::invalid_argument for nesting too deep, std::out_of_range); no
// input may crash.
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/judge/gate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)dg::gate_rows_from_json(text);
  } catch (const nlohmann::json::exception&) {
  } catch (const std::invalid_argument&) {
  } catch (const std::out_of_range&) {
  }
  return 0;
}
