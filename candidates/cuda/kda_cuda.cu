// CUDA KDA candidates (kda_cuda.h): device memory, GPU timing, and three kernels.
//
// Device memory. register_cuda_device_ops() installs DeviceOps for Device::cuda: cudaMalloc'd
// storage, copies through one pinned staging buffer (host pages are copied into it and DMA'd from
// it, the path that reaches full PCIe bandwidth). Allocation asks cuda_status() first and throws
// NotSupported with its reason when there is no device, so a row says "no CUDA device" and never
// crashes. Every CUDA call is checked (DG_CUDA), and every launch right after it (DG_LAUNCHED).
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
//
// Numerics: compiled with --fmad=false and -ffp-contract=off like the CPU code, so every fused
// multiply-add below is an explicit fmaf; expf/log1pf are the accurate CUDA versions (no fast math).
//
// Emulation: with DG_CUDA_EMULATE this file compiles as host C++ against candidates/cuda/emu/
// cuda_emu.h (kernels as fibers, device memory on the host), so tests run its kernels and host code
// on machines without a GPU; DG_LAUNCH is the one spelling of a launch for both.
#include "candidates/cuda/kda_cuda.h"

#ifdef DG_CUDA_EMULATE
#include "candidates/cuda/emu/cuda_emu.h"
#define DG_LAUNCH(kernel, grid, block, stream, ...) ::dg::cuda_emu::launch(kernel, grid, block, stream, __VA_ARGS__)
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define DG_LAUNCH(kernel, grid, block, stream, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/kda_cpu.h"
#include "candidates/cuda/device.h"
#include "harness/timing/device_timing.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"
#include "reference/kda_params.h"

namespace dg {
namespace {

// --- errors ----------------------------------------------------------------------------------------
void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();   // clear a non-sticky error so the next call starts clean
  throw std::runtime_error(std::string("CUDA: ") + what + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
#define DG_CUDA(expr) check((expr), #expr, __FILE__, __LINE__)
#define DG_LAUNCHED(name) check(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)

const CudaStatus& device_status() {
  static const CudaStatus s = cuda_status();
  return s;
}
void require_device() {
  if (!device_status().available) throw NotSupported(device_status().reason);
}

// --- device memory -----------------------------------------------------------------------------------
constexpr size_t kStagingBytes = size_t{16} << 20;

struct Staging {
  std::mutex m;
  void* p = nullptr;   // pinned; never freed (the process's exit releases it after the runtime)
};
Staging& staging() {
  static Staging s;
  return s;
}

void* device_alloc(size_t bytes) {
  require_device();
  void* p = nullptr;
  DG_CUDA(cudaMalloc(&p, bytes));
  return p;
}
void device_zero(void* p, size_t bytes) { DG_CUDA(cudaMemset(p, 0, bytes)); }
void device_free(void* p) { cudaFree(p); }
void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::cuda && src_dev == Device::cuda) {
    DG_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    return;
  }
  Staging& s = staging();
  std::lock_guard<std::mutex> lock(s.m);
  if (!s.p) DG_CUDA(cudaMallocHost(&s.p, kStagingBytes));
  auto* d = static_cast<std::byte*>(dst);
  const auto* r = static_cast<const std::byte*>(src);
  for (size_t off = 0; off < bytes; off += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, bytes - off);
    if (dst_dev == Device::cuda) {
      std::memcpy(s.p, r + off, n);
      DG_CUDA(cudaMemcpy(d + off, s.p, n, cudaMemcpyHostToDevice));
    } else {
      DG_CUDA(cudaMemcpy(s.p, r + off, n, cudaMemcpyDeviceToHost));
      std::memcpy(d + off, s.p, n);
    }
  }
}

// Scratch buffers of one thread's calls, by name, grown as needed and kept between calls.
class Scratch {
 public:
  void* get(const std::string& name, size_t bytes) {
    Buf& b = bufs_[name];
    if (b.bytes < bytes) {
      b.t = Tensor(DType::f32, {static_cast<int64_t>((bytes + 3) / 4)}, Device::cuda);
      b.bytes = bytes;
    }
    return b.t.bytes();
  }

 private:
  struct Buf {
    Tensor t;
    size_t bytes = 0;
  };
  std::map<std::string, Buf> bufs_;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// A device pointer to tensor `t` in dtype `want`: device tensors of that dtype as they are, anything
// else converted on the host (one rounding) and uploaded into scratch buffer `name`.
const void* device_input(const Tensor& t, DType want, const std::string& name) {
  if (t.device() == Device::cuda && t.dtype() == want) return t.bytes();
  Tensor h = t.device() == Device::cuda ? t.to(Device::host) : t;
  if (h.dtype() != want) h = convert(h, want);
  void* d = scratch().get(name, std::max<size_t>(h.nbytes(), 4));
  device_copy(d, Device::cuda, h.bytes(), Device::host, h.nbytes());
  return d;
}
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
const Tensor& need(const TensorMap& m, const char* name, const char* op) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument(std::string(op) + ": tensor '" + name + "' is missing");
  return it->second;
}

// Input `name` of `in` (numel elements) on the device as bf16 (the kernels' activations) or f32
// (weights, states).
const __nv_bfloat16* bf16_input(const TensorMap& in, const char* name, const char* op, int64_t numel) {
  return static_cast<const __nv_bfloat16*>(device_input(need(in, name, op, numel), DType::bf16, name));
}
const float* f32_input(const TensorMap& in, const char* name, const char* op, int64_t numel) {
  return static_cast<const float*>(device_input(need(in, name, op, numel), DType::f32, name));
}
// A_log [HV] and dt_bias [HV*K] of the in-op gate modes (null when the case's gate does not read
// them; dt_bias is optional).
void gate_inputs(const KdaParams& p, const TensorMap& in, const char* op, const float*& A_log, const float*& dt_bias) {
  A_log = dt_bias = nullptr;
  if (p.gate == KdaGate::pregated) return;
  if (p.use_A_log) A_log = f32_input(in, "A_log", op, p.HV);
  if (in.count("dt_bias")) dt_bias = f32_input(in, "dt_bias", op, p.HV * p.K);
}

// f32 device results -> output tensor `t` (host or device, any float dtype; one rounding).
void store_output(const float* dev, Tensor& t) {
  Tensor h(DType::f32, t.shape());
  device_copy(h.bytes(), Device::host, dev, Device::cuda, h.nbytes());
  Tensor c = t.dtype() == DType::f32 ? h : convert(h, t.dtype());
  if (t.device() == Device::host) std::memcpy(t.bytes(), c.bytes(), c.nbytes());
  else device_copy(t.bytes(), t.device(), c.bytes(), Device::host, c.nbytes());
}

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
InOut in_out(Tensor& t, const std::string& name, const char* op) {
  if (t.dtype() != DType::f32) throw std::invalid_argument(std::string(op) + ": pool '" + name + "' must be f32");
  if (t.device() == Device::cuda) return {&t, t.data<float>(), false};
  auto* d = static_cast<float*>(scratch().get(name, t.nbytes()));
  device_copy(d, Device::cuda, t.bytes(), Device::host, t.nbytes());
  return {&t, d, true};
}

// --- timing --------------------------------------------------------------------------------------
// Spins `cycles` SM clocks and writes the wall time it took, read from the global timer inside the
// kernel (so launch latency does not enter the clock measurement).
__device__ __forceinline__ unsigned long long global_timer() {
#ifdef DG_CUDA_EMULATE
  return globaltimer_ns();
#else
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}
__global__ void spin_kernel(long long cycles, unsigned long long* ns) {
  const unsigned long long g0 = global_timer();
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  const unsigned long long g1 = global_timer();
  if (ns) *ns = g1 - g0;
}

// Reads every 16 bytes of buf: afterwards L2 holds clean lines of buf only. The xor reaches *sink
// only if it equals `key`, which the zeroed buffer never gives, so the loads stay.
__global__ void flush_kernel(const int4* buf, int64_t n, int key, int* sink) {
  int acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == key) *sink = acc;
}
// The guard spin: 100 us at 2 GHz, long enough that the global timer's tick (up to 1 us) moves the
// clock it measures by 1% at most.
constexpr int kGuardCycles = 200000;

