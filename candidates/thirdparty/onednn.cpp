// oneDNN judged as a candidate: Intel's optimized matmul (Debian's libdnnl-dev), judged as any patch
// is. Its arithmetic is its own (JIT kernels chosen for this CPU at run time: AVX-512, AVX2, and
// for bf16 the VDPBF16PS dot products where the CPU has them); driftgate only describes the operands.
//   gemm_cpu_onednn_f32    dnnl::matmul in f32: y = x W^T + bias on f32 copies of the operands
//                          (exact for bf16, f16 and f32 storage, one rounding for f64), the weight
//                          described as [K,N] in layout "ba" (nn.Linear's [N,K] rows, no copy).
//   gemm_cpu_onednn_bf16   dnnl::matmul with bf16 operands, f32 accumulation inside the library, a
//                          bf16 output and an f32 bias: a tensor-core GEMM's contract on a CPU.
//                          Operands stored wider are rounded to bf16 once (its input dtype). Where
//                          the CPU has no bf16 matmul, oneDNN refuses the primitive and every row is
//                          NOT_SUPPORTED with its message.
// Threads: the library runs on OpenMP; each call sets the OpenMP team to driftgate's thread budget
// (--threads), so the worker's thread and CPU-time rules bind it as they bind every candidate.
// Built without the library (DG_HAVE_ONEDNN 0: CMake did not find it), the candidates are still
// listed and every row is NOT_SUPPORTED with the reason, never a build failure.
#if DG_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/threads.h"

namespace dg {
namespace {

#if DG_HAVE_ONEDNN
// A stored operand in `t`'s dtype: `src` itself when it is already in it, else a converted copy
// (exact when widening, one rounding when narrowing); to f32 through the candidates' bulk loader.
Tensor as(const Tensor& src, DType t) {
  if (src.dtype() == t) return src;
  if (t != DType::f32) return convert(src, t);
  Tensor f(DType::f32, src.shape(), Tensor::Uninitialized{});
  load_row(src, 0, src.numel(), f.data<float>());
  return f;
}

void matmul(const Case& c, const TensorMap& in, TensorMap& out, DType operand) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const int64_t M = c.integer("M"), N = c.integer("N"), K = c.integer("K");
  const dt odt = operand == DType::bf16 ? dt::bf16 : dt::f32;
  Tensor& y = need_out(out, "y", M * N, "gemm");
  const dt ydt = y.dtype() == DType::bf16 ? dt::bf16 : dt::f32;
  Tensor x = as(need(in, "x", "gemm"), operand), w = as(need(in, "w", "gemm"), operand);
  Tensor b;
  dnnl::memory::desc bias_md;
  if (c.boolean("bias")) {
    b = as(need(in, "bias", "gemm"), DType::f32);
    bias_md = dnnl::memory::desc({1, N}, dt::f32, tag::ab);
  }
  omp_set_num_threads(num_threads());
  try {
    // One engine for the process: oneDNN's primitive cache keys on it, so the JIT kernel of a shape is
    // generated once, not at every call.
    static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream s(eng);
    const dnnl::memory::desc x_md({M, K}, odt, tag::ab), w_md({K, N}, odt, tag::ba), y_md({M, N}, ydt, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_md, w_md, bias_md, y_md), eng);
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, dnnl::memory(x_md, eng, x.bytes())},
                                                  {DNNL_ARG_WEIGHTS, dnnl::memory(w_md, eng, w.bytes())},
                                                  {DNNL_ARG_DST, dnnl::memory(y_md, eng, y.bytes())}};
    if (!b.empty()) args.insert({DNNL_ARG_BIAS, dnnl::memory(bias_md, eng, b.bytes())});
    dnnl::matmul(pd).execute(s, args);
    s.wait();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented)
      throw NotSupported(fmt::format("oneDNN has no {} matmul for this CPU: {}", name(operand), e.what()));
    throw;
  }
}
#endif

void onednn_gemm(const Case& c, const TensorMap& in, TensorMap& out, DType operand) {
#if DG_HAVE_ONEDNN
  matmul(c, in, out, operand);
#else
  (void)c, (void)in, (void)out, (void)operand;
  throw NotSupported("this driftgate was built without oneDNN (Debian package libdnnl-dev; scripts/setup.sh "
                     "installs it, then rebuild)");
#endif
}

}  // namespace

DG_REGISTER_CANDIDATE(gemm_cpu_onednn_f32,
                      {"gemm_cpu_onednn_f32", "gemm", "cpu", "onednn", DType::f32, DType::f32, DType::f32,
                       "oneDNN dnnl::matmul in f32 (Debian's libdnnl), + bias in the primitive"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) { onednn_gemm(c, in, out, DType::f32); });
DG_REGISTER_CANDIDATE(gemm_cpu_onednn_bf16,
                      {"gemm_cpu_onednn_bf16", "gemm", "cpu", "onednn", DType::bf16, DType::f32, DType::bf16,
                       "oneDNN dnnl::matmul with bf16 operands and output, f32 accumulation and bias inside it"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) { onednn_gemm(c, in, out, DType::bf16); });

}  // namespace dg
