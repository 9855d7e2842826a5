// attention_decode, written once over Real (attention_decode.h has the definition).
#include "reference/attention_decode.h"

#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/decode_softmax.h"
#include "reference/op_inputs.h"

namespace dg {

void check_attention_decode_pages(const AttentionDecodeParams& p, const std::vector<int64_t>& lens,
                                  const std::vector<int64_t>& table, const char* op) {
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t L = lens[static_cast<size_t>(b)];
    if (L < 0 || L > p.max_pages * p.page)
      throw InputError(fmt::format("{}: seqlens[{}] = {} is outside [0, max_pages*page = {}*{}]", op, b, L,
                                   p.max_pages, p.page));
    for (int64_t j = 0; j < (L + p.page - 1) / p.page; ++j) {
      const int64_t id = table[static_cast<size_t>(b * p.max_pages + j)];
      if (id < 0 || id >= p.n_pages)
        throw InputError(fmt::format("{}: page_table[{}][{}] = {} is outside the pool [0, {})", op, b, j, id,
                                     p.n_pages));
    }
  }
}

namespace {

struct Inputs {
  std::vector<double> q, k, v;
  std::vector<int64_t> lens, table;
};

// Element offset of token j of sequence b, kv head g, in a pool whose rows hold `width` channels.
int64_t slot(const AttentionDecodeParams& p, const Inputs& in, int64_t b, int64_t j, int64_t g, int64_t width) {
  const int64_t page = in.table[static_cast<size_t>(b * p.max_pages + j / p.page)];
  return ((page * p.page + j % p.page) * p.n_kv + g) * width;
}

// One (b, h) row: the two passes of attention_decode.h (reference/decode_softmax.h).
template <class Real>
void row(const AttentionDecodeParams& p, const Inputs& in, int64_t b, int64_t h, AttentionDecodeReferenceResult& r,
         bool tails) {
  const size_t i = static_cast<size_t>(b * p.n_h + h);
  const int64_t g = h / (p.n_h / p.n_kv);
  const decode_softmax::Row w{in.q.data() + static_cast<int64_t>(i) * p.d, p.d, p.dv, p.scale, in.lens[static_cast<size_t>(b)], i};
  decode_softmax::row<Real>(
      w, [&](int64_t j) { return in.k.data() + slot(p, in, b, j, g, p.d); },
      [&](int64_t j) { return in.v.data() + slot(p, in, b, j, g, p.dv); }, r, tails);
}

template <class Real>
AttentionDecodeReferenceResult run(const AttentionDecodeParams& p, const Inputs& in, int64_t rows, bool tails) {
  AttentionDecodeReferenceResult r = decode_softmax::sized(rows, p.dv, tails);
  for (int64_t i = 0; i < rows; ++i) row<Real>(p, in, i / p.n_h, i % p.n_h, r, tails);
  return r;
}

}  // namespace

AttentionDecodeReferenceResult attention_decode_reference(Tier tier, const AttentionDecodeParams& p, const Tensor& q,
                                                          const Tensor& k_cache, const Tensor& v_cache,
                                                          const Tensor& page_table, const Tensor& seqlens, bool tails,
                                                          int64_t rows) {
  if (p.B < 1 || p.n_h < 1 || p.n_kv < 1 || p.d < 1 || p.dv < 1 || p.page < 1 || p.max_pages < 1 || p.n_pages < 1 ||
      !std::isfinite(p.scale) || !(p.k_scale > 0) || !(p.v_scale > 0) || !std::isfinite(p.k_scale) ||
      !std::isfinite(p.v_scale))
    throw InputError("attention_decode reference: bad parameters");
  if (p.n_h % p.n_kv != 0)
    throw InputError(fmt::format("attention_decode: n_h = {} must be a multiple of n_kv = {}", p.n_h, p.n_kv));
  expect_numel(q, "q", p.B * p.n_h * p.d, "[B,n_h,d]");
  expect_numel(k_cache, "k_cache", p.n_pages * p.page * p.n_kv * p.d, "[n_pages,page,n_kv,d]");
  expect_numel(v_cache, "v_cache", p.n_pages * p.page * p.n_kv * p.dv, "[n_pages,page,n_kv,dv]");
  expect_numel(page_table, "page_table", p.B * p.max_pages, "[B,max_pages]");
  expect_numel(seqlens, "seqlens", p.B, "[B]");
  Inputs in{read_finite(q, "q"), read_finite(k_cache, "k_cache"), read_finite(v_cache, "v_cache"), decode_softmax::ints(seqlens),
            decode_softmax::ints(page_table)};
  for (double& x : in.k) x *= p.k_scale;   // exact: 24 + 11 bits at most
  for (double& x : in.v) x *= p.v_scale;
  check_attention_decode_pages(p, in.lens, in.table);
  const int64_t n = rows < 0 ? p.B * p.n_h : std::min(rows, p.B * p.n_h);
  return with_tier(tier, [&](auto real) { return run<decltype(real)>(p, in, n, tails); });
}

}  // namespace dg