struct Timer {
  cudaStream_t stream = nullptr;
  cudaEvent_t pre = nullptr, start = nullptr, stop = nullptr;
  void* flush = nullptr;
  size_t flush_bytes = 0;
  unsigned flush_blocks = 0;
  double peak_gbs = 0, max_mhz = 0;
};
Timer& timer() {
  thread_local Timer t;
  if (!t.stream) {
    require_device();
    DG_CUDA(cudaStreamCreate(&t.stream));   // blocking: the legacy default stream waits for it
    DG_CUDA(cudaEventCreate(&t.pre));
    DG_CUDA(cudaEventCreate(&t.start));
    DG_CUDA(cudaEventCreate(&t.stop));
    int dev = 0, l2 = 0, mem_khz = 0, bus_bits = 0, sms = 0;
    DG_CUDA(cudaGetDevice(&dev));
    DG_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    DG_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    DG_CUDA(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
    DG_CUDA(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    t.peak_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    t.flush_bytes = std::max<size_t>(2 * static_cast<size_t>(l2), size_t{1} << 20) / 16 * 16;
    t.flush_blocks = static_cast<unsigned>(std::max(1, 2 * sms));
    DG_CUDA(cudaMalloc(&t.flush, t.flush_bytes));
    DG_CUDA(cudaMemset(t.flush, 0, t.flush_bytes));
  }
  return t;
}

struct Region {
  void* p;
  size_t bytes;
};

// Runs launch(stream) once; timed as described at the top when a DeviceTimingScope is open.
// `inout`: device memory the kernel updates in place (restored before a re-measured attempt).
template <class Launch>
void run_launch(Launch&& launch, std::initializer_list<Region> inout = {}) {
  Timer& t = timer();
  DeviceCall* call = active_device_timing();
  if (!call) {
    launch(t.stream);
    DG_CUDA(cudaStreamSynchronize(t.stream));
    return;
  }
  std::vector<void*> saved;   // the in-out state before the first attempt (scratch, kept between calls)
  for (const Region& r : inout) {
    saved.push_back(r.bytes ? scratch().get("saved" + std::to_string(saved.size()), r.bytes) : nullptr);
    if (r.bytes) DG_CUDA(cudaMemcpy(saved.back(), r.p, r.bytes, cudaMemcpyDeviceToDevice));
  }
  int* sink = static_cast<int*>(scratch().get("flush_sink", sizeof(int)));
  auto* guard_ns = static_cast<unsigned long long*>(scratch().get("guard_ns", sizeof(unsigned long long)));
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      size_t i = 0;
      for (const Region& r : inout) {
        if (r.bytes) DG_CUDA(cudaMemcpy(r.p, saved[i], r.bytes, cudaMemcpyDeviceToDevice));
        ++i;
      }
    }
    DG_CUDA(cudaCtxResetPersistingL2Cache());
    DG_LAUNCH(flush_kernel, t.flush_blocks, 256, t.stream, static_cast<const int4*>(t.flush),
              static_cast<int64_t>(t.flush_bytes / 16), 1, sink);
    DG_LAUNCHED("flush_kernel");
    DG_CUDA(cudaDeviceSynchronize());
    // A short spin ahead of the start event keeps the stream busy while the host enqueues the
    // launch, so the launch API's latency is not counted as device time. The wall time runs from
    // before the spin to the end of the synchronisation, less the spin's device time (pre ->
    // start): what a caller of the launch waits for, without the spin.
    const auto w0 = std::chrono::steady_clock::now();
    DG_CUDA(cudaEventRecord(t.pre, t.stream));
    DG_LAUNCH(spin_kernel, 1, 1, t.stream, static_cast<long long>(kGuardCycles), guard_ns);
    DG_LAUNCHED("spin_kernel");
    DG_CUDA(cudaEventRecord(t.start, t.stream));
    launch(t.stream);
    DG_CUDA(cudaEventRecord(t.stop, cudaStreamLegacy));
    DG_CUDA(cudaEventSynchronize(t.stop));
    DG_CUDA(cudaDeviceSynchronize());
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    float ms = 0, spin_ms = 0;
    DG_CUDA(cudaEventElapsedTime(&ms, t.start, t.stop));
    DG_CUDA(cudaEventElapsedTime(&spin_ms, t.pre, t.start));
    const double wall = std::max(total - static_cast<double>(spin_ms) * 1e-3, static_cast<double>(ms) * 1e-3);
    unsigned long long ns = 0;
    DG_CUDA(cudaMemcpy(&ns, guard_ns, sizeof ns, cudaMemcpyDeviceToHost));
    const double mhz = ns > 0 ? kGuardCycles / (static_cast<double>(ns) * 1e-3) : 0.0;
    t.max_mhz = std::max(t.max_mhz, mhz);
    if (mhz < 0.9 * t.max_mhz) {
      if (attempt < 3) {
        ++call->throttled;
        continue;
      }
      ++call->low_clock;
    }
    call->device_s += static_cast<double>(ms) * 1e-3;
    call->launch_wall_s += wall;
    ++call->launches;
    call->clock_mhz = mhz;
    call->peak_gbs = t.peak_gbs;
    call->device = device_status().device;
    return;
  }
}

