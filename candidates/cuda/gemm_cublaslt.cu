// The cuBLASLt GEMM candidate (gemm_cublaslt.h). Host code only: cuBLASLt picks and runs the kernel.
// No emulator: cuBLASLt's kernels are NVIDIA's binaries, so this file is compiled by nvcc into
// dg_cuda and runs only on a device; the emulated builds register the name as NOT_SUPPORTED
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
// FP8 with block scales is not built here. CUDA 13's cublasLt.h declares the scale modes
// (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F for 1x128 activation blocks, BLK128x128_32F for
// 128x128 weight blocks, DeepSeek-V3's recipe), but the gemm op stores bf16/f16/f32/f64 operands
// with no scale tensors, so a block-scaled candidate would have to quantize inside itself and be
// judged against a reference that never saw the quantization; it waits for an op whose inputs carry
// e4m3 data and its scales. Which devices run those modes (the heuristic returns no algorithm where
// they are unsupported) is for that candidate's GPU check to say.
#include "candidates/cuda/gemm_cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "candidates/cuda/cuda_rt.h"
#include "harness/ops/gemm.h"

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

void describe(Descs& ds, const GemmParams& p, const void* bias) {
  DG_LT(lt().desc_create(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (bias) {
    set(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    set(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_16BF));
  }
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  DG_LT(lt().layout_create(&ds.a, CUDA_R_16BF, u(p.K), u(p.N), p.K));
  DG_LT(lt().layout_create(&ds.b, CUDA_R_16BF, u(p.K), u(p.M), p.K));
  DG_LT(lt().layout_create(&ds.d, CUDA_R_16BF, u(p.N), u(p.M), p.N));
  DG_LT(lt().pref_create(&ds.pref));
  const uint64_t ws = kWorkspaceBytes;
  DG_LT(lt().pref_set(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
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
  void* ws = scratch().get("cublaslt_workspace", kWorkspaceBytes);
  Descs ds;
  describe(ds, p, bias);
  cublasLtMatmulHeuristicResult_t algo{};
  int found = 0;
  DG_LT(lt().heuristic(handle(), ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &algo, &found));
  if (found == 0) throw NotSupported("cuBLASLt has no bf16 algorithm for " + c.str() + " on this device");
  const float alpha = 1.0f, beta = 0.0f;
  run_launch([&](cudaStream_t s) {
    DG_LT(lt().matmul(handle(), ds.op, &alpha, w, ds.a, x, ds.b, &beta, dy, ds.d, dy, ds.d, &algo.algo, ws,
                      kWorkspaceBytes, s));
    DG_LAUNCHED("cublasLtMatmul");
  });
  store_output(dy, DType::bf16, y);
}

}  // namespace dg
