// Registration of the CUDA moe_router candidate (moe_router.h), compiled in every build so that the
// name, doc and NOT_SUPPORTED rows are the same with and without CUDA.
#include "candidates/cuda/moe_router.h"

#include "harness/cases/registry.h"

namespace dg {

DG_REGISTER_CANDIDATE(moe_router_cuda_f32,
                      CandidateInfo{"moe_router_cuda_f32", "moe_router", "cuda", "naive", DType::f32, DType::f32,
                                    DType::f32,
                                    "the noaux_tc router on the GPU in f32, one block per token: sigmoid, biased "
                                    "scores, group top-2 sums, top-k by block-wide argmax (lower index on ties), "
                                    "renorm in slot order (moe_router_cpu_naive_f32's arithmetic)"},
                      moe_router_cuda_f32);

}  // namespace dg
