// Shared by the cheating candidates: they compute through the real kda_cpu_recurrent_f32 (looked
// up at run time: registration order across files is unspecified) and then misbehave.
#pragma once

#include <stdexcept>

#include "harness/cases/registry.h"

namespace dg::cheats {

inline const Candidate& honest() {
  static const Candidate* c = find_candidate("kda_cpu_recurrent_f32");
  if (!c) throw std::logic_error("cheats: kda_cpu_recurrent_f32 is not registered");
  return *c;
}

// Every cheat claims to be an f32 recurrent kernel; "cheat" as the algorithm marks it for the
// harness (selftest runs them; a default candidate list should leave them out).
inline CandidateInfo cheat_info(const char* name, const char* doc) {
  return {name, "kda", "cpu", "cheat", DType::f32, DType::f32, DType::f32, doc};
}

// Fresh outputs shaped like `out`, for cheats that compute somewhere else first.
inline TensorMap fresh_like(const TensorMap& out) {
  TensorMap m;
  for (const auto& [name, t] : out) m[name] = Tensor(t.dtype(), t.shape());
  return m;
}

}  // namespace dg::cheats
