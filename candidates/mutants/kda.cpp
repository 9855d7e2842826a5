// The KDA prefill mutants and equivalent variants, one statement each (kda_variant.h has the loop).
// A mutant carries one bug a real kernel has shipped or could ship (notes/kda-numerics.md: the
// section named in its doc); `driftgate mutants` must see every one of them REJECTED by a suite
// that exercises the bug. An equivalent variant is a legitimate rewrite that must MERGE on every case.
#include "candidates/cpu/kda_cpu.h"
#include "candidates/mutants/kda_variant.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"

namespace dg::mutants {
namespace {

CandidateInfo info(const char* name, const char* algorithm, const char* doc) {
  return {name, "kda", "cpu", algorithm, DType::f32, DType::f32, DType::f32, doc};
}
CandidateInfo mutant(const char* name, const char* doc) { return info(name, "mutant", doc); }
CandidateInfo equivalent(const char* name, const char* doc) { return info(name, "equivalent", doc); }

RunFn variant(KdaVariant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) { run_kda_variant(v, kda_params(c), in, out); };
}

// The decode step's variants: the same hooks around one token against the paged state pool.
CandidateInfo decode_info(const char* name, const char* algorithm, const char* doc) {
  return {name, "kda_decode", "cpu", algorithm, DType::f32, DType::f32, DType::f32, doc};
}
CandidateInfo decode_mutant(const char* name, const char* doc) { return decode_info(name, "mutant", doc); }
CandidateInfo decode_equivalent(const char* name, const char* doc) { return decode_info(name, "equivalent", doc); }
RunFn decode_variant(KdaVariant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) { run_kda_decode_variant(v, kda_params(c), in, out); };
}

RunFn chunk_variant(ChunkBug bug) {
  return [bug](const Case& c, const TensorMap& in, TensorMap& out) { kda_cpu_chunk_mutant_f32(bug, kda_params(c), in, out); };
}

}  // namespace

// --- narrower dtypes (notes: pitfalls 8, 9; §2.2 bf16 copies of the state) ---
DG_REGISTER_CANDIDATE(kda_mutant_state_bf16, mutant("kda_mutant_state_bf16", "state rounded to bf16 after every token (pitfall 9)"),
                      variant({.state = Narrow::bf16}));
DG_REGISTER_CANDIDATE(kda_mutant_decay_bf16, mutant("kda_mutant_decay_bf16", "decay exp(g) rounded to bf16 before it scales the state (pitfall 8)"),
                      variant({.decay = Narrow::bf16}));
DG_REGISTER_CANDIDATE(kda_mutant_decay_f16, mutant("kda_mutant_decay_f16", "decay exp(g) rounded to f16 (pitfall 8)"),
                      variant({.decay = Narrow::f16}));
DG_REGISTER_CANDIDATE(kda_mutant_dot_bf16, mutant("kda_mutant_dot_bf16", "S^T k and S^T q accumulated in bf16"),
                      variant({.dot = Narrow::bf16}));
// --- the l2norm epsilon (§1.3, pitfall 7: near-zero-norm q/k) ---
DG_REGISTER_CANDIDATE(kda_mutant_eps_outside_sqrt, mutant("kda_mutant_eps_outside_sqrt", "l2norm x / (sqrt(sum x^2) + 1e-6): epsilon outside the root"),
                      variant({.l2 = L2Eps::outside_sqrt}));
DG_REGISTER_CANDIDATE(kda_mutant_eps_1e12, mutant("kda_mutant_eps_1e12", "l2norm x / sqrt(sum x^2 + 1e-12): F.normalize's epsilon, not the kernel's"),
                      variant({.l2 = L2Eps::tiny}));
// --- step order (§1.4) ---
DG_REGISTER_CANDIDATE(kda_mutant_residual_before_decay, mutant("kda_mutant_residual_before_decay", "residual v - S^T k from the state before its decay (§1.4 order)"),
                      variant({.residual_before_decay = true}));
DG_REGISTER_CANDIDATE(kda_mutant_read_before_write, mutant("kda_mutant_read_before_write", "output S^T q read before the write of the token (§1.4 order)"),
                      variant({.read_before_write = true}));
