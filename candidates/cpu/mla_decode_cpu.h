// What the CPU candidates and mutants of mla_decode (candidates/cpu/mla_decode.cpp,
// candidates/mutants/mla_decode.cpp) share: the case's view of its inputs, the gather of a
// sequence's keys (mla_decode_keys: its tokens, or the valid entries of its index row) out of the
// latent pool through the page table (read as f32, exact for bf16/f16/f32 storage; FP8 dequantized
// in f32), the joined query [q~ | q_pe] of a head, and the stores of one (b, h) row's o~ and lse.
#pragma once

#include <cstdint>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/ops/attention_decode.h"
#include "harness/ops/mla_decode.h"

namespace dg::mla_cpu {

struct View {
  MlaDecodeParams p;
  AttentionDecodeParams a;   // p.attention(): the softmax rows of attention_cpu read d, dv, scale, page
  std::vector<int64_t> lens, table, indices;
  const Tensor *q, *q_pe, *latent;
};

inline View view(const Case& c, const TensorMap& in) {
  const MlaDecodeParams p = mla_decode_params(c);
  View w{p, p.attention(), attention_decode_ints(need(in, "seqlens", "mla_decode")), attention_decode_ints(need(in, "page_table", "mla_decode")), {},
         &need(in, "q", "mla_decode"), p.rope > 0 ? &need(in, "q_pe", "mla_decode") : nullptr, &need(in, "latent", "mla_decode")};
  if (p.topk > 0) w.indices = attention_decode_ints(need(in, "indices", "mla_decode"));
  return w;
}

// The latent rows of token positions `keys`: k [n, d_c+rope] (a.k_scale * the stored row) and the
// values v [n, d_c] (a.v_scale * its first d_c channels), in the order of `keys`.
inline void gather(const View& w, const std::vector<int64_t>& keys, int64_t b, std::vector<float>& k, std::vector<float>& v) {
  const int64_t D = w.p.width(), dc = w.p.d_c, n = static_cast<int64_t>(keys.size());
  k.resize(static_cast<size_t>(n * D));
  v.resize(static_cast<size_t>(n * dc));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t j = keys[static_cast<size_t>(t)];
    const int64_t slot = w.table[static_cast<size_t>(b * w.p.max_pages + j / w.p.page)] * w.p.page + j % w.p.page;
    load_row(*w.latent, slot * D, D, k.data() + t * D);
    for (int64_t c = 0; c < dc; ++c) v[static_cast<size_t>(t * dc + c)] = k[static_cast<size_t>(t * D + c)] * w.a.v_scale;
  }
  for (float& x : k) x = x * w.a.k_scale;
}

// [q~ | q_pe] of head (b, h), d_c + rope values.
inline std::vector<float> query(const View& w, int64_t b, int64_t h) {
  const int64_t i = b * w.p.n_h + h;
  std::vector<float> q(static_cast<size_t>(w.p.width()));
  load_row(*w.q, i * w.p.d_c, w.p.d_c, q.data());
  if (w.p.rope > 0) load_row(*w.q_pe, i * w.p.rope, w.p.rope, q.data() + w.p.d_c);
  return q;
}

// o~ [d_c] and lse of row (b, h), each rounded once into its tensor's dtype.
inline void store(TensorMap& out, const View& w, int64_t b, int64_t h, const std::vector<float>& o, float lse) {
  const int64_t rows = w.p.B * w.p.n_h, i = b * w.p.n_h + h;
  store_row(need_out(out, "o", rows * w.p.d_c, "mla_decode"), i * w.p.d_c, w.p.d_c, o.data());
  store_row(need_out(out, "lse", rows, "mla_decode"), i, 1, &lse);
}

}  // namespace dg::mla_cpu
