// The kpool_indexer mutants and equivalent variants (candidates/mutants/kpool_indexer.cpp), judged in
// this process against the naive f32 candidate: each mutant is rejected on the case named for it (a
// wide pool miss, a tie against the rule or an invalid id), each equivalent variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(KpoolIndexerMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string prod = "kpool_indexer(B=2,L=4096,topk=512,regime=production,dtype=bf16,seed=0)";
  const std::string ragged = "kpool_indexer(B=6,L=4096,topk=512,regime=ragged,dtype=bf16,seed=0)";
  const std::string ties = "kpool_indexer(B=2,L=4096,topk=512,regime=exact_ties,dtype=bf16,seed=0)";
  const std::string sat = "kpool_indexer(B=2,L=4096,topk=512,regime=saturated_gate,dtype=bf16,seed=0)";
  check_variants("kpool_indexer_cpu_naive_f32", {prod, ragged, ties, sat},
                 {{"kpool_indexer_mutant_ties_high_index", ties},
                  {"kpool_indexer_mutant_no_ape", prod},
                  {"kpool_indexer_mutant_softmax_channels", prod},
                  {"kpool_indexer_mutant_mean_pool", prod},
                  {"kpool_indexer_mutant_softmax_no_max", sat},
                  {"kpool_indexer_mutant_grid_from_zero", ragged},
                  {"kpool_indexer_mutant_tail_dropped", ragged},
                  {"kpool_indexer_mutant_tail_scored", ragged},
                  {"kpool_indexer_mutant_non_causal", ragged},
                  {"kpool_indexer_mutant_topk_minus_one", prod},
                  {"kpool_indexer_mutant_sentinel_zero", prod},
                  {"kpool_indexer_mutant_relu_dropped", prod},
                  {"kpool_indexer_mutant_weights_inside_relu", prod}},
                 3);
}

}  // namespace
}  // namespace dg
