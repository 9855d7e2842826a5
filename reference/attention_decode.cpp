// attention_decode, written once over Real (attention_decode.h has the definition).
#include "reference/attention_decode.h"

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/f64.h"
#include "reference/real/real_ops.h"

namespace dg {

void check_attention_decode_pages(const AttentionDecodeParams& p, const std::vector<int64_t>& lens,
                                  const std::vector<int64_t>& table) {
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t L = lens[static_cast<size_t>(b)];
    if (L < 0 || L > p.max_pages * p.page)
      throw InputError(fmt::format("attention_decode: seqlens[{}] = {} is outside [0, max_pages*page = {}*{}]", b, L,
                                   p.max_pages, p.page));
    for (int64_t j = 0; j < (L + p.page - 1) / p.page; ++j) {
      const int64_t id = table[static_cast<size_t>(b * p.max_pages + j)];
      if (id < 0 || id >= p.n_pages)
        throw InputError(fmt::format("attention_decode: page_table[{}][{}] = {} is outside the pool [0, {})", b, j, id,
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

// s = scale * q.k, the dot product in increasing i (Dot2 in the f64 tier).
template <class Real> Real score(const double* q, const double* k, int64_t d, double scale) {
  if constexpr (std::is_same_v<Real, double>) {
    Dot2 acc;
    for (int64_t i = 0; i < d; ++i) acc.add(q[i], k[i]);
    return acc.value() * scale;
  } else {
    Real acc(0.0);
    for (int64_t i = 0; i < d; ++i) acc += Real(q[i]) * k[i];
    return acc * scale;
  }
}

// One (b, h) row: the two passes of attention_decode.h.
template <class Real>
void row(const AttentionDecodeParams& p, const Inputs& in, int64_t b, int64_t h, AttentionDecodeReferenceResult& r,
         bool tails) {
  const size_t i = static_cast<size_t>(b * p.n_h + h);
  const int64_t L = in.lens[static_cast<size_t>(b)], g = h / (p.n_h / p.n_kv);
  const double* q = in.q.data() + static_cast<int64_t>(i) * p.d;
  if (L == 0) {   // empty context: o = 0, lse = -inf (tails stay 0)
    for (int64_t c = 0; c < p.dv; ++c) r.o[i * static_cast<size_t>(p.dv) + static_cast<size_t>(c)] = 0.0;
    r.lse[i] = -std::numeric_limits<double>::infinity();
    return;
  }
  Real m = score<Real>(q, in.k.data() + slot(p, in, b, 0, g, p.d), p.d, p.scale);
  for (int64_t j = 1; j < L; ++j) {
    const Real s = score<Real>(q, in.k.data() + slot(p, in, b, j, g, p.d), p.d, p.scale);
    if (s > m) m = s;
  }
  Real l(0.0);
  std::vector<Real> u(static_cast<size_t>(p.dv), Real(0.0));
  for (int64_t j = 0; j < L; ++j) {
    const Real e = r_exp(score<Real>(q, in.k.data() + slot(p, in, b, j, g, p.d), p.d, p.scale) - m);
    l += e;
    const double* v = in.v.data() + slot(p, in, b, j, g, p.dv);
    for (int64_t c = 0; c < p.dv; ++c) u[static_cast<size_t>(c)] += e * v[c];
  }
  for (int64_t c = 0; c < p.dv; ++c)
    put_odd(Real(u[static_cast<size_t>(c)] / l), r.o, tails ? &r.o_tail : nullptr, i * static_cast<size_t>(p.dv) + static_cast<size_t>(c));
  put_odd(Real(m + r_log(l)), r.lse, tails ? &r.lse_tail : nullptr, i);
}

template <class Real>
AttentionDecodeReferenceResult run(const AttentionDecodeParams& p, const Inputs& in, int64_t rows, bool tails) {
  AttentionDecodeReferenceResult r;
  r.o.resize(static_cast<size_t>(rows * p.dv));
  r.lse.resize(static_cast<size_t>(rows));
  if (tails) {
    r.o_tail.assign(2 * r.o.size(), 0.0);
    r.lse_tail.assign(2 * r.lse.size(), 0.0);
  }
  for (int64_t i = 0; i < rows; ++i) row<Real>(p, in, i / p.n_h, i % p.n_h, r, tails);
  return r;
}

std::vector<int64_t> read_ints(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  t.read(0, v);
  return std::vector<int64_t>(v.begin(), v.end());
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
  Inputs in{read_finite(q, "q"), read_finite(k_cache, "k_cache"), read_finite(v_cache, "v_cache"), read_ints(seqlens),
            read_ints(page_table)};
  for (double& x : in.k) x *= p.k_scale;   // exact: 24 + 11 bits at most
  for (double& x : in.v) x *= p.v_scale;
  check_attention_decode_pages(p, in.lens, in.table);
  const int64_t n = rows < 0 ? p.B * p.n_h : std::min(rows, p.B * p.n_h);
  return with_tier(tier, [&](auto real) { return run<decltype(real)>(p, in, n, tails); });
}

}  // namespace dg
