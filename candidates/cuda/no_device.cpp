#include "candidates/cuda/device.h"

namespace dg {

CudaStatus cuda_status() { return {false, "built without CUDA (configure with nvcc on PATH or -DDRIFTGATE_CUDA=ON)", ""}; }

}  // namespace dg
