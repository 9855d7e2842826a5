// Registrations of the cuBLASLt GEMM candidates (gemm_cublaslt.h), compiled in every build so that
// the name, doc and NOT_SUPPORTED rows are the same with and without CUDA.
#include "candidates/cuda/gemm_cublaslt.h"

#include "harness/cases/registry.h"

namespace dg {

DG_REGISTER_CANDIDATE(gemm_cuda_cublaslt_bf16,
                      CandidateInfo{"gemm_cuda_cublaslt_bf16", "gemm", "cuda", "cublaslt", DType::bf16, DType::f32,
                                    DType::bf16,
                                    "cublasLtMatmul: bf16 operands, CUBLAS_COMPUTE_32F, bias by the epilogue in f32, "
                                    "the output rounded once to bf16"},
                      gemm_cuda_cublaslt_bf16);
DG_REGISTER_CANDIDATE(gemm_fp8_block_cuda_cublaslt,
                      CandidateInfo{"gemm_fp8_block_cuda_cublaslt", "gemm_fp8_block", "cuda", "cublaslt", DType::f32,
                                    DType::tf32, DType::bf16,
                                    "cublasLtMatmul on e4m3 operands with VEC128_32F (x) and BLK128x128_32F (w) block "
                                    "scales, CUBLAS_COMPUTE_32F, bf16 y (Hopper's FP8 accumulator: state tf32 as "
                                    "gemm_fp8_block_cpu_deepgemm_bf16); compute capability 9.x only"},
                      gemm_fp8_block_cuda_cublaslt);

}  // namespace dg
