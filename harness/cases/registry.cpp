#include "harness/cases/registry.h"

#include <algorithm>
#include <deque>
#include <stdexcept>

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

}  // namespace

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
