// KDA (Kimi Delta Attention) reference: the exact FLA semantics, token by token, over a scalar Real.
// (Interface; the recurrence, shapes, constants and loop order are documented with the definition.)
#pragma once

#include <cstdint>
#include <vector>

#include "harness/tensor.h"
#include "reference/kda_params.h"
#include "reference/real/tier.h"

namespace dg {

struct KdaReferenceOptions {
  int64_t max_tokens = -1;        // per sequence, only the first max_tokens tokens (-1: all)
  std::vector<int64_t> heads;     // value heads to compute (empty: all)
  int threads = 0;                // worker threads over (sequence, value head) pairs; 0: all cores
};

// Outputs as doubles, rounded to odd from the tier's value (so one RNE gives the correctly rounded
// value in any candidate format). Layout as the tensors: o [B, T, HV, V], ht [N, HV, K, V] (or
// [N, HV, V, K] when state_v_first). Elements outside the computed sample are NaN.
struct KdaReferenceResult {
  std::vector<double> o;
  std::vector<double> ht;
};

// `in` holds the case's inputs (any float dtypes; read exactly). Throws InputError on NaN/Inf input.
KdaReferenceResult kda_reference(Tier tier, const KdaParams& p, const TensorMap& in,
                                 const KdaReferenceOptions& opt = {});

}  // namespace dg
