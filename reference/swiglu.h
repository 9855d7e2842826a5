// Reference of swiglu, the activation of every dense MLP and MoE expert (notes/model-ops.md section
// 1.7), written once over a scalar Real and run in the tiers of reference/real/tier.h. The input is
// the output of the fused gate/up projection, one row of 2I per token: gate = x[:, :I], up = x[:, I:]
// (vLLM's SiluAndMul layout). Per element, with the clamp of GLM-5.3-Flash (swiglu_limit L > 0; no
// clamp when L = 0):
//   g = min(gate, L)            the gate is clamped from above only
//   u = clamp(up, -L, L)        the up projection on both sides
//   y = silu(g) * u,  silu(g) = g * sigmoid(g)
// Shapes: x [N, 2I], y [N, I]. The clamps are exact; outputs are doubles rounded to odd from the
// tier's value, with optional two-double tails (as kda.h) for certification.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct SwigluParams {
  int64_t N = 1, I = 1;
  double limit = 0;   // 0: no clamp
};
struct SwigluReferenceResult {
  std::vector<double> y, y_tail;   // [N, I]; tails: 2 per element
};

// Throws InputError on non-finite inputs or a mis-shaped tensor.
SwigluReferenceResult swiglu_reference(Tier tier, const SwigluParams& p, const Tensor& x, bool tails = false);

}  // namespace dg
