#include "harness/cases/case.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "harness/cases/registry.h"

namespace dg {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Integers accept a binary K/M suffix (T=64K is 65536, T=1M is 1048576); canonical text is digits.
std::optional<int64_t> parse_int(std::string_view s) {
  int64_t mult = 1;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) { mult = 1024; s.remove_suffix(1); }
  else if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) { mult = 1024 * 1024; s.remove_suffix(1); }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  if (v > INT64_MAX / mult || v < INT64_MIN / mult) return std::nullopt;
  return v * mult;
}

std::optional<double> parse_real(std::string_view s) {
  std::string str(s);
  if (str.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

const ParamSpec* find_param(const OpSpec& op, std::string_view name) {
  for (const ParamSpec& p : op.params)
    if (p.name == name) return &p;
  return nullptr;
}

// The canonical text of a value, or an InputError naming the parameter and what it expects.
std::string canonical_value(const std::string& op, const ParamSpec& p, std::string_view raw) {
  std::string_view v = trim(raw);
  auto bad = [&](std::string_view expected) {
    return InputError(fmt::format("{}: parameter '{}' expects {}, got '{}'", op, p.name, expected, v));
  };
  switch (p.kind) {
    case ParamKind::integer: {
      auto x = parse_int(v);
      if (!x) throw bad("an integer");
      return std::to_string(*x);
    }
    case ParamKind::real: {
      auto x = parse_real(v);
      if (!x) throw bad("a finite number");
      return fmt::format("{}", *x);
    }
    case ParamKind::boolean:
      if (v == "1" || v == "true") return "1";
      if (v == "0" || v == "false") return "0";
      throw bad("0 or 1");
    case ParamKind::int_list: {
      std::string out;
      std::string_view rest = v;
      if (rest.empty()) return out;
      while (true) {
        size_t slash = rest.find('/');
        auto x = parse_int(trim(rest.substr(0, slash)));
        if (!x) throw bad("integers separated by '/' (e.g. 1/15/63)");
        if (!out.empty()) out += '/';
        out += std::to_string(*x);
        if (slash == std::string_view::npos) break;
        rest = rest.substr(slash + 1);
      }
      return out;
    }
    case ParamKind::text:
      if (v.empty()) throw bad("a value");
      if (!p.choices.empty()) {
        for (const std::string& c : p.choices)
          if (c == v) return c;
        std::string list;
        for (const std::string& c : p.choices) list += (list.empty() ? "" : ", ") + c;
        throw bad("one of: " + list);
      }
      return std::string(v);
  }
  throw bad("a value");
}

}  // namespace

int64_t checked_product(const std::string& what, std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  std::string text;
  bool overflow = false;
  for (int64_t f : factors) {
    text += fmt::format("{}{}", text.empty() ? "" : "*", f);
    overflow |= f < 0 || __builtin_mul_overflow(product, f, &product);
  }
  if (overflow) throw InputError(fmt::format("{} = {} does not fit in 64 bits", what, text));
  return product;
}

void check_option_range(const std::string& option, double value, double lo, double hi, bool lo_open) {
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) && value <= hi;
  if (!ok) throw InputError(fmt::format("{} must be in {}{}, {}], got {}", option, lo_open ? "(" : "[", lo, hi, value));
}

DType Case::dtype() const {
  auto t = parse_dtype(text("dtype"));
  if (!t) throw InputError("unknown dtype " + text("dtype"));
  return *t;
}

std::string Case::str() const {
  const OpSpec* op = find_op(op_);
  std::string s = op_ + "(";
  bool first = true;
  auto emit = [&](const ParamSpec& p) {
    s += (first ? "" : ",") + p.name + "=" + values_.find(p.name)->second;
    first = false;
  };
  for (const ParamSpec& p : op->params)
    if (p.always_print || !is_default(p.name)) emit(p);
  return s + ")";
}

namespace {
const std::string& lookup(const std::map<std::string, std::string, std::less<>>& m, std::string_view op,
                          std::string_view name) {
  auto it = m.find(name);
  if (it == m.end()) throw std::logic_error(fmt::format("{}: no parameter '{}'", op, name));
  return it->second;
}
}  // namespace

