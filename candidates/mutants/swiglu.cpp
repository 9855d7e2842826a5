// Mutants and equivalent variants of swiglu (reference/swiglu.h), each the naive CPU candidate's loop
// (candidates/cpu/swiglu.cpp) with one hook turned. The bugs come from the op's physics and its
// production forms (notes/model-ops.md sections 1.7 and 5):
//
//   mutants      the gate clamped on both sides (the clamp is asymmetric: gate <= L only); the up
//                projection left unclamped; the clamp applied after the SiLU (min(silu(g), L));
//                gate and up halves swapped; the row read interleaved [g0 u0 g1 u1 ...] where it is
//                [gate | up]; sigmoid(g) * u (a GLU) for silu(g) * u; the sigmoid as
//                exp(g) / (1 + exp(g)) (Inf / Inf = NaN past g = 88); silu rounded to bf16 before the
//                product; a cubic exp2 inside the sigmoid
//   equivalents  f64 arithmetic; silu as g * sigmoid(g); silu as (g/2)(1 + tanh(g/2)); the product
//                formed first, (g * u) / (1 + exp(-g))
#include <algorithm>
#include <cmath>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/swiglu.h"

namespace dg::mutants {
namespace {


struct Variant {
  // mutants
  bool gate_symmetric = false, up_unclamped = false, clamp_after = false, swapped = false, interleaved = false,
       glu = false, exp_ratio = false, silu_bf16 = false, cubic_exp = false;
  // equivalents
  bool f64 = false, via_sigmoid = false, via_tanh = false, product_first = false;
};

// 2^t by a cubic on the fraction (relative error about 1e-4), as a hand-rolled fast exp.
float cubic_exp(float x) {
  const float t = x * 1.44269504f;
  if (t < -126.0f) return 0.0f;
  if (t > 127.0f) return INFINITY;
  const float n = std::floor(t), f = t - n;
  return std::ldexp(1.0f + f * (0.6960f + f * (0.2245f + f * 0.0794f)), static_cast<int>(n));
}

float silu(const Variant& v, float g) {
  if (v.exp_ratio) return g * (std::exp(g) / (1.0f + std::exp(g)));
  if (v.cubic_exp) return g / (1.0f + cubic_exp(-g));
  if (v.via_sigmoid) return g * (1.0f / (1.0f + std::exp(-g)));
  if (v.via_tanh) return (0.5f * g) * (1.0f + std::tanh(0.5f * g));
  return g / (1.0f + std::exp(-g));
}

float one(const Variant& v, float g, float u, float L) {
  if (L > 0) {
    g = v.gate_symmetric ? std::clamp(g, -L, L) : v.clamp_after ? g : std::min(g, L);
    if (!v.up_unclamped) u = std::clamp(u, -L, L);
  }
  if (v.f64) {
    const double gd = g;
    return static_cast<float>(gd / (1.0 + std::exp(-gd)) * static_cast<double>(u));
  }
  if (v.glu) return u / (1.0f + std::exp(-g));
  if (v.product_first) return (g * u) / (1.0f + std::exp(-g));
  float s = silu(v, g);
  if (v.clamp_after && L > 0) s = std::min(s, L);
  if (v.silu_bf16) s = round_bf16(s);
  return s * u;
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const SwigluParams p = swiglu_params(c);
    const int64_t N = p.N, I = p.I;
    std::vector<float> row(static_cast<size_t>(2 * I)), y(static_cast<size_t>(I));
    for (int64_t n = 0; n < N; ++n) {
      load_row(in.at("x"), n * 2 * I, 2 * I, row.data());
      for (int64_t i = 0; i < I; ++i) {
        float g = row[static_cast<size_t>(v.interleaved ? 2 * i : i)], u = row[static_cast<size_t>(v.interleaved ? 2 * i + 1 : I + i)];
        if (v.swapped) std::swap(g, u);
        y[static_cast<size_t>(i)] = one(v, g, u, static_cast<float>(p.limit));
      }
      store_row(out.at("y"), n * I, I, y.data());
    }
  };
}

struct Add {
  Add(const char* kind, const char* what, const char* doc, Variant v) {
    register_candidate({std::string("swiglu_") + kind + "_" + what, "swiglu", "cpu", kind, DType::f32, DType::f32, DType::f32, doc},
                       variant(v));
  }
};

const Add gate_symmetric("mutant", "gate_clamp_symmetric", "the gate clamped to [-L, L] (the clamp is gate <= L only)", {.gate_symmetric = true});
const Add up_unclamped("mutant", "up_unclamped", "the up projection left unclamped", {.up_unclamped = true});
const Add clamp_after("mutant", "clamp_after_silu", "min(silu(gate), L) instead of silu(min(gate, L))", {.clamp_after = true});
const Add swapped("mutant", "halves_swapped", "silu(up) * gate: the halves of the row swapped", {.swapped = true});
const Add interleaved("mutant", "interleaved", "the row read as [g0 u0 g1 u1 ...] where it is [gate | up]", {.interleaved = true});
const Add glu("mutant", "sigmoid_glu", "sigmoid(gate) * up (a GLU) for silu(gate) * up", {.glu = true});
const Add exp_ratio("mutant", "exp_ratio_sigmoid", "sigmoid as exp(g) / (1 + exp(g)): Inf / Inf = NaN past g = 88", {.exp_ratio = true});
const Add silu_bf16("mutant", "silu_bf16", "silu(gate) rounded to bf16 before the product", {.silu_bf16 = true});
const Add cubic("mutant", "cubic_exp", "a cubic exp2 (relative error ~1e-4) inside the sigmoid", {.cubic_exp = true});
const Add f64("equivalent", "f64", "the whole activation in f64, rounded once to f32", {.f64 = true});
const Add via_sigmoid("equivalent", "via_sigmoid", "silu as g * (1 / (1 + exp(-g)))", {.via_sigmoid = true});
const Add via_tanh("equivalent", "via_tanh", "silu as (g / 2)(1 + tanh(g / 2))", {.via_tanh = true});
const Add product_first("equivalent", "product_first", "(g * u) / (1 + exp(-g)): the product formed first", {.product_first = true});

}  // namespace
}  // namespace dg::mutants
