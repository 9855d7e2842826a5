#include "harness/core/json_limits.h"

#include <stdexcept>

#include <fmt/format.h>

namespace dg {

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    else if (ch == '[' || ch == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return limit + 1;
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json parse_json_bounded(std::string_view text, int max_depth) {
  if (json_nesting_depth(text, max_depth) > max_depth)
    throw std::invalid_argument(fmt::format("JSON nested deeper than {} levels", max_depth));
  return nlohmann::json::parse(text);
}

}  // namespace dg
