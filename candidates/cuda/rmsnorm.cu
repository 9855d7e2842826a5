// CUDA candidates of rmsnorm and add_rmsnorm (rmsnorm.h).
//
// One block per row of D. The sum of squares is one warp's: lane j accumulates x_i^2 by FMA in f32
// over i = j, j + 32, ... in increasing i, then the butterfly (warp_sum, xor 16 .. 1) sums the 32
// lanes; lane 0 writes r = 1 / sqrt(sum / D + eps) (IEEE division and square root: no fast math,
// no rsqrtf) to shared memory for the block. That is rmsnorm_cpu_blocked_bf16's order, so the GPU
// and the CPU candidate agree bit for bit; the other warps load and store (the residual sum before
// the reduction, the normalized row after it), and rows run in parallel over the SMs. A reduction
// over every warp of the block would be faster on a few long rows, but its order is not the CPU's.
//
// Rounding points (production's, as the CPU candidate): x, residual and weight read as bf16 (a
// tensor in f64 through f32 first, as the CPU reads it); add_rmsnorm's s = x + residual in f32,
// rounded to the case's dtype (the residual stream's) and then to bf16, stored to residual_out and
// read back for the norm (after a barrier: the block's own global writes are visible to it);
// y = round_bf16(round_bf16(s * r) * w).
//
// Compiled by nvcc into dg_cuda, and against the CUDA emulator (emu/rmsnorm_emu.cpp) for the tests.
#include "candidates/cuda/rmsnorm.h"

#include <algorithm>
#include <string>

#include "candidates/cuda/cuda_rt.h"
#include "harness/ops/rmsnorm.h"

namespace dg {
namespace {
using namespace cu;
using cu::round_bf16;   // the device one (dtype.h has a host one of the same name in dg)

constexpr int kMaxNormThreads = 256;
enum class StreamRound : int { keep = 0, bf16 = 1, f16 = 2 };   // the residual stream's rounding

struct NormArgs {
  const __nv_bfloat16 *x, *res, *w;   // res null: rmsnorm
  __nv_bfloat16 *y, *res_out;
  int64_t D;
  float eps;
  StreamRound storage;
};

__device__ __forceinline__ float round_storage(StreamRound s, float v) {
  if (s == StreamRound::bf16) return round_bf16(v);
  if (s == StreamRound::f16) return __half2float(__float2half_rn(v));
  return v;
}

__global__ void __launch_bounds__(kMaxNormThreads) rmsnorm_kernel(NormArgs a) {
  __shared__ float r_shared;
  const int64_t D = a.D, row = blockIdx.x;
  const __nv_bfloat16* src = a.x + row * D;
  if (a.res) {   // the residual stream: rounded to its dtype, then to the kernel's bf16, stored
    const __nv_bfloat16* res = a.res + row * D;
    __nv_bfloat16* dst = a.res_out + row * D;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
      dst[i] = __float2bfloat16_rn(round_storage(a.storage, bf(src, i) + bf(res, i)));
    __syncthreads();
    src = dst;
  }
  if (threadIdx.x < kWarp) {
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += kWarp) acc = fmaf(bf(src, i), bf(src, i), acc);
    acc = warp_sum(acc);
    if (threadIdx.x == 0) r_shared = 1.0f / sqrtf(acc / static_cast<float>(D) + a.eps);
  }
  __syncthreads();
  const float r = r_shared;
  __nv_bfloat16* y = a.y + row * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    y[i] = __float2bfloat16_rn(round_bf16(bf(src, i) * r) * bf(a.w, i));
}

StreamRound storage_of(DType dt) {
  if (dt == DType::bf16) return StreamRound::bf16;
  if (dt == DType::f16) return StreamRound::f16;
  return StreamRound::keep;   // f32, f64: the f32 sum is the stream's value, rounded to bf16 next
}

void run_norm(const Case& c, const TensorMap& in, TensorMap& out, bool add) {
  const char* op = add ? "add_rmsnorm" : "rmsnorm";
  require_device();
  const RmsNormParams p = rmsnorm_params(c);
  const int64_t n = p.N * p.D;
  NormArgs A{};
  A.x = bf16_input_via_f32(in, "x", op, n);
  A.res = add ? bf16_input_via_f32(in, "residual", op, n) : nullptr;
  A.w = bf16_input_via_f32(in, "weight", op, p.D);
  Tensor& y = need(out, "y", op, n);
  Tensor* ro = add ? &need(out, "residual_out", op, n) : nullptr;
  A.y = static_cast<__nv_bfloat16*>(scratch().get("y", static_cast<size_t>(n) * 2));
  A.res_out = add ? static_cast<__nv_bfloat16*>(scratch().get("residual_out", static_cast<size_t>(n) * 2)) : nullptr;
  A.D = p.D;
  A.eps = static_cast<float>(p.eps);
  A.storage = storage_of(p.dtype);
  const int threads = static_cast<int>(std::clamp<int64_t>((p.D + kWarp - 1) / kWarp * kWarp, kWarp, kMaxNormThreads));
  run_launch([&](cudaStream_t s) {
    DG_LAUNCH(rmsnorm_kernel, static_cast<unsigned>(p.N), static_cast<unsigned>(threads), s, A);
    DG_LAUNCHED("rmsnorm_kernel");
  });
  store_output(A.y, DType::bf16, y);
  if (ro) store_output(A.res_out, DType::bf16, *ro);
}

}  // namespace

void rmsnorm_cuda_bf16(const Case& c, const TensorMap& in, TensorMap& out) { run_norm(c, in, out, false); }
void add_rmsnorm_cuda_bf16(const Case& c, const TensorMap& in, TensorMap& out) { run_norm(c, in, out, true); }

}  // namespace dg
