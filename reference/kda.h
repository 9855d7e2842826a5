// KDA (Kimi Delta Attention) reference: the exact FLA semantics, token by token, over a scalar Real
// (double with compensated reductions, double-double, MPFR 127 / 256 bits, binary128).
// The f64 and dd kernels take a block of tokens through a few state columns at a time (columns never
// meet), so the state they touch stays in L1; the order of operations per element is unchanged.
//
// Cited: FLA (fla-org/flash-linear-attention) fla/ops/kda/naive.py : naive_recurrent_kda, with the
// gates of fla/ops/kda/gate.py (naive_kda_gate, naive_kda_lowerbound_gate); our notes
// notes/kda-numerics.md section 1. FLA's naive code computes in fp32; this one in the tier's Real.
//
// Shapes (kda_params.h): q, k [B,T,H,K]; v [B,T,HV,V]; g [B,T,HV,K]; beta [B,T,HV]; A_log [HV];
// dt_bias [HV*K]; h0, ht [N,HV,K,V] ([N,HV,V,K] when state_v_first); o [B,T,HV,V]. Varlen: B == 1
// and cu_seqlens [N+1] packs the sequences along T. GVA: value head hv reads q/k head h = hv/(HV/H).
//
// Per sequence n and value head hv, with S = h0[n,hv] (K x V; zeros without h0), for each token t:
//   l2norm (optional)  x <- x * (1 / sqrt(sum_i x_i^2 + eps)),  eps = 1e-6 (the double), for q and k
//   scale              q <- q * scale,  scale = p.scale_value() (the double; K^-1/2 by default)
//   gate               pregated:    g = g_t
//                      softplus:    g = -exp(A_log[hv]) * softplus(g_t + dt_bias[hv*K:])
//                      lower_bound: g = lb * sigmoid(exp(A_log[hv]) * (g_t + dt_bias[hv*K:]))
//                                   (lb * sigmoid(g_t + dt_bias) when !use_A_log; dt_bias absent: 0)
//                      softplus(x) = log1p(exp(x)) for x <= 0, x + log1p(exp(-x)) for x > 0
//                      sigmoid(x)  = 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) for x < 0
//   beta               given: b_t;  sigmoid: sigmoid(b_t);  sigmoid2: 2 * sigmoid(b_t)
//   alpha = exp(g)
//   pass 1, k = 0..K-1 in order:  S[k,:] <- S[k,:] * alpha[k];   acc[:] <- acc[:] + S[k,:] * k_t[k]
//   r = v_t - acc                                     (the delta residual, with the decayed state)
//   bk[k] = beta * k_t[k]
//   pass 2, k = 0..K-1 in order:  S[k,:] <- S[k,:] + bk[k] * r[:];   o[:] <- o[:] + S[k,:] * q_t[k]
//   o_t = o                                           (the read, with the updated state)
// ht[n,hv] = S after the sequence's last token. Every tier runs these loops in this order (every sum
// in increasing index order), each operation rounded in the tier's arithmetic, with two refinements
// in the vectorized kernels, same order:
//   f64: the write S + bk r is one fma; sum_i x_i^2 uses Dot2 (reference/real/f64.h) over 8
//        interleaved lanes; both state reductions are blocked compensated sums (FABsum, blocks of
//        32 rows by fma, block sums added by TwoSum): error u |x^T y| + 32 u sum |x_k y_k|, the size
//        of the state's own rounding (kda.cpp has the argument and the measurement);
//   dd:  the reductions keep a (hi, lo) pair per lane (TwoSum of the high parts, low parts summed);
//        the write's error is below 3u^2 (|S| + |bk r|), u = 2^-53; the state stays normalized;
//        the softplus and lower-bound gates run as passes over the token's K gates with the
//        generic operations (softplus's log1p takes its expm1 from one table branch: kda.cpp).
// (KdaReferenceOptions::generic_kernels runs the plain loops instead; tests compare the two.)
//
// Outputs are doubles rounded to odd from the tier's value (one later round-to-nearest-even gives the
// correctly rounded value in any candidate format). Memory is O(K V) per worker plus the outputs:
// inputs are read token by token through Tensor::read, never converted as a whole.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/kda_params.h"
#include "reference/real/tier.h"

namespace dg {

struct KdaReferenceOptions {
  int64_t max_tokens = -1;        // per sequence, only the first max_tokens tokens (-1: all)
  std::vector<int64_t> heads;     // value heads to compute (empty: all)
  int threads = 0;                // worker threads over (sequence, value head) pairs; 0: all cores
  // When max_tokens cuts a sequence short, ht is NaN for it unless this is set: then ht holds the
  // state after the computed prefix (certification compares tiers on such samples).
  bool state_after_prefix = false;
  // Also return each element's tail (o_tail, ht_tail: two doubles per element) so that
  // o[i] + o_tail[2i] + o_tail[2i+1] carries the tier's full-precision value (about 159 bits).
  bool tails = false;
  // Run the plain generic state loops even where a vectorized kernel exists (f64, dd): tests
  // check the kernels against the generic template.
  bool generic_kernels = false;
  // Not a reference: the generic loops in float (every state update and sum rounded to binary32, in
  // the order above; gates and the L2 norm's 1/sqrt may round once from double), FLA's
  // naive_recurrent_kda as it runs in fp32. The policy's naive candidate for f32 KDA
  // (candidates/cpu/kda_naive.cpp) is this: plainly written, same precision, independent of the
  // optimized CPU kernels. `tier` is ignored.
  bool plain_f32 = false;
};

// Outputs as doubles, rounded to odd from the tier's value (so one RNE gives the correctly rounded
// value in any candidate format). Layout as the tensors: o [B, T, HV, V], ht [N, HV, K, V] (or
// [N, HV, V, K] when state_v_first). Elements outside the computed sample are NaN.
struct KdaReferenceResult {
  std::vector<double> o;
  std::vector<double> ht;
  std::vector<double> o_tail, ht_tail;  // with options.tails: 2 per element, 0 for the f64 tier
};

// `in` holds the case's inputs (any float dtypes; read exactly). Throws InputError on NaN/Inf input
// (naming the tensor and the element) and on missing or mis-shaped tensors.
KdaReferenceResult kda_reference(Tier tier, const KdaParams& p, const TensorMap& in,
                                 const KdaReferenceOptions& opt = {});

}  // namespace dg
