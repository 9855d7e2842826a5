// The cuBLASLt GEMM candidates (gemm_cublaslt.cu), declared for every build: without CUDA, or at run
// time without a device, it throws NotSupported with the reason, and the row says so.
//
//   gemm_cuda_cublaslt_bf16   op gemm: y = x W^T (+ bias) by cublasLtMatmul, bf16 x [M,K], w [N,K] and
//                             bias [N], CUBLAS_COMPUTE_32F (f32 accumulation on the tensor cores, in
//                             the library's order), the bias added in f32 by the BIAS epilogue, the
//                             output rounded once to bf16: gemm_cpu_blocked_bf16's numerics with
//                             another summation order
//   gemm_fp8_block_cuda_cublaslt  op gemm_fp8_block: y = x W^T by cublasLtMatmul on e4m3 x [M,K] and
//                             w [N,K] with DeepSeek-V3's block scales as multipliers (x_scale 1 x 128
//                             by VEC128_32F, w_scale 128 x 128 by BLK128x128_32F), CUBLAS_COMPUTE_32F,
//                             y in bf16; compute capability 9.x only (NOT_SUPPORTED elsewhere, with
//                             the reason); gemm_cublaslt.cu says more
//
// Only a device runs it: the CUDA emulator does not emulate cuBLASLt, and the *_emu builds register
// the same names as NOT_SUPPORTED with that reason (emu/gemm_cublaslt_emu.cpp).
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void gemm_cuda_cublaslt_bf16(const Case& c, const TensorMap& in, TensorMap& out);
void gemm_fp8_block_cuda_cublaslt(const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg
