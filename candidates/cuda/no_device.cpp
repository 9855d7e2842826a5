// The CUDA entry points of a build without nvcc: device discovery says why, the candidates throw
// NotSupported with the same reason, and no device memory is registered.
#include "candidates/cuda/attention_decode.h"
#include "candidates/cuda/device.h"
#include "candidates/cuda/gemm_cublaslt.h"
#include "candidates/cuda/kda_cuda.h"
#include "candidates/cuda/mla_decode.h"
#include "candidates/cuda/moe_router.h"
#include "candidates/cuda/rmsnorm.h"
#include "candidates/cuda/rope.h"
#include "candidates/cuda/swiglu.h"
#include "harness/cases/registry.h"

#include <stdexcept>

namespace dg {
namespace {
const char* kReason = "built without CUDA (configure with nvcc on PATH or -DDRIFTGATE_CUDA=ON)";
}

CudaStatus cuda_status() { return {false, kReason, ""}; }
CopyBandwidth cuda_copy_bandwidth(size_t, int) { throw std::runtime_error(kReason); }

void kda_decode_cuda_f32state(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void kda_decode_cuda_f32state_fused(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void kda_cuda_chunk_bf16(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void rmsnorm_cuda_bf16(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void add_rmsnorm_cuda_bf16(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void swiglu_cuda_bf16(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void gemm_cuda_cublaslt_bf16(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void gemm_fp8_block_cuda_cublaslt(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void rope_cuda_bf16(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void moe_router_cuda_f32(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void attention_decode_cuda_splitkv_f32(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void mla_decode_cuda_packed_f32(const Case&, const TensorMap&, TensorMap&) { throw NotSupported(kReason); }
void register_cuda_device_ops() {}

}  // namespace dg
