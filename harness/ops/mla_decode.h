// mla_decode (reference/mla_decode.h): a case's parameters, for the regimes, candidates and
// mutants. The lengths are attention_decode's (attention_decode_lens: ctx, or the ragged cycle in
// the ragged and sparse_mixed regimes, or lens=).
#pragma once

#include "harness/cases/case.h"
#include "reference/mla_decode.h"

namespace dg {

// The shapes of a case: the page table's width max(1, ceil(ctx / page)), the pool one page per
// started page of every sequence plus a spare page, topk 0 (dense) or the case's.
MlaDecodeParams mla_decode_params(const Case& c);

}  // namespace dg
