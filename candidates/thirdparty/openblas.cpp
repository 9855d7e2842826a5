// OpenBLAS judged as a candidate: an optimized kernel written by others, judged as any patch is. Its
// arithmetic is its own; driftgate only lays the operands out as it expects.
//   gemm_cpu_openblas_f32   cblas_sgemm of Debian's serial build (libopenblas-serial-dev: no threads
//                           of its own, so the worker's thread and CPU-time rules see one thread),
//                           y = x W^T on f32 copies of the stored operands (exact for bf16, f16 and
//                           f32 storage, one rounding for f64), then + bias in f32. Its accumulation
//                           order is the micro-kernel's (blocked in K by its GEMM_Q, FMA lanes across
//                           N), not documented: that is what the gate measures.
// Built without the library (DG_HAVE_OPENBLAS 0: CMake did not find it), the candidate is still
// listed and every row of it is NOT_SUPPORTED with the reason, never a build failure.
#if DG_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

void openblas_sgemm(const Case& c, const TensorMap& in, TensorMap& out) {
#if DG_HAVE_OPENBLAS
  const int64_t M = c.integer("M"), N = c.integer("N"), K = c.integer("K");
  std::vector<float> x(static_cast<size_t>(M * K)), w(static_cast<size_t>(N * K)), y(static_cast<size_t>(M * N));
  load_row(need(in, "x", "gemm"), 0, M * K, x.data());
  load_row(need(in, "w", "gemm"), 0, N * K, w.data());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(M), static_cast<blasint>(N),
              static_cast<blasint>(K), 1.0f, x.data(), static_cast<blasint>(K), w.data(), static_cast<blasint>(K), 0.0f,
              y.data(), static_cast<blasint>(N));
  if (c.boolean("bias")) {
    std::vector<float> b(static_cast<size_t>(N));
    load_row(need(in, "bias", "gemm"), 0, N, b.data());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[static_cast<size_t>(m * N + n)] += b[static_cast<size_t>(n)];
  }
  store_row(need_out(out, "y", M * N, "gemm"), 0, M * N, y.data());
#else
  (void)c, (void)in, (void)out;
  throw NotSupported("this driftgate was built without OpenBLAS (Debian package libopenblas-serial-dev; "
                     "scripts/setup.sh installs it, then rebuild)");
#endif
}

}  // namespace

DG_REGISTER_CANDIDATE(gemm_cpu_openblas_f32,
                      {"gemm_cpu_openblas_f32", "gemm", "cpu", "openblas", DType::f32, DType::f32, DType::f32,
                       "OpenBLAS cblas_sgemm (Debian's serial build) on f32 copies of the operands, + bias in f32"},
                      openblas_sgemm);

}  // namespace dg
