// Bounds on JSON read from files driftgate did not write itself (.safetensors headers, results and
// verdict files given to --resume): nesting depth is checked on the raw text before any JSON
// library sees it, because printing or walking a value nested 100,000 levels deep recurses once per
// level and overflows the stack.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dg {

// Headers and results files nest a handful of levels; 64 leaves room for any future field.
inline constexpr int kMaxJsonDepth = 64;

// The deepest nesting of arrays and objects in `text`, counting brackets outside strings (escapes
// inside strings are honoured). Stops counting once `limit` is exceeded and returns limit + 1.
// Malformed text gets a number too: the JSON parser reports its own errors afterwards.
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

// nlohmann::json::parse after the depth check. Throws nlohmann::json::exception (parse_error 101
// for malformed text) and, when the text nests deeper than `max_depth`, std::invalid_argument
// naming the limit.
nlohmann::json parse_json_bounded(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace dg
