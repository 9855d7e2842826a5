#include "harness/policy.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "harness/case.h"
#include "policy_default.h"

namespace dg {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw InputError(fmt::format("policy {}: {}", source, what));
}

double number(const toml::node& n, const std::string& source, const std::string& key) {
  if (auto v = n.value<double>()) return *v;
  fail(source, fmt::format("'{}' must be a number", key));
}

double positive(const toml::node& n, const std::string& source, const std::string& key, bool allow_zero = true) {
  double v = number(n, source, key);
  if (v < 0 || (!allow_zero && v == 0)) fail(source, fmt::format("'{}' must be {} 0, got {}", key, allow_zero ? ">=" : ">", v));
  return v;
}

void apply(Policy& p, const toml::table& root, const std::string& source) {
  for (const auto& [k, node] : root) {
    std::string key(k.str());
    if (key == "precision") {
      const toml::table* t = node.as_table();
      if (!t) fail(source, "[precision] must be a table");
      for (const auto& [pk, pn] : *t) {
        std::string name(pk.str());
        std::string full = "precision." + name;
        if (name == "slack") p.slack = positive(pn, source, full);
        else if (name == "naive_factor") p.naive_factor = positive(pn, source, full);
        else if (name == "floor_ulps") p.floor_ulps = positive(pn, source, full);
        else if (name == "drift_margin") p.drift_margin = positive(pn, source, full);
        else if (name == "drift_min_positions") p.drift_min_positions = static_cast<int64_t>(positive(pn, source, full));
        else if (name == "metrics") {
          const toml::array* a = pn.as_array();
          if (!a) fail(source, "'precision.metrics' must be an array of strings");
          p.metrics.clear();
          for (const toml::node& m : *a) {
            auto s = m.value<std::string>();
            if (!s || (*s != "rms" && *s != "max_abs"))
              fail(source, "'precision.metrics' entries must be \"rms\" or \"max_abs\"");
            p.metrics.push_back(*s);
          }
        } else if (name == "min_bits") {
          const toml::table* mb = pn.as_table();
          if (!mb) fail(source, "[precision.min_bits] must be a table");
          for (const auto& [fk, fn] : *mb) {
            std::string fmt_name(fk.str());
            if (!parse_dtype(fmt_name)) fail(source, fmt::format("[precision.min_bits]: unknown format '{}'", fmt_name));
            p.min_bits[fmt_name] = number(fn, source, "precision.min_bits." + fmt_name);
          }
        } else {
          fail(source, fmt::format("unknown key '{}'", full));
        }
      }
    } else if (key == "naive") {
      const toml::table* t = node.as_table();
      if (!t) fail(source, "[naive] must be a table");
      for (const auto& [nk, nn] : *t) {
        auto v = nn.value<std::string>();
        if (!v) fail(source, fmt::format("'naive.{}' must be a candidate name", nk.str()));
        p.naive[std::string(nk.str())] = *v;
      }
    } else if (key == "throughput") {
      const toml::table* t = node.as_table();
      if (!t) fail(source, "[throughput] must be a table");
      for (const auto& [tk, tn] : *t) {
        std::string name(tk.str());
        std::string full = "throughput." + name;
        if (name == "confidence") {
          p.confidence = number(tn, source, full);
          if (!(p.confidence > 0.5 && p.confidence < 1)) fail(source, "'throughput.confidence' must be in (0.5, 1)");
        } else if (name == "min_effect") p.min_effect = positive(tn, source, full);
        else if (name == "max_time_s") p.max_time_s = positive(tn, source, full, false);
        else if (name == "target_halfwidth") p.target_halfwidth = positive(tn, source, full, false);
        else if (name == "claim_tolerance") p.claim_tolerance = positive(tn, source, full);
        else fail(source, fmt::format("unknown key '{}'", full));
      }
    } else if (key == "cases") {
      const toml::table* t = node.as_table();
      if (!t) fail(source, "[cases] must be a table");
      for (const auto& [ck, cn] : *t) {
        std::string name(ck.str());
        if (name != "not_supported") fail(source, fmt::format("unknown key 'cases.{}'", name));
        auto v = cn.value<std::string>();
        if (!v || (*v != "skip" && *v != "reject"))
          fail(source, "'cases.not_supported' must be \"skip\" or \"reject\"");
        p.not_supported = *v;
      }
    } else {
      fail(source, fmt::format("unknown table or key '{}'", key));
    }
  }
}

}  // namespace

double Policy::min_bits_for(DType format) const {
  auto it = min_bits.find(std::string(name(format)));
  return it == min_bits.end() ? 0.0 : it->second;
}

std::string Policy::naive_for(const std::string& op, DType format) const {
  auto it = naive.find(op + "." + std::string(name(format)));
  return it == naive.end() ? std::string() : it->second;
}

Policy parse_policy(const std::string& text, const std::string& source) {
  Policy p;
  if (source != "default") p = default_policy();
  p.source = source;
  try {
    toml::table root = toml::parse(text, source);
    apply(p, root, source);
  } catch (const toml::parse_error& e) {
    fail(source, fmt::format("not valid TOML: {} (line {})", e.description(), e.source().begin.line));
  }
  return p;
}

Policy default_policy() {
  static const Policy p = parse_policy(kDefaultPolicyToml, "default");
  return p;
}

Policy read_policy(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InputError(fmt::format("policy {}: cannot read the file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_policy(ss.str(), path);
}

}  // namespace dg
