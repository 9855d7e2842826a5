// The cuBLASLt GEMM candidates (gemm_cublaslt.h). Host code only: cuBLASLt picks and runs the kernel.
// No emulator: cuBLASLt's kernels are NVIDIA's binaries, so this file is compiled by nvcc into
// dg_cuda and runs only on a device; the emulated builds register the names as NOT_SUPPORTED
// (emu/gemm_cublaslt_emu.cpp).
//
// The library is opened at the first call (dlopen of libcublasLt.so.<the toolkit's major>), not
// linked: it is over 500 MB, so driftgate neither loads it at every start nor needs it where no
// gemm row asks for it (the prebuilt GPU bundle of scripts/gpu-bundle.sh stays small). Without it the
// row is NOT_SUPPORTED and says which file was not found.
//
// Layout. The op's row-major y [M,N] = x [M,K] W^T is, in cuBLASLt's column-major terms,
// D [N,M] = op(A) B with A = W seen as K x N (ld K, op T) and B = x seen as K x M (ld K, op N): the
// "TN" layout, the one every tensor-core path (bf16, and FP8) supports. Scale type f32, alpha 1,
// beta 0 (C is D and is not read).
//
// Numerics: bf16 inputs (a tensor in f64 read through f32 first, as the CPU candidates read it),
// CUBLAS_COMPUTE_32F (no reduced-precision reduction, no TF32 or split-K into bf16), the bias [N] in
// bf16 added in f32 by CUBLASLT_EPILOGUE_BIAS before the one rounding of the output to bf16, as
// gemm_cpu_blocked_bf16 adds it. The summation order over K is the library's (tile, MMA and split-K
// order): the results agree with the CPU candidate within f32 accumulation's bound (the op's measure
// format_bound.y), not bit for bit. The algorithm is the heuristic's first choice for a 32 MiB
// workspace, asked once per call (descriptors are cheap; the handle is one per thread, kept).
//
// gemm_fp8_block_cuda_cublaslt (op gemm_fp8_block): the same TN call on e4m3 operands with
// DeepSeek-V3's block scales, as multipliers: A = w with CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
// (one f32 per 128 x 128 block) and B = x with CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (one f32 per
// 1 x 128 block along K), CUBLAS_COMPUTE_32F, D in bf16 (C is D, beta 0). Architectures: CUDA 13's
// cublasLt.h declares both modes but does not say which devices run them; cuBLAS's documentation
// (the 12.9 release that added them, and the scaling-mode support table) lists them for FP8 on
// compute capability 9.0 (Hopper) only, Blackwell's block-scaled tensor cores taking the MX modes
// (VEC32_UE8M0, VEC16_UE4M3) instead. So the candidate runs on 9.x devices and is NOT_SUPPORTED,
// saying so, on any other (and where the heuristic offers no algorithm).
// Scale layouts (each a column-major grid over the operand's blocks in cuBLAS's terms): w_scale as
// the op stores it, [ceil(N/128), K/128] row-major, K/128 fastest (the blocks of A, K x N, in
// column-major order); x_scale transposed on the host to [K/128, M], M fastest ("outer-dim-major",
// the layout PyTorch's _scaled_mm hands cuBLAS for the 1 x 128 recipe). These layouts have not yet
// been confirmed on a device (no GPU ran this candidate when it was written): a wrong one multiplies
// blocks by other blocks' scales, which misses the op's format bound (gemm_fp8_block_bound_ratio) and
// verify's bits by orders of magnitude, so scripts/gpu-check.sh (cuda-tests, and verify-layer-ops on
// gemm-fp8-block-smoke) settles it on the first run.
// Numerics: the library's FP8 MMA partials (Hopper's accumulator keeps about 14 bits, DeepSeek-V3's
// measurement) promoted to f32 with the scales, as gemm_fp8_block_cpu_deepgemm_bf16 models; the
// candidate declares the same tf32 state dtype, so the op's bound allows for that accumulator. D's
// leading dimension is N rounded up to 8 (16-byte rows, which the FP8 kernels require); the rows are
// compacted on the host.
#include "candidates/cuda/gemm_cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "candidates/cuda/cuda_rt.h"
#include "harness/ops/gemm.h"
#include "harness/ops/gemm_fp8_block.h"

namespace dg {
namespace {
using namespace cu;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The cuBLASLt entry points used here, from the library opened at the first call.
struct Lt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtGetStatusName) status_name;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
  std::string error;   // why the library could not be used; empty when every entry point is here
};

template <class F>
void find_entry(void* lib, const char* name, F& f, std::string& error) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f && error.empty()) error = std::string("cuBLASLt: ") + name + " not found in the library";
}