// --- head map, layout (§1.1, pitfalls 10, 14) ---
DG_REGISTER_CANDIDATE(kda_mutant_gva_head_mod, mutant("kda_mutant_gva_head_mod", "GVA: value head hv reads key head hv % H, not hv / (HV/H) (pitfall 14)"),
                      variant({.gva_mod_head = true}));
DG_REGISTER_CANDIDATE(kda_mutant_h0_transposed, mutant("kda_mutant_h0_transposed", "h0 read in the other layout, K-first as V-first (pitfall 10, vLLM #41292)"),
                      variant({.h0_transposed = true}));
// --- approximate transcendentals (FLA_USE_FAST_OPS, §2.2) ---
DG_REGISTER_CANDIDATE(kda_mutant_exp_cubic, mutant("kda_mutant_exp_cubic", "exp through 2^x with a cubic fraction (relative error 1e-4)"),
                      variant({.approx_exp = true}));
DG_REGISTER_CANDIDATE(kda_mutant_sigmoid_fast, mutant("kda_mutant_sigmoid_fast", "beta's and the lower-bound gate's sigmoid as 1 / (1 + cubic exp(-x)) (relative error 1e-4)"),
                      variant({.approx_sigmoid = true}));
DG_REGISTER_CANDIDATE(kda_mutant_log_fast, mutant("kda_mutant_log_fast", "the softplus gate's log(1 + e^x) through a quartic log2 of the mantissa (error 2e-4)"),
                      variant({.approx_log = true}));
// --- long-context bookkeeping (§3.8, pitfalls 1, 9, 11, 13) ---
DG_REGISTER_CANDIDATE(kda_mutant_pos_wrap16, mutant("kda_mutant_pos_wrap16", "16-bit position counter: position p reads the inputs of p mod 65536"),
                      variant({.position_wrap = 65536}));
DG_REGISTER_CANDIDATE(kda_mutant_reset_32k, mutant("kda_mutant_reset_32k", "state dropped (zeroed) every 32768 tokens"),
                      variant({.reset_every = 32768}));
DG_REGISTER_CANDIDATE(kda_mutant_checkpoint_bf16, mutant("kda_mutant_checkpoint_bf16", "state checkpointed through bf16 every 4096 tokens (bf16 prefix-cache states, §2.2)"),
                      variant({.checkpoint_every = 4096}));
DG_REGISTER_CANDIDATE(kda_mutant_varlen_boundary, mutant("kda_mutant_varlen_boundary", "varlen: every inner segment boundary one token late (pitfall 11)"),
                      variant({.varlen_late_boundary = true}));
// --- the chunk form's boundaries (notes §2.1: the chunked WY/UT form; the honest kernel is
// kda_cpu_chunk_f32, and each of these is it with one bug) ---
DG_REGISTER_CANDIDATE(kda_mutant_chunk_gamma_diff,
                      mutant("kda_mutant_chunk_gamma_diff", "chunk form: gamma - G_i as a difference of inclusive cumsums, not a reverse scan (the reverse-cumsum pitfall)"),
                      chunk_variant(ChunkBug::gamma_by_difference));
DG_REGISTER_CANDIDATE(kda_mutant_chunk_ragged_gamma,
                      mutant("kda_mutant_chunk_ragged_gamma", "chunk form: the last chunk's total decay read at row 63 of the cumsum, stale when T % 64 != 0"),
                      chunk_variant(ChunkBug::ragged_gamma));
DG_REGISTER_CANDIDATE(kda_mutant_chunk_no_boundary_decay,
                      mutant("kda_mutant_chunk_no_boundary_decay", "chunk form: the state carried into the next chunk is not decayed by exp(gamma)"),
                      chunk_variant(ChunkBug::no_boundary_decay));

// --- legitimate rewrites: must MERGE everywhere ---
DG_REGISTER_CANDIDATE(kda_equiv_f64_accum, equivalent("kda_equiv_f64_accum", "S^T k and S^T q accumulated in f64"),
                      variant({.f64_accum = true}));
DG_REGISTER_CANDIDATE(kda_equiv_fused_decay, equivalent("kda_equiv_fused_decay", "decay fused into the write: r through a*k, S = fma(a, S, k r^T)"),
                      variant({.fused_decay = true}));
