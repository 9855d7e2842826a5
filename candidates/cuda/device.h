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

}  // namespace dg
