// The cuBLASLt GEMMs under the CUDA emulator: not emulated (cuBLASLt's kernels are NVIDIA's
// binaries), so the emulated builds register the names with this reason instead.
#include "candidates/cuda/gemm_cublaslt.h"

#include "harness/cases/registry.h"

namespace dg {

void gemm_cuda_cublaslt_bf16(const Case&, const TensorMap&, TensorMap&) {
  throw NotSupported("cuBLASLt runs only on a CUDA device: the CUDA emulator does not emulate it");
}
void gemm_fp8_block_cuda_cublaslt(const Case&, const TensorMap&, TensorMap&) {
  throw NotSupported("cuBLASLt runs only on a CUDA device: the CUDA emulator does not emulate it");
}

}  // namespace dg