DG_REGISTER_CANDIDATE(kda_equiv_reverse_k, equivalent("kda_equiv_reverse_k", "reductions over d (S^T k, S^T q) in reverse order"),
                      variant({.reverse_k = true}));
DG_REGISTER_CANDIDATE(kda_equiv_vfirst_state, equivalent("kda_equiv_vfirst_state", "state held V-first (V rows of K) in memory"),
                      variant({.v_first_state = true}));

// --- the decode step (kda_decode, notes §2.3: one token per call against a paged pool) ---
DG_REGISTER_CANDIDATE(kda_decode_mutant_state_bf16, decode_mutant("kda_decode_mutant_state_bf16", "pool state written back through bf16 every step, declared f32 (pitfall 9)"),
                      decode_variant({.state = Narrow::bf16}));
DG_REGISTER_CANDIDATE(kda_decode_mutant_decay_bf16, decode_mutant("kda_decode_mutant_decay_bf16", "decay exp(g) rounded to bf16 before it scales the state (pitfall 8)"),
                      decode_variant({.decay = Narrow::bf16}));
DG_REGISTER_CANDIDATE(kda_decode_mutant_eps_outside_sqrt, decode_mutant("kda_decode_mutant_eps_outside_sqrt", "l2norm x / (sqrt(sum x^2) + 1e-6): epsilon outside the root"),
                      decode_variant({.l2 = L2Eps::outside_sqrt}));
DG_REGISTER_CANDIDATE(kda_decode_mutant_residual_before_decay, decode_mutant("kda_decode_mutant_residual_before_decay", "residual v - S^T k from the state before its decay (§1.4 order)"),
                      decode_variant({.residual_before_decay = true}));
DG_REGISTER_CANDIDATE(kda_decode_mutant_read_before_write, decode_mutant("kda_decode_mutant_read_before_write", "output S^T q read before the write of the token (§1.4 order)"),
                      decode_variant({.read_before_write = true}));
DG_REGISTER_CANDIDATE(kda_decode_mutant_gva_head_mod, decode_mutant("kda_decode_mutant_gva_head_mod", "GVA: value head hv reads key head hv % H (pitfall 14)"),
                      decode_variant({.gva_mod_head = true}));
DG_REGISTER_CANDIDATE(kda_decode_mutant_pool_transposed, decode_mutant("kda_decode_mutant_pool_transposed", "state pool read and written in the other layout, K-first as V-first (pitfall 10)"),
                      decode_variant({.h0_transposed = true}));
DG_REGISTER_CANDIDATE(kda_decode_mutant_slot_is_sequence, decode_mutant("kda_decode_mutant_slot_is_sequence", "state_indices ignored: sequence b reads and writes pool slot b"),
                      decode_variant({.slot_is_sequence = true}));
DG_REGISTER_CANDIDATE(kda_decode_mutant_exp_cubic, decode_mutant("kda_decode_mutant_exp_cubic", "exp through 2^x with a cubic fraction (relative error 1e-4)"),
                      decode_variant({.approx_exp = true}));
DG_REGISTER_CANDIDATE(kda_decode_equiv_f64_accum, decode_equivalent("kda_decode_equiv_f64_accum", "S^T k and S^T q accumulated in f64"),
                      decode_variant({.f64_accum = true}));
DG_REGISTER_CANDIDATE(kda_decode_equiv_fused_decay, decode_equivalent("kda_decode_equiv_fused_decay", "decay fused into the write: S = fma(a, S, k r^T)"),
                      decode_variant({.fused_decay = true}));
DG_REGISTER_CANDIDATE(kda_decode_equiv_reverse_k, decode_equivalent("kda_decode_equiv_reverse_k", "reductions over d in reverse order"),
                      decode_variant({.reverse_k = true}));
DG_REGISTER_CANDIDATE(kda_decode_equiv_vfirst_state, decode_equivalent("kda_decode_equiv_vfirst_state", "state held V-first in registers (K loop inside)"),
                      decode_variant({.v_first_state = true}));

}  // namespace dg::mutants
