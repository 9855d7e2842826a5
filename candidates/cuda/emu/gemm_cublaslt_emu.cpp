// The cuBLASLt GEMM under the CUDA emulator: not emulated (cuBLASLt's kernels are NVIDIA's
// binaries), so the emulated builds register the name with this reason instead.
#include "candidates/cuda/gemm_cublaslt.h"

#include "harness/cases/registry.h"

namespace dg {

void gemm_cuda_cublaslt_bf16(const Case&, const TensorMap&, TensorMap&) {
  throw NotSupported("cuBLASLt runs only on a CUDA device: the CUDA emulator does not emulate it");
}

}  // namespace dg