// --- shared device code ----------------------------------------------------------------------------
constexpr int kWarp = 32;
constexpr int kMaxKPerLane = 8;   // K <= 256

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
// The decay exp(g) of a decode step, rounded to f32 from CUDA's double exp (within 1 ulp of double):
// within half an f32 ulp, as the host's expf the CPU decode kernels use. CUDA's own expf (ex2.approx on a
// reduced argument, within 2 ulp) errs to one side for the small |g| of long memory (g ~ -5e-5,
// decay 1 - 5e-5); the state carries that error from step to step, and on an H200 the decode
// kernels' ht lost 2 bits against the CPU over 64 long_memory steps (19.7 against 21.7 bits). One
// double exp per channel per step costs nothing next to the state's read and write.
__device__ __forceinline__ float decay_of(float g) { return static_cast<float>(exp(static_cast<double>(g))); }
__device__ __forceinline__ float bf(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Sum of x over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ float block_sum(float x, float* red) {
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  x = warp_sum(x);
  __syncthreads();
  if (lane == 0) red[w] = x;
  __syncthreads();
  float s = 0;
  for (int i = 0; i < nw; ++i) s += red[i];
  return s;
}

struct GateArgs {
  int gate;        // KdaGate
  int beta_mode;   // KdaBeta
  int use_A_log, l2norm;
  float scale, lb;
};
GateArgs gate_args(const KdaParams& p) {
  return {static_cast<int>(p.gate), static_cast<int>(p.beta), p.use_A_log ? 1 : 0, p.qk_l2norm ? 1 : 0,
          static_cast<float>(p.scale_value()), static_cast<float>(p.lower_bound)};
}

// The log-space gate of channel d from the stored f (or g), as kda_cpu::TokenReader computes it.
__device__ __forceinline__ float gate_value(const GateArgs& a, float f, float a_exp, const float* dt_bias, int d) {
  if (a.gate == static_cast<int>(KdaGate::pregated)) return f;
  const float x = f + (dt_bias ? dt_bias[d] : 0.0f);
  if (a.gate == static_cast<int>(KdaGate::softplus)) return -a_exp * softplusf_(x);
  return a.lb * sigmoidf_(a.use_A_log ? a_exp * x : x);
}
__device__ __forceinline__ float beta_value(const GateArgs& a, float b) {
  if (a.beta_mode == static_cast<int>(KdaBeta::sigmoid)) return sigmoidf_(b);
  if (a.beta_mode == static_cast<int>(KdaBeta::sigmoid2)) return 2.0f * sigmoidf_(b);
  return b;
}

// q, k (K floats in shared memory, raw) -> l2-normalised, q times scale; block-wide.
__device__ void prepare_qk(float* q, float* k, int K, const GateArgs& a, float* red) {
  if (a.l2norm) {
    float sq = 0, sk = 0;
    for (int d = threadIdx.x; d < K; d += blockDim.x) {
      sq = fmaf(q[d], q[d], sq);
      sk = fmaf(k[d], k[d], sk);
    }
    const float rq = 1.0f / sqrtf(block_sum(sq, red) + static_cast<float>(KdaParams::kL2NormEps));
    const float rk = 1.0f / sqrtf(block_sum(sk, red + 32) + static_cast<float>(KdaParams::kL2NormEps));
    __syncthreads();
    for (int d = threadIdx.x; d < K; d += blockDim.x) {
      q[d] *= rq;
      k[d] *= rk;
    }
  }
  for (int d = threadIdx.x; d < K; d += blockDim.x) q[d] *= a.scale;
  __syncthreads();
}

// V-first state ([V,K] per head: a column contiguous). NC state columns of one head, held by a
// warp: lane holds d = lane + 32 i of each, so each access of the warp is 128 contiguous bytes.
// col[c]: column c's first element, or null to skip it (warp-uniform). The state is read and
// written once per step, so it bypasses the caches' keep policy (__ldcs/__stcs: streaming).
template <int KPL, int NC>
__device__ __forceinline__ void load_columns(float (&s)[NC][KPL], float* const (&col)[NC], int K) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int c = 0; c < NC; ++c)
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int d = lane + kWarp * i;
      s[c][i] = col[c] && d < K ? __ldcs(col[c] + d) : 0.0f;
    }
}

// The step of the columns load_columns() read, per column:
//   s *= exp(g); r = (v - s.k) beta; s += k r; o = s.q; the column stored back.
template <int KPL, int NC>
__device__ __forceinline__ void step_columns(float (&s)[NC][KPL], float* const (&col)[NC], int K,
                                             const float* q, const float* k, const float* decay, const float (&v)[NC],
                                             float beta, float (&o)[NC]) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    o[c] = 0.0f;
    if (!col[c]) continue;
    float dot = 0;
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int d = lane + kWarp * i;
      if (d < K) {
        s[c][i] *= decay[d];
        dot = fmaf(k[d], s[c][i], dot);
      }
    }
    const float r = (v[c] - warp_sum(dot)) * beta;
    float oc = 0;
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int d = lane + kWarp * i;
      if (d < K) {
        s[c][i] = fmaf(k[d], r, s[c][i]);
        oc = fmaf(q[d], s[c][i], oc);
        __stcs(col[c] + d, s[c][i]);
      }
    }
    o[c] = warp_sum(oc);
  }
}

// K-first state ([K,V] per head: a column is strided, a row contiguous), a tile of 32 columns at a
// time: lane l holds column j0 + l (col: its first element, null past V), warp w of NW the rows
// d = w + NW i, so every load and store of a warp is one contiguous row segment.
template <int R, int NW>
__device__ __forceinline__ void load_tile(float (&s)[R], const float* col, int K, int V) {
  const int w = threadIdx.x / kWarp;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int d = w + NW * i;
    s[i] = col && d < K ? __ldcs(col + int64_t(d) * V) : 0.0f;
  }
}

// The step of the tile load_tile() read; returns o of the lane's column to every warp. Each thread
// forms its partial k.s and q.s over its rows; the warps' partials are added in warp order through
// `part` (shared, [2][NW][32]). Every thread of the block calls it (it holds two barriers).
template <int R, int NW>
__device__ __forceinline__ float step_tile(float (&s)[R], float* col, int K, int V, const float* q, const float* k,
                                           const float* decay, float v, float beta, float (*part)[NW][kWarp]) {
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float dot = 0;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int d = w + NW * i;
    if (d < K) {
      s[i] *= decay[d];
      dot = fmaf(k[d], s[i], dot);
    }
  }
  part[0][w][lane] = dot;
  __syncthreads();
  float ks = 0;
  for (int x = 0; x < NW; ++x) ks += part[0][x][lane];
  const float r = (v - ks) * beta;
  float oc = 0;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int d = w + NW * i;
    if (d < K) {
      s[i] = fmaf(k[d], r, s[i]);
      oc = fmaf(q[d], s[i], oc);
      if (col) __stcs(col + int64_t(d) * V, s[i]);
    }
  }
  part[1][w][lane] = oc;
  __syncthreads();
  float o = 0;
  for (int x = 0; x < NW; ++x) o += part[1][x][lane];
  return o;
}

