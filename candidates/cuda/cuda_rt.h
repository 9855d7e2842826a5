// What every CUDA candidate's host code shares (cuda_rt.cu): checked CUDA calls, device memory,
// inputs uploaded and outputs downloaded in the candidate's dtypes, and the timed launch. Included by
// the .cu files only (it names CUDA types); with DG_CUDA_EMULATE it compiles against the CUDA
// emulator (candidates/cuda/emu/cuda_emu.h) instead of the CUDA headers, so the same host and
// device code runs on machines without a GPU. DG_LAUNCH is the one spelling of a launch for both.
//
// Device memory. register_cuda_device_ops() (kda_cuda.h) installs device_alloc/zero/free/copy as
// the DeviceOps of Device::cuda: cudaMalloc'd storage, copies through one pinned staging buffer (host
// pages are copied into it and DMA'd from it, the path that reaches full PCIe bandwidth). Allocation
// asks cuda_status() first and throws NotSupported with its reason when there is no device, so a row
// says "no CUDA device" and never crashes. Every CUDA call is checked (DG_CUDA), and every launch
// right after it (DG_LAUNCHED).
//
// Timing (harness/timing/device_timing.h). Inside a DeviceTimingScope each launch: persisting L2 lines
// reset, L2 flushed by reading a buffer twice its size (a read, not a memset: a memset would leave
// L2 full of dirty lines, and the kernel would pay for their write-back), device synchronised; a
// 100 us guard spin on the candidate's stream (a blocking stream), so the launch is enqueued before
// the GPU reaches it, which also measures the SM clock just before the start (its cycles over the
// global timer); the start event, the kernel, the end event on the legacy default stream, which
// waits for every blocking stream (not for a non-blocking one; the kernels here use only the
// timer's stream). Wall time is the host's, less the guard spin's device time. A
// launch whose clock was below 90% of the fastest seen is measured again (up to three times) from
// the in-out buffers it started from (saved before the first attempt), and counted as throttled;
// one still below after three is kept and counted in low_clock. The device's memory bandwidth
// comes from its attributes (2 x memory clock x bus width; an H200 reads 4.8 TB/s).
#pragma once

#ifdef DG_CUDA_EMULATE
#include "candidates/cuda/emu/cuda_emu.h"
#define DG_LAUNCH(kernel, grid, block, stream, ...) ::dg::cuda_emu::launch(kernel, grid, block, stream, __VA_ARGS__)
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define DG_LAUNCH(kernel, grid, block, stream, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#endif

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>

#include "candidates/cuda/device.h"
#include "harness/cases/registry.h"
#include "harness/core/tensor.h"

namespace dg::cu {

// --- errors ----------------------------------------------------------------------------------------
// Throws std::runtime_error naming the call, the place and CUDA's message unless e is cudaSuccess.
void check(cudaError_t e, const char* what, const char* file, int line);
#define DG_CUDA(expr) ::dg::cu::check((expr), #expr, __FILE__, __LINE__)
#define DG_LAUNCHED(name) ::dg::cu::check(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)

const CudaStatus& device_status();   // cuda_status(), asked once per process
void require_device();               // throws NotSupported with the reason when there is no device

// --- device memory -----------------------------------------------------------------------------------
void* device_alloc(size_t bytes);
void device_zero(void* p, size_t bytes);
void device_free(void* p);
void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);

// Scratch buffers of one thread's calls, by name, grown as needed and kept between calls.
class Scratch {
 public:
  void* get(const std::string& name, size_t bytes);

 private:
  struct Buf {
    Tensor t;
    size_t bytes = 0;
  };
  std::map<std::string, Buf> bufs_;
};
Scratch& scratch();   // this thread's

// --- inputs and outputs --------------------------------------------------------------------------------
// A device pointer to tensor `t` in dtype `want`: device tensors of that dtype as they are, anything
// else converted on the host (one rounding) and uploaded into scratch buffer `name`.
const void* device_input(const Tensor& t, DType want, const std::string& name);

// Tensor `name` of `m`, holding `numel` elements (the kernels index it by the case's shape).
template <class Map>
auto& need(Map& m, const char* name, const char* op, int64_t numel) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument(std::string(op) + ": tensor '" + name + "' is missing");
  if (it->second.numel() != numel)
    throw std::invalid_argument(std::string(op) + ": tensor '" + name + "' has shape " + it->second.shape_str() + " (" +
                                std::to_string(it->second.numel()) + " elements); the case needs " +
                                std::to_string(numel));
  return it->second;
}
const Tensor& need(const TensorMap& m, const char* name, const char* op);

// Input `name` of `in` (numel elements) on the device as bf16 (activations) or f32 (weights, states).
const __nv_bfloat16* bf16_input(const TensorMap& in, const char* name, const char* op, int64_t numel);
const float* f32_input(const TensorMap& in, const char* name, const char* op, int64_t numel);
// As bf16_input, but a tensor in another dtype is read as f32 first (exact for bf16/f16/f32, one
// rounding for f64) and that f32 rounded to bf16: the two roundings of a CPU candidate that loads a
// row as f32 (candidates/cpu/op_io.h) and rounds it to bf16, so GPU and CPU see the same inputs.
const __nv_bfloat16* bf16_input_via_f32(const TensorMap& in, const char* name, const char* op, int64_t numel);

// Device results in `dev_dtype` (f32 or bf16) -> output tensor `t` (host or device, any float dtype;
// one rounding, none when the dtypes agree).
void store_output(const void* dev, DType dev_dtype, Tensor& t);
inline void store_output(const float* dev, Tensor& t) { store_output(dev, DType::f32, t); }

// An in-out f32 pool as a device pointer: device pools in place; a host pool is uploaded into
// scratch here and copied back by write_back() after the launch.
struct InOut {
  Tensor* t = nullptr;
  float* dev = nullptr;
  bool staged = false;
  void write_back() const {
    if (staged) device_copy(t->bytes(), Device::host, dev, Device::cuda, t->nbytes());
  }
};
InOut in_out(Tensor& t, const std::string& name, const char* op);

// --- launches ----------------------------------------------------------------------------------------
struct Region {
  void* p;
  size_t bytes;
};
// Runs launch(stream) once and waits for it; timed as described at the top when a
// DeviceTimingScope is open. `inout`: device memory the kernel updates in place (restored before a
// re-measured attempt).
void run_launch(const std::function<void(cudaStream_t)>& launch, std::initializer_list<Region> inout = {});

// --- shared device code ----------------------------------------------------------------------------
constexpr int kWarp = 32;

// The butterfly over a warp's 32 lanes (xor 16, 8, 4, 2, 1): every lane gets the sum. Lane 0's
// value is the pairwise tree lane[j] += lane[j + w], w = 16 .. 1 (addition commutes bit for bit),
// the order of the CPU candidates' "blocked" reductions.
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float bf(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Sum of x over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ inline float block_sum(float x, float* red) {
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  x = warp_sum(x);
  __syncthreads();
  if (lane == 0) red[w] = x;
  __syncthreads();
  float s = 0;
  for (int i = 0; i < nw; ++i) s += red[i];
  return s;
}

}  // namespace dg::cu