Lt open_lt() {
  Lt lt{};
  const std::string file = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);   // never closed: kept for the process
  if (!lib) {
    const char* why = dlerror();
    lt.error = "cuBLASLt is not installed here (" + file + ": " + (why ? why : "not found") + ")";
    return lt;
  }
  find_entry(lib, "cublasLtCreate", lt.create, lt.error);
  find_entry(lib, "cublasLtGetStatusName", lt.status_name, lt.error);
  find_entry(lib, "cublasLtGetStatusString", lt.status_string, lt.error);
  find_entry(lib, "cublasLtMatmulDescCreate", lt.desc_create, lt.error);
  find_entry(lib, "cublasLtMatmulDescDestroy", lt.desc_destroy, lt.error);
  find_entry(lib, "cublasLtMatmulDescSetAttribute", lt.desc_set, lt.error);
  find_entry(lib, "cublasLtMatrixLayoutCreate", lt.layout_create, lt.error);
  find_entry(lib, "cublasLtMatrixLayoutDestroy", lt.layout_destroy, lt.error);
  find_entry(lib, "cublasLtMatmulPreferenceCreate", lt.pref_create, lt.error);
  find_entry(lib, "cublasLtMatmulPreferenceDestroy", lt.pref_destroy, lt.error);
  find_entry(lib, "cublasLtMatmulPreferenceSetAttribute", lt.pref_set, lt.error);
  find_entry(lib, "cublasLtMatmulAlgoGetHeuristic", lt.heuristic, lt.error);
  find_entry(lib, "cublasLtMatmul", lt.matmul, lt.error);
  return lt;
}

// The library; throws NotSupported with the reason when it cannot be used.
const Lt& lt() {
  static const Lt l = open_lt();
  if (!l.error.empty()) throw NotSupported(l.error);
  return l;
}

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt: ") + what + ": " + lt().status_name(s) + " (" +
                             lt().status_string(s) + ")");
}
#define DG_LT(expr) check_lt((expr), #expr)

cublasLtHandle_t handle() {
  thread_local cublasLtHandle_t h = nullptr;   // never destroyed: the process's exit releases it
  if (!h) DG_LT(lt().create(&h));
  return h;
}

// The descriptors of one call, destroyed with it.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Descs() = default;
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
  ~Descs() {
    if (pref) lt().pref_destroy(pref);
    if (d) lt().layout_destroy(d);
    if (b) lt().layout_destroy(b);
    if (a) lt().layout_destroy(a);
    if (op) lt().desc_destroy(op);
  }
};

template <class T>
void set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& v) {
  DG_LT(lt().desc_set(op, attr, &v, sizeof v));
}

