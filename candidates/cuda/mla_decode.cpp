// Registration of the CUDA mla_decode candidate (mla_decode.h), compiled in every build so that the
// name, doc and NOT_SUPPORTED rows are the same with and without CUDA.
#include "candidates/cuda/mla_decode.h"

#include "harness/cases/registry.h"

namespace dg {

DG_REGISTER_CANDIDATE(mla_decode_cuda_packed_f32,
                      CandidateInfo{"mla_decode_cuda_packed_f32", "mla_decode", "cuda", "packed", DType::f32, DType::f32,
                                    DType::f32,
                                    "mla_decode_cpu_packed_f32 on the GPU: per (sequence, split, 8 q heads) block an "
                                    "f32 online softmax over blocks of 64 keys (dense pages or the compacted sparse "
                                    "index list), each latent row shared by the block's heads as key and value, -inf "
                                    "guarded empty splits; a last kernel's LSE merge in split order"},
                      mla_decode_cuda_packed_f32);

}  // namespace dg
