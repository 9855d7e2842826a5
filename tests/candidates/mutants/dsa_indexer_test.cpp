// The dsa_indexer mutants and equivalent variants (candidates/mutants/dsa_indexer.cpp), judged in this
// process against the naive f32 candidate: each mutant is rejected on the case named for it (by its
// op measures: a wide miss, a tie against the rule, an invalid id, or its score error), each
// equivalent variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(DsaIndexerMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string prod = "dsa_indexer(B=2,L=4096,topk=2048,regime=production,dtype=bf16,seed=0)";
  const std::string ragged = "dsa_indexer(B=6,L=3000,topk=2048,regime=ragged,dtype=bf16,seed=0)";
  const std::string ties = "dsa_indexer(B=2,L=4096,topk=2048,regime=exact_ties,dtype=bf16,seed=0)";
  const std::string near = "dsa_indexer(B=2,L=4096,topk=2048,regime=near_ties,dtype=f32,seed=0)";
  check_variants("dsa_indexer_cpu_naive_f32", {prod, ragged, ties, near},
                 {{"dsa_indexer_mutant_ties_high_index", ties},
                  {"dsa_indexer_mutant_threshold_fill", ties},
                  {"dsa_indexer_mutant_non_causal", ragged},
                  {"dsa_indexer_mutant_diagonal_masked", ragged},
                  {"dsa_indexer_mutant_relu_dropped", prod},
                  {"dsa_indexer_mutant_relu_after_sum", prod},
                  {"dsa_indexer_mutant_weights_inside_relu", prod},
                  {"dsa_indexer_mutant_softmax_weights", prod},
                  {"dsa_indexer_mutant_unscaled", prod},
                  {"dsa_indexer_mutant_topk_minus_one", prod},
                  {"dsa_indexer_mutant_sentinel_zero", ragged},
                  {"dsa_indexer_mutant_scores_bf16", prod}},
                 4);
}

}  // namespace
}  // namespace dg
