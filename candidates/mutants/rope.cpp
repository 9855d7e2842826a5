// Mutants and equivalent variants of rope (reference/rope.h), each the naive CPU candidate's loop
// (candidates/cpu/rope.cpp) with one hook turned. The bugs come from the op's physics and its
// production forms (notes/model-ops.md sections 1.2, 1.3 and 5):
//
//   mutants      the angle pos * inv_freq formed in f32 with inv_freq = 1 / theta^(2i/d) in f32 (HF's
//                and vLLM's cache); only inv_freq in f32; the HF inv_freq @ positions matmul under
//                TF32 (both operands rounded to 10-bit significands); __sincosf on the unreduced f32
//                angle (the SFU's reduction by an f32 multiply with 1/2pi, a result good to ~2^-22
//                absolute); NeoX and GPT-J pairing swapped; inv_freq's exponent over D instead of
//                d_rope (partial rotary); all D dims rotated; the sin's sign flipped (the inverse
//                rotation); positions wrapped at 2^16 (a 16-bit counter); cos/sin rounded to bf16 in
//                an f32 kernel; the token index t used as the position; GPT-J pairs reading a NeoX
//                cache [freqs | freqs] at dim 2i instead of i (frequency 2i mod d_rope/2)
//   equivalents  pairs outer, heads inner; angles reduced mod pi/2 in double-double before cos/sin
//                (reference/real/dd_trig.h); the rotation by FMA; the rotation in f64 rounded once; a
//                per-position cos/sin cache built before the rotation instead of on the fly
#include <cmath>
#include <map>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"
#include "harness/ops/rope.h"
#include "reference/real/dd_trig.h"

