// gemm (reference/gemm.h): a case's parameters, for candidates and mutants; the size limit and the
// certification sample that gemm and gemm_fp8_block share.
#pragma once

#include <cstdint>
#include <string>

#include "harness/cases/case.h"
#include "reference/gemm.h"

namespace dg {

GemmParams gemm_params(const Case& c);

// The most multiply-adds one case may ask of the reference: 2^34, about 4 s of gemm's f64 tier on 2
// cores, 50 s of dd and 10 minutes of mpfr127 (reference/gemm.h; the lm_head at M = 16 is 2^33.2).
constexpr double kGemmMaxMacs = 17179869184.0;

// Refuses (InputError, prefixed by `op`) an M*K, N*K or M*N past int64 and M*N*K over kGemmMaxMacs.
void gemm_check_size(const char* op, int64_t M, int64_t N, int64_t K);

// The certification sample of an [M,N] output whose elements cost `output_cost` tier operations each
// at the upper tier: rows [0, rows) within kCertifyOps, all N columns; when not even one row fits,
// row 0's first `cols` outputs. `what` names it ("full case", "rows [0,3)", "row 0, columns [0,90)").
struct GemmSample {
  int64_t rows = 1, cols = 1;
  std::string what;
};
GemmSample gemm_certify_sample(int64_t M, int64_t N, double output_cost);

}  // namespace dg
