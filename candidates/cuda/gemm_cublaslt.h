// The cuBLASLt GEMM candidate (gemm_cublaslt.cu), declared for every build: without CUDA, or at run
// time without a device, it throws NotSupported with the reason, and the row says so.
//
//   gemm_cuda_cublaslt_bf16   op gemm: y = x W^T (+ bias) by cublasLtMatmul, bf16 x [M,K], w [N,K] and
//                             bias [N], CUBLAS_COMPUTE_32F (f32 accumulation on the tensor cores, in
//                             the library's order), the bias added in f32 by the BIAS epilogue, the
//                             output rounded once to bf16: gemm_cpu_blocked_bf16's numerics with
//                             another summation order
//
// Only a device runs it: the CUDA emulator does not emulate cuBLASLt, and the *_emu builds register
// the same name as NOT_SUPPORTED with that reason (emu/gemm_cublaslt_emu.cpp).
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void gemm_cuda_cublaslt_bf16(const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg
