// CUDA candidate of moe_router (moe_router.cu), declared for every build: without CUDA, or at run
// time without a device, it throws NotSupported with the reason, and the row says so.
//
//   moe_router_cuda_f32   the GLM/DeepSeek-V3 router (noaux_tc) on the GPU in f32, one block per
//                         token: sigmoid, biased selection scores, each group's top-2 sum, the
//                         topk_group groups and then the k experts by block-wide argmax (the tie rule:
//                         the lower index wins), slots in rank order, the unbiased weights renormalized
//                         in slot order and scaled by rsf; moe_router_cpu_naive_f32's arithmetic
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void moe_router_cuda_f32(const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg
