#include "harness/judge/policy.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "harness/cases/case.h"
#include "harness/core/output_path.h"
#include "harness/cases/registry.h"
#include "policy_default.h"

namespace dg {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw InputError(fmt::format("policy {}: {}", source, what));
}

// Every number must be finite (TOML has nan and inf literals); ranges are checked by policy_problem
// once the whole file is read.
double number(const toml::node& n, const std::string& source, const std::string& key) {
  std::optional<double> v = n.value<double>();
  if (!v) fail(source, fmt::format("'{}' must be a number", key));
  if (!std::isfinite(*v)) fail(source, fmt::format("'{}' must be a finite number, got {}", key, *v));
  return *v;
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
        else if (name == "tail_factor") p.tail_factor = positive(pn, source, full);
        else if (name == "drift_margin") p.drift_margin = positive(pn, source, full);
        else if (name == "drift_min_positions") {
          // Asked before any conversion: toml++'s float-to-integer conversion casts before it
          // checks the range (undefined for 1e30).
          if (!pn.is_integer()) fail(source, fmt::format("'{}' must be an integer", full));
          auto v = pn.value<int64_t>();
          if (!v) fail(source, fmt::format("'{}' must be an integer", full));
          p.drift_min_positions = *v;
        }
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
        else if (name == "interim_confidence") p.interim_confidence = positive(tn, source, full, false);
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

const std::vector<PolicyBound>& policy_bounds() {
  static const std::vector<PolicyBound> bounds = {
      {"precision.slack", 0, 2, &Policy::slack},
      {"precision.naive_factor", 0, 4, &Policy::naive_factor},
      {"precision.floor_ulps", 0, 16, &Policy::floor_ulps},
      {"precision.tail_factor", 1, 4, &Policy::tail_factor},
      {"precision.drift_margin", 0, 1, &Policy::drift_margin},
      {"throughput.confidence", 0.8, 0.9999, &Policy::confidence},
      {"throughput.min_effect", 0, 0.5, &Policy::min_effect},
      {"throughput.max_time_s", 0.1, 3600, &Policy::max_time_s},
      {"throughput.target_halfwidth", 0.001, 0.5, &Policy::target_halfwidth},
      {"throughput.interim_confidence", 0.99, 1, &Policy::interim_confidence},
      {"throughput.claim_tolerance", 0, 0.5, &Policy::claim_tolerance},
  };
  return bounds;
}

std::string policy_problem(const Policy& p) {
  for (const PolicyBound& b : policy_bounds()) {
    const double v = p.*b.field;
    if (!(v >= b.lo && v <= b.hi))   // NaN fails too
      return fmt::format("'{}' must be in [{}, {}], got {}", b.key, b.lo, b.hi, v);
  }
  if (p.drift_min_positions < 1 || p.drift_min_positions > kMaxDriftMinPositions)
    return fmt::format("'precision.drift_min_positions' must be in [1, {}], got {}", kMaxDriftMinPositions,
                       p.drift_min_positions);
  if (p.metrics.empty()) return "'precision.metrics' must name at least one metric (\"rms\", \"max_abs\")";
  for (const auto& [format, bits] : p.min_bits) {
    const std::optional<DType> d = parse_dtype(format);
    if (!d) return fmt::format("[precision.min_bits]: unknown format '{}'", format);
    const int precision = info(*d).precision;
    if (!(bits >= 1 && bits <= precision))
      return fmt::format("'precision.min_bits.{}' must be in [1, {}] (the format's significand bits), got {}", format,
                         precision, bits);
  }
  for (const auto& [key, cand] : p.naive) {
    if (cand.empty()) return fmt::format("'naive.{}' must name a candidate", key);
    // A canary as the naive kernel would raise every limit to its own (huge) error.
    if (const Candidate* c = find_candidate(cand); c && (is_canary(c->info()) || c->info().algorithm == "mutant"))
      return fmt::format("'naive.{}' names {}, a null or cheating candidate or a mutant, which cannot set a precision limit", key,
                         cand);
  }
  return {};
}

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
  if (std::string problem = policy_problem(p); !problem.empty()) fail(source, problem);
  return p;
}

Policy default_policy() {
  static const Policy p = parse_policy(kDefaultPolicyToml, "default");
  return p;
}

Policy read_policy(const std::string& path) {
  return parse_policy(read_regular_file("policy", path, size_t{1} << 20), path);
}

}  // namespace dg
