// attention_decode (reference/attention_decode.h): a case's parameters and lengths, for the
// regimes, candidates and mutants.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/cases/case.h"
#include "harness/cases/registry.h"
#include "harness/core/tensor.h"
#include "reference/attention_decode.h"
#include "reference/certify.h"

namespace dg {

// The context length of each sequence: the case's `lens` when given; otherwise ctx for every
// sequence, except in the ragged regime and mla_decode's sparse_mixed (lengths cycling over ctx, 0,
// 1, ctx/2 + 3, page + 1) and
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

// What the decode-attention OpSpecs (attention_decode, mla_decode) share. The case's `lens`: B of
// them (or none), each in [0, ctx]; throws InputError prefixed by `op` otherwise.
void check_decode_lens(const Case& c, const char* op);
// The stored seqlens, each the case's length (attention_decode_lens); throws InputError naming the
// first that differs.
std::vector<int64_t> check_decode_seqlens(const Case& c, const TensorMap& in, const char* op);
// The certification of
// the first n of `rows` rows (b, h), lo at `tier` against hi at `up`, o and lse each compared on its
// own (an empty context's lse, -inf in both, left out).
Certification decode_certification(AttentionDecodeReferenceResult lo, AttentionDecodeReferenceResult hi, Tier tier, Tier up,
                                   int64_t n, int64_t rows);
// Whether some sequence of the case (its lengths by attention_decode_lens, pages of `page`, `split`
// splits) leaves a split with no keys (the -inf guard's case).
bool decode_has_empty_split(const Case& c);
// The coverage axes of the context lengths (0, 1, a partial last page, ragged, >= 32K) and of the
// split count (1, > 1, an empty split).
CoverageAxis decode_lengths_axis();
CoverageAxis decode_split_axis();

}  // namespace dg
