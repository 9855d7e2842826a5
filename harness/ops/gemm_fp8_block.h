// gemm_fp8_block (reference/gemm_fp8_block.h): a case's parameters, for candidates and mutants, and
// the op's format bound (the error the accumulation scheme allows at the case's K).
#pragma once

#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "harness/core/tensor.h"
#include "reference/gemm_fp8_block.h"

namespace dg {

GemmFp8BlockParams gemm_fp8_block_params(const Case& c);

// The worst-case error of the op's accumulation scheme, per output y[m][n], for a kernel whose inner
// (per 128-block) accumulator keeps at least `state`'s precision and whose output is stored in
// `out`. Each term x w x_scale w_scale reaches y through at most 127 adds of the inner accumulator
// (relative error each at most 2^(1-p_state): round to nearest or truncation, as tensor cores
// do), two f32 multiplications by the scales and K/128 - 1 f32 adds across blocks, in any order
// (Higham's gamma argument over the worst path), then the output rounding:
//   B = (1 + u_out) g S + u_out |r| + 2^-52 |r| + ((K/128 + 1) 2^-150 + eta_out / 2)
//   g = (1 + 2^(1-p_state))^127 (1 + 2^-24)^(K/128 + 1) - 1,   S = sum_b |x_scale w_scale| sum_k |x w|
// with u_out = 2^-p_out, r the reference (2^-52 |r|: its own rounding), the f32 scalings' and
// additions' underflow (half of 2^-149 each) and half the output format's smallest subnormal
// eta_out. `bound` gets B for every output ([M,N], computed in double with a 2^-40 relative margin).
void gemm_fp8_block_bound(const GemmFp8BlockParams& p, const TensorMap& in, DType state, DType out,
                          const std::vector<double>& ref, std::vector<double>& bound);

// max_i |c_i - r_i| / B_i over the outputs (+inf where c is not finite), the measure
// "format_bound.y" (limit 1), and where the maximum is in `where`.
double gemm_fp8_block_bound_ratio(const GemmFp8BlockParams& p, const TensorMap& in, DType state, const Tensor& y,
                                  const std::vector<double>& ref, std::string* where = nullptr);

}  // namespace dg
