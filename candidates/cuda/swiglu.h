// CUDA candidate of swiglu (swiglu.cu), declared for every build: without CUDA, or at run time
// without a device, it throws NotSupported with the reason, and the row says so.
//
//   swiglu_cuda_bf16   vLLM's silu_and_mul with the asymmetric clamp (gpt-oss): x [N, 2I] in bf16, the
//                      gate g = x[:, :I] clamped above at limit, the up u = x[:, I:] clamped to
//                      [-limit, limit] (no clamp when limit is 0), y = g / (1 + exp(-g)) * u in f32,
//                      rounded once to bf16; the arithmetic of swiglu_cpu_fused_bf16 in the same order
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void swiglu_cuda_bf16(const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg
