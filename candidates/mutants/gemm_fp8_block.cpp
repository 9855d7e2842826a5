// Mutants and equivalent variants of gemm_fp8_block (reference/gemm_fp8_block.h), each the naive CPU
// candidate's loop (candidates/cpu/gemm_fp8_block.cpp) with one hook turned. The bugs come from the
// FP8 block-scaled GEMMs of DeepGEMM, vLLM and SGLang (notes/model-ops.md sections 2 and 5):
//
//   mutants      the scales used as divisors (weight_scale_inv read as a scale to divide by); no
//                promotion: the whole K in the tensor core's ~14-bit truncating accumulator, each
//                product scaled on the way in; the scales per tensor (block 0's x_scale and w_scale
//                for every block); x_scale read one block ahead (block b scaled by b + 1's, the last
//                by its own); w_scale read transposed ([K/128, ceil(N/128)] row-major); y rounded to
//                bf16 inside an f32 output (an extra rounding); the block partials accumulated in
//                bf16; the scales read as bf16 (a kernel instantiated for bf16 scales); x and w
//                decoded as e5m2, or as AMD's e4m3fnuz (exponent bias 8: every value halved, 0x80 NaN)
//   equivalents  every sum in f64, rounded once to f32; blocks and k in decreasing order; the partial
//                in 4 k-lanes; the scales applied to each product inside the block; the promotion
//                as one FMA
// Saturation is the quantizer's concern: the stored operands are already e4m3.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/core/threads.h"
#include "harness/ops/gemm_fp8_block.h"

namespace dg::mutants {
namespace {

struct Variant {
  // mutants
  bool scale_divisor = false, no_promotion = false, per_tensor = false, x_scale_shifted = false,
       w_scale_transposed = false, output_bf16 = false, partial_bf16 = false, scales_bf16 = false,
       decode_e5m2 = false, decode_fnuz = false;
  // equivalents
  bool f64 = false, reversed = false, lanes4 = false, scale_per_product = false, fma = false;
};

constexpr int64_t B = kFp8Block;

// The e4m3 operand `name` as f32: decoded as stored, or from its bits as e5m2 / e4m3fnuz.
std::vector<float> operand(const Variant& v, const TensorMap& in, const char* name) {
  const Tensor& t = need(in, name, "gemm_fp8_block");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (!v.decode_e5m2 && !v.decode_fnuz) {
    load_row(t, 0, t.numel(), out.data());
    return out;
  }
  const auto* bits = reinterpret_cast<const uint8_t*>(t.bytes());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = v.decode_e5m2 ? static_cast<float>(decode(DType::e5m2, bits[i]))
             : bits[i] == 0x80 ? NAN
                               : static_cast<float>(decode(DType::e4m3, bits[i]) / 2);
  return out;
}

// Block b's partial sum_k x[k] w[k] over its 128 k.
float partial(const Variant& v, const float* x, const float* w, int64_t b, float s) {
  const int64_t k0 = b * B;
  if (v.lanes4) {
    float lane[4] = {};
    for (int64_t k = 0; k < B; ++k) lane[k % 4] = lane[k % 4] + x[k0 + k] * w[k0 + k];
    return ((lane[0] + lane[1]) + lane[2]) + lane[3];
  }
  float p = 0.0f;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t k = k0 + (v.reversed ? B - 1 - i : i);
    p = v.scale_per_product ? p + x[k] * w[k] * s : p + x[k] * w[k];
    if (v.partial_bf16) p = round_bf16(p);
  }
  return p;
}

// The whole K in a 14-bit truncating accumulator, each product scaled (no promotion).
float unpromoted(const float* x, const float* w, const float* xs, const float* ws, int64_t KB) {
  double acc = 0.0;
  for (int64_t k = 0; k < KB * B; ++k) {
    acc += static_cast<double>(x[k] * w[k] * (xs[k / B] * ws[k / B]));
    uint64_t bits;   // truncated toward zero to 14 significant bits
    std::memcpy(&bits, &acc, 8);
    bits &= ~((uint64_t{1} << 39) - 1);
    std::memcpy(&acc, &bits, 8);
  }
  return static_cast<float>(acc);
}

// y[m][n] from x's row m, w's row n, x_scale's row m and all of w_scale ([NB,KB]; row nb = n / 128).
float output(const Variant& v, const float* x, const float* w, const float* xs, const float* ws_all, int64_t KB,
             int64_t nb, int64_t NB) {
  const float* ws = ws_all + nb * KB;
  if (v.no_promotion) return unpromoted(x, w, xs, ws, KB);
  if (v.f64) {
    double acc = 0.0;
    for (int64_t b = 0; b < KB; ++b) {
      double p = 0.0;
      for (int64_t k = b * B; k < (b + 1) * B; ++k) p += static_cast<double>(x[k]) * w[k];
      acc += p * xs[b] * ws[b];
    }
    return static_cast<float>(acc);
  }
  float acc = 0.0f;
  for (int64_t i = 0; i < KB; ++i) {
    const int64_t b = v.reversed ? KB - 1 - i : i;
    float sx = v.per_tensor ? xs[0] : v.x_scale_shifted ? xs[std::min(b + 1, KB - 1)] : xs[b];
    float sw = v.per_tensor ? ws[0] : v.w_scale_transposed ? ws_all[b * NB + nb] : ws[b];
    if (v.scales_bf16) {
      sx = round_bf16(sx);
      sw = round_bf16(sw);
    }
    if (v.scale_per_product) {
      acc = acc + partial(v, x, w, b, sx * sw);
    } else {
      const float p = partial(v, x, w, b, 0.0f);
      acc = v.scale_divisor ? acc + p / sx / sw : v.fma ? std::fma(p, sx * sw, acc) : acc + p * sx * sw;
    }
  }
  return v.output_bf16 ? round_bf16(acc) : acc;
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const GemmFp8BlockParams p = gemm_fp8_block_params(c);
    const int64_t M = p.M, N = p.N, K = p.K, KB = p.kb(), NB = p.nb();
    const std::vector<float> x = operand(v, in, "x"), w = operand(v, in, "w");
    std::vector<float> xs(static_cast<size_t>(M * KB)), ws(static_cast<size_t>(NB * KB)), y(static_cast<size_t>(M * N));
    load_row(need(in, "x_scale", "gemm_fp8_block"), 0, M * KB, xs.data());
    load_row(need(in, "w_scale", "gemm_fp8_block"), 0, NB * KB, ws.data());
    parallel_for(N, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t m = 0; m < M; ++m)
          y[static_cast<size_t>(m * N + n)] = output(v, x.data() + m * K, w.data() + n * K, xs.data() + m * KB,
                                                     ws.data(), KB, n / B, NB);
    });
    store_row(need_out(out, "y", M * N, "gemm_fp8_block"), 0, M * N, y.data());
  };
}

