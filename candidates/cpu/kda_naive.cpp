// kda_cpu_naive_f32: the policy's naive candidate for f32 KDA (policies/default.toml [naive]): FLA's
// naive_recurrent_kda as it runs in fp32, one token at a time in plain loops, every state update and
// sum rounded to binary32 in increasing index order. It is the reference's generic template
// (reference/kda.h) run in float, so it shares no code with the optimized CPU kernels it judges
// (kda_cpu_recurrent_f32, kda_cpu_chunk_f32): the gate's "twice a simple same-precision
// implementation's error" (FlashAttention's rule) then measures what plain f32 achieves, not the
// base against itself.
//
// Inputs wider than f32 (a dtype=f64 case) are rounded to f32 first, as every f32 candidate reads
// them; the outputs are f32 values (exact in the result's doubles), stored in the output tensors.
#include <span>
#include <string>

#include "candidates/cpu/kda_cpu.h"
#include "harness/ops/kda_op.h"
#include "harness/registry.h"
#include "reference/kda.h"

namespace dg {

void kda_cpu_naive_f32(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  TensorMap f32;
  for (const auto& [name, t] : in)
    f32[name] = t.dtype() == DType::f64 ? convert(t, DType::f32) : t;
  KdaReferenceOptions opt;
  opt.plain_f32 = true;
  opt.threads = 1;
  const KdaReferenceResult r = kda_reference(Tier::f64, p, f32, opt);
  out.at("o").write(0, std::span<const double>(r.o));
  out.at("ht").write(0, std::span<const double>(r.ht));
}

DG_REGISTER_CANDIDATE(kda_cpu_naive_f32,
                      CandidateInfo{"kda_cpu_naive_f32", "kda", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                                    "the naive f32 KDA of the policy: FLA's naive recurrence in plain f32 loops, one thread"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        kda_cpu_naive_f32(kda_params(c), in, out);
                      });

}  // namespace dg
