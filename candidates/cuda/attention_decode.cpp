// Registration of the CUDA attention_decode candidate (attention_decode.h), compiled in every build
// so that the name, doc and NOT_SUPPORTED rows are the same with and without CUDA.
#include "candidates/cuda/attention_decode.h"

#include "harness/cases/registry.h"

namespace dg {

DG_REGISTER_CANDIDATE(attention_decode_cuda_splitkv_f32,
                      CandidateInfo{"attention_decode_cuda_splitkv_f32", "attention_decode", "cuda", "splitkv",
                                    DType::f32, DType::f32, DType::f32,
                                    "flash-decoding on the GPU: per (sequence, split, kv head) block an f32 online "
                                    "softmax over its pages by tiles of tokens, K/V read once for the group's q "
                                    "heads, -inf guarded empty splits; a second kernel's LSE merge in split order"},
                      attention_decode_cuda_splitkv_f32);

}  // namespace dg
