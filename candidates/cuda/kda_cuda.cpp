// Registrations of the CUDA candidates (kda_cuda.h), compiled in every build so that the names, docs
// and NOT_SUPPORTED rows are the same with and without CUDA.
#include "candidates/cuda/kda_cuda.h"

#include "harness/cases/registry.h"

namespace dg {
namespace {
struct RegisterCudaMemory {
  RegisterCudaMemory() { register_cuda_device_ops(); }
};
const RegisterCudaMemory register_cuda_memory;
}  // namespace

DG_REGISTER_CANDIDATE(kda_decode_cuda_f32state,
                      CandidateInfo{"kda_decode_cuda_f32state", "kda_decode", "cuda", "recurrent", DType::bf16,
                                    DType::f32, DType::f32,
                                    "fused-recurrent decode step on the GPU: f32 state pool (V-first), bf16 inputs, "
                                    "in-kernel l2norm and gates, one warp per state column"},
                      kda_decode_cuda_f32state);
DG_REGISTER_CANDIDATE(kda_decode_cuda_f32state_fused,
                      CandidateInfo{"kda_decode_cuda_f32state_fused", "kda_decode_fused", "cuda", "recurrent",
                                    DType::bf16, DType::f32, DType::f32,
                                    "the decode layer in one GPU kernel: short conv + SiLU, KDA step (f32 state), "
                                    "sigmoid-gated RMSNorm"},
                      kda_decode_cuda_f32state_fused);
DG_REGISTER_CANDIDATE(kda_cuda_chunk_bf16,
                      CandidateInfo{"kda_cuda_chunk_bf16", "kda", "cuda", "chunk", DType::bf16, DType::f32, DType::bf16,
                                    "chunked WY/UT prefill on the GPU with kda_cpu_chunk_bf16's bf16 storage points"},
                      kda_cuda_chunk_bf16);

}  // namespace dg
