// Mutants and an equivalent of the rejection sampler sampler_cpu_rejection_f32
// (candidates/cpu/sampler_rejection.h), each with one hook turned; like it they draw differently from
// the op's race and register judged_by = "distribution", so the op's distribution test judges them
// (harness/ops/sampler.h). The bugs distort the distribution without leaving the kept set, or leave
// it (invalid_ids):
//   mutants      the temperature applied twice (l / T / T: a sharper distribution over the same kept
//                set at top-k alone); top-p's sums over the whole row instead of the min-p and top-k
//                set (the renormalization after the first filters missed: top-p keeps more); each
//                round's inverse CDF scaled by the whole row's sum instead of the sum above the pivot
//                (the walk runs off the end and lands on the last token above the pivot)
//   equivalent   the inverse CDF walked from the last index (other tokens for the same uniforms, the
//                same distribution)
#include "candidates/cpu/sampler_rejection.h"

namespace dg::mutants {
namespace {

CandidateInfo info(const std::string& name, const char* kind, const std::string& doc) {
  CandidateInfo i{"sampler_" + std::string(kind) + "_rejection_" + name, "sampler", "cpu", kind, DType::f32, DType::f32,
                  DType::f32, doc};
  i.judged_by = "distribution";
  return i;
}

const bool registered = [] {
  using sampler_rejection::Hooks;
  using sampler_rejection::make;
  register_candidate(info("temperature_twice", "mutant", "rejection sampling with the temperature applied twice (l / T / T)"),
                     make(Hooks{.temperature_twice = true}));
  register_candidate(info("top_p_unfiltered", "mutant",
                          "rejection sampling with top-p's sums over the whole row, not the min-p and top-k set"),
                     make(Hooks{.top_p_unfiltered = true}));
  register_candidate(info("z_unrestricted", "mutant",
                          "rejection sampling with each round's inverse CDF scaled by the whole row's sum"),
                     make(Hooks{.z_unrestricted = true}));
  register_candidate(info("reverse_walk", "equivalent", "rejection sampling with the inverse CDF walked from the last index"),
                     make(Hooks{.reverse_walk = true}));
  return true;
}();

}  // namespace
}  // namespace dg::mutants
