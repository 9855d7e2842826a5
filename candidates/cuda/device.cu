#include "candidates/cuda/device.h"

#include <cuda_runtime.h>

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

}  // namespace dg
