// libFuzzer target: the rows of a verify --json results file, as `verify --resume` reads them (the
// bounded JSON parse, then the case, candidate and disposition of every record, each record copied)
// and as record_from_json turns them back into Records. Every input must either read or throw
// (nlohmann::json::exception, std::invalid_argument for nesting too deep, std::out_of_range); no
// input may crash.
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

#include "harness/core/json_limits.h"
#include "harness/report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = dg::parse_json_bounded(text);
    nlohmann::json prior = nlohmann::json::array();
    for (const auto& r : j.at("records")) {
      prior.push_back(r);
      (void)r.at("case").get<std::string>();
      (void)r.at("candidate").get<std::string>();
      (void)r.at("disposition").get<std::string>();
      const dg::Record rec = dg::record_from_json(r);
      (void)dg::to_json(rec).dump();
    }
  } catch (const nlohmann::json::exception&) {
  } catch (const std::invalid_argument&) {
  } catch (const std::out_of_range&) {
  }
  return 0;
}
