// Registrations of the CUDA rmsnorm candidates (rmsnorm.h), compiled in every build so that the
// names, docs and NOT_SUPPORTED rows are the same with and without CUDA.
#include "candidates/cuda/rmsnorm.h"

#include "harness/cases/registry.h"

namespace dg {

DG_REGISTER_CANDIDATE(rmsnorm_cuda_bf16,
                      CandidateInfo{"rmsnorm_cuda_bf16", "rmsnorm", "cuda", "blocked", DType::bf16, DType::f32,
                                    DType::bf16,
                                    "one block per row on the GPU, one warp's f32 reduction (rmsnorm_cpu_blocked_bf16's "
                                    "order, bit for bit), x * r and * w rounded to bf16"},
                      rmsnorm_cuda_bf16);
DG_REGISTER_CANDIDATE(add_rmsnorm_cuda_bf16,
                      CandidateInfo{"add_rmsnorm_cuda_bf16", "add_rmsnorm", "cuda", "blocked", DType::bf16, DType::f32,
                                    DType::bf16,
                                    "vLLM's fused_add_rms_norm on the GPU: the residual sum rounded and stored, then the "
                                    "norm of rmsnorm_cuda_bf16"},
                      add_rmsnorm_cuda_bf16);

}  // namespace dg
