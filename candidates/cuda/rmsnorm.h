// CUDA candidates of rmsnorm and add_rmsnorm (rmsnorm.cu), declared for every build: without CUDA,
// or at run time without a device, each throws NotSupported with the reason, and the row says so.
//
//   rmsnorm_cuda_bf16       op rmsnorm: one block per row; bf16 x and weight, the sum of squares in
//                           f32, then production's rounding points (vLLM rms_norm, HF RMSNorm): x * r
//                           rounded to bf16, times the bf16 weight, rounded to bf16 again
//   add_rmsnorm_cuda_bf16   op add_rmsnorm: vLLM's fused_add_rms_norm: s = x + residual rounded to the
//                           case's dtype (then to bf16, the kernel's storage) and written to
//                           residual_out, then the norm above of s
// Both compute in the order of the CPU candidates rmsnorm_cpu_blocked_bf16 / add_rmsnorm_cpu_blocked_bf16
// and agree with them bit for bit.
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void rmsnorm_cuda_bf16(const Case& c, const TensorMap& in, TensorMap& out);
void add_rmsnorm_cuda_bf16(const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg
