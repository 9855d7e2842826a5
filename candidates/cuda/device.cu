#include "candidates/cuda/device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dg {

CudaStatus cuda_status() {
  CudaStatus s;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    s.reason = std::string("no CUDA device (the driver says: ") + cudaGetErrorString(err) + ")";
    cudaGetLastError();
    return s;
  }
  if (err != cudaSuccess) {
    s.reason = std::string("CUDA: ") + cudaGetErrorString(err);
    cudaGetLastError();   // clear the sticky error
    return s;
  }
  if (n == 0) {
    s.reason = "no CUDA device";
    return s;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    s.reason = "CUDA: cannot read device 0 properties";
    return s;
  }
  s.available = true;
  s.device = prop.name;
  return s;
}

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

__global__ void stream_copy(const float4* __restrict__ src, float4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    __stcs(dst + i, __ldcs(src + i));
}

}  // namespace

CopyBandwidth cuda_copy_bandwidth(size_t bytes, int reps) {
  const CudaStatus s = cuda_status();
  if (!s.available) throw std::runtime_error(s.reason);
  bytes = std::max<size_t>(bytes / 16 * 16, 16);
  int mem_khz = 0, bus_bits = 0, sms = 0;
  check(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0), "memory clock");
  check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0), "bus width");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  CopyBandwidth r;
  r.peak_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  void *a = nullptr, *b = nullptr;
  cudaEvent_t e0, e1;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  auto best_gbs = [&](auto&& launch) {
    float best_ms = 0;
    for (int i = 0; i <= reps; ++i) {   // the first pass warms up and is not counted
      check(cudaEventRecord(e0), "event record");
      launch();
      check(cudaEventRecord(e1), "event record");
      check(cudaEventSynchronize(e1), "copy");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      if (i > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
    }
    return 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
  };
  r.memcpy_gbs = best_gbs([&] { check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy"); });
  r.kernel_gbs = best_gbs([&] {
    stream_copy<<<static_cast<unsigned>(sms * 8), 256>>>(static_cast<const float4*>(a), static_cast<float4*>(b), bytes / 16);
    check(cudaGetLastError(), "copy kernel launch");
  });
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return r;
}

}  // namespace dg
