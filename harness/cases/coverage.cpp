#include "harness/cases/coverage.h"

#include <algorithm>
#include <set>

#include "harness/cases/registry.h"

namespace dg {
namespace {

// Every axis of an op, in a fixed order: its parameters (schema order), its regimes, its own axes.
std::vector<CoverageAxis> axes_of(const OpSpec& op) {
  std::vector<CoverageAxis> out;
  for (const ParamSpec& p : op.params) {
    if (p.name == "regime") continue;
    std::vector<std::string> values = p.choices;
    if (p.kind == ParamKind::boolean) values = {"0", "1"};
    if (values.empty()) continue;
    const std::string name = p.name;
    out.push_back({name, values, [name](const Case& c) { return std::vector<std::string>{c.text(name)}; }});
  }
  std::vector<std::string> regimes;
  for (const Regime* r : all_regimes())
    if (r->op == op.name) regimes.push_back(r->name);
  if (!regimes.empty())
    out.push_back({"regime", regimes, [](const Case& c) { return std::vector<std::string>{c.text("regime")}; }});
  out.insert(out.end(), op.coverage.begin(), op.coverage.end());
  return out;
}

}  // namespace

std::vector<AxisCoverage> op_coverage(const std::string& op_name, const std::vector<Case>& cases) {
  const OpSpec* op = find_op(op_name);
  if (!op) return {};
  std::vector<AxisCoverage> out;
  for (const CoverageAxis& axis : axes_of(*op)) {
    std::set<std::string> seen;
    for (const Case& c : cases)
      if (c.op() == op_name)
        for (const std::string& v : axis.of(c)) seen.insert(v);
    AxisCoverage a{axis.name, {}, {}};
    for (const std::string& v : axis.values) (seen.count(v) ? a.covered : a.missing).push_back(v);
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<std::string> coverage_gaps(const std::string& op, const std::vector<Case>& cases) {
  std::vector<std::string> out;
  for (const AxisCoverage& a : op_coverage(op, cases))
    for (const std::string& v : a.missing) out.push_back(a.axis + "=" + v);
  return out;
}

nlohmann::json suite_coverage_json(const std::vector<Case>& cases) {
  std::vector<std::string> ops;
  for (const Case& c : cases)
    if (std::find(ops.begin(), ops.end(), c.op()) == ops.end()) ops.push_back(c.op());
  nlohmann::json j = nlohmann::json::object();
  for (const std::string& op : ops) {
    nlohmann::json rows = nlohmann::json::array();
    for (const AxisCoverage& a : op_coverage(op, cases))
      rows.push_back({{"axis", a.axis}, {"covered", a.covered}, {"missing", a.missing}});
    j[op] = rows;
  }
  return j;
}

}  // namespace dg