int64_t Case::integer(std::string_view name) const { return *parse_int(lookup(values_, op_, name)); }
double Case::real(std::string_view name) const { return *parse_real(lookup(values_, op_, name)); }
const std::string& Case::text(std::string_view name) const { return lookup(values_, op_, name); }
bool Case::boolean(std::string_view name) const { return lookup(values_, op_, name) == "1"; }
std::vector<int64_t> Case::int_list(std::string_view name) const {
  std::vector<int64_t> out;
  std::string_view rest = lookup(values_, op_, name);
  while (!rest.empty()) {
    size_t slash = rest.find('/');
    out.push_back(*parse_int(rest.substr(0, slash)));
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  return out;
}

bool Case::is_default(std::string_view name) const {
  auto it = explicit_.find(name);
  return it == explicit_.end() || !it->second;
}

Case make_case(std::string_view op_name, const std::map<std::string, std::string>& given) {
  const OpSpec* op = find_op(op_name);
  if (!op) {
    std::string known;
    for (const OpSpec* o : all_ops()) known += (known.empty() ? "" : ", ") + o->name;
    throw InputError(fmt::format("unknown op '{}' (known: {})", op_name, known));
  }
  Case c;
  c.op_ = op->name;
  std::map<std::string, std::string> canon;
  for (const auto& [k, v] : given) {
    const ParamSpec* p = find_param(*op, k);
    if (!p) {
      std::string known;
      for (const ParamSpec& q : op->params) known += (known.empty() ? "" : ", ") + q.name;
      throw InputError(fmt::format("{}: unknown parameter '{}' (parameters: {})", op->name, k, known));
    }
    canon[k] = canonical_value(op->name, *p, v);
  }
  // Defaults: the schema's, then the regime's (a regime implies a gate mode, a layout, ...).
  std::map<std::string, std::string> defaults;
  for (const ParamSpec& p : op->params) defaults[p.name] = p.default_value;
  if (find_param(*op, "regime")) {
    std::string regime = canon.count("regime") ? canon["regime"] : defaults["regime"];
    const Regime* r = find_regime(op->name, regime);
    if (!r) {
      std::string known;
      for (const Regime* q : all_regimes())
        if (q->op == op->name) known += (known.empty() ? "" : ", ") + q->name;
      throw InputError(fmt::format("{}: unknown regime '{}' (regimes: {})", op->name, regime, known));
    }
    for (const auto& [k, v] : r->defaults) defaults[k] = canonical_value(op->name, *find_param(*op, k), v);
  }
  for (const ParamSpec& p : op->params) {
    auto it = canon.find(p.name);
    bool differs = it != canon.end() && it->second != defaults[p.name];
    c.values_[p.name] = it != canon.end() ? it->second : defaults[p.name];
    c.explicit_[p.name] = differs;
  }
  if (op->validate) op->validate(c);
  return c;
}

Case parse_case(std::string_view text) {
  std::string_view s = trim(text);
  size_t open = s.find('(');
  if (open == std::string_view::npos || s.back() != ')')
    throw InputError(fmt::format("malformed case string '{}': expected op(name=value,...)", text));
  std::string op(trim(s.substr(0, open)));
  if (op.empty()) throw InputError(fmt::format("malformed case string '{}': no op name", text));
  std::string_view body = trim(s.substr(open + 1, s.size() - open - 2));
  std::map<std::string, std::string> given;
  while (!body.empty()) {
    size_t comma = body.find(',');
    std::string_view item = trim(body.substr(0, comma));
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || trim(item.substr(0, eq)).empty())
      throw InputError(fmt::format("malformed case string '{}': '{}' is not name=value", text, item));
    std::string key(trim(item.substr(0, eq)));
    if (given.count(key))
      throw InputError(fmt::format("malformed case string '{}': parameter '{}' given twice", text, key));
    given[key] = std::string(trim(item.substr(eq + 1)));
    if (comma == std::string_view::npos) break;
    body = body.substr(comma + 1);
    if (trim(body).empty())
      throw InputError(fmt::format("malformed case string '{}': trailing comma", text));
  }
  return make_case(op, given);
}

Case Case::with(std::string_view name, std::string_view value) const {
  std::map<std::string, std::string> given;
  for (const auto& [k, v] : values_)
    if (!is_default(k)) given[k] = v;
  const OpSpec* op = find_op(op_);
  for (const ParamSpec& p : op->params)
    if (p.always_print) given[p.name] = values_.find(p.name)->second;
  given[std::string(name)] = std::string(value);
  return make_case(op_, given);
}

}  // namespace dg