// --- kda_decode ------------------------------------------------------------------------------------
struct DecodeArgs {
  const __nv_bfloat16 *q, *k, *v, *g, *beta;   // [B,H,K] [B,H,K] [B,HV,V] [B,HV,K] [B,HV]
  const float *A_log, *dt_bias;                // [HV], [HV*K]; null when unused
  const int64_t* slots;                        // [B]; < 0: padding
  float* state;                                // [N,HV,V,K] V-first (kda_decode_kernel), or [N,HV,K,V]
  float* o;                                    // [B,HV,V]
  int B, H, HV, K, V;
  GateArgs a;
};

constexpr int kDecodeWarps = 4, kDecodeColsPerWarp = 4, kDecodeCols = kDecodeWarps * kDecodeColsPerWarp;
constexpr int kDecodeColsKFirst = kWarp;

// The per-(sequence, value head) prologue of a decode block, into shared memory: q and k of the
// head (normalised, q scaled) and the decay exp(g) of every channel; returns beta.
__device__ float decode_prologue(const DecodeArgs& A, int b, int hv, float* q, float* k, float* decay, float* red) {
  const int h = hv / (A.HV / A.H), K = A.K;
  const float a_exp = A.A_log ? expf(A.A_log[hv]) : 1.0f;
  for (int d = threadIdx.x; d < K; d += blockDim.x) {
    q[d] = bf(A.q, (int64_t(b) * A.H + h) * K + d);
    k[d] = bf(A.k, (int64_t(b) * A.H + h) * K + d);
    decay[d] = decay_of(gate_value(A.a, bf(A.g, (int64_t(b) * A.HV + hv) * K + d), a_exp,
                                   A.dt_bias ? A.dt_bias + int64_t(hv) * K : nullptr, d));
  }
  __syncthreads();
  prepare_qk(q, k, K, A.a, red);
  return beta_value(A.a, bf(A.beta, int64_t(b) * A.HV + hv));
}

// V-first state. Block (b, hv) x a tile of kDecodeCols state columns; each warp takes
// kDecodeColsPerWarp columns. The step is bound by the state's read and write, so each warp issues
// its columns' loads first (NC * KPL loads in flight per lane) and forms q, k and the decay while
// they arrive.
template <int KPL>
__global__ void __launch_bounds__(kDecodeWarps* kWarp) kda_decode_kernel(DecodeArgs A) {
  constexpr int NC = kDecodeColsPerWarp;
  __shared__ float q[kMaxKPerLane * kWarp], k[kMaxKPerLane * kWarp], decay[kMaxKPerLane * kWarp], red[64];
  const int b = blockIdx.x / A.HV, hv = blockIdx.x % A.HV, K = A.K, V = A.V;
  const int j0 = blockIdx.y * kDecodeCols;
  const int64_t slot = A.slots[b];
  if (slot < 0) {
    for (int j = j0 + threadIdx.x; j < min(V, j0 + kDecodeCols); j += blockDim.x) A.o[(int64_t(b) * A.HV + hv) * V + j] = 0.0f;
    return;
  }
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* S = A.state + (slot * A.HV + hv) * int64_t(K) * V;
  float* cols[NC];
  float v[NC], o[NC], st[NC][KPL];
  for (int c = 0; c < NC; ++c) {
    const int j = j0 + w * NC + c;
    cols[c] = j < V ? S + int64_t(j) * K : nullptr;
    v[c] = j < V ? bf(A.v, (int64_t(b) * A.HV + hv) * V + j) : 0.0f;
  }
  load_columns<KPL, NC>(st, cols, K);
  const float beta = decode_prologue(A, b, hv, q, k, decay, red);
  step_columns<KPL, NC>(st, cols, K, q, k, decay, v, beta, o);
  if (lane == 0)
    for (int c = 0; c < NC; ++c) {
      const int j = j0 + w * NC + c;
      if (j < V) A.o[(int64_t(b) * A.HV + hv) * V + j] = o[c];
    }
}

// K-first state. Block (b, hv) x a tile of 32 columns (load_tile, step_tile over 4 warps).
template <int KPL>
__global__ void __launch_bounds__(kDecodeWarps* kWarp) kda_decode_kfirst_kernel(DecodeArgs A) {
  constexpr int R = KPL * kWarp / kDecodeWarps;   // rows per thread: kDecodeWarps R >= K
  __shared__ float q[kMaxKPerLane * kWarp], k[kMaxKPerLane * kWarp], decay[kMaxKPerLane * kWarp], red[64];
  __shared__ float part[2][kDecodeWarps][kWarp];
  const int b = blockIdx.x / A.HV, hv = blockIdx.x % A.HV, K = A.K, V = A.V;
  const int j = blockIdx.y * kDecodeColsKFirst + threadIdx.x % kWarp;
  const int64_t slot = A.slots[b];
  const int64_t oi = (int64_t(b) * A.HV + hv) * V + j;
  const bool writer = threadIdx.x < kWarp && j < V;
  if (slot < 0) {
    if (writer) A.o[oi] = 0.0f;
    return;
  }
  float* col = j < V ? A.state + (slot * A.HV + hv) * int64_t(K) * V + j : nullptr;
  float st[R];
  load_tile<R, kDecodeWarps>(st, col, K, V);
  const float vj = j < V ? bf(A.v, oi) : 0.0f;
  const float beta = decode_prologue(A, b, hv, q, k, decay, red);
  const float o = step_tile<R, kDecodeWarps>(st, col, K, V, q, k, decay, vj, beta, part);
  if (writer) A.o[oi] = o;
}

template <class Kernel4, class Args>
void launch_by_k(int K, dim3 grid, dim3 block, cudaStream_t s, const Args& a, Kernel4 pick) {
  const int kpl = (K + kWarp - 1) / kWarp;
  auto kernel = pick(kpl <= 1 ? 1 : kpl <= 2 ? 2 : kpl <= 4 ? 4 : 8);
  DG_LAUNCH(kernel, grid, block, s, a);
}

void check_decode_shapes(const KdaParams& p, const char* op) {
  if (p.T != 1 || !p.cu_seqlens.empty())
    throw std::invalid_argument(std::string(op) + ": a step takes one token per sequence (T=1, no cu_seqlens)");
  if (p.K > kMaxKPerLane * kWarp) throw NotSupported(std::string(op) + ": K > 256");
}

