// Mutants and equivalent variants of rmsnorm and add_rmsnorm (reference/rmsnorm.h), each the naive
// CPU candidate's loop (candidates/cpu/rmsnorm.cpp) with one hook turned. The bugs come from the
// op's physics (notes/model-ops.md sections 1.2 and 5):
//
//   both ops       sum of squares accumulated in bf16 (percent errors over 4096 dims); eps outside
//                  the root; eps fixed at 1e-6 whatever the site's (a constant copied between norm
//                  sites); LayerNorm's variance (mean subtracted); Gemma's (1 + w) weight; the
//                  reciprocal root from a 12-bit hardware estimate without its Newton step; the
//                  unbiased variance (divide by D - 1)
//   add_rmsnorm    the f32 sum squared instead of the residual rounded to the dtype; residual_out
//                  left as the incoming residual; the norm taken of x alone (residual added after)
//   equivalents    sum of squares in f64; the blocked 32-lane order; x / sqrt(...) for x * reciprocal;
//                  the weight applied first ((x * w) * r)
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/kda_cpu.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/rmsnorm.h"

namespace dg::mutants {
namespace {

using kda_cpu::load_row;
using kda_cpu::store_row;

struct Variant {
  // mutants
  bool sum_bf16 = false, eps_outside = false, eps_fixed = false, mean_subtracted = false, one_plus_w = false,
       rsqrt_estimate = false, unbiased = false, square_unrounded = false, residual_stale = false, norm_of_x = false;
  // equivalents
  bool f64_sum = false, lanes32 = false, divide = false, weight_first = false;
};

float round_storage(DType dt, float x) {
  if (dt == DType::bf16) return round_bf16(x);
  if (dt == DType::f16) return f32_from_f16(f16_from_f32(x));
  return x;
}

// The 12-bit reciprocal square root estimate of x86's rsqrtss, modelled as 1/sqrt rounded to 12
// significand bits (its relative error is at most 1.5 * 2^-12).
float rsqrt_estimate(float v) {
  const float r = 1.0f / std::sqrt(v);
  int e = 0;
  const float m = std::frexp(r, &e);
  return std::ldexp(std::nearbyint(m * 4096.0f) / 4096.0f, e);
}

float sum_squares(const Variant& v, const float* x, int64_t D, float mean) {
  if (v.f64_sum) {
    double s = 0;
    for (int64_t i = 0; i < D; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return static_cast<float>(s);
  }
  if (v.lanes32) {
    float lane[32] = {};
    for (int64_t i = 0; i < D; ++i) lane[i % 32] = lane[i % 32] + x[i] * x[i];
    float s = 0.0f;
    for (float l : lane) s = s + l;
    return s;
  }
  float s = 0.0f;
  for (int64_t i = 0; i < D; ++i) {
    const float d = x[i] - mean;
    s = s + d * d;
    if (v.sum_bf16) s = round_bf16(s);
  }
  return s;
}

// y = the norm of the row x (the residual sum for add_rmsnorm).
void norm_row(const Variant& v, const float* x, const float* w, int64_t D, float eps, float* y) {
  float mean = 0.0f;
  if (v.mean_subtracted) {
    for (int64_t i = 0; i < D; ++i) mean = mean + x[i];
    mean = mean / static_cast<float>(D);
  }
  const float ss = sum_squares(v, x, D, mean);
  const float ms = ss / static_cast<float>(v.unbiased ? D - 1 : D);
  const float e = v.eps_fixed ? 1e-6f : eps;
  const float root = v.eps_outside ? std::sqrt(ms) + e : std::sqrt(ms + e);
  const float r = v.rsqrt_estimate ? rsqrt_estimate(ms + e) : 1.0f / root;
  for (int64_t i = 0; i < D; ++i) {
    const float wi = v.one_plus_w ? 1.0f + w[i] : w[i];
    if (v.divide) y[i] = (x[i] / root) * wi;
    else if (v.weight_first) y[i] = (x[i] * wi) * r;
    else y[i] = (x[i] * r) * wi;
  }
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const RmsNormParams p = rmsnorm_params(c);
    const bool add = c.op() == "add_rmsnorm";
    const int64_t N = p.N, D = p.D;
    std::vector<float> x(static_cast<size_t>(D)), res(x.size()), s(x.size()), sq(x.size()), w(x.size()), y(x.size());
    load_row(in.at("weight"), 0, D, w.data());
    for (int64_t n = 0; n < N; ++n) {
      load_row(in.at("x"), n * D, D, x.data());
      if (!add) {
        norm_row(v, x.data(), w.data(), D, static_cast<float>(p.eps), y.data());
        store_row(out.at("y"), n * D, D, y.data());
        continue;
      }
      load_row(in.at("residual"), n * D, D, res.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const float sum = x[i] + res[i];
        s[i] = round_storage(p.dtype, sum);
        sq[i] = v.square_unrounded ? sum : s[i];
      }
      norm_row(v, v.norm_of_x ? x.data() : sq.data(), w.data(), D, static_cast<float>(p.eps), y.data());
      store_row(out.at("y"), n * D, D, y.data());
      store_row(out.at("residual_out"), n * D, D, v.residual_stale ? res.data() : s.data());
    }
  };
}

CandidateInfo info(const std::string& op, const char* kind, const std::string& what, const char* doc) {
  return {op + "_" + kind + "_" + what, op, "cpu", kind, DType::f32, DType::f32, DType::f32, doc};
}

// Registers a mutant or equivalent for both ops.
struct Both {
  Both(const char* kind, const char* what, const char* doc, Variant v) {
    for (const char* op : {"rmsnorm", "add_rmsnorm"}) register_candidate(info(op, kind, what, doc), variant(v));
  }
};
struct AddOnly {
  AddOnly(const char* what, const char* doc, Variant v) { register_candidate(info("add_rmsnorm", "mutant", what, doc), variant(v)); }
};

const Both sum_bf16("mutant", "sum_bf16", "sum of squares accumulated in bf16", {.sum_bf16 = true});
const Both eps_outside("mutant", "eps_outside_sqrt", "1 / (sqrt(mean x^2) + eps): epsilon outside the root", {.eps_outside = true});
const Both eps_fixed("mutant", "eps_1e6", "eps = 1e-6 whatever the case's (a constant copied from another norm site)", {.eps_fixed = true});
const Both layernorm("mutant", "mean_subtracted", "LayerNorm's variance: the row mean subtracted before squaring", {.mean_subtracted = true});
const Both gemma("mutant", "one_plus_weight", "Gemma's (1 + w) scale where the checkpoint stores w", {.one_plus_w = true});
const Both rsqrt("mutant", "rsqrt_estimate", "a 12-bit reciprocal square root estimate without its Newton step", {.rsqrt_estimate = true});
const Both unbiased("mutant", "unbiased", "mean of squares over D - 1 (torch.var's unbiased default)", {.unbiased = true});
const AddOnly unrounded("square_unrounded", "squares the f32 sum x + residual, not the residual rounded to the dtype", {.square_unrounded = true});
const AddOnly stale("residual_stale", "residual_out left as the incoming residual (the add never written back)", {.residual_stale = true});
const AddOnly norm_x("norm_of_x", "the norm of x alone: the residual added after the norm, not before", {.norm_of_x = true});
const Both f64_sum("equivalent", "f64_sum", "sum of squares in f64", {.f64_sum = true});
const Both lanes("equivalent", "lanes32", "sum of squares in 32 strided lanes, then the lanes in order", {.lanes32 = true});
const Both divide("equivalent", "divide", "x / sqrt(mean x^2 + eps) instead of x * reciprocal", {.divide = true});
const Both weight_first("equivalent", "weight_first", "(x * w) * r: the weight applied before the scale", {.weight_first = true});

}  // namespace
}  // namespace dg::mutants
