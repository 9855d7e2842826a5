// Mutants and equivalent variants of mla_decode (reference/mla_decode.h): attention_decode's
// split-KV row with its hooks (candidates/mutants/attention_decode_variant.h) over the gathered
// latent keys and values (candidates/cpu/mla_decode_cpu.h), plus MLA's own hooks in the keys, the
// query and the latent layout. Judged against mla_decode_cpu_packed_f32 (FlashMLA's form). The bugs
// come from the MLA decode kernels and their callers (FlashMLA, vLLM and SGLang MLA backends, the
// DSA sparse path; notes/model-ops.md sections 1.3, 3 and 5):
//
//   mutants      the split merge without the max subtraction; the lse in bf16; no -inf guard for a
//                split with no keys; the running accumulator not rescaled when the max moves (at a new page tile); P
//                rounded to bf16 before the PV product (FlashMLA's MMA operand: production's choice
//                for a bf16 output, a loss of 10+ bits against these f32 outputs); the base-2 lse
//                reported as natural; the last key left out; the scale of the kernel's
//                head dim (d_c + rope)^-0.5 instead of the configured (d_nope + d_rope)^-0.5 (the
//                absorbed form's dim taken for the expanded head's); the rope part of the score
//                dropped (q_pe . k_pe); the values read as if the row were [k_pe | c_kv] (a rope-first
//                layout for V while K reads [c_kv | k_pe]); an index of -1 read as token 0; indices at
//                or past the sequence's length attended (not masked); each token read one slot
//                later in its page ((j + 1) mod page); the FP8 scale applied to the keys only
//   equivalents  the row itself, one head at a time (registered as `tokenwise`; token by token only
//                at page 1): the online softmax in tiles of one page of the gathered keys (64 keys at
//                FlashMLA's page 64, the packed base's blocks, but a fresh f32 partial per tile added
//                to the rescaled accumulator where the base sums P V into its running accumulator
//                token by token); 2 split + 1 splits; every sum in f64; exp2 with log2 e folded into
//                the scale; heads visited from the last
#include <cmath>
#include <string>
#include <vector>

#include "candidates/cpu/mla_decode_cpu.h"
#include "candidates/mutants/attention_decode_variant.h"
#include "harness/cases/registry.h"

namespace dg::mutants {
namespace {

using attention_variant::Row;
using mla_cpu::View;

struct MlaVariant {
  attention_variant::Variant a;   // the softmax and merge hooks
  // mutants
  bool last_key_dropped = false, scale_head_dim = false, rope_dropped = false, value_rope_first = false,
       invalid_as_zero = false, beyond_unmasked = false, slot_off_by_one = false, v_unscaled = false;
  // equivalents
  bool reversed_heads = false;
};

// The keys of sequence b as the variant reads them (mla_decode_keys with its bugs).
std::vector<int64_t> keys_of(const MlaVariant& v, const View& w, int64_t b) {
  const int64_t L = w.lens[static_cast<size_t>(b)];
  std::vector<int64_t> keys;
  if (w.p.topk == 0) keys = mla_decode_keys(w.p, b, w.lens, w.indices);
  for (int64_t t = 0; t < w.p.topk; ++t) {
    int64_t x = w.indices[static_cast<size_t>(b * w.p.topk + t)];
    if (v.invalid_as_zero && x == -1) x = 0;
    if (x >= 0 && (x < L || v.beyond_unmasked)) keys.push_back(x);
  }
  if (v.last_key_dropped && !keys.empty()) keys.pop_back();
  if (v.slot_off_by_one)
    for (int64_t& j : keys) j = j / w.p.page * w.p.page + (j % w.p.page + 1) % w.p.page;
  return keys;
}

float scale_of(const MlaVariant& v, const View& w) {
  float s = v.scale_head_dim ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(w.p.width()))) : w.p.scale;
  if (v.a.exp2) s = s * 1.44269504f;   // log2 e folded into the f32 scale
  return s;
}

// The gathered keys and values of sequence b with the variant's layout and scale bugs.
void gather(const MlaVariant& v, View w, const std::vector<int64_t>& keys, int64_t b, std::vector<float>& k,
            std::vector<float>& vv) {
  if (v.v_unscaled) w.a.v_scale = 1.0f;
  mla_cpu::gather(w, keys, b, k, vv);
  const int64_t D = w.p.width(), dc = w.p.d_c, r = w.p.rope;
  if (v.value_rope_first)   // v = the row's channels [rope, rope + d_c)
    for (size_t t = 0; t < keys.size(); ++t)
      for (int64_t c = 0; c < dc; ++c)
        vv[t * static_cast<size_t>(dc) + static_cast<size_t>(c)] = k[t * static_cast<size_t>(D) + static_cast<size_t>(r + c)];
}

RunFn variant(MlaVariant v) {
  return [v](const Case& c, const TensorMap& in, TensorMap& out) {
    const View w = mla_cpu::view(c, in);
    const int64_t nsplit = v.a.more_splits ? 2 * c.integer("split") + 1 : c.integer("split");
    const Row<float> rf{v.a, w.a, scale_of(v, w)};
    const Row<double> rd{v.a, w.a, static_cast<double>(scale_of(v, w))};
    std::vector<float> k, vv, o(static_cast<size_t>(w.p.d_c));
    for (int64_t b = 0; b < w.p.B; ++b) {
      const std::vector<int64_t> keys = keys_of(v, w, b);
      gather(v, w, keys, b, k, vv);
      for (int64_t hi = 0; hi < w.p.n_h; ++hi) {
        const int64_t h = v.reversed_heads ? w.p.n_h - 1 - hi : hi;
        std::vector<float> q = mla_cpu::query(w, b, h);
        if (v.rope_dropped) std::fill(q.begin() + w.p.d_c, q.end(), 0.0f);
        float lse = 0.0f;
        if (v.a.f64) rd.run(nsplit, q, static_cast<int64_t>(keys.size()), k, vv, o, lse);
        else rf.run(nsplit, q, static_cast<int64_t>(keys.size()), k, vv, o, lse);
        mla_cpu::store(out, w, b, h, o, lse);
      }
    }
  };
}

struct Add {
  Add(const char* kind, const char* what, const char* doc, MlaVariant v) {
    register_candidate({std::string("mla_decode_") + kind + "_" + what, "mla_decode", "cpu", kind, DType::f32, DType::f32,
                        DType::f32, doc},
                       variant(v));
  }
};

using V = attention_variant::Variant;
const Add merge_no_max("mutant", "merge_no_max", "the split merge without the max subtraction: w_p = exp(lse_p)", {.a = V{.merge_no_max = true}});
const Add lse_bf16("mutant", "lse_bf16", "each split's lse and the output lse stored in bf16", {.a = V{.lse_bf16 = true}});
const Add empty_unguarded("mutant", "empty_unguarded", "no -inf guard for a split with no keys (0/0, -inf - -inf)", {.a = V{.empty_unguarded = true}});
const Add no_rescale("mutant", "no_rescale", "the accumulator not rescaled by exp(m_old - m_new) when the max moves", {.a = V{.no_rescale = true}});
const Add p_bf16("mutant", "p_bf16", "P = exp(s - m) rounded to bf16 before the PV product (l from the f32 P)", {.a = V{.p_bf16 = true}});
const Add lse_base2("mutant", "lse_base2", "the base-2 lse reported as natural", {.a = V{.lse_base2 = true}});
const Add last_key_dropped("mutant", "last_key_dropped", "the last key left out (the new token's latent, or the last index)", {.a = {}, .last_key_dropped = true});
const Add scale_head_dim("mutant", "scale_head_dim", "the scale (d_c + rope)^-0.5 of the kernel's head dim instead of the configured one", {.a = {}, .scale_head_dim = true});
const Add rope_dropped("mutant", "rope_dropped", "the rope part of the score (q_pe . k_pe) dropped", {.a = {}, .rope_dropped = true});
const Add value_rope_first("mutant", "value_rope_first", "the values read as if the row were [k_pe | c_kv]: channels [rope, rope + d_c)", {.a = {}, .value_rope_first = true});
const Add invalid_as_zero("mutant", "invalid_as_zero", "an index of -1 read as token 0", {.a = {}, .invalid_as_zero = true});
const Add beyond_unmasked("mutant", "beyond_unmasked", "indices at or past the sequence's length attended", {.a = {}, .beyond_unmasked = true});
const Add slot_off_by_one("mutant", "slot_off_by_one", "token j read from slot (j + 1) mod page of its page", {.a = {}, .slot_off_by_one = true});
const Add v_unscaled("mutant", "v_unscaled", "the FP8 latent scale applied to the keys but not to the values", {.a = {}, .v_unscaled = true});
const Add tokenwise("equivalent", "tokenwise", "attention_decode's split-KV row per head: one page tile per online-softmax step, a fresh f32 partial each (token-wise at page 1)", {});
const Add more_splits("equivalent", "more_splits", "2 split + 1 splits instead of split", {.a = V{.more_splits = true}});
const Add f64("equivalent", "f64", "every sum and the softmax in f64, rounded once to f32", {.a = V{.f64 = true}});
const Add exp2("equivalent", "exp2", "exp2 with log2e folded into the f32 scale; lse converted by ln 2", {.a = V{.exp2 = true}});
const Add reversed_heads("equivalent", "reversed_heads", "the heads visited from the last", {.a = {}, .reversed_heads = true});

}  // namespace
}  // namespace dg::mutants
