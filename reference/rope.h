// Reference of rope, the rotary position embedding of q and k (notes/model-ops.md sections 1.2, 1.3
// and 5), written once over a scalar Real and run in the tiers of reference/real/tier.h:
//
//   inv_freq_i = theta^(-2i / d_rope),   i = 0 .. d_rope/2 - 1
//   phi_ti     = positions[t] * inv_freq_i              (exact real numbers: no rounding is part of the op)
//   pair i of head h of token t, dims (a, b):
//     y_a = x_a cos(phi_ti) - x_b sin(phi_ti)
//     y_b = x_b cos(phi_ti) + x_a sin(phi_ti)
//   dims d_rope .. D-1 pass through unchanged (partial rotary).
// Pairing (`style`): neox (GLM-4.x, HF rotate_half): (a, b) = (i, i + d_rope/2); gptj (interleaved,
// GLM-5.x MLA and the DSA indexer): (a, b) = (2i, 2i + 1).
//
// Shapes: x and y [T,H,D], positions [T] (integers in [0, kRopeMaxPosition]). Loops: tokens, then
// pairs (the angles of a token), then heads; each output element is its own short expression.
//
// Angles. A position of 2^20 with inv_freq ~ 1 gives phi ~ 2^20 rad: an angle formed in a format of
// p bits carries about phi 2^-p rad of error, all of which reaches the output as phase. So each
// tier forms inv_freq = exp(-(2i/d_rope) ln theta) and phi = pos inv_freq in its own precision,
// except the f64 tier, which forms them in double-double (reference/real/dd.h) and reduces phi mod
// pi/2 there (reference/real/dd_trig.h) before taking cos and sin in double: a double angle would
// be off by 2^-29 rad at 2^24, a double-double one is off by about 2^-80, and the reduced angle is
// then correct to a double's precision. dd takes cos and sin in double-double (dd_trig.h), mpfr127
// and mpfr256 through MPFR, f128 through glibc's binary128 functions (both reduce exactly).
// Outputs are doubles rounded to odd from the tier's value, with optional two-double tails (as
// kda.h) for certification; pass-through dims are the inputs exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

enum class RopeStyle : uint8_t { neox, gptj };

// Positions are integers in [0, kRopeMaxPosition]: every one is exact in f32 (2^24), and the
// models' contexts (1M = 2^20) fit with room for offsets.
inline constexpr int64_t kRopeMaxPosition = int64_t{1} << 24;

struct RopeParams {
  int64_t T = 1, H = 1, D = 2, d_rope = 2;
  RopeStyle style = RopeStyle::neox;
  double theta = 1e4;
};
struct RopeReferenceResult {
  std::vector<double> y, y_tail;   // [T,H,D]; tails: 2 per element
};

// The dims (a, b) of pair i (0 <= i < d_rope/2) for a style.
inline void rope_pair_dims(RopeStyle s, int64_t i, int64_t d_rope, int64_t& a, int64_t& b) {
  a = s == RopeStyle::neox ? i : 2 * i;
  b = s == RopeStyle::neox ? i + d_rope / 2 : 2 * i + 1;
}

// Throws InputError on bad parameters (d_rope odd, zero or above D; theta not above 1), a
// mis-shaped tensor, non-finite x, or a position that is not an integer in [0, kRopeMaxPosition].
RopeReferenceResult rope_reference(Tier tier, const RopeParams& p, const Tensor& x, const Tensor& positions,
                                   bool tails = false);

}  // namespace dg