namespace dg::mutants {
namespace {

struct Variant {
  // mutants
  bool f32_angle = false, f32_inv_freq = false, tf32_angle = false, fast_sincos = false, pairing_swapped = false,
       exponent_over_D = false, rotate_all = false, sin_flipped = false, wrap16 = false, cache_bf16 = false,
       token_index = false, gptj_cache_index = false;
  // equivalents
  bool pairs_outer = false, exact_angles = false, fma = false, f64_math = false, cache = false;
};

// __sincosf as the SFU computes it: the f32 argument times an f32 1/2pi (rounded), the fraction of
// that many turns, and sin/cos of it good to about 2^-22 absolute.
void fast_sincos(float phi, float& s, float& c) {
  float turns = phi * 0.159154943f;
  turns = turns - std::nearbyint(turns);
  const double a = 6.283185307179586 * static_cast<double>(turns);
  s = static_cast<float>(std::nearbyint(std::sin(a) * 0x1p22) * 0x1p-22);
  c = static_cast<float>(std::nearbyint(std::cos(a) * 0x1p22) * 0x1p-22);
}

// cos and sin of pos * inv_freq_i with the reference's angle: inv_freq and the product in
// double-double, reduced mod pi/2 there, cos and sin of the reduced angle in double.
void exact_sincos(int64_t pos, int64_t i, const RopeParams& p, float& s, float& c) {
  const DD e = dw_div_fp(DD(static_cast<double>(2 * i)), static_cast<double>(p.d_rope));
  const DD inv = exp(-(e * log(DD(p.theta))));
  int64_t k = 0;
  const DD r = dd_reduce_pio2(inv * static_cast<double>(pos), k);
  double sd = 0, cd = 0;
  quadrant_sin_cos(k, std::sin(r.hi) + std::cos(r.hi) * r.lo, std::cos(r.hi) - std::sin(r.hi) * r.lo, sd, cd);
  s = static_cast<float>(sd);
  c = static_cast<float>(cd);
}

// cos and sin of pair i at position pos (the token index t for token_index), with the variant's angle.
void angle(const Variant& v, const RopeParams& p, int64_t pos, int64_t i, float& s, float& c) {
  const int64_t d = v.exponent_over_D || v.rotate_all ? p.D : p.d_rope;
  const double e = 2.0 * static_cast<double>(i) / static_cast<double>(d);
  if (v.exact_angles) return exact_sincos(pos, i, p, s, c);
  const float inv_f = 1.0f / std::pow(static_cast<float>(p.theta), static_cast<float>(e));
  double phi = static_cast<double>(pos) * std::pow(p.theta, -e);
  if (v.f32_angle) phi = static_cast<float>(static_cast<float>(pos) * inv_f);
  if (v.f32_inv_freq) phi = static_cast<double>(pos) * static_cast<double>(inv_f);
  if (v.tf32_angle)
    phi = static_cast<float>(round_to(DType::tf32, static_cast<double>(pos)) * round_to(DType::tf32, static_cast<double>(inv_f)));
  if (v.fast_sincos) return fast_sincos(static_cast<float>(phi), s, c);
  s = static_cast<float>(std::sin(phi));
  c = static_cast<float>(std::cos(phi));
  if (v.cache_bf16) {
    s = round_bf16(s);
    c = round_bf16(c);
  }
  if (v.sin_flipped) s = -s;
}

void rotate(const Variant& v, float xa, float xb, float c, float s, float& ya, float& yb) {
  if (v.fma) {
    ya = std::fma(xa, c, -(xb * s));
    yb = std::fma(xb, c, xa * s);
  } else if (v.f64_math) {
    ya = static_cast<float>(static_cast<double>(xa) * c - static_cast<double>(xb) * s);
    yb = static_cast<float>(static_cast<double>(xb) * c + static_cast<double>(xa) * s);
  } else {
    ya = xa * c - xb * s;
    yb = xb * c + xa * s;
  }
}

// The cos/sin of every pair of token t into cs, sn (from a per-position cache for `cache`: entries
// [c_0, s_0, c_1, s_1, ...] filled the first time a position is seen).
void token_angles(const Variant& v, const RopeParams& p, int64_t t, int64_t pos, std::map<int64_t, std::vector<float>>& cache,
                  std::vector<float>& cs, std::vector<float>& sn) {
  if (v.wrap16) pos &= 0xFFFF;
  if (v.token_index) pos = t;
  const size_t half = cs.size();
  std::vector<float>* e = v.cache ? &cache[pos] : nullptr;
  if (e && !e->empty()) {
    for (size_t i = 0; i < half; ++i) {
      cs[i] = (*e)[2 * i];
      sn[i] = (*e)[2 * i + 1];
    }
    return;
  }
  for (size_t i = 0; i < half; ++i) {
    const auto ii = static_cast<int64_t>(i);
    const int64_t f = v.gptj_cache_index && p.style == RopeStyle::gptj ? (2 * ii) % static_cast<int64_t>(half) : ii;
    angle(v, p, pos, f, sn[i], cs[i]);
  }
  if (!e) return;
  for (size_t i = 0; i < half; ++i) {
    e->push_back(cs[i]);
    e->push_back(sn[i]);
  }
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    RopeParams p = rope_params(c);
    if (v.pairing_swapped) p.style = p.style == RopeStyle::neox ? RopeStyle::gptj : RopeStyle::neox;
    const int64_t rot = v.rotate_all ? p.D : p.d_rope, half = rot / 2, HD = p.H * p.D;
    const int64_t* pos = in.at("positions").data<int64_t>();
    std::vector<float> row(static_cast<size_t>(HD)), cs(static_cast<size_t>(half)), sn(cs.size());
    std::map<int64_t, std::vector<float>> cache;
    for (int64_t t = 0; t < p.T; ++t) {
      token_angles(v, p, t, pos[t], cache, cs, sn);
      load_row(in.at("x"), t * HD, HD, row.data());
      for (int64_t outer = 0; outer < (v.pairs_outer ? half : p.H); ++outer)
        for (int64_t inner = 0; inner < (v.pairs_outer ? p.H : half); ++inner) {
          const int64_t h = v.pairs_outer ? inner : outer, i = v.pairs_outer ? outer : inner;
          int64_t a = 0, b = 0;
          rope_pair_dims(p.style, i, rot, a, b);
          float* xh = row.data() + h * p.D;
          rotate(v, xh[a], xh[b], cs[static_cast<size_t>(i)], sn[static_cast<size_t>(i)], xh[a], xh[b]);
        }
      store_row(out.at("y"), t * HD, HD, row.data());
    }
  };
}

struct Add {
  Add(const char* kind, const char* what, const char* doc, Variant v) {
    register_candidate({std::string("rope_") + kind + "_" + what, "rope", "cpu", kind, DType::f32, DType::f32, DType::f32, doc},
                       variant(v));
  }
};

const Add f32_angle("mutant", "f32_angle", "pos * inv_freq in f32 with inv_freq = 1 / theta^(2i/d) in f32 (HF's and vLLM's cache)", {.f32_angle = true});
const Add f32_inv_freq("mutant", "f32_inv_freq", "inv_freq in f32, the product with the position in double", {.f32_inv_freq = true});
const Add tf32_angle("mutant", "tf32_angle", "HF's inv_freq @ positions matmul under TF32: both rounded to 10-bit significands", {.tf32_angle = true});
const Add fast_sincos_m("mutant", "fast_sincos", "__sincosf on the unreduced f32 angle (f32 turns, ~2^-22 absolute)", {.fast_sincos = true});
const Add pairing("mutant", "pairing_swapped", "NeoX and GPT-J pairing swapped", {.pairing_swapped = true});
const Add exponent_D("mutant", "exponent_over_D", "inv_freq = theta^(-2i/D): the exponent over head_dim, not d_rope", {.exponent_over_D = true});
const Add rotate_all("mutant", "rotate_all_dims", "every dim of the head rotated (partial rotary ignored)", {.rotate_all = true});
const Add sin_flipped("mutant", "sin_flipped", "the sin's sign flipped: the inverse rotation", {.sin_flipped = true});
const Add wrap16("mutant", "positions_wrap16", "positions wrapped at 2^16 (a 16-bit counter)", {.wrap16 = true});
const Add cache_bf16("mutant", "cache_bf16", "cos/sin rounded to bf16 in an f32 kernel", {.cache_bf16 = true});
const Add token_index("mutant", "token_index", "the token index t used as the position (positions ignored)", {.token_index = true});
const Add gptj_index("mutant", "gptj_cache_index", "GPT-J pairs read a [freqs | freqs] cache at dim 2i: frequency 2i mod d_rope/2", {.gptj_cache_index = true});
const Add pairs_outer("equivalent", "pairs_outer", "pairs outer, heads inner", {.pairs_outer = true});
const Add exact_angles("equivalent", "exact_angles", "angles in double-double reduced mod pi/2 before cos/sin", {.exact_angles = true});
const Add fma_e("equivalent", "fma", "the rotation by FMA", {.fma = true});
const Add f64_math("equivalent", "f64_math", "the rotation in f64, rounded once to f32", {.f64_math = true});
const Add cache("equivalent", "cache", "a per-position cos/sin cache instead of angles on the fly", {.cache = true});

}  // namespace
}  // namespace dg::mutants