// The state pool out["state"] of a decode step, whole [HV,K,V] slots, at least one, and its slot
// count. (kda_cpu's decode checks its pool the same way, inline.)
struct StatePool {
  Tensor& t;
  int64_t slots;
};
StatePool state_pool(TensorMap& out, const KdaParams& p, const char* op) {
  auto it = out.find("state");
  if (it == out.end()) throw std::invalid_argument(std::string(op) + ": tensor 'state' is missing");
  const int64_t per_slot = p.HV * p.K * p.V;
  if (it->second.numel() == 0 || it->second.numel() % per_slot != 0)
    throw std::invalid_argument(std::string(op) + ": state pool shape " + it->second.shape_str() + " is not [N,HV,K,V]");
  return {it->second, it->second.numel() / per_slot};
}

// The pool slot of each sequence, checked by the CPU decode's own rules (kda_cpu::state_slots);
// state_indices may live on the device.
std::vector<int64_t> host_slots(const TensorMap& in, int64_t B, int64_t pool_slots, const char* op) {
  const Tensor& t = need(in, "state_indices", op);
  if (t.device() == Device::host) return kda_cpu::state_slots(in, B, pool_slots);
  return kda_cpu::state_slots(TensorMap{{"state_indices", t.to(Device::host)}}, B, pool_slots);
}
const int64_t* device_slots(const std::vector<int64_t>& s) {
  void* d = scratch().get("slots", s.size() * sizeof(int64_t));
  device_copy(d, Device::cuda, s.data(), Device::host, s.size() * sizeof(int64_t));
  return static_cast<const int64_t*>(d);
}

// --- kda_decode_fused --------------------------------------------------------------------------------
struct FusedArgs {
  const __nv_bfloat16 *xq, *xk, *xv, *g, *beta, *ogate;   // [B,H,K] [B,H,K] [B,HV,V] [B,HV,K] [B,HV] [B,HV,V]
  const float *wq, *wk, *wv;                               // [H*K,W] [H*K,W] [HV*V,W]
  const float *A_log, *dt_bias, *nweight;                  // [HV] [HV*K] [V]
  float *cq, *ck, *cv;                                     // conv pools [N,H*K,W-1] [N,H*K,W-1] [N,HV*V,W-1]
  const int64_t* slots;
  float* state;
  float* o;
  int B, H, HV, K, V, W;   // the layout is kda_fused_kernel's VFIRST
  float eps;
  GateArgs a;
};

constexpr int kFusedWarps = 8, kFusedThreads = kFusedWarps * kWarp;

// Channel c of one sequence's conv: h = [pool row (W-1, oldest first), x]; returns silu(sum w h)
// (w order, fma, as causal_conv1d_cpu_direct_f32) and shifts the pool row by one.
__device__ __forceinline__ float conv_channel(float x, const float* w, float* pool_row, int W) {
  float h[8];
  for (int m = 0; m < W - 1; ++m) h[m] = pool_row[m];
  h[W - 1] = x;
  float z = 0;
  for (int m = 0; m < W; ++m) z = fmaf(w[m], h[m], z);
  for (int m = 0; m < W - 1; ++m) pool_row[m] = h[m + 1];
  return z / (1.0f + expf(-z));
}

// Block (b, h): the q/k head's conv and normalisation once, then each of its HV/H value heads: conv
// of v, the state step over every column, the gated norm of the head's output row.
template <int KPL, bool VFIRST>
__global__ void __launch_bounds__(kFusedThreads) kda_fused_kernel(FusedArgs A) {
  constexpr int NC = 4;
  __shared__ float q[kMaxKPerLane * kWarp], k[kMaxKPerLane * kWarp], decay[kMaxKPerLane * kWarp], v[256], o[256], red[64];
  __shared__ float part[2][kFusedWarps][kWarp];
  const int b = blockIdx.x / A.H, h = blockIdx.x % A.H, K = A.K, V = A.V, W = A.W, group = A.HV / A.H;
  const int64_t slot = A.slots[b];
  if (slot < 0) {
    for (int i = threadIdx.x; i < group * V; i += blockDim.x) A.o[(int64_t(b) * A.HV + h * group) * V + i] = 0.0f;
    return;
  }
  const int64_t Cq = int64_t(A.H) * K, Cv = int64_t(A.HV) * V;
  for (int d = threadIdx.x; d < K; d += blockDim.x) {
    const int64_t c = int64_t(h) * K + d;
    q[d] = conv_channel(bf(A.xq, int64_t(b) * Cq + c), A.wq + c * W, A.cq + (slot * Cq + c) * (W - 1), W);
    k[d] = conv_channel(bf(A.xk, int64_t(b) * Cq + c), A.wk + c * W, A.ck + (slot * Cq + c) * (W - 1), W);
  }
  __syncthreads();
  prepare_qk(q, k, K, A.a, red);
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int gi = 0; gi < group; ++gi) {
    const int hv = h * group + gi;
    const float a_exp = A.A_log ? expf(A.A_log[hv]) : 1.0f;
    for (int d = threadIdx.x; d < K; d += blockDim.x)
      decay[d] = decay_of(gate_value(A.a, bf(A.g, (int64_t(b) * A.HV + hv) * K + d), a_exp,
                                     A.dt_bias ? A.dt_bias + int64_t(hv) * K : nullptr, d));
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      const int64_t c = int64_t(hv) * V + j;
      v[j] = conv_channel(bf(A.xv, int64_t(b) * Cv + c), A.wv + c * W, A.cv + (slot * Cv + c) * (W - 1), W);
    }
    __syncthreads();
    const float beta = beta_value(A.a, bf(A.beta, int64_t(b) * A.HV + hv));
    float* S = A.state + (slot * A.HV + hv) * int64_t(K) * V;
    if (VFIRST) {
      for (int j0 = NC * w; j0 < V; j0 += NC * kFusedWarps) {   // NC columns per warp at a time
        float* cols[NC];
        float vj[NC], oj[NC], st[NC][KPL];
        for (int c = 0; c < NC; ++c) {
          const int j = j0 + c;
          cols[c] = j < V ? S + int64_t(j) * K : nullptr;
          vj[c] = j < V ? v[j] : 0.0f;
        }
        load_columns<KPL, NC>(st, cols, K);
        step_columns<KPL, NC>(st, cols, K, q, k, decay, vj, beta, oj);
        if (lane == 0)
          for (int c = 0; c < NC && j0 + c < V; ++c) o[j0 + c] = oj[c];
      }
    } else {
      for (int j0 = 0; j0 < V; j0 += kWarp) {   // a tile of 32 columns at a time, every thread
        constexpr int R = KPL * kWarp / kFusedWarps;
        const int j = j0 + lane;
        float* col = j < V ? S + j : nullptr;
        float st[R];
        load_tile<R, kFusedWarps>(st, col, K, V);
        const float oj = step_tile<R, kFusedWarps>(st, col, K, V, q, k, decay, j < V ? v[j] : 0.0f, beta, part);
        if (w == 0 && j < V) o[j] = oj;
      }
    }
    __syncthreads();
    // y = (o * rstd) * w * sigmoid(gate), rstd = 1 / sqrt(sum o^2 / V + eps)
    float ss = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) ss = fmaf(o[j], o[j], ss);
    const float rstd = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(V) + A.eps);
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      const int64_t i = (int64_t(b) * A.HV + hv) * V + j;
      A.o[i] = ((o[j] * rstd) * A.nweight[j]) * sigmoidf_(bf(A.ogate, i));
    }
    __syncthreads();
  }
}

