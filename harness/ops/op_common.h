// What every op's OpSpec (harness/ops/<op>.cpp) may share: the certification budget, the layer ops'
// last parameters and prefix slicing for references run on a sample.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "harness/core/tensor.h"
#include "reference/certify.h"
#include "reference/real/tier.h"

namespace dg {

// Budget of certification, in tier operations: about a second at mpfr127.
constexpr double kCertifyOps = 2e6;

// A reference's outputs with their two-double tails on a sample of a case, for certification.
struct SampleOutputs {
  std::vector<double> y, y_tail;
};

// Certification of an op whose reference runs on leading rows (rmsnorm, swiglu, rmsnorm_gated):
// recomputes rows [0, n) at `tier` and at the next tier up and measures their agreement, where n is
// as many of the case's `rows` as kCertifyOps buys at `ops_per_row` operations of the upper tier
// (tier_cost) each, at least 1. `run(tier, n)` gives the outputs of rows [0, n). Throws InputError
// when no tier is above `tier`.
Certification certify_leading_rows(Tier tier, int64_t rows, double ops_per_row,
                                   const std::function<SampleOutputs(Tier, int64_t)>& run);

// The last parameters of the KDA layer's ops (causal_conv1d, rmsnorm_gated): regime (default
// kimi_linear, documented by `regime_doc`), dtype of the stored activations (default bf16) and seed.
std::vector<ParamSpec> layer_params_tail(const char* regime_doc);

// The first `keep` indices of axis `axis`: [B,T,...] cut to [B,keep,...] (axis 1), [N,...] to
// [keep,...] (axis 0).
Tensor leading_slice(const Tensor& t, int axis, int64_t keep);

}  // namespace dg