// The descriptors every call shares: D = op(A)^T op(B) with A = w [N,K] and B = x [M,K] in `operand`
// (row-major, so K is each column's leading dimension), D [M rows of ldd] bf16, f32 compute, and
// the workspace preference.
void describe_common(Descs& ds, cudaDataType_t operand, int64_t M, int64_t N, int64_t K, int64_t ldd) {
  DG_LT(lt().desc_create(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  DG_LT(lt().layout_create(&ds.a, operand, u(K), u(N), K));
  DG_LT(lt().layout_create(&ds.b, operand, u(K), u(M), K));
  DG_LT(lt().layout_create(&ds.d, CUDA_R_16BF, u(N), u(M), ldd));
  DG_LT(lt().pref_create(&ds.pref));
  const uint64_t ws = kWorkspaceBytes;
  DG_LT(lt().pref_set(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
}

void describe(Descs& ds, const GemmParams& p, const void* bias) {
  describe_common(ds, CUDA_R_16BF, p.M, p.N, p.K, p.N);
  if (bias) {
    set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    set(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_16BF));
  }
}

// The FP8 call's descriptors (the head comment): w's and x's e4m3 layouts, their block scales, D in
// bf16 with leading dimension ldd.
void describe_fp8(Descs& ds, const GemmFp8BlockParams& p, const void* w_scale, const void* x_scale, int64_t ldd) {
  describe_common(ds, CUDA_R_8F_E4M3, p.M, p.N, p.K, ldd);
  set(ds.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
  set(ds.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  set(ds.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale);
  set(ds.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, x_scale);
}

// D = w x^T through the heuristic's first algorithm, as one timed launch; NotSupported naming `kind`
// when cuBLASLt has none for the case.
void run_matmul(const Descs& ds, const void* w, const void* x, void* dy, const Case& c, const std::string& kind) {
  void* ws = scratch().get("cublaslt_workspace", kWorkspaceBytes);
  cublasLtMatmulHeuristicResult_t algo{};
  int found = 0;
  DG_LT(lt().heuristic(handle(), ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &algo, &found));
  if (found == 0) throw NotSupported("cuBLASLt has no " + kind + " algorithm for " + c.str() + " on this device");
  const float alpha = 1.0f, beta = 0.0f;
  run_launch([&](cudaStream_t s) {
    DG_LT(lt().matmul(handle(), ds.op, &alpha, w, ds.a, x, ds.b, &beta, dy, ds.d, dy, ds.d, &algo.algo, ws,
                      kWorkspaceBytes, s));
    cu::check(cudaGetLastError(), ("launch of cublasLtMatmul (" + kind + ")").c_str(), __FILE__, __LINE__);
  });
}

// Throws NotSupported unless the current device is compute capability 9.x (the head comment).
void require_block_scaled_fp8() {
  int dev = 0, major = 0, minor = 0;
  DG_CUDA(cudaGetDevice(&dev));
  DG_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  DG_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9)
    throw NotSupported("cuBLASLt's 1x128 / 128x128 block-scaled FP8 runs on compute capability 9.x (Hopper); this "
                       "device is " + std::to_string(major) + "." + std::to_string(minor));
}

// x_scale [M, K/128] (row-major, any float dtype) as [K/128, M], M fastest, in f32 on the host.
Tensor x_scale_outer_major(const Tensor& xs, const GemmFp8BlockParams& p) {
  const Tensor h = convert(xs.device() == Device::host ? xs : xs.to(Device::host), DType::f32);
  Tensor t(DType::f32, {p.kb(), p.M});
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t b = 0; b < p.kb(); ++b) t.data<float>()[b * p.M + m] = h.data<float>()[m * p.kb() + b];
  return t;
}

// D [M rows of ldd bf16] on the device -> y [M, N] (rows compacted, then one rounding to y's dtype).
void store_rows(const void* dev, int64_t M, int64_t N, int64_t ldd, Tensor& y) {
  Tensor h(DType::bf16, {M, ldd}), c(DType::bf16, {M, N});
  device_copy(h.bytes(), Device::host, dev, Device::cuda, h.nbytes());
  for (int64_t m = 0; m < M; ++m) std::memcpy(c.bytes() + m * N * 2, h.bytes() + m * ldd * 2, static_cast<size_t>(N) * 2);
  const Tensor o = y.dtype() == DType::bf16 ? c : convert(c, y.dtype());
  if (y.device() == Device::host) std::memcpy(y.bytes(), o.bytes(), o.nbytes());
  else device_copy(y.bytes(), y.device(), o.bytes(), Device::host, o.nbytes());
}

}  // namespace

void gemm_cuda_cublaslt_bf16(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "gemm";
  require_device();
  lt();   // the library first: without it the row says so before any upload
  const GemmParams p = gemm_params(c);
  const void* x = bf16_input_via_f32(in, "x", op, p.M * p.K);
  const void* w = bf16_input_via_f32(in, "w", op, p.N * p.K);
  const void* bias = p.bias ? bf16_input_via_f32(in, "bias", op, p.N) : nullptr;
  Tensor& y = need(out, "y", op, p.M * p.N);
  void* dy = scratch().get("y", static_cast<size_t>(p.M * p.N) * 2);
  Descs ds;
  describe(ds, p, bias);
  run_matmul(ds, w, x, dy, c, "bf16");
  store_output(dy, DType::bf16, y);
}

void gemm_fp8_block_cuda_cublaslt(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "gemm_fp8_block";
  require_device();
  require_block_scaled_fp8();
  lt();
  const GemmFp8BlockParams p = gemm_fp8_block_params(c);
  const void* x = device_input(need(in, "x", op, p.M * p.K), DType::e4m3, "x");
  const void* w = device_input(need(in, "w", op, p.N * p.K), DType::e4m3, "w");
  const void* ws_dev = f32_input(in, "w_scale", op, p.nb() * p.kb());
  const void* xs_dev = device_input(x_scale_outer_major(need(in, "x_scale", op, p.M * p.kb()), p), DType::f32, "x_scale");
  Tensor& y = need(out, "y", op, p.M * p.N);
  const int64_t ldd = (p.N + 7) / 8 * 8;
  void* dy = scratch().get("y", static_cast<size_t>(p.M * ldd) * 2);
  Descs ds;
  describe_fp8(ds, p, ws_dev, xs_dev, ldd);
  run_matmul(ds, w, x, dy, c, "block-scaled FP8");
  store_rows(dy, p.M, p.N, ldd, y);
}

}  // namespace dg