// The instance of kda_fused_kernel for KPL = kpl (1, 2, 4, 8) and the layout: one path per instance,
// so neither layout's registers weigh on the other.
template <bool VFIRST>
auto fused_kernel(int kpl) {
  return kpl == 1   ? kda_fused_kernel<1, VFIRST>
         : kpl == 2 ? kda_fused_kernel<2, VFIRST>
         : kpl == 4 ? kda_fused_kernel<4, VFIRST>
                    : kda_fused_kernel<8, VFIRST>;
}

// --- kda (chunked prefill, bf16 storage) -------------------------------------------------------------
constexpr int kChunk = 64, kChunkThreads = 256;

struct ChunkArgs {
  const __nv_bfloat16 *q, *k, *v, *g, *beta;   // [B*T,H,K] [B*T,H,K] [B*T,HV,V] [B*T,HV,K] [B*T,HV]
  const float *A_log, *dt_bias, *h0;           // [HV] [HV*K] [N,HV,K,V] (or V-first)
  const int64_t* cu;                           // [N+1] token offsets (always given)
  float* o;                                    // [B*T,HV,V]
  float* ht;                                   // [N,HV,K,V] (or V-first)
  float* work;                                 // per block: chunk_work_floats(K, V)
  int H, HV, K, V, vfirst;
  GateArgs a;
};

__host__ __device__ inline int64_t chunk_work_floats(int64_t K, int64_t V) {
  return 8 * kChunk * K + 5 * kChunk * V + 3 * kChunk * kChunk + 2 * K * V + kChunk + K;
}

// One block per (sequence n, value head hv): chunks of 64 tokens in order, every intermediate in the
// block's slice of `work`; the steps and storage roundings of kda_cpu_chunk_bf16 (kda_chunk.cpp),
// with exp(G_i - G_j) formed per element (both arguments <= 0, as there).
__global__ void __launch_bounds__(kChunkThreads) kda_chunk_bf16_kernel(ChunkArgs A) {
  const int n = blockIdx.x / A.HV, hv = blockIdx.x % A.HV, h = hv / (A.HV / A.H), K = A.K, V = A.V;
  const int tid = threadIdx.x, nt = blockDim.x;
  float* base = A.work + int64_t(blockIdx.x) * chunk_work_floats(K, V);
  float *Q = base, *Kn = Q + kChunk * K, *G = Kn + kChunk * K, *Rs = G + kChunk * K, *Qg = Rs + kChunk * K;
  float *Yk = Qg + kChunk * K, *Kg = Yk + kChunk * K, *Wm = Kg + kChunk * K;
  float *Vb = Wm + kChunk * K, *Yv = Vb + kChunk * V, *U = Yv + kChunk * V, *Vn = U + kChunk * V, *Ob = Vn + kChunk * V;
  float *L = Ob + kChunk * V, *Ai = L + kChunk * kChunk, *Aqk = Ai + kChunk * kChunk;
  float *S = Aqk + kChunk * kChunk, *Sb = S + int64_t(K) * V, *beta = Sb + int64_t(K) * V, *eg = beta + kChunk;
  auto sidx = [&](int d, int j) { return A.vfirst ? int64_t(j) * K + d : int64_t(d) * V + j; };
  const int64_t per_head = int64_t(K) * V, st0 = (int64_t(n) * A.HV + hv) * per_head;
  for (int64_t x = tid; x < per_head; x += nt) {
    const int d = static_cast<int>(x / V), j = static_cast<int>(x % V);
    S[x] = A.h0 ? A.h0[st0 + sidx(d, j)] : 0.0f;
  }
  const float a_exp = A.A_log ? expf(A.A_log[hv]) : 1.0f;
  const float* dtb = A.dt_bias ? A.dt_bias + int64_t(hv) * K : nullptr;
  const int64_t end = A.cu[n + 1];
  for (int64_t t0 = A.cu[n]; t0 < end; t0 += kChunk) {
    const int c = end - t0 < kChunk ? static_cast<int>(end - t0) : kChunk;
    __syncthreads();
    // Rows in (bf16 as stored), then l2norm of q and k per row, rounded to bf16 again.
    for (int x = tid; x < c * K; x += nt) {
      const int i = x / K, d = x % K;
      const int64_t tok = t0 + i;
      Q[i * K + d] = bf(A.q, (tok * A.H + h) * K + d);
      Kn[i * K + d] = bf(A.k, (tok * A.H + h) * K + d);
      G[i * K + d] = bf(A.g, (tok * A.HV + hv) * K + d);
    }
    for (int x = tid; x < c * V; x += nt) {
      const int i = x / V, j = x % V;
      Vb[i * V + j] = bf(A.v, ((t0 + i) * A.HV + hv) * V + j);
    }
    for (int i = tid; i < c; i += nt) beta[i] = beta_value(A.a, bf(A.beta, (t0 + i) * A.HV + hv));
    __syncthreads();
    if (A.a.l2norm)
      for (int r = tid; r < 2 * c; r += nt) {   // one thread per row of q or k
        float* row = r < c ? Q + r * K : Kn + (r - c) * K;
        float s = 0;
        for (int d = 0; d < K; ++d) s = fmaf(row[d], row[d], s);
        const float rs = 1.0f / sqrtf(s + static_cast<float>(KdaParams::kL2NormEps));
        for (int d = 0; d < K; ++d) row[d] = round_bf16(row[d] * rs);
      }
    // Gates (in f32 from the bf16 inputs).
    for (int x = tid; x < c * K; x += nt) G[x] = gate_value(A.a, G[x], a_exp, dtb, x % K);
    __syncthreads();
    // Per channel: suffix sums gamma - G_i by their own reverse scan, then the inclusive cumsum.
    for (int d = tid; d < K; d += nt) {
      Rs[(c - 1) * K + d] = 0.0f;
      for (int i = c - 2; i >= 0; --i) Rs[i * K + d] = Rs[(i + 1) * K + d] + G[(i + 1) * K + d];
      for (int i = 1; i < c; ++i) G[i * K + d] = G[i * K + d] + G[(i - 1) * K + d];
      eg[d] = expf(G[(c - 1) * K + d]);
    }
    __syncthreads();
    // Gated copies, stored bf16: q exp(G), (k beta) exp(G), k exp(gamma - G); v beta.
    for (int x = tid; x < c * K; x += nt) {
      const int i = x / K;
      const float e = expf(G[x]);
      Qg[x] = round_bf16(Q[x] * e);
      Yk[x] = round_bf16((Kn[x] * beta[i]) * e);
      Kg[x] = round_bf16(Kn[x] * expf(Rs[x]));
    }
    for (int x = tid; x < c * V; x += nt) Yv[x] = round_bf16(Vb[x] * beta[x / V]);
    // L = beta_i (k_i . k_j exp(G_i - G_j)) for j < i; Aqk = scale (q_i . k_j exp(G_i - G_j)), j <= i (bf16).
    for (int x = tid; x < kChunk * kChunk; x += nt) {
      const int i = x / kChunk, j = x % kChunk;
      float aq = 0, ak = 0;
      if (i < c && j <= i)
        for (int d = 0; d < K; ++d) {
          const float kj = Kn[j * K + d] * expf(G[i * K + d] - G[j * K + d]);
          aq = fmaf(Q[i * K + d], kj, aq);
          ak = fmaf(Kn[i * K + d], kj, ak);
        }
      Aqk[x] = (i < c && j <= i) ? round_bf16(aq * A.a.scale) : 0.0f;
      L[x] = (i < c && j < i) ? ak * beta[i] : 0.0f;
      Ai[x] = (i == j) ? 1.0f : 0.0f;
    }
    __syncthreads();
    // Ai = (I + L)^-1 by forward substitution, row by row: x_i = e_i - sum_{j<i} L_ij x_j.
    for (int i = 1; i < c; ++i) {
      for (int m = tid; m < i; m += nt) {
        float acc = 0;
        for (int j = m; j < i; ++j) acc = fmaf(-L[i * kChunk + j], Ai[j * kChunk + m], acc);
        Ai[i * kChunk + m] = acc;
      }
      __syncthreads();
    }
    for (int x = tid; x < c * kChunk; x += nt)
      if (x % kChunk < x / kChunk) Ai[x] = round_bf16(Ai[x]);
    __syncthreads();
    // W = Ai (k beta exp G), U = Ai (v beta), stored bf16; the state's bf16 copy.
    for (int x = tid; x < c * K; x += nt) {
      const int i = x / K, d = x % K;
      float acc = 0;
      for (int j = 0; j <= i; ++j) acc = fmaf(Ai[i * kChunk + j], Yk[j * K + d], acc);
      Wm[x] = round_bf16(acc);
    }
    for (int x = tid; x < c * V; x += nt) {
      const int i = x / V, j = x % V;
      float acc = 0;
      for (int m = 0; m <= i; ++m) acc = fmaf(Ai[i * kChunk + m], Yv[m * V + j], acc);
      U[x] = round_bf16(acc);
    }
    for (int64_t x = tid; x < per_head; x += nt) Sb[x] = round_bf16(S[x]);
    __syncthreads();
    // V' = U - W Sb (bf16); O = scale (q exp G) Sb.
    for (int x = tid; x < c * V; x += nt) {
      const int i = x / V, j = x % V;
      float ws = 0, qs = 0;
      for (int d = 0; d < K; ++d) {
        ws = fmaf(Wm[i * K + d], Sb[int64_t(d) * V + j], ws);
        qs = fmaf(Qg[i * K + d], Sb[int64_t(d) * V + j], qs);
      }
      Vn[x] = round_bf16(U[x] - ws);
      Ob[x] = qs * A.a.scale;
    }
    __syncthreads();
    // O += Aqk V', stored bf16; the state update S = exp(gamma) S + (k exp(gamma - G))^T V'.
    for (int x = tid; x < c * V; x += nt) {
      const int i = x / V, j = x % V;
      float acc = 0;
      for (int m = 0; m <= i; ++m) acc = fmaf(Aqk[i * kChunk + m], Vn[m * V + j], acc);
      A.o[((t0 + i) * A.HV + hv) * V + j] = round_bf16(Ob[x] + acc);
    }
    for (int64_t x = tid; x < per_head; x += nt) {
      const int d = static_cast<int>(x / V), j = static_cast<int>(x % V);
      float acc = 0;
      for (int i = 0; i < c; ++i) acc = fmaf(Kg[i * K + d], Vn[i * V + j], acc);
      S[x] = S[x] * eg[d] + acc;
    }
  }
  __syncthreads();
  for (int64_t x = tid; x < per_head; x += nt) {
    const int d = static_cast<int>(x / V), j = static_cast<int>(x % V);
    A.ht[st0 + sidx(d, j)] = S[x];
  }
}

}  // namespace

