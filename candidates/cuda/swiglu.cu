// CUDA candidate of swiglu (swiglu.h): one block per row of I outputs (a grid-stride loop over the
// columns when I passes the block), each thread one output at a time: the bf16 gate and up read,
// the clamps, g / (1 + expf(-g)) * u in f32, rounded once to bf16 on store.
//
// Numerics: the arithmetic of swiglu_cpu_fused_bf16 in its order (the clamps as std::min and
// std::clamp compare, so a clamped value is the limit itself). expf is CUDA's accurate expf (no fast
// math: within 2 ulp, where the host's is within 1), so on a GPU a few outputs may differ from the
// CPU candidate's by one bf16 ulp where the f32 product lies near a bf16 rounding boundary; under
// the emulator expf is the host's and the two agree bit for bit.
//
// Compiled by nvcc into dg_cuda, and against the CUDA emulator (emu/swiglu_emu.cpp) for the tests.
#include "candidates/cuda/swiglu.h"

#include <algorithm>

#include "candidates/cuda/cuda_rt.h"
#include "harness/ops/swiglu.h"

namespace dg {
namespace {
using namespace cu;
using cu::round_bf16;   // the device one (dtype.h has a host one of the same name in dg)

constexpr int kMaxSwigluThreads = 256;

struct SwigluArgs {
  const __nv_bfloat16* x;   // [N, 2I]
  __nv_bfloat16* y;         // [N, I]
  int64_t I;
  float limit;              // 0: no clamp
};

__global__ void __launch_bounds__(kMaxSwigluThreads) swiglu_kernel(SwigluArgs a) {
  const int64_t row = blockIdx.x, I = a.I;
  const __nv_bfloat16* x = a.x + row * 2 * I;
  __nv_bfloat16* y = a.y + row * I;
  const float L = a.limit;
  for (int64_t i = threadIdx.x; i < I; i += blockDim.x) {
    float g = bf(x, i), u = bf(x, I + i);
    if (L > 0.0f) {
      g = L < g ? L : g;                          // std::min(g, L)
      u = u < -L ? -L : (L < u ? L : u);          // std::clamp(u, -L, L)
    }
    y[i] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace

void swiglu_cuda_bf16(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "swiglu";
  require_device();
  const SwigluParams p = swiglu_params(c);
  SwigluArgs A{};
  A.x = bf16_input_via_f32(in, "x", op, p.N * 2 * p.I);
  Tensor& y = need(out, "y", op, p.N * p.I);
  A.y = static_cast<__nv_bfloat16*>(scratch().get("y", static_cast<size_t>(p.N * p.I) * 2));
  A.I = p.I;
  A.limit = static_cast<float>(p.limit);
  const int threads = static_cast<int>(std::clamp<int64_t>((p.I + kWarp - 1) / kWarp * kWarp, kWarp, kMaxSwigluThreads));
  run_launch([&](cudaStream_t s) {
    DG_LAUNCH(swiglu_kernel, static_cast<unsigned>(p.N), static_cast<unsigned>(threads), s, A);
    DG_LAUNCHED("swiglu_kernel");
  });
  store_output(A.y, DType::bf16, y);
}

}  // namespace dg
