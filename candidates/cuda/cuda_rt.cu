// The CUDA candidates' shared host code (cuda_rt.h describes it): checked calls, device memory,
// inputs and outputs, and the timed launch. Compiled by nvcc into dg_cuda, and by g++ against the
// CUDA emulator (emu/cuda_rt_emu.cpp) into dg_cuda_emu.
#include "candidates/cuda/cuda_rt.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "harness/timing/device_timing.h"

namespace dg::cu {

// --- errors ----------------------------------------------------------------------------------------
void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();   // clear a non-sticky error so the next call starts clean
  throw std::runtime_error(std::string("CUDA: ") + what + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

const CudaStatus& device_status() {
  static const CudaStatus s = cuda_status();
  return s;
}
void require_device() {
  if (!device_status().available) throw NotSupported(device_status().reason);
}

// --- device memory -----------------------------------------------------------------------------------
namespace {
constexpr size_t kStagingBytes = size_t{16} << 20;

struct Staging {
  std::mutex m;
  void* p = nullptr;   // pinned; never freed (the process's exit releases it after the runtime)
};
Staging& staging() {
  static Staging s;
  return s;
}
}  // namespace

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

void* Scratch::get(const std::string& name, size_t bytes) {
  Buf& b = bufs_[name];
  if (b.bytes < bytes) {
    b.t = Tensor(DType::f32, {static_cast<int64_t>((bytes + 3) / 4)}, Device::cuda);
    b.bytes = bytes;
  }
  return b.t.bytes();
}
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// --- inputs and outputs --------------------------------------------------------------------------------
const void* device_input(const Tensor& t, DType want, const std::string& name) {
  if (t.device() == Device::cuda && t.dtype() == want) return t.bytes();
  Tensor h = t.device() == Device::cuda ? t.to(Device::host) : t;
  if (h.dtype() != want) h = convert(h, want);
  void* d = scratch().get(name, std::max<size_t>(h.nbytes(), 4));
  device_copy(d, Device::cuda, h.bytes(), Device::host, h.nbytes());
  return d;
}
const Tensor& need(const TensorMap& m, const char* name, const char* op) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument(std::string(op) + ": tensor '" + name + "' is missing");
  return it->second;
}

const __nv_bfloat16* bf16_input(const TensorMap& in, const char* name, const char* op, int64_t numel) {
  return static_cast<const __nv_bfloat16*>(device_input(need(in, name, op, numel), DType::bf16, name));
}
const float* f32_input(const TensorMap& in, const char* name, const char* op, int64_t numel) {
  return static_cast<const float*>(device_input(need(in, name, op, numel), DType::f32, name));
}
const __nv_bfloat16* bf16_input_via_f32(const TensorMap& in, const char* name, const char* op, int64_t numel) {
  const Tensor& t = need(in, name, op, numel);
  if (t.dtype() == DType::bf16 || t.dtype() == DType::f32) return bf16_input(in, name, op, numel);
  const Tensor h = t.device() == Device::cuda ? t.to(Device::host) : t;
  return static_cast<const __nv_bfloat16*>(device_input(convert(h, DType::f32), DType::bf16, name));
}

void store_output(const void* dev, DType dev_dtype, Tensor& t) {
  Tensor h(dev_dtype, t.shape());
  device_copy(h.bytes(), Device::host, dev, Device::cuda, h.nbytes());
  Tensor c = t.dtype() == dev_dtype ? h : convert(h, t.dtype());
  if (t.device() == Device::host) std::memcpy(t.bytes(), c.bytes(), c.nbytes());
  else device_copy(t.bytes(), t.device(), c.bytes(), Device::host, c.nbytes());
}

InOut in_out(Tensor& t, const std::string& name, const char* op) {
  if (t.dtype() != DType::f32) throw std::invalid_argument(std::string(op) + ": pool '" + name + "' must be f32");
  if (t.device() == Device::cuda) return {&t, t.data<float>(), false};
  auto* d = static_cast<float*>(scratch().get(name, t.nbytes()));
  device_copy(d, Device::cuda, t.bytes(), Device::host, t.nbytes());
  return {&t, d, true};
}

// --- timing --------------------------------------------------------------------------------------
namespace {
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

}  // namespace

void run_launch(const std::function<void(cudaStream_t)>& launch, std::initializer_list<Region> inout) {
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

}  // namespace dg::cu
