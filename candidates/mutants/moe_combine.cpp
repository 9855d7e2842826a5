// Mutants and equivalent variants of moe_combine (reference/moe_combine.h), each the naive CPU
// candidate's loop (candidates/cpu/moe_combine.cpp) with one hook turned. The bugs come from the MoE
// combine of vLLM, SGLang and the HF models (notes/model-ops.md sections 1.7 and 5):
//
//   mutants      the accumulator rounded to bf16 after every add; each weighted term a_j E_j rounded to
//                bf16 before the sum (the unfused `expert_out * weights` in the activation dtype); rsf
//                applied on the weights and again on the routed sum, or not at all; rsf applied after
//                the shared output was added (rsf (routed + S)); the routed sum rounded to bf16 before
//                rsf and the shared add (vLLM's unfused path: moe_sum writes bf16, then `*= rsf`,
//                then `+ shared`); the routed sum rounded to bf16 before the shared add alone; slot
//                j's weight taken from slot j + 1 (mod k: ids and weights sorted differently); the
//                shared output never added
//   equivalents  every sum in f64, rounded once to f32; slots in decreasing order; FMA accumulation;
//                slots summed as a pairwise tree; rsf on the other side, in f32
#include <cmath>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/moe_combine.h"

namespace dg::mutants {
namespace {

struct Variant {
  // mutants
  bool acc_bf16 = false, terms_bf16 = false, rsf_twice = false, rsf_missing = false, rsf_scales_shared = false,
       routed_bf16_then_rsf = false, routed_bf16_before_shared = false, wrong_slot = false, shared_dropped = false;
  // equivalents
  bool f64 = false, reversed = false, fma = false, pairwise = false, rsf_other_side = false;
};

// The routed sum sum_j a_j x_j of one channel (x_j at x[j*H]).
float routed(const Variant& v, const std::vector<float>& a, const float* x, int64_t H) {
  const int64_t k = static_cast<int64_t>(a.size());
  if (v.f64) {
    double acc = 0.0;
    for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(a[static_cast<size_t>(j)]) * x[j * H];
    return static_cast<float>(acc);
  }
  if (v.pairwise) {
    std::vector<float> t(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) t[static_cast<size_t>(j)] = a[static_cast<size_t>(j)] * x[j * H];
    for (int64_t n = k; n > 1; n = n / 2 + n % 2) {   // adjacent pairs; an odd last one carried up
      for (int64_t j = 0; j < n / 2; ++j) t[static_cast<size_t>(j)] = t[static_cast<size_t>(2 * j)] + t[static_cast<size_t>(2 * j + 1)];
      if (n % 2) t[static_cast<size_t>(n / 2)] = t[static_cast<size_t>(n - 1)];
    }
    return t[0];
  }
  float acc = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = v.reversed ? k - 1 - i : i;
    const float aj = a[static_cast<size_t>(v.wrong_slot ? (j + 1) % k : j)];
    float term = aj * x[j * H];
    if (v.terms_bf16) term = round_bf16(term);
    acc = v.fma ? std::fma(aj, x[j * H], acc) : acc + term;
    if (v.acc_bf16) acc = round_bf16(acc);
  }
  return acc;
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const MoeCombineParams p = moe_combine_params(c);
    const int64_t T = p.T, k = p.k, H = p.H;
    const float rsf = static_cast<float>(p.rsf);
    // Where rsf goes: the weights, the routed sum (before or, for rsf_scales_shared, after the shared
    // add), both or neither.
    const bool on_output = v.rsf_other_side ? !p.rsf_on_output : p.rsf_on_output;
    const bool rsf_w = !v.rsf_missing && !v.rsf_scales_shared && (!on_output || v.rsf_twice);
    const bool rsf_out = !v.rsf_missing && (on_output || v.rsf_twice || v.rsf_scales_shared);
    std::vector<float> e(static_cast<size_t>(k * H)), a(static_cast<size_t>(k)), s(static_cast<size_t>(H)), y(static_cast<size_t>(H));
    for (int64_t t = 0; t < T; ++t) {
      load_row(need(in, "expert_out", "moe_combine"), t * k * H, k * H, e.data());
      load_row(need(in, "weights", "moe_combine"), t * k, k, a.data());
      if (p.shared) load_row(need(in, "shared", "moe_combine"), t * H, H, s.data());
      for (float& w : a) w = rsf_w ? rsf * w : w;
      for (int64_t h = 0; h < H; ++h) {
        float acc = routed(v, a, e.data() + h, H);
        if (v.routed_bf16_then_rsf) acc = round_bf16(acc);
        if (rsf_out && !v.rsf_scales_shared) acc = acc * rsf;
        if (v.routed_bf16_before_shared) acc = round_bf16(acc);
        if (p.shared && !v.shared_dropped) acc = acc + s[static_cast<size_t>(h)];
        if (rsf_out && v.rsf_scales_shared) acc = acc * rsf;
        y[static_cast<size_t>(h)] = acc;
      }
      store_row(need_out(out, "y", T * H, "moe_combine"), t * H, H, y.data());
    }
  };
}

struct Add {
  Add(const char* kind, const char* what, const char* doc, Variant v) {
    register_candidate({std::string("moe_combine_") + kind + "_" + what, "moe_combine", "cpu", kind, DType::f32, DType::f32,
                        DType::f32, doc},
                       variant(v));
  }
};

const Add acc_bf16("mutant", "acc_bf16", "the accumulator rounded to bf16 after every add", {.acc_bf16 = true});
const Add terms_bf16("mutant", "terms_bf16", "each weighted term a_j E_j rounded to bf16 before the sum", {.terms_bf16 = true});
const Add rsf_twice("mutant", "rsf_twice", "rsf on the weights and again on the routed sum", {.rsf_twice = true});
const Add rsf_missing("mutant", "rsf_missing", "rsf never applied", {.rsf_missing = true});
const Add rsf_scales_shared("mutant", "rsf_scales_shared", "rsf applied after the shared add: rsf (routed + S)", {.rsf_scales_shared = true});
const Add routed_bf16_then_rsf("mutant", "routed_bf16_then_rsf", "the routed sum rounded to bf16, then rsf and the shared add (vLLM's unfused path)", {.routed_bf16_then_rsf = true});
const Add routed_bf16_before_shared("mutant", "routed_bf16_before_shared", "the routed sum rounded to bf16 before the shared add", {.routed_bf16_before_shared = true});
const Add wrong_slot("mutant", "wrong_slot", "slot j's weight taken from slot j + 1 (mod k)", {.wrong_slot = true});
const Add shared_dropped("mutant", "shared_dropped", "the shared expert's output never added", {.shared_dropped = true});
const Add f64("equivalent", "f64", "every sum in f64, rounded once to f32", {.f64 = true});
const Add reversed("equivalent", "reversed", "slots summed in decreasing order", {.reversed = true});
const Add fma("equivalent", "fma", "acc = fma(a_j, E_j, acc)", {.fma = true});
const Add pairwise("equivalent", "pairwise", "slots summed as a pairwise tree", {.pairwise = true});
const Add rsf_other_side("equivalent", "rsf_other_side", "rsf on the other side (weights <-> routed sum), in f32", {.rsf_other_side = true});

}  // namespace
}  // namespace dg::mutants
