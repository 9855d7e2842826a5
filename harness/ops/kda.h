// The KDA ops of driftgate: "kda" (prefill: a whole sequence in, o and the final state out) and
// "kda_decode" (one token for each of B sequences per step, against a state pool the candidate keeps
// in its state dtype; the harness drives T steps). Both live in this op's files: kda_decode is KDA's
// decode form, made by the same spec function as kda (kda.cpp) from the parameters below and the
// reference in reference/kda.h; their regimes and suites are in datasets/kda.cpp.
#pragma once

#include "harness/cases/case.h"
#include "harness/cases/registry.h"
#include "harness/core/tensor.h"
#include "reference/kda_params.h"

namespace dg {

// The typed parameters of a kda or kda_decode case.
KdaParams kda_params(const Case& c);

// What the fused decode op (kda_decode_fused.cpp) shares with kda and kda_decode: the parameter schema
// (without the varlen `seqlens` for decode ops), its constraints, and one token of a [B,T,...]
// tensor as a [B,1,...] tensor.
std::vector<ParamSpec> kda_param_specs(bool varlen);
// The coverage axes of the KDA ops beyond their parameters' values (harness/cases/coverage.h).
std::vector<CoverageAxis> kda_coverage_axes(bool varlen);
void kda_validate(const Case& c);
Tensor token_slice(const Tensor& full, int64_t t);

// Pool slot of sequence b in a kda_decode step: reversed order, so that a candidate that ignores
// "state_indices" and uses slot b reads another sequence's state and is caught.
inline int64_t kda_decode_slot(int64_t b, int64_t B) { return B - 1 - b; }

// Copies the per-sequence blocks of `from` (sequence order, B blocks) into their kda_decode_slot
// blocks of `pool` (into_pool), or back from `pool` into `from` (the fused decode ops' state pools).
void kda_to_slots(const Tensor& from, Tensor& pool, int64_t B, bool into_pool);

}  // namespace dg
