// The run of every CPU candidate of sampler (candidates/cpu/sampler.cpp, sampler_rejection.h): row b's
// logits and uniforms read into f32, its token drawn by `sample(params, logits, uniforms)`, written
// to token_ids.
#pragma once

#include <string>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/cases/registry.h"
#include "harness/ops/sampler.h"

namespace dg::sampler_cpu {

template <class Sample>
RunFn rows(Sample sample) {
  return [sample](const Case& c, const TensorMap& in, TensorMap& out) {
    const SamplerParams p = sampler_params(c);
    const std::string op = c.op();
    std::vector<float> l(static_cast<size_t>(p.V)), u(l.size());
    Tensor& ids = need_out(out, "token_ids", p.B, op);
    for (int64_t b = 0; b < p.B; ++b) {
      load_row(need(in, "logits", op), b * p.V, p.V, l.data());
      load_row(need(in, "uniforms", op), b * p.V, p.V, u.data());
      ids.set(b, static_cast<double>(sample(p, l, u)));
    }
  };
}

}  // namespace dg::sampler_cpu
