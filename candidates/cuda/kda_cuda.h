// CUDA KDA candidates (kda_cuda.cu), declared for every build: without CUDA, or at run time without a
// device, each entry point throws NotSupported with the reason ("built without CUDA", "no CUDA
// device", or the driver's message), and the row says so.
//
//   kda_decode_cuda_f32state        op kda_decode: one decode step of B sequences against a paged f32
//                                   state pool, bf16 q/k/v/g/beta, in-kernel l2norm and gate modes; the
//                                   fused-recurrent algorithm, state V-first (K-first is accepted and
//                                   runs the same kernel with strided state access)
//   kda_decode_cuda_f32state_fused  op kda_decode_fused: the step above with the causal short conv
//                                   (width W, SiLU, conv-state pools updated) before it and the
//                                   sigmoid-gated RMSNorm after it, in one kernel
//   kda_cuda_chunk_bf16             op kda: the chunked prefill (chunk 64) with the storage precision
//                                   of kda_cpu_chunk_bf16 (bf16 inputs, bf16-stored Akk^-1, Aqk, W, U,
//                                   V', gated q/k copies, the f32 state consumed through a bf16 copy
//                                   each chunk, f32 accumulation, bf16 o, f32 ht)
//
// Tensors in `in` and `out` may live on the host or on the device (Tensor::device()); the drivers
// keep decode pools on the device between steps when device memory is registered. Launches are
// checked one by one; inside a DeviceTimingScope (the bench runner) each launch is timed by events
// as harness/timing/device_timing.h describes.
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void kda_decode_cuda_f32state(const Case& c, const TensorMap& in, TensorMap& out);
void kda_decode_cuda_f32state_fused(const Case& c, const TensorMap& in, TensorMap& out);
void kda_cuda_chunk_bf16(const Case& c, const TensorMap& in, TensorMap& out);

// Registers the CUDA DeviceOps (device memory through cudaMalloc, copies through pinned staging)
// when this build has CUDA; a no-op otherwise. Allocation without a device throws NotSupported.
void register_cuda_device_ops();

}  // namespace dg
