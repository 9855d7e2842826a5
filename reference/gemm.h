// Reference of gemm, the linear layers of every model (notes/model-ops.md sections 1.2, 1.7, 1.8 and
// 2): QKV and output projections, dense MLPs, experts, the router and the lm_head, as nn.Linear
// stores them (weight [N,K], out_features x in_features). Written once over a scalar Real and run in
// the tiers of reference/real/tier.h:
//   y[m][n] = sum_k x[m][k] w[n][k]   in increasing k,   then + bias[n] (when a bias is given)
// Shapes: x [M,K], w [N,K], bias [N], y [M,N]. Every product of two doubles is exact in dd and MPFR
// (106 bits), so those tiers round only the sums. The f64 tier accumulates by Dot2
// (reference/real/f64.h) as rmsnorm's sum_squares does, as if in twice a double's precision, the
// bias added by one more TwoSum step, then rounded once.
// Outputs are doubles rounded to odd from the tier's value, with optional two-double tails (as
// kda.h) for certification.
//
// Work is split over blocks of 8 output columns with parallel_for (harness/core/threads.h); each
// output's k-loop is sequential in increasing k in one thread, so results do not depend on the
// thread count. The f64 tier keeps the 8 columns' Dot2 accumulators in SIMD lanes over a packed
// [K,8] copy of the block's weights. Speed (measured through `driftgate verify --ref-tier`, this
// machine: AMD EPYC, 2 threads, x [M,4096] and w [4096,4096] in bf16): f64 about 4e9 multiply-adds
// per second (M = 256), dd about 3.5e8 (M = 64), mpfr127 about 3e7 (M = 1).
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/tensor.h"
#include "reference/real/tier.h"

namespace dg {

struct GemmParams {
  int64_t M = 1, N = 1, K = 1;
  bool bias = false;
};
struct GemmReferenceResult {
  std::vector<double> y, y_tail;   // [M,N]; tails: 2 per element
};

// `bias` null when p.bias is false. Throws InputError on non-finite inputs or a mis-shaped tensor.
GemmReferenceResult gemm_reference(Tier tier, const GemmParams& p, const Tensor& x, const Tensor& w, const Tensor* bias,
                                   bool tails = false);

// Rows [n0, n0 + nb) of a weight [N,K] read as doubles into rows[l*K + k]; the first non-finite flat
// index of w among them, or -1 (gemm and gemm_fp8_block read their weights this way).
int64_t gemm_read_rows(const Tensor& w, int64_t K, int64_t n0, int64_t nb, std::vector<double>& rows);

}  // namespace dg
