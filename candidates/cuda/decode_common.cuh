// Device code shared by the split-KV decode kernels (attention_decode.cu, mla_decode.cu): reading a
// stored K/V or latent element as f32, the pools' device dtype, and kernel 2, the LSE merge of the
// splits. Included by each .cu inside its own translation unit (for nvcc and for the emulator, cuda_rt.h
// first); everything here has internal linkage, so each kernel file keeps its own copy of the merge
// kernel's host stub.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "candidates/cuda/cuda_rt.h"
#include "harness/core/dtype.h"

namespace dg {
namespace {
namespace decode_cu {
using namespace cu;

constexpr int kMergeThreads = 128;
constexpr int kMaxSplits = 1024;   // the ops' bound on split

__device__ __forceinline__ int64_t lmin(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ float kv_value(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float kv_value(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float kv_value(const __half* p, int64_t i) { return __half2float(p[i]); }
// FP8 e4m3 (E4M3FN): sign, 4 exponent bits of bias 7, 3 mantissa bits, no infinities, S.1111.111
// NaN; every value exact in f32.
__device__ __forceinline__ float kv_value(const uint8_t* p, int64_t i) {
  const unsigned x = p[i], e = (x >> 3) & 15u, m = x & 7u;
  // (8 + m) 2^(e - 10) as a product of exact factors (no ldexpf: its call spilled the PV loop's registers)
  float v = e == 0 ? static_cast<float>(m) * 0x1p-9f : static_cast<float>(8u + m) * (static_cast<float>(1u << e) * 0x1p-10f);
  if ((x & 0x7fu) == 0x7fu) v = nanf("");
  return (x & 0x80u) ? -v : v;
}

// The pool on the device in the dtype the kernel reads: bf16, f16, f32 and e4m3 as stored, f64 as
// f32 (one rounding, as the CPU candidates load it). `what` names the pool ("attention_decode: KV
// pages").
inline DType device_dtype(DType stored, const char* what) {
  switch (stored) {
    case DType::bf16:
    case DType::f16:
    case DType::f32:
    case DType::e4m3: return stored;
    case DType::f64: return DType::f32;
    default: throw std::invalid_argument(std::string(what) + " in " + std::string(dg::name(stored)) + " are not read");
  }
}

struct MergeArgs {
  const float *o_part, *lse_part;   // [rows, split, dv], [rows, split]
  float *o, *lse;                   // [rows, dv], [rows]
  int64_t split, dv;
};

// Kernel 2: one block of kMergeThreads per row (b, h): M = max_p lse_p; M = -inf (no keys in any
// split) gives o = 0, lse = -inf; else w_p = exp(lse_p - M), o = sum_p w_p o_p / sum_p w_p,
// lse = M + ln sum_p w_p, every sum in increasing p (the CPU candidates' merge).
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(MergeArgs a) {
  __shared__ float w_s[kMaxSplits];
  const int64_t r = blockIdx.x;
  const float* lse = a.lse_part + r * a.split;
  float M = -INFINITY;
  for (int64_t s = 0; s < a.split; ++s) M = fmaxf(M, lse[s]);
  if (M == -INFINITY) {   // no keys in any split
    for (int64_t c = threadIdx.x; c < a.dv; c += blockDim.x) a.o[r * a.dv + c] = 0.0f;
    if (threadIdx.x == 0) a.lse[r] = -INFINITY;
    return;
  }
  for (int64_t s = threadIdx.x; s < a.split; s += blockDim.x) w_s[s] = expf(lse[s] - M);
  __syncthreads();
  float wsum = 0.0f;
  for (int64_t s = 0; s < a.split; ++s) wsum = wsum + w_s[s];
  for (int64_t c = threadIdx.x; c < a.dv; c += blockDim.x) {
    float u = 0.0f;
    for (int64_t s = 0; s < a.split; ++s) u = u + w_s[s] * a.o_part[(r * a.split + s) * a.dv + c];
    a.o[r * a.dv + c] = u / wsum;
  }
  if (threadIdx.x == 0) a.lse[r] = M + logf(wsum);
}

}  // namespace decode_cu
}  // namespace
}  // namespace dg
