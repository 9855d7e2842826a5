// CUDA device discovery. Every CUDA path asks here first; with no device (or no CUDA build) it gets
// the reason as text, and the row becomes NOT_SUPPORTED instead of a crash.
#pragma once

#include <string>

namespace dg {

struct CudaStatus {
  bool available = false;
  std::string reason;   // "no CUDA device", the driver's message, or "built without CUDA"
  std::string device;   // the device's name when available
};

CudaStatus cuda_status();

// What device 0's memory moves in practice: `bytes` copied from one buffer to another (read and
// write both counted, 1e9 bytes per GB), the best of `reps` event-timed passes, by cudaMemcpy and by
// a streaming kernel (16-byte __ldcs/__stcs per thread, as the decode kernels' state traffic), with
// the peak the bench rows use (memory clock x bus width). The practical ceiling a memory-bound
// kernel's "% of peak" is read against (README: the GPU tables). Throws std::runtime_error without
// a device.
struct CopyBandwidth {
  double memcpy_gbs = 0, kernel_gbs = 0, peak_gbs = 0;
};
CopyBandwidth cuda_copy_bandwidth(size_t bytes, int reps);

}  // namespace dg
