// attention_decode (reference/attention_decode.h): a case's parameters and lengths, for the
// regimes, candidates and mutants.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/cases/case.h"
#include "harness/core/tensor.h"
#include "reference/attention_decode.h"

namespace dg {

// The context length of each sequence: the case's `lens` when given; otherwise ctx for every
// sequence, except in the ragged regime (lengths cycling over ctx, 0, 1, ctx/2 + 3, page + 1) and
// the empty_splits regime (cycling over 0, 1, page - 1, page + 1), each at most ctx.
std::vector<int64_t> attention_decode_lens(const Case& c);

// The shapes of a case: the page table's width max(1, ceil(ctx / page)) and the pool's size, one page
// per started page of every sequence plus one spare page no sequence uses; scale fl32(d^-0.5)
// unless the case gives one.
AttentionDecodeParams attention_decode_params(const Case& c);

// Pages per split of a sequence of n_pages pages split `split` ways: ceil(n_pages / split); split s
// covers the sequence's pages [s * pps, (s + 1) * pps), so the last splits are empty when split >
// n_pages (and all of them when n_pages = 0).
inline int64_t attention_decode_pages_per_split(int64_t n_pages, int64_t split) {
  return n_pages == 0 ? 1 : (n_pages + split - 1) / split;
}

// An integer tensor (page_table, seqlens) as int64 values.
std::vector<int64_t> attention_decode_ints(const Tensor& t);

}  // namespace dg
