// CUDA candidate of attention_decode (attention_decode.cu), declared for every build: without CUDA,
// or at run time without a device, it throws NotSupported with the reason, and the row says so.
//
//   attention_decode_cuda_splitkv_f32   paged split-KV (flash-decoding) decode attention on the GPU,
//                                       two kernels: one block per (sequence, split, kv head, tile of
//                                       up to 16 of its q heads) runs an f32 online softmax over its
//                                       share of the sequence's pages, reading each K/V row once for
//                                       every q head of the tile, and writes o_p, lse_p (o_p = 0,
//                                       lse_p = -inf for a split with no keys); the second merges
//                                       the splits by the max-subtracted LSE merge, in split order
//                                       (attention_decode_cpu_splitkv_f32's merge). KV pages in
//                                       bf16, f16, f32 or FP8 e4m3 (per-tensor k/v scales) are read
//                                       as stored; o and lse in f32.
#pragma once

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

void attention_decode_cuda_splitkv_f32(const Case& c, const TensorMap& in, TensorMap& out);

}  // namespace dg