struct Add {
  Add(const char* kind, const char* what, const char* doc, Variant v) {
    register_candidate({std::string("gemm_fp8_block_") + kind + "_" + what, "gemm_fp8_block", "cpu", kind, DType::f32,
                        DType::f32, DType::f32, doc},
                       variant(v));
  }
};

const Add scale_divisor("mutant", "scale_divisor", "the scales divided by (weight_scale_inv read as a scale)", {.scale_divisor = true});
const Add no_promotion("mutant", "no_promotion", "no f32 promotion: the whole K in a 14-bit truncating accumulator", {.no_promotion = true});
const Add per_tensor("mutant", "per_tensor_scale", "block 0's x_scale and w_scale used for every block", {.per_tensor = true});
const Add x_shift("mutant", "x_scale_shifted", "x_scale read one block ahead (block b scaled by b + 1's)", {.x_scale_shifted = true});
const Add w_transposed("mutant", "w_scale_transposed", "w_scale read as [K/128, ceil(N/128)] row-major", {.w_scale_transposed = true});
const Add output_bf16("mutant", "output_bf16", "y rounded to bf16 inside the f32 output (an extra rounding)", {.output_bf16 = true});
const Add partial_bf16("mutant", "partial_bf16", "the block partials accumulated in bf16", {.partial_bf16 = true});
const Add scales_bf16("mutant", "scales_bf16", "x_scale and w_scale read as bf16", {.scales_bf16 = true});
const Add e5m2("mutant", "decode_e5m2", "x and w decoded as e5m2", {.decode_e5m2 = true});
const Add fnuz("mutant", "decode_fnuz", "x and w decoded as e4m3fnuz (bias 8: halved; 0x80 NaN)", {.decode_fnuz = true});
const Add f64("equivalent", "f64", "every sum in f64, rounded once to f32", {.f64 = true});
const Add reversed("equivalent", "reversed", "blocks and k in decreasing order", {.reversed = true});
const Add lanes4("equivalent", "lanes4", "each block's partial in 4 k-lanes (k mod 4), summed in order", {.lanes4 = true});
const Add per_product("equivalent", "scale_per_product", "x*w*(x_scale*w_scale) summed inside each block", {.scale_per_product = true});
const Add fma("equivalent", "fma", "the promotion as acc = fma(p, x_scale*w_scale, acc)", {.fma = true});

}  // namespace
}  // namespace dg::mutants
