// CUDA candidate of rope (rope.h): one block per token, one thread per rotated pair (a block-stride
// loop over the token's H * d_rope/2 pairs when they pass the block), then the pass-through dims
// d_rope .. D-1 of every head copied.
//
// The cos/sin cache. vLLM keeps cos_sin_cache [max_position, d_rope] in the model dtype, built once
// when the model loads; the kernel reads the row of each token's position. Here the host builds the
// rows of the case's positions, [T, d_rope] (cos_0 .. cos_{h-1}, sin_0 .. sin_{h-1}), exactly as
// rope_cpu_cache_bf16 does: inv_freq = theta^(-2i/d_rope) and the angle pos * inv_freq in long double
// (64-bit significand), cos and sin in long double rounded to f32 and then to bf16 (vLLM builds the
// cache in f32 and casts it). The rows are uploaded as bf16 before the launch, outside the timed
// kernel, as a loaded model's cache is already on the device.
//
// Numerics (rope_cpu_cache_bf16's, c10::BFloat16's operators): x read as bf16 (a tensor in f64
// through f32 first, as the CPU reads it); y_a = bf16(bf16(x_a c) - bf16(x_b s)),
// y_b = bf16(bf16(x_b c) + bf16(x_a s)), each product and sum in f32 (--fmad=false: no contraction)
// and rounded to bf16. Nothing transcendental runs on the GPU, so it agrees with the CPU candidate
// bit for bit on every device.
//
// Compiled by nvcc into dg_cuda, and against the CUDA emulator (emu/rope_emu.cpp) for the tests.
#include "candidates/cuda/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "candidates/cuda/cuda_rt.h"
#include "harness/core/dtype.h"
#include "harness/ops/rope.h"

namespace dg {
namespace {
using namespace cu;

constexpr int kMaxRopeThreads = 256;

struct RopeArgs {
  const __nv_bfloat16* x;    // [T, H, D]
  const __nv_bfloat16* cs;   // [T, d_rope]: the token's cos row, then its sin row
  __nv_bfloat16* y;          // [T, H, D]
  int64_t H, D, half;
  bool neox;
};

__device__ __forceinline__ float rbf(float v) { return cu::round_bf16(v); }

__global__ void __launch_bounds__(kMaxRopeThreads) rope_kernel(RopeArgs a) {
  const int64_t t = blockIdx.x, half = a.half, D = a.D, d_rope = 2 * half;
  const __nv_bfloat16* x = a.x + t * a.H * D;
  const __nv_bfloat16* cs = a.cs + t * d_rope;
  __nv_bfloat16* y = a.y + t * a.H * D;
  for (int64_t p = threadIdx.x; p < a.H * half; p += blockDim.x) {
    const int64_t h = p / half, i = p % half;
    const int64_t ia = h * D + (a.neox ? i : 2 * i), ib = h * D + (a.neox ? i + half : 2 * i + 1);
    const float xa = bf(x, ia), xb = bf(x, ib), c = bf(cs, i), s = bf(cs, half + i);
    y[ia] = __float2bfloat16_rn(rbf(xa * c) - rbf(xb * s));
    y[ib] = __float2bfloat16_rn(rbf(xb * c) + rbf(xa * s));
  }
  const int64_t pass = D - d_rope;
  for (int64_t p = threadIdx.x; p < a.H * pass; p += blockDim.x) {
    const int64_t j = (p / pass) * D + d_rope + p % pass;
    y[j] = x[j];
  }
}

// The cache rows of the case's positions (rope_cpu_cache_bf16's values, the head comment), as a host
// f32 tensor holding bf16 values.
Tensor cos_sin_rows(const RopeParams& p, const Tensor& positions) {
  const Tensor pos = positions.device() == Device::host ? positions : positions.to(Device::host);
  const int64_t half = p.d_rope / 2;
  std::vector<long double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] = std::pow(static_cast<long double>(p.theta),
                                           -2.0L * static_cast<long double>(i) / static_cast<long double>(p.d_rope));
  Tensor rows(DType::f32, {p.T, p.d_rope});
  float* r = rows.data<float>();
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const long double phi = static_cast<long double>(pos.data<int64_t>()[t]) * inv[static_cast<size_t>(i)];
      r[t * p.d_rope + i] = dg::round_bf16(static_cast<float>(std::cos(phi)));
      r[t * p.d_rope + half + i] = dg::round_bf16(static_cast<float>(std::sin(phi)));
    }
  return rows;
}

}  // namespace

void rope_cuda_bf16(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "rope";
  require_device();
  const RopeParams p = rope_params(c);
  RopeArgs A{};
  A.x = bf16_input_via_f32(in, "x", op, p.T * p.H * p.D);
  const Tensor& pos = need(in, "positions", op, p.T);
  A.cs = static_cast<const __nv_bfloat16*>(device_input(cos_sin_rows(p, pos), DType::bf16, "cos_sin"));
  Tensor& y = need(out, "y", op, p.T * p.H * p.D);
  A.y = static_cast<__nv_bfloat16*>(scratch().get("y", static_cast<size_t>(p.T * p.H * p.D) * 2));
  A.H = p.H;
  A.D = p.D;
  A.half = p.d_rope / 2;
  A.neox = p.style == RopeStyle::neox;
  const int64_t work = std::max(A.H * A.half, A.H * (p.D - p.d_rope));
  const int threads = static_cast<int>(std::clamp<int64_t>((work + kWarp - 1) / kWarp * kWarp, kWarp, kMaxRopeThreads));
  run_launch([&](cudaStream_t s) {
    DG_LAUNCH(rope_kernel, static_cast<unsigned>(p.T), static_cast<unsigned>(threads), s, A);
    DG_LAUNCHED("rope_kernel");
  });
  store_output(A.y, DType::bf16, y);
}

}  // namespace dg
