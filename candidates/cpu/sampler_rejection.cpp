// sampler_cpu_rejection_f32: sampler (reference/sampler.h) by FlashInfer's sort-free rejection
// sampling (candidates/cpu/sampler_rejection.h): the filtered distribution of the reference drawn by
// another use of the uniforms, so it registers judged_by = "distribution" and its op judges the
// distribution of its tokens (harness/ops/sampler.h), not each token.
#include "candidates/cpu/sampler_rejection.h"

namespace dg {
namespace {

CandidateInfo info() {
  CandidateInfo i{"sampler_cpu_rejection_f32", "sampler", "cpu", "rejection", DType::f32, DType::f32, DType::f32,
                  "FlashInfer's sort-free rejection sampling in f32: inverse-CDF draws above a rising pivot until one "
                  "passes min-p, top-k and top-p (judged by the distribution of its draws)"};
  i.judged_by = "distribution";
  return i;
}

const bool registered = (register_candidate(info(), sampler_rejection::make({})), true);

}  // namespace
}  // namespace dg
