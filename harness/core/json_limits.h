// Bounds on JSON read from files driftgate did not write itself (.safetensors headers, results and
// verdict files given to --resume): nesting depth is checked on the raw text before any JSON
// library sees it, because printing or walking a value nested 100,000 levels deep recurses once per
// level and overflows the stack.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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

// An integer field of JSON driftgate did not write itself. nlohmann's get<int64_t>() on a number with
// a fraction or out of range (6.5e23) converts it with a static_cast, which is undefined behaviour;
// this one throws std::out_of_range instead, naming what it found.
template <class T>
T json_integer(const nlohmann::json& j) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T>);
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      throw std::out_of_range("integer field out of range: " + j.dump());
    return static_cast<T>(v);
  }
  if (!j.is_number_integer()) throw std::out_of_range("expected an integer, found " + j.dump());
  const int64_t v = j.get<int64_t>();
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) || v > static_cast<int64_t>(std::numeric_limits<T>::max()))
    throw std::out_of_range("integer field out of range: " + j.dump());
  return static_cast<T>(v);
}

}  // namespace dg
