// The KDA prefill mutants and equivalent variants, one statement each (kda_variant.h has the loop).
// A mutant carries one bug a real kernel has shipped or could ship (notes/kda-numerics.md: the
// section named in its doc); `driftgate mutants` must see every one of them REJECTED by a suite
// that exercises the bug. An equivalent variant is a legitimate rewrite that must MERGE on every case.
#include "candidates/mutants/kda_variant.h"
#include "harness/ops/kda_op.h"
#include "harness/registry.h"

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
// --- long-context bookkeeping (§3.8, pitfalls 1, 9, 11, 13) ---
DG_REGISTER_CANDIDATE(kda_mutant_pos_wrap16, mutant("kda_mutant_pos_wrap16", "16-bit position counter: position p reads the inputs of p mod 65536"),
                      variant({.position_wrap = 65536}));
DG_REGISTER_CANDIDATE(kda_mutant_reset_32k, mutant("kda_mutant_reset_32k", "state dropped (zeroed) every 32768 tokens"),
                      variant({.reset_every = 32768}));
DG_REGISTER_CANDIDATE(kda_mutant_checkpoint_bf16, mutant("kda_mutant_checkpoint_bf16", "state checkpointed through bf16 every 4096 tokens (bf16 prefix-cache states, §2.2)"),
                      variant({.checkpoint_every = 4096}));
DG_REGISTER_CANDIDATE(kda_mutant_varlen_boundary, mutant("kda_mutant_varlen_boundary", "varlen: every inner segment boundary one token late (pitfall 11)"),
                      variant({.varlen_late_boundary = true}));

// --- legitimate rewrites: must MERGE everywhere ---
DG_REGISTER_CANDIDATE(kda_equiv_f64_accum, equivalent("kda_equiv_f64_accum", "S^T k and S^T q accumulated in f64"),
                      variant({.f64_accum = true}));
DG_REGISTER_CANDIDATE(kda_equiv_fused_decay, equivalent("kda_equiv_fused_decay", "decay fused into the write: r through a*k, S = fma(a, S, k r^T)"),
                      variant({.fused_decay = true}));
DG_REGISTER_CANDIDATE(kda_equiv_reverse_k, equivalent("kda_equiv_reverse_k", "reductions over d (S^T k, S^T q) in reverse order"),
                      variant({.reverse_k = true}));
DG_REGISTER_CANDIDATE(kda_equiv_vfirst_state, equivalent("kda_equiv_vfirst_state", "state held V-first (V rows of K) in memory"),
                      variant({.v_first_state = true}));

}  // namespace dg::mutants
