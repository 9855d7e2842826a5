// The sampler mutants and equivalent variants (candidates/mutants/sampler.cpp and
// sampler_rejection.cpp), judged in this process against the naive f32 candidate: each mutant is
// rejected on the case named for it (by its op measures: a wide flip or an invalid token; the
// rejection sampler's by the distribution test on groups of 4096 draws, or an invalid token), each
// equivalent variant merges on every case.
#include <gtest/gtest.h>

#include "tests/candidates/mutants/variant_check.h"

namespace dg {
namespace {

TEST(SamplerMutants, EachIsRejectedWhereItsBugShowsAndRewritesMerge) {
  const std::string nucleus = "sampler(B=64,V=4096,temperature=1.5,top_p=0.5,regime=typical,dtype=bf16,seed=0)";
  const std::string minp = "sampler(B=64,V=4096,min_p=0.1,regime=typical,dtype=bf16,seed=0)";
  const std::string both = "sampler(B=64,V=4096,top_k=4,top_p=0.7,regime=typical,dtype=bf16,seed=0)";
  const std::string ties = "sampler(B=64,V=4096,top_k=5,regime=ties_at_k,dtype=bf16,seed=0)";
  const std::string hot = "sampler(B=16,V=32000,temperature=1.5,top_p=0.5,regime=typical,dtype=bf16,seed=0)";
  const std::string greedy = "sampler(B=16,V=4096,temperature=0,regime=greedy,dtype=bf16,seed=0)";
  const std::string large = "sampler(B=16,V=4096,temperature=0.8,regime=large_logits,dtype=f32,seed=0)";
  const std::string drawn = "sampler(B=4096,V=1024,temperature=0.7,top_k=50,draws=4096,regime=typical,dtype=bf16,seed=0)";
  const std::string drawn_flat = "sampler(B=4096,V=1024,top_k=20,top_p=0.9,draws=4096,regime=flat,dtype=bf16,seed=0)";
  check_variants("sampler_cpu_naive_f32", {nucleus, minp, both, ties, hot, greedy, large, drawn, drawn_flat},
                 {{"sampler_mutant_cumsum_bf16", hot},
                  {"sampler_mutant_topk_exact_k", ties},
                  {"sampler_mutant_topp_exclusive", nucleus},
                  {"sampler_mutant_minp_logits", minp},
                  {"sampler_mutant_temp_after_softmax", nucleus},
                  {"sampler_mutant_softmax_no_max", large},
                  {"sampler_mutant_race_mul", nucleus},
                  {"sampler_mutant_greedy_ignored", greedy},
                  {"sampler_mutant_topp_first", both},
                  {"sampler_mutant_draw_stride", nucleus},
                  {"sampler_mutant_rejection_temperature_twice", drawn},
                  {"sampler_mutant_rejection_top_p_unfiltered", drawn_flat},
                  {"sampler_mutant_rejection_z_unrestricted", drawn_flat}},
                 5);
}

}  // namespace
}  // namespace dg
