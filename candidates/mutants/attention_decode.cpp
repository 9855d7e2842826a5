// Mutants and equivalent variants of attention_decode (reference/attention_decode.h), each the
// split-KV CPU candidate (candidates/cpu/attention_decode.cpp, the production form: the online
// softmax in tiles of one KV page) with one hook turned. The bugs come from the decode kernels of vLLM, FlashAttention, FlashInfer and SGLang
// (notes/model-ops.md sections 3 and 5):
//
//   mutants      the split merge without the max subtraction (w_p = exp(lse_p): f32 overflow at large
//                logits); each split's lse and the output lse stored in bf16; no -inf guard for a
//                split with no keys (0/0 and -inf - -inf: NaN); the scale dv^-0.5 instead of d^-0.5;
//                the scale applied twice; P rounded to bf16 before the PV product (FlashAttention's
//                MMA operand; l from the f32 P); the base-2 lse (FlashInfer's internal state)
//                reported as natural; q head h reading kv head h % n_kv instead of h / group; the
//                last partial page dropped (floor(L / page) pages); the last token dropped (L - 1
//                keys: the new token's key left out); the accumulator not rescaled when the running
//                max moves at a new page tile (l rescaled, acc not); FP8 pages dequantized with
//                k_scale and v_scale swapped
//   P in bf16 is FlashAttention's own choice for a kernel that writes o in bf16: there o's rounding
//   (2^-9, 9.3 bits rms on typical scores at L = 300, d = 128) already costs what P's rounding does
//   (9.3 bits alone, 8.8 with both; a simulation of 8 draws), so it would merge against a bf16-output
//   base. Against these f32-output kernels (21-25 bits of o) it throws 10-12 bits away: a mutant.
//
//   equivalents  another split count (2 split + 1); every sum and the softmax in f64, rounded once to
//                f32; exp2 with log2e folded into the f32 scale (base-2 m, l and merge, lse converted
//                by ln 2 at the end); the q heads of a group visited in decreasing order, kv heads
//                from the last
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "candidates/cpu/attention_decode_cpu.h"
#include "candidates/mutants/attention_decode_variant.h"
#include "harness/cases/registry.h"
#include "harness/core/dtype.h"

namespace dg::mutants {
namespace {

using attention_cpu::View;
using attention_variant::Row;
using attention_variant::Variant;

float scale_of(const Variant& v, const View& w) {
  float s = v.scale_dv ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(w.p.dv))) : w.p.scale;
  if (v.scale_twice) s = s * s;
  if (v.exp2) s = s * 1.44269504f;   // log2 e folded into the f32 scale
  return s;
}

RunFn variant(Variant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const View w = attention_cpu::view(c, in);
    const int64_t nsplit = v.more_splits ? 2 * c.integer("split") + 1 : c.integer("split");
    const Row<float> rf{v, w.p, scale_of(v, w)};
    const Row<double> rd{v, w.p, static_cast<double>(scale_of(v, w))};
    std::vector<float> k, vv, o(static_cast<size_t>(w.p.dv));
    for (int64_t bi = 0; bi < w.p.B; ++bi)
      for (int64_t hi = 0; hi < w.p.n_h; ++hi) {
        const int64_t b = bi, h = v.reversed_heads ? w.p.n_h - 1 - hi : hi;
        const int64_t g = v.gqa_mod ? h % w.p.n_kv : h / w.group();
        int64_t L = w.lens[static_cast<size_t>(b)];
        if (v.partial_page_dropped) L = L / w.p.page * w.p.page;
        if (v.last_token_dropped && L > 0) L = L - 1;
        View wg = w;
        if (v.kv_scales_swapped) std::swap(wg.p.k_scale, wg.p.v_scale);
        attention_cpu::gather(wg, b, g, L, k, vv);
        const std::vector<float> q = attention_cpu::query(w, b, h);
        float lse = 0.0f;
        if (v.f64) rd.run(nsplit, q, L, k, vv, o, lse);
        else rf.run(nsplit, q, L, k, vv, o, lse);
        attention_cpu::store(out, w, b, h, o, lse);
      }
  };
}

struct Add {
  Add(const char* kind, const char* what, const char* doc, Variant v) {
    register_candidate({std::string("attention_decode_") + kind + "_" + what, "attention_decode", "cpu", kind, DType::f32,
                        DType::f32, DType::f32, doc},
                       variant(v));
  }
};

const Add merge_no_max("mutant", "merge_no_max", "the split merge without the max subtraction: w_p = exp(lse_p)", {.merge_no_max = true});
const Add lse_bf16("mutant", "lse_bf16", "each split's lse and the output lse stored in bf16", {.lse_bf16 = true});
const Add empty_unguarded("mutant", "empty_unguarded", "no -inf guard for a split with no keys (0/0, -inf - -inf)", {.empty_unguarded = true});
const Add scale_dv("mutant", "scale_dv", "the softmax scale dv^-0.5 instead of d^-0.5", {.scale_dv = true});
const Add scale_twice("mutant", "scale_twice", "the softmax scale applied twice", {.scale_twice = true});
const Add p_bf16("mutant", "p_bf16", "P = exp(s - m) rounded to bf16 before the PV product (l from the f32 P)", {.p_bf16 = true});
const Add lse_base2("mutant", "lse_base2", "the base-2 lse reported as natural", {.lse_base2 = true});
const Add gqa_mod("mutant", "gqa_mod", "q head h reads kv head h % n_kv instead of h / group", {.gqa_mod = true});
const Add partial_page_dropped("mutant", "partial_page_dropped", "the last partial page dropped: floor(L / page) pages", {.partial_page_dropped = true});
const Add last_token_dropped("mutant", "last_token_dropped", "the context taken as L - 1 tokens (the new token's key left out)", {.last_token_dropped = true});
const Add no_rescale("mutant", "no_rescale", "the accumulator not rescaled by exp(m_old - m_new) when the max moves", {.no_rescale = true});
const Add kv_scales_swapped("mutant", "kv_scales_swapped", "FP8 pages dequantized with k_scale and v_scale swapped", {.kv_scales_swapped = true});
const Add more_splits("equivalent", "more_splits", "2 split + 1 splits instead of split", {.more_splits = true});
const Add f64("equivalent", "f64", "every sum and the softmax in f64, rounded once to f32", {.f64 = true});
const Add exp2("equivalent", "exp2", "exp2 with log2e folded into the f32 scale; lse converted by ln 2", {.exp2 = true});
const Add reversed_heads("equivalent", "reversed_heads", "q heads visited from the last, one gather per head", {.reversed_heads = true});

}  // namespace
}  // namespace dg::mutants
