// Registration of the CUDA rope candidate (rope.h), compiled in every build so that the name, doc
// and NOT_SUPPORTED rows are the same with and without CUDA.
#include "candidates/cuda/rope.h"

#include "harness/cases/registry.h"

namespace dg {

DG_REGISTER_CANDIDATE(rope_cuda_bf16,
                      CandidateInfo{"rope_cuda_bf16", "rope", "cuda", "cache", DType::bf16, DType::f32, DType::bf16,
                                    "vLLM's rotary_embedding on the GPU in a bf16 model: a bf16 cos/sin cache per "
                                    "position, every product and sum rounded to bf16 (rope_cpu_cache_bf16 bit for bit)"},
                      rope_cuda_bf16);

}  // namespace dg
