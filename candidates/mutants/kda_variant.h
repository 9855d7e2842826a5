// KDA variants for `driftgate mutants`: one f32 token recurrence with hook points, so that every
// mutant (one realistic bug) and every equivalent variant (one legitimate rewrite) of the honest
// kda_cpu_recurrent_f32 is the same short loop with one switch turned.
//
// The loop, per (sequence n, value head hv), h = hv / (HV / H), in the honest kernel's order
// (candidates/cpu/kda_recurrent.cpp, notes/kda-numerics.md §1.4 and §2.3):
//
//   S = h0[n, hv] or 0                                  (K x V, f32)
//   for each token t of sequence n:
//     q, k, v, g, beta = TokenReader (l2norm, scale, gate and beta modes)
//     a = exp(g);  S *= a[:, None];  r = (v - S^T k) beta;  S += k r^T;  o[t] = S^T q
//   ht[n, hv] = S
//
// Hooks (KdaVariant fields), each named after the physics it breaks or keeps:
//   mutants      state/decay/dot narrowed to bf16 or f16; the l2norm epsilon outside the square root
//                or 1e-12; residual read before the decay; output read before the write; value head
//                -> key head as hv % H; h0 read transposed; a cubic exp2; a fast sigmoid (beta, the
//                lower-bound gate) or a fast log (the softplus gate); a 16-bit position counter;
//                the state dropped every N tokens; a bf16 checkpoint of the state every N tokens;
//                varlen boundaries one token late
//   equivalents  f64 accumulation of both dot products; the decay fused into the write
//                (S = fma(a, S, k r^T), residual through a*k); reductions over d in reverse order;
//                a V-first state in memory (K loop inside)
// Candidates register with algorithm "mutant" or "equivalent" (harness/cases/registry.h: is_variant), so
// no default candidate set and no selftest picks them up; each claims f32 input, state and output,
// as the kernel it imitates does.
#pragma once

#include <cstdint>

#include "harness/core/tensor.h"
#include "reference/kda_params.h"

namespace dg::mutants {

enum class Narrow : uint8_t { none, bf16, f16 };
enum class L2Eps : uint8_t { inside_sqrt, outside_sqrt, tiny };   // tiny: sqrt(sum x^2 + 1e-12)

struct KdaVariant {
  // --- one bug each (mutants) ---
  Narrow state = Narrow::none;         // S rounded to this format after every token
  Narrow decay = Narrow::none;         // a = exp(g) rounded to this format before it scales S
  Narrow dot = Narrow::none;           // S^T k and S^T q accumulated in this format (rounded after every add)
  L2Eps l2 = L2Eps::inside_sqrt;       // where the l2norm epsilon goes
  bool residual_before_decay = false;  // r = v - S_{t-1}^T k, then decay (the wrong order)
  bool read_before_write = false;      // o = S^T q before S += k r^T
  bool gva_mod_head = false;           // q/k head of value head hv taken as hv % H (right: hv / (HV / H))
  bool h0_transposed = false;          // h0 read in the other layout (K-first as V-first and back)
  bool approx_exp = false;             // exp(x) = 2^(x log2 e) with a cubic for the fraction
  bool approx_sigmoid = false;         // beta's and the lower-bound gate's sigmoid as 1 / (1 + that cubic exp(-x))
  bool approx_log = false;             // the softplus gate's log(1 + e^x) through a quartic log2 of the mantissa
  int64_t position_wrap = 0;           // > 0: inputs of position p read at p mod position_wrap
  int64_t reset_every = 0;             // > 0: S set to zero before every position p > 0, p % N == 0
  int64_t checkpoint_every = 0;        // > 0: S rounded to bf16 before every position p > 0, p % N == 0
  bool varlen_late_boundary = false;   // each inner sequence boundary one token late
  bool slot_is_sequence = false;       // decode: sequence b uses pool slot b, not state_indices[b]
  // --- legitimate rewrites (equivalent variants) ---
  bool f64_accum = false;              // S^T k and S^T q accumulated in double
  bool fused_decay = false;            // r = sum_d (a_d k_d) S_d; S = fma(a, S, k r^T)
  bool reverse_k = false;              // reductions over d = K-1 .. 0
  bool v_first_state = false;          // S held as V rows of K
};

// Runs the variant over a whole prefill case: in/out as kda_cpu_recurrent_f32 (candidates/cpu/kda_cpu.h).
void run_kda_variant(const KdaVariant& var, const KdaParams& p, const TensorMap& in, TensorMap& out);

// One decode step of the variant against the paged state pool: in/out as kda_decode_cpu_f32
// (candidates/cpu/kda_decode.cpp). Per sequence b and value head hv: S = pool[state_indices[b], hv]
// (h0_transposed: the pool read and written in the other layout; slot_is_sequence: slot b), one
// token of the loop above, S written back; a negative slot is padding (o = 0, no state touched).
void run_kda_decode_variant(const KdaVariant& var, const KdaParams& p, const TensorMap& in, TensorMap& out);

}  // namespace dg::mutants
