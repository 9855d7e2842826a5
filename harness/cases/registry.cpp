#include "harness/cases/registry.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

namespace dg {

double Storage::input_bytes(DType case_dtype) const {
  return std::min(info(case_dtype).storage_bytes, info(input).storage_bytes);
}
double Storage::output_bytes(DType case_dtype) const {
  return std::min(info(case_dtype).storage_bytes, info(output).storage_bytes);
}
double Storage::state_bytes() const { return info(state).storage_bytes; }
namespace {

// Function-local statics: registration runs during static initialisation of other translation units.
std::deque<OpSpec>& ops() {
  static std::deque<OpSpec> v;
  return v;
}
std::deque<Candidate>& candidates() {
  static std::deque<Candidate> v;
  return v;
}

std::deque<Regime>& regimes() {
  static std::deque<Regime> v;
  return v;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? "," : "", shape[i]);
  return s + "]";
}

void check_finite(const Tensor& t, const std::string& name) {
  std::vector<double> buf(4096);
  for (int64_t off = 0; off < t.numel(); off += static_cast<int64_t>(buf.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), t.numel() - off);
    t.read(off, std::span<double>(buf.data(), static_cast<size_t>(n)));
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(buf[static_cast<size_t>(i)]))
        throw InputError(fmt::format("input tensor '{}' holds {} at flat index {}", name, buf[static_cast<size_t>(i)], off + i));
  }
}

}  // namespace

void check_inputs_exact(const Case& c, const TensorMap& in, const std::map<std::string, InputSpec>& want) {
  std::string extra;
  for (const auto& [name, t] : in)
    if (!want.count(name)) extra += fmt::format("{}'{}'", extra.empty() ? "" : ", ", name);
  if (!extra.empty()) {
    std::string known;
    for (const auto& [name, spec] : want) known += fmt::format("{}{}", known.empty() ? "" : ", ", name);
    throw InputError(fmt::format("unexpected input tensor(s) {} for {} (it reads exactly: {})", extra, c.str(), known));
  }
  for (const auto& [name, spec] : want) {
    auto it = in.find(name);
    if (it == in.end()) throw InputError(fmt::format("input tensor '{}' is missing for {}", name, c.str()));
    const Tensor& t = it->second;
    if (t.dtype() != spec.dtype)
      throw InputError(fmt::format("input tensor '{}' is stored as {}, but {} reads it as {} (inputs are never converted)",
                                   name, dg::name(t.dtype()), c.str(), dg::name(spec.dtype)));
    if (t.shape() != spec.shape)
      throw InputError(fmt::format("input tensor '{}' has shape {}, expected {}", name, t.shape_str(), shape_text(spec.shape)));
    if (info(t.dtype()).is_float) check_finite(t, name);
  }
}


void register_regime(Regime r) {
  if (find_regime(r.op, r.name)) throw std::logic_error("regime registered twice: " + r.name);
  regimes().push_back(std::move(r));
}

const Regime* find_regime(std::string_view op, std::string_view name) {
  for (const Regime& r : regimes())
    if (r.op == op && r.name == name) return &r;
  return nullptr;
}

std::vector<const Regime*> all_regimes() {
  std::vector<const Regime*> v;
  for (const Regime& r : regimes()) v.push_back(&r);
  return v;
}

void register_op(OpSpec spec) {
  if (find_op(spec.name)) throw std::logic_error("op registered twice: " + spec.name);
  if (!spec.check_inputs && spec.inputs)
    spec.check_inputs = [inputs = spec.inputs](const Case& c, const TensorMap& in) { check_inputs_exact(c, in, inputs(c)); };
  ops().push_back(std::move(spec));
}

const OpSpec* find_op(std::string_view name) {
  for (const OpSpec& o : ops())
    if (o.name == name) return &o;
  return nullptr;
}

std::vector<const OpSpec*> all_ops() {
  std::vector<const OpSpec*> v;
  for (const OpSpec& o : ops()) v.push_back(&o);
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return v;
}

void register_candidate(CandidateInfo info, RunFn run) {
  if (find_candidate(info.name)) throw std::logic_error("candidate registered twice: " + info.name);
  candidates().emplace_back(std::move(info), std::move(run));
}

const Candidate* find_candidate(std::string_view name) {
  for (const Candidate& c : candidates())
    if (c.name() == name) return &c;
  return nullptr;
}

const Candidate& require_candidate(std::string_view name) {
  if (const Candidate* c = find_candidate(name)) return *c;
  std::string known;
  for (const Candidate* k : all_candidates()) known += (known.empty() ? "" : ", ") + k->name();
  throw InputError("unknown candidate '" + std::string(name) + "' (candidates: " + known + ")");
}

std::vector<const Candidate*> all_candidates() {
  std::vector<const Candidate*> v;
  for (const Candidate& c : candidates()) v.push_back(&c);
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
  return v;
}

}  // namespace dg
