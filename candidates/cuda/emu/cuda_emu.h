// The CUDA emulator: the subset of CUDA C++ and the runtime API that the CUDA candidates
// (candidates/cuda/*.cu, except the cuBLASLt GEMM, which only a device runs) use, implemented on
// the host, so the candidates' own source (kernels and host code alike) is compiled by g++ and run
// on machines without a GPU (the *_emu_test binaries; nothing in the driftgate program uses it). cuda_rt.h includes this header instead of the CUDA headers when
// DG_CUDA_EMULATE is defined.
//
// Why our own: no packaged library runs CUDA C++ on a CPU, and the checks we need are about the
// kernels' logic, not the hardware: indexing, bounds, barrier use and the numerics of every step.
//
// Execution model. A launch runs synchronously. Its blocks run one after another on the calling
// thread; the threads of a block are fibers (Boost.Context) switched only at barriers, so each
// thread runs from one barrier to the next before the next thread starts:
//   - __syncthreads() waits for every thread of the block that has not exited (an exited thread
//     counts as arrived, as on the hardware);
//   - __shfl_xor_sync() is a barrier of the warp's 32 lanes with full mask; a shuffle in a warp
//     with an exited lane, or with a partial mask, is reported as an error;
//   - a block in which no thread can run while some wait (divergent barriers) is a deadlock,
//     reported as a launch error naming the barrier.
// set_thread_order(reverse) runs the threads of every phase in descending order instead: a kernel
// with a missing barrier reads what another thread wrote in the same phase, so its results change
// with the order (the emulator tests compare the two orders bit for bit).
//
// __shared__ is `static thread_local`: blocks run one at a time on the launching thread, so a
// block's threads share it and concurrent launches on other threads do not. Device memory is host
// memory (aligned_alloc to 256 bytes as cudaMalloc, so sanitizers see it); copies are memcpy;
// events read the steady clock. The device attributes are nominal H200 figures so the timing code
// runs its full path; the times are host times, never a GPU's.
//
// What the emulator can say of speed is how the kernels touch memory: trace_streaming() counts
// the 32-byte sectors of every __ldcs/__stcs warp request (the decode kernels move their state
// that way), so a test can hold a kernel to coalesced access and to the bytes the bench counts.
#pragma once

#include <algorithm>
#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>

#include "harness/core/dtype.h"

// --- qualifiers --------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

// --- built-in variables ------------------------------------------------------------------------------
struct uint3 {   // an aggregate, as CUDA's: thread_local copies need no initialiser
  unsigned x, y, z;
};
struct int4 {
  int x, y, z, w;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
// __thread, not thread_local: an extern thread_local is read through a TLS wrapper function,
// which UBSan's null check misreads as a null object in kernels that declare __shared__ arrays;
// __thread (constant-initialised, as these are) is a plain TLS access.
extern __thread uint3 threadIdx, blockIdx;
extern __thread dim3 blockDim, gridDim;

// --- bf16 (bit-exact with cuda_bf16.h: round to nearest even, NaN kept) ------------------------------
struct __nv_bfloat16 {
  uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 h) { return dg::f32_from_bf16(h.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {dg::bf16_from_f32(x)}; }

// --- f16 (bit-exact with cuda_fp16.h's __float2half_rn / __half2float: round to nearest even,
// overflow to Inf, subnormals exact, NaN kept) ------------------------------------------------------
struct __half {
  uint16_t bits;
};
inline float __half2float(__half h) { return dg::f32_from_f16(h.bits); }
inline __half __float2half_rn(float x) { return {dg::f16_from_f32(x)}; }

// --- device functions --------------------------------------------------------------------------------
// expf, log1pf, sqrtf, fmaf: the host's (<math.h>; CUDA's differ from them by at most 2 ulp).
namespace dg::cuda_emu {
extern thread_local bool t_tracing;
void record_streaming(const void* p, unsigned bytes, bool store);
}  // namespace dg::cuda_emu
// Streaming load/store: a cache hint, a plain memory access here, recorded when tracing is on.
template <class T>
inline T __ldcs(const T* p) {
  if (dg::cuda_emu::t_tracing) dg::cuda_emu::record_streaming(p, sizeof(T), false);
  return *p;
}
template <class T>
inline void __stcs(T* p, T v) {
  if (dg::cuda_emu::t_tracing) dg::cuda_emu::record_streaming(p, sizeof(T), true);
  *p = v;
}
inline int min(int a, int b) { return a < b ? a : b; }
long long clock64();                  // the emulated SM clock: steady-clock ns times its nominal GHz
unsigned long long globaltimer_ns();  // %globaltimer

namespace dg::cuda_emu {
void syncthreads();
float shfl_xor(unsigned mask, float v, int lane_mask);
void set_thread_order(bool reverse);   // for every later launch, on every thread
void set_clock_scale(double scale);    // clock64() runs at scale x its nominal rate (a clock drop)
void run_grid(dim3 grid, dim3 block, const std::function<void()>& body);

// The streaming-access trace: how the __ldcs/__stcs accesses of this thread's launches map onto
// 32-byte memory sectors, the unit in which the memory system moves data. Accesses are grouped
// into warp requests as the hardware does for warp-uniform code: the n-th streaming load (store)
// of each lane of a warp is one request. A request's sectors are the distinct sectors its lanes
// touch; a coalesced request of 32 lanes x 4 bytes touches 4. Where the lanes of a warp make
// different numbers of streaming accesses (divergent code) the grouping is not the hardware's,
// and `uniform` says so.
struct Traffic {
  uint64_t requests = 0, sectors = 0, bytes = 0;   // bytes: what the lanes asked for
  double efficiency() const { return sectors ? static_cast<double>(bytes) / (32.0 * static_cast<double>(sectors)) : 0.0; }
};
struct StreamingTrace {
  Traffic load, store;
  bool uniform = true;
};
void trace_streaming(bool on);     // this thread's later launches; on: the counts restart at zero
StreamingTrace streaming_trace();  // the counts of the launches since trace_streaming(true)
}  // namespace dg::cuda_emu

inline void __syncthreads() { dg::cuda_emu::syncthreads(); }
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) { return dg::cuda_emu::shfl_xor(mask, v, lane_mask); }

// --- runtime API -------------------------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaDeviceAttr {
  cudaDevAttrL2CacheSize,
  cudaDevAttrMemoryClockRate,
  cudaDevAttrGlobalMemoryBusWidth,
  cudaDevAttrMultiProcessorCount
};
struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
#define cudaStreamLegacy (reinterpret_cast<cudaStream_t>(0x1))

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaCtxResetPersistingL2Cache();
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev);
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);

namespace dg::cuda_emu {
// kernel<<<grid, block, 0, stream>>>(args...): every thread calls kernel with its own copy of args.
// A bad configuration or a deadlock becomes the error cudaGetLastError() returns next.
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t, A&&... args) {
  const std::tuple<std::decay_t<P>...> bound(std::forward<A>(args)...);
  run_grid(grid, block, [&] { std::apply(kernel, bound); });
}
}  // namespace dg::cuda_emu
