// Named suites: fixed lists of case strings, so a table can be reproduced by name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dg {

struct Suite {
  std::string name;
  std::string doc;
  std::vector<std::string> cases;
  std::string tier = {};   // the reference tier verify uses for this suite unless --ref-tier is given
};

const std::vector<Suite>& all_suites();
const Suite* find_suite(std::string_view name);

}  // namespace dg