// --- entry points ----------------------------------------------------------------------------------
void register_cuda_device_ops() {
  DeviceOps ops;
  ops.alloc = device_alloc;
  ops.zero = device_zero;
  ops.free = device_free;
  ops.copy = device_copy;
  register_device_ops(Device::cuda, ops);
}

void kda_decode_cuda_f32state(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "kda_decode";
  require_device();
  const KdaParams p = kda_params(c);
  check_decode_shapes(p, op);
  const StatePool sp = state_pool(out, p, op);
  Tensor& pool = sp.t;
  Tensor& o = need(out, "o", op, p.B * p.HV * p.V);
  const std::vector<int64_t> slots = host_slots(in, p.B, sp.slots, op);
  DecodeArgs A{};
  A.q = bf16_input(in, "q", op, p.B * p.H * p.K);
  A.k = bf16_input(in, "k", op, p.B * p.H * p.K);
  A.v = bf16_input(in, "v", op, p.B * p.HV * p.V);
  A.g = bf16_input(in, "g", op, p.B * p.HV * p.K);
  A.beta = bf16_input(in, "beta", op, p.B * p.HV);
  gate_inputs(p, in, op, A.A_log, A.dt_bias);
  A.slots = device_slots(slots);
  InOut st = in_out(pool, "state", op);
  A.state = st.dev;
  A.o = static_cast<float*>(scratch().get("o", static_cast<size_t>(p.B * p.HV * p.V) * 4));
  A.B = static_cast<int>(p.B);
  A.H = static_cast<int>(p.H);
  A.HV = static_cast<int>(p.HV);
  A.K = static_cast<int>(p.K);
  A.V = static_cast<int>(p.V);
  A.a = gate_args(p);
  const int cols = p.state_v_first ? kDecodeCols : kDecodeColsKFirst;
  const dim3 grid(static_cast<unsigned>(p.B * p.HV), static_cast<unsigned>((p.V + cols - 1) / cols));
  run_launch(
      [&](cudaStream_t s) {
        if (p.state_v_first) {
          launch_by_k(A.K, grid, dim3(kDecodeWarps * kWarp), s, A, [](int kpl) {
            return kpl == 1 ? kda_decode_kernel<1> : kpl == 2 ? kda_decode_kernel<2> : kpl == 4 ? kda_decode_kernel<4> : kda_decode_kernel<8>;
          });
          DG_LAUNCHED("kda_decode_kernel");
        } else {
          launch_by_k(A.K, grid, dim3(kDecodeWarps * kWarp), s, A, [](int kpl) {
            return kpl == 1   ? kda_decode_kfirst_kernel<1>
                   : kpl == 2 ? kda_decode_kfirst_kernel<2>
                   : kpl == 4 ? kda_decode_kfirst_kernel<4>
                              : kda_decode_kfirst_kernel<8>;
          });
          DG_LAUNCHED("kda_decode_kfirst_kernel");
        }
      },
      {{A.state, pool.nbytes()}});
  store_output(A.o, o);
  st.write_back();
}

