// mla_decode, written once over Real (mla_decode.h has the definition).
#include "reference/mla_decode.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/decode_softmax.h"
#include "reference/op_inputs.h"

namespace dg {

AttentionDecodeParams MlaDecodeParams::attention() const {
  AttentionDecodeParams a;
  a.B = B, a.n_h = n_h, a.n_kv = 1, a.d = width(), a.dv = d_c, a.page = page, a.max_pages = max_pages, a.n_pages = n_pages;
  a.scale = scale, a.k_scale = kv_scale, a.v_scale = kv_scale;
  return a;
}

std::vector<int64_t> mla_decode_keys(const MlaDecodeParams& p, int64_t b, const std::vector<int64_t>& lens,
                                     const std::vector<int64_t>& indices) {
  const int64_t L = lens[static_cast<size_t>(b)];
  std::vector<int64_t> keys;
  if (p.topk == 0) {
    for (int64_t j = 0; j < L; ++j) keys.push_back(j);
    return keys;
  }
  for (int64_t t = 0; t < p.topk; ++t) {
    const int64_t x = indices[static_cast<size_t>(b * p.topk + t)];
    if (x >= 0 && x < L) keys.push_back(x);
  }
  return keys;
}

void check_mla_decode_indices(const MlaDecodeParams& p, const std::vector<int64_t>& indices) {
  const int64_t cap = p.max_pages * p.page;
  for (int64_t i = 0; i < p.B * p.topk; ++i) {
    const int64_t x = indices[static_cast<size_t>(i)];
    if (x < -1 || x >= cap)
      throw InputError(fmt::format("mla_decode: indices[{}][{}] = {} is outside [-1, max_pages*page = {})", i / p.topk,
                                   i % p.topk, x, cap));
  }
}

namespace {

struct Inputs {
  std::vector<double> q, latent;   // q: [B,n_h,d_c+rope], q~ and q_pe joined
  std::vector<int64_t> lens, table, indices;
};

template <class Real>
AttentionDecodeReferenceResult run(const MlaDecodeParams& p, const Inputs& in, int64_t rows, bool tails) {
  AttentionDecodeReferenceResult r = decode_softmax::sized(rows, p.d_c, tails);
  const int64_t D = p.width();
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t b = i / p.n_h;
    if (i % p.n_h == 0) keys = mla_decode_keys(p, b, in.lens, in.indices);
    const auto at = [&](int64_t t) {
      const int64_t j = keys[static_cast<size_t>(t)];
      return in.latent.data() + (in.table[static_cast<size_t>(b * p.max_pages + j / p.page)] * p.page + j % p.page) * D;
    };
    const decode_softmax::Row w{in.q.data() + i * D, D, p.d_c, p.scale, static_cast<int64_t>(keys.size()), static_cast<size_t>(i)};
    decode_softmax::row<Real>(w, at, at, r, tails);   // the value: the key's first d_c channels
  }
  return r;
}

// q~ [B,n_h,d_c] and q_pe [B,n_h,rope] joined per row into [B,n_h,d_c+rope].
std::vector<double> joined_query(const MlaDecodeParams& p, const Tensor& q, const Tensor& q_pe) {
  expect_numel(q, "q", p.B * p.n_h * p.d_c, "[B,n_h,d_c]");
  const std::vector<double> nope = read_finite(q, "q");
  std::vector<double> pe;
  if (p.rope > 0) {
    expect_numel(q_pe, "q_pe", p.B * p.n_h * p.rope, "[B,n_h,rope]");
    pe = read_finite(q_pe, "q_pe");
  }
  std::vector<double> out(static_cast<size_t>(p.B * p.n_h * p.width()));
  for (int64_t i = 0; i < p.B * p.n_h; ++i) {
    std::copy_n(nope.begin() + i * p.d_c, p.d_c, out.begin() + i * p.width());
    std::copy_n(pe.begin() + i * p.rope, p.rope, out.begin() + i * p.width() + p.d_c);
  }
  return out;
}

}  // namespace

AttentionDecodeReferenceResult mla_decode_reference(Tier tier, const MlaDecodeParams& p, const Tensor& q, const Tensor& q_pe,
                                                    const Tensor& latent, const Tensor& page_table, const Tensor& seqlens,
                                                    const Tensor& indices, bool tails, int64_t rows) {
  if (p.B < 1 || p.n_h < 1 || p.d_c < 1 || p.rope < 0 || p.page < 1 || p.max_pages < 1 || p.n_pages < 1 || p.topk < 0 ||
      !std::isfinite(p.scale) || !(p.kv_scale > 0) || !std::isfinite(p.kv_scale))
    throw InputError("mla_decode reference: bad parameters");
  expect_numel(latent, "latent", p.n_pages * p.page * p.width(), "[n_pages,page,d_c+rope]");
  expect_numel(page_table, "page_table", p.B * p.max_pages, "[B,max_pages]");
  expect_numel(seqlens, "seqlens", p.B, "[B]");
  Inputs in{joined_query(p, q, q_pe), read_finite(latent, "latent"), decode_softmax::ints(seqlens),
            decode_softmax::ints(page_table), {}};
  if (p.topk > 0) {
    expect_numel(indices, "indices", p.B * p.topk, "[B,topk]");
    in.indices = decode_softmax::ints(indices);
    check_mla_decode_indices(p, in.indices);
  }
  for (double& x : in.latent) x *= p.kv_scale;   // exact: 24 + 4 bits at most
  check_attention_decode_pages(p.attention(), in.lens, in.table, "mla_decode");
  const int64_t n = rows < 0 ? p.B * p.n_h : std::min(rows, p.B * p.n_h);
  return with_tier(tier, [&](auto real) { return run<decltype(real)>(p, in, n, tails); });
}

}  // namespace dg
