// Mutants and equivalent variants of gemm (reference/gemm.h), each the naive CPU candidate's loop
// (candidates/cpu/gemm.cpp) with one hook turned. The bugs come from the op's physics and its
// production forms (notes/model-ops.md sections 1.8, 2 and 5):
//
//   mutants      the accumulator rounded to bf16 after every add (an MMA without f32 accumulation)
//                or to f16; the bias added twice (in the epilogue and again by the caller) or
//                dropped; the weight read as [K,N] row-major (element (n,k) at k*N + n: a transposed
//                layout); the k-tail dropped (the last K % 32 terms of a kernel tiled by 32);
//                split-K with the two halves' f32 partial sums rounded to bf16 before they are
//                added (partials stored in the output dtype); x and w rounded to f16 (a kernel
//                instantiated for the wrong 16-bit type)
//   equivalents  f64 accumulation; FMA accumulation; k in decreasing order; 4 k-lanes (k mod 4)
//                summed in order at the end
#include <cmath>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/core/threads.h"
#include "harness/ops/gemm.h"

namespace dg::mutants {
namespace {

struct Variant {
  // mutants
  bool acc_bf16 = false, acc_f16 = false, bias_twice = false, bias_dropped = false, w_transposed = false,
       k_tail_dropped = false, split_k_bf16 = false, inputs_f16 = false;
  // equivalents
  bool f64 = false, fma = false, reversed = false, lanes4 = false;
};

float round_f16(float x) { return f32_from_f16(f16_from_f32(x)); }

// One output: sum_k x[k] w(k), where w(k) is the weight of term k.
template <class W> float dot(const Variant& v, const float* x, const W& w, int64_t K) {
  if (v.f64) {
    double acc = 0.0;
    for (int64_t k = 0; k < K; ++k) acc = acc + static_cast<double>(x[k]) * static_cast<double>(w(k));
    return static_cast<float>(acc);
  }
  if (v.lanes4) {
    float lane[4] = {};
    for (int64_t k = 0; k < K; ++k) lane[k % 4] = lane[k % 4] + x[k] * w(k);
    return ((lane[0] + lane[1]) + lane[2]) + lane[3];
  }
  if (v.split_k_bf16) {
    const int64_t h = K / 2;
    float lo = 0.0f, hi = 0.0f;
    for (int64_t k = 0; k < h; ++k) lo = lo + x[k] * w(k);
    for (int64_t k = h; k < K; ++k) hi = hi + x[k] * w(k);
    return round_bf16(lo) + round_bf16(hi);
  }
  const int64_t end = v.k_tail_dropped ? K - K % 32 : K;
  float acc = 0.0f;
  for (int64_t i = 0; i < end; ++i) {
    const int64_t k = v.reversed ? K - 1 - i : i;
    acc = v.fma ? std::fma(x[k], w(k), acc) : acc + x[k] * w(k);
    if (v.acc_bf16) acc = round_bf16(acc);
    if (v.acc_f16) acc = round_f16(acc);
  }
  return acc;
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const GemmParams p = gemm_params(c);
    const int64_t M = p.M, N = p.N, K = p.K;
    std::vector<float> x(static_cast<size_t>(M * K)), b(static_cast<size_t>(p.bias ? N : 0));
    std::vector<float> w(static_cast<size_t>(N * K)), y(static_cast<size_t>(M * N));
    load_row(in.at("x"), 0, M * K, x.data());
    load_row(in.at("w"), 0, N * K, w.data());
    if (p.bias) load_row(in.at("bias"), 0, N, b.data());
    if (v.inputs_f16) {
      for (float& e : x) e = round_f16(e);
      for (float& e : w) e = round_f16(e);
    }
    parallel_for(N, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t m = 0; m < M; ++m) {
          const float* wn = w.data() + n * K;
          const auto row = [wn](int64_t k) { return wn[k]; };
          const auto transposed = [&w, n, N](int64_t k) { return w[static_cast<size_t>(k * N + n)]; };
          float acc = v.w_transposed ? dot(v, x.data() + m * K, transposed, K) : dot(v, x.data() + m * K, row, K);
          if (p.bias && !v.bias_dropped) acc = acc + b[static_cast<size_t>(n)];
          if (p.bias && v.bias_twice) acc = acc + b[static_cast<size_t>(n)];
          y[static_cast<size_t>(m * N + n)] = acc;
        }
    });
    store_row(out.at("y"), 0, M * N, y.data());
  };
}

struct Add {
  Add(const char* kind, const char* what, const char* doc, Variant v) {
    register_candidate({std::string("gemm_") + kind + "_" + what, "gemm", "cpu", kind, DType::f32, DType::f32, DType::f32, doc},
                       variant(v));
  }
};

const Add acc_bf16("mutant", "acc_bf16", "the accumulator rounded to bf16 after every add", {.acc_bf16 = true});
const Add acc_f16("mutant", "acc_f16", "the accumulator rounded to f16 after every add", {.acc_f16 = true});
const Add bias_twice("mutant", "bias_twice", "the bias added twice (epilogue and caller)", {.bias_twice = true});
const Add bias_dropped("mutant", "bias_dropped", "the bias never added", {.bias_dropped = true});
const Add w_transposed("mutant", "w_transposed", "w read as [K,N] row-major: element (n,k) at k*N + n", {.w_transposed = true});
const Add k_tail("mutant", "k_tail_dropped", "the last K % 32 terms skipped (a kernel tiled by 32 without its tail)", {.k_tail_dropped = true});
const Add split_k("mutant", "split_k_bf16", "split-K: the two halves' f32 sums rounded to bf16, then added", {.split_k_bf16 = true});
const Add inputs_f16("mutant", "inputs_f16", "x and w rounded to f16 (the kernel instantiated for the wrong 16-bit type)", {.inputs_f16 = true});
const Add f64("equivalent", "f64", "the sum in f64, rounded once to f32", {.f64 = true});
const Add fma("equivalent", "fma", "acc = fma(x, w, acc): the product unrounded", {.fma = true});
const Add reversed("equivalent", "k_reversed", "the sum in decreasing k", {.reversed = true});
const Add lanes4("equivalent", "lanes4", "4 k-lanes (k mod 4), summed in order at the end", {.lanes4 = true});

}  // namespace
}  // namespace dg::mutants
