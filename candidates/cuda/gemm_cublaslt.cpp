// Registration of the cuBLASLt GEMM candidate (gemm_cublaslt.h), compiled in every build so that
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

}  // namespace dg