void kda_decode_cuda_f32state_fused(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "kda_decode_fused";
  require_device();
  const KdaParams p = kda_params(c);
  check_decode_shapes(p, op);
  if (p.V > 256) throw NotSupported("kda_decode_fused: V > 256");
  const int64_t W = c.integer("W");
  if (W < 1 || W > 8) throw NotSupported("kda_decode_fused: conv width W must be 1..8");
  const StatePool sp = state_pool(out, p, op);
  Tensor& pool = sp.t;
  Tensor& o = need(out, "o", op, p.B * p.HV * p.V);
  const int64_t N = sp.slots, Cq = p.H * p.K, Cv = p.HV * p.V;
  const std::vector<int64_t> slots = host_slots(in, p.B, N, op);
  FusedArgs A{};
  A.xq = bf16_input(in, "xq", op, p.B * Cq);
  A.xk = bf16_input(in, "xk", op, p.B * Cq);
  A.xv = bf16_input(in, "xv", op, p.B * Cv);
  A.g = bf16_input(in, "g", op, p.B * p.HV * p.K);
  A.beta = bf16_input(in, "beta", op, p.B * p.HV);
  A.ogate = bf16_input(in, "ogate", op, p.B * Cv);
  A.wq = f32_input(in, "wq", op, Cq * W);
  A.wk = f32_input(in, "wk", op, Cq * W);
  A.wv = f32_input(in, "wv", op, Cv * W);
  A.nweight = f32_input(in, "nweight", op, p.V);
  gate_inputs(p, in, op, A.A_log, A.dt_bias);
  A.slots = device_slots(slots);
  InOut st = in_out(pool, "state", op);
  // The conv pools have the state pool's slots: [N, channels, W-1].
  InOut cq = in_out(need(out, "conv_q", op, N * Cq * (W - 1)), "conv_q", op),
        ck = in_out(need(out, "conv_k", op, N * Cq * (W - 1)), "conv_k", op),
        cv = in_out(need(out, "conv_v", op, N * Cv * (W - 1)), "conv_v", op);
  A.state = st.dev;
  A.cq = cq.dev;
  A.ck = ck.dev;
  A.cv = cv.dev;
  A.o = static_cast<float*>(scratch().get("o", static_cast<size_t>(p.B * p.HV * p.V) * 4));
  A.B = static_cast<int>(p.B);
  A.H = static_cast<int>(p.H);
  A.HV = static_cast<int>(p.HV);
  A.K = static_cast<int>(p.K);
  A.V = static_cast<int>(p.V);
  A.W = static_cast<int>(W);
  A.eps = static_cast<float>(c.real("eps"));
  A.a = gate_args(p);
  const dim3 grid(static_cast<unsigned>(p.B * p.H));
  run_launch(
      [&](cudaStream_t s) {
        if (p.state_v_first)
          launch_by_k(A.K, grid, dim3(kFusedThreads), s, A, [](int kpl) { return fused_kernel<true>(kpl); });
        else
          launch_by_k(A.K, grid, dim3(kFusedThreads), s, A, [](int kpl) { return fused_kernel<false>(kpl); });
        DG_LAUNCHED("kda_fused_kernel");
      },
      {{A.state, pool.nbytes()}, {A.cq, cq.t->nbytes()}, {A.ck, ck.t->nbytes()}, {A.cv, cv.t->nbytes()}});
  store_output(A.o, o);
  for (const InOut* x : {&st, &cq, &ck, &cv}) x->write_back();
}

void kda_cuda_chunk_bf16(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "kda";
  require_device();
  const KdaParams p = kda_params(c);
  if (p.K > 256 || p.V > 256) throw NotSupported("kda_cuda_chunk_bf16: K and V must be <= 256");
  const int64_t N = p.num_seqs();
  std::vector<int64_t> cu(static_cast<size_t>(N + 1));
  for (int64_t n = 0; n <= N; ++n) cu[static_cast<size_t>(n)] = n < N ? p.seq_begin(n) : p.seq_end(N - 1);
  ChunkArgs A{};
  const int64_t tokens = cu.back();
  A.q = bf16_input(in, "q", op, tokens * p.H * p.K);
  A.k = bf16_input(in, "k", op, tokens * p.H * p.K);
  A.v = bf16_input(in, "v", op, tokens * p.HV * p.V);
  A.g = bf16_input(in, "g", op, tokens * p.HV * p.K);
  A.beta = bf16_input(in, "beta", op, tokens * p.HV);
  gate_inputs(p, in, op, A.A_log, A.dt_bias);
  if (p.has_h0) A.h0 = f32_input(in, "h0", op, N * p.HV * p.K * p.V);
  void* dcu = scratch().get("cu", cu.size() * sizeof(int64_t));
  device_copy(dcu, Device::cuda, cu.data(), Device::host, cu.size() * sizeof(int64_t));
  A.cu = static_cast<const int64_t*>(dcu);
  Tensor& o = need(out, "o", op, tokens * p.HV * p.V);
  Tensor& ht = need(out, "ht", op, N * p.HV * p.K * p.V);
  A.o = static_cast<float*>(scratch().get("o", static_cast<size_t>(o.numel()) * 4));
  A.ht = static_cast<float*>(scratch().get("ht", static_cast<size_t>(ht.numel()) * 4));
  const int64_t blocks = N * p.HV;
  A.work = static_cast<float*>(scratch().get("work", static_cast<size_t>(blocks * chunk_work_floats(p.K, p.V)) * 4));
  A.H = static_cast<int>(p.H);
  A.HV = static_cast<int>(p.HV);
  A.K = static_cast<int>(p.K);
  A.V = static_cast<int>(p.V);
  A.vfirst = p.state_v_first ? 1 : 0;
  A.a = gate_args(p);
  run_launch([&](cudaStream_t s) {
    DG_LAUNCH(kda_chunk_bf16_kernel, static_cast<unsigned>(blocks), kChunkThreads, s, A);
    DG_LAUNCHED("kda_chunk_bf16_kernel");
  });
  store_output(A.o, o);
  store_output(A.ht, ht);
}

}  // namespace dg
