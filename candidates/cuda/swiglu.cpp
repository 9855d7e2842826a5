// Registration of the CUDA swiglu candidate (swiglu.h), compiled in every build so that the name,
// doc and NOT_SUPPORTED rows are the same with and without CUDA.
#include "candidates/cuda/swiglu.h"

#include "harness/cases/registry.h"

namespace dg {

DG_REGISTER_CANDIDATE(swiglu_cuda_bf16,
                      CandidateInfo{"swiglu_cuda_bf16", "swiglu", "cuda", "fused", DType::bf16, DType::f32, DType::bf16,
                                    "vLLM's silu_and_mul on the GPU with the asymmetric clamp: bf16 in, f32 arithmetic, "
                                    "the product rounded once to bf16"},
                      swiglu_cuda_bf16);

}  // namespace dg
