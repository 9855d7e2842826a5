// What the CPU candidates and mutants of attention_decode (candidates/cpu/attention_decode.cpp,
// candidates/mutants/attention_decode.cpp) share: the case's view of its inputs, the gather of one
// kv head's keys and values of a sequence out of the pool through the page table (read as f32,
// exact for bf16/f16/f32 storage), and the stores of one (b, h) row's o and lse.
#pragma once

#include <cstdint>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/ops/attention_decode.h"

namespace dg::attention_cpu {

struct View {
  AttentionDecodeParams p;
  std::vector<int64_t> lens, table;   // the stored seqlens and page table
  const Tensor *q, *k, *v;
  int64_t group() const { return p.n_h / p.n_kv; }
};

inline View view(const Case& c, const TensorMap& in) {
  return {attention_decode_params(c), attention_decode_ints(need(in, "seqlens", "attention_decode")),
          attention_decode_ints(need(in, "page_table", "attention_decode")), &need(in, "q", "attention_decode"),
          &need(in, "k_cache", "attention_decode"), &need(in, "v_cache", "attention_decode")};
}

// Rows j < n of kv head g of sequence b: k [n,d], v [n,dv], in token order; FP8 pages dequantized
// in f32 (k_scale * k, v_scale * v, one rounding each; scales of 1 leave the values as stored).
inline void gather(const View& w, int64_t b, int64_t g, int64_t n, std::vector<float>& k, std::vector<float>& v) {
  const AttentionDecodeParams& p = w.p;
  k.resize(static_cast<size_t>(n * p.d));
  v.resize(static_cast<size_t>(n * p.dv));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot = w.table[static_cast<size_t>(b * p.max_pages + j / p.page)] * p.page + j % p.page;
    load_row(*w.k, (slot * p.n_kv + g) * p.d, p.d, k.data() + j * p.d);
    load_row(*w.v, (slot * p.n_kv + g) * p.dv, p.dv, v.data() + j * p.dv);
  }
  for (float& x : k) x = x * p.k_scale;
  for (float& x : v) x = x * p.v_scale;
}

inline std::vector<float> query(const View& w, int64_t b, int64_t h) {
  std::vector<float> q(static_cast<size_t>(w.p.d));
  load_row(*w.q, (b * w.p.n_h + h) * w.p.d, w.p.d, q.data());
  return q;
}

// o [dv] and lse of row (b, h), each rounded once into its tensor's dtype.
inline void store(TensorMap& out, const View& w, int64_t b, int64_t h, const std::vector<float>& o, float lse) {
  const int64_t rows = w.p.B * w.p.n_h, i = b * w.p.n_h + h;
  store_row(need_out(out, "o", rows * w.p.dv, "attention_decode"), i * w.p.dv, w.p.dv, o.data());
  store_row(need_out(out, "lse", rows, "attention_decode"), i, 1, &lse);
}

}  // namespace dg::attention_cpu
