// rope (reference/rope.h): a case's parameters and positions, for the regimes, candidates and mutants.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/cases/case.h"
#include "reference/rope.h"

namespace dg {

RopeParams rope_params(const Case& c);

// The position of every token of a case (its `layout`): prefill, pos0 + t (a chunk of one sequence
// starting at pos0; T = 1 is one decode token); spread, T positions from pos0 to pos_max spaced
// geometrically, pos0 + round((pos_max - pos0 + 1)^(t / (T-1))) - 1 (a batch of decode tokens of
// sequences at every length, each octave of positions about equally represented).
std::vector<int64_t> rope_positions(const Case& c);

}  // namespace dg
