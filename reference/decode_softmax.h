// The softmax row of the decode-attention references (reference/attention_decode.cpp,
// reference/mla_decode.cpp): one query against n keys and values handed out by position, in the two
// passes both references define (attention_decode.h):
//   s_t = scale * sum_i q[i] k_t[i]                   t in [0, n), i increasing (Dot2 in f64)
//   m   = max_t s_t                                   pass 1, increasing t
//   l   = sum_t exp(s_t - m), u[c] = sum_t exp(s_t - m) v_t[c]   pass 2, increasing t
//   o[c] = u[c] / l, lse = m + ln l; n = 0: o = 0, lse = -inf (tails 0)
// Both passes recompute s_t, so the memory beyond the inputs is O(dv).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "reference/attention_decode.h"
#include "reference/op_inputs.h"
#include "reference/real/f64.h"
#include "reference/real/real_ops.h"

namespace dg::decode_softmax {

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

struct Row {
  const double* q;
  int64_t d, dv;
  double scale;
  int64_t n;   // keys
  size_t i;    // the row's index in r.lse (o at i * dv)
};

// key(t), value(t): pointers to the t-th key (d values) and value (dv values).
template <class Real, class Key, class Value>
void row(const Row& w, Key key, Value value, AttentionDecodeReferenceResult& r, bool tails) {
  const size_t o0 = w.i * static_cast<size_t>(w.dv);
  if (w.n == 0) {
    for (int64_t c = 0; c < w.dv; ++c) r.o[o0 + static_cast<size_t>(c)] = 0.0;
    r.lse[w.i] = -std::numeric_limits<double>::infinity();
    return;
  }
  Real m = score<Real>(w.q, key(0), w.d, w.scale);
  for (int64_t t = 1; t < w.n; ++t) {
    const Real s = score<Real>(w.q, key(t), w.d, w.scale);
    if (s > m) m = s;
  }
  Real l(0.0);
  std::vector<Real> u(static_cast<size_t>(w.dv), Real(0.0));
  for (int64_t t = 0; t < w.n; ++t) {
    const Real e = r_exp(score<Real>(w.q, key(t), w.d, w.scale) - m);
    l += e;
    const double* v = value(t);
    for (int64_t c = 0; c < w.dv; ++c) u[static_cast<size_t>(c)] += e * v[c];
  }
  for (int64_t c = 0; c < w.dv; ++c)
    put_odd(Real(u[static_cast<size_t>(c)] / l), r.o, tails ? &r.o_tail : nullptr, o0 + static_cast<size_t>(c));
  put_odd(Real(m + r_log(l)), r.lse, tails ? &r.lse_tail : nullptr, w.i);
}

// An integer tensor (page table, lengths, indices) as int64 values.
inline std::vector<int64_t> ints(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  t.read(0, v);
  return std::vector<int64_t>(v.begin(), v.end());
}

// A result of `rows` rows of dv outputs and one lse each, tails allocated when asked.
inline AttentionDecodeReferenceResult sized(int64_t rows, int64_t dv, bool tails) {
  AttentionDecodeReferenceResult r;
  r.o.resize(static_cast<size_t>(rows * dv));
  r.lse.resize(static_cast<size_t>(rows));
  if (tails) {
    r.o_tail.assign(2 * r.o.size(), 0.0);
    r.lse_tail.assign(2 * r.lse.size(), 0.0);
  }
  return r;
}

}  // namespace dg::decode_softmax
