// CUDA candidate of mla_decode (mla_decode.cu), declared for every build: without CUDA, or at run
// time without a device, it throws NotSupported with the reason, and the row says so.
//
//   mla_decode_cuda_packed_f32   absorbed MLA decode on the GPU, the twin of mla_decode_cpu_packed_f32:
//                                one block per (sequence, split, group of up to 8 q heads) runs an
//                                f32 online softmax over its split of the sequence's keys (dense: its
//                                tokens by pages; sparse: the valid entries of its index row, compacted
//                                by a first kernel) in blocks of 64 keys, each latent row read once
//                                per block of heads as the key and again as the value (its first d_c
//                                channels); o_p = 0, lse_p = -inf for a split with no keys; a last
//                                kernel merges the splits by the max-subtracted LSE merge in split
//                                order. Latent pages in bf16, f16, f32 or FP8 e4m3 (per-tensor
//                                kv_scale) read as stored; o~ and lse in f32. Static shared memory
//                                under 48 KiB; no tensor cores.
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void mla_decode_cuda_packed_f32(const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg
