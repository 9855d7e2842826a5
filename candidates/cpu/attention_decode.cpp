// CPU candidates of attention_decode (reference/attention_decode.h). Per (b, h), scores s_j =
// fl32(q.k) * scale with the dot product summed in f32 in increasing i, then:
//   attention_decode_cpu_naive_f32    the policy's naive: plain two-pass softmax in f32 summed as a
//                                     plain paged kernel sums: m = max s_j; p_j = exp(s_j - m), one
//                                     f32 partial l_P = sum p_j and acc_P = sum p_j v_j per page of
//                                     the case's `page` keys (increasing j within the page), the
//                                     pages' partials added in increasing page order; o = acc / l,
//                                     lse = m + ln l (no rescaling, no split)
//   attention_decode_cpu_splitkv_f32  flash-decoding, the production form (FlashAttention's
//                                     num_splits, FlashInfer's merge_state, vLLM PagedAttention v2):
//                                     the sequence's pages split `split` ways (split s covers pages
//                                     [s ceil(n/split), (s+1) ceil(n/split))); per split an online
//                                     softmax with f32 m, l and accumulator in tiles of one KV page:
//                                     per tile its max, m_new = max(m, tile max), alpha =
//                                     exp(m - m_new), a fresh f32 partial of the tile's p_j =
//                                     exp(s_j - m_new) sums (l_t, acc_t in increasing j), then
//                                     l = l alpha + l_t, acc = acc alpha + acc_t; o_p = acc / l and
//                                     lse_p = m + ln l, or o_p = 0, lse_p = -inf for a split with no
//                                     keys (attention_decode_cpu.h split_state); then the LSE
//                                     merge M = max lse_p, w_p = exp(lse_p - M), o = sum w_p o_p /
//                                     sum w_p, lse = M + ln sum w_p (M = -inf: o = 0, lse = -inf)
// Both write o and lse in f32; an empty context gives o = 0 and lse = -inf.
#include <vector>

#include "candidates/cpu/attention_decode_cpu.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using attention_cpu::View;

RunFn make(bool splitkv) {
  return [splitkv](const Case& c, const TensorMap& in, TensorMap& out) {
    const View w = attention_cpu::view(c, in);
    const int64_t split = c.integer("split");
    std::vector<float> k, v, o(static_cast<size_t>(w.p.dv));
    for (int64_t b = 0; b < w.p.B; ++b)
      for (int64_t g = 0; g < w.p.n_kv; ++g) {
        const int64_t L = w.lens[static_cast<size_t>(b)];
        attention_cpu::gather(w, b, g, L, k, v);
        for (int64_t h = g * w.group(); h < (g + 1) * w.group(); ++h) {
          const std::vector<float> q = attention_cpu::query(w, b, h);
          float lse = 0.0f;
          if (splitkv) attention_cpu::splitkv_row(w.p, split, q, L, k, v, o, lse);
          else attention_cpu::naive_row(w.p, q, L, k, v, o, lse);
          attention_cpu::store(out, w, b, h, o, lse);
        }
      }
  };
}

}  // namespace

DG_REGISTER_CANDIDATE(attention_decode_cpu_naive_f32,
                      {"attention_decode_cpu_naive_f32", "attention_decode", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                       "plain two-pass softmax in f32: max, then exp(s - m) and the weighted V sum, one f32 partial per KV page, "
                       "the pages' partials added in page order (the policy's naive)"},
                      make(false));
DG_REGISTER_CANDIDATE(attention_decode_cpu_splitkv_f32,
                      {"attention_decode_cpu_splitkv_f32", "attention_decode", "cpu", "splitkv", DType::f32, DType::f32, DType::f32,
                       "flash-decoding: online softmax per split in tiles of one KV page (f32 m, l, acc; a fresh f32 partial per "
                       "page added to the rescaled state), the LSE merge of the splits, -inf guarded"},
                      make(true));

}  // namespace dg
