// CUDA candidate of rope (rope.cu), declared for every build: without CUDA, or at run time without a
// device, it throws NotSupported with the reason, and the row says so.
//
//   rope_cuda_bf16   vLLM's rotary_embedding kernel in a bf16 model: a bf16 cos/sin cache per
//                    position, bf16 x, every product and sum rounded to bf16; the arithmetic of
//                    rope_cpu_cache_bf16 in the same order (bit for bit on every device: no
//                    transcendental runs on the GPU)
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void rope_cuda_bf16(const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg
