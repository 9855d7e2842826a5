// kda_cpu_naive_f32: the policy's naive candidate for f32 KDA (policies/default.toml [naive]): FLA's
// naive_recurrent_kda as it runs in fp32, one token at a time in plain loops, every state update and
// sum rounded to binary32 in increasing index order. It is the reference's generic template
// (reference/kda.h) run in float, so it shares no code with the optimized CPU kernels it judges
// (kda_cpu_recurrent_f32, kda_cpu_chunk_f32): the gate's "twice a simple same-precision
// implementation's error" (FlashAttention's rule) then measures what plain f32 achieves, not the
// base against itself.
//
// kda_decode_cpu_naive_f32 (below) is the same template for one decode step against the pool.
//
// Inputs wider than f32 (a dtype=f64 case) are rounded to f32 first, as every f32 candidate reads
// them; the outputs are f32 values (exact in the result's doubles), stored in the output tensors.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "candidates/cpu/kda_cpu.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"
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

// kda_decode_cpu_naive_f32: the naive f32 decode step of the policy ([naive] "kda_decode.f32"): per
// call, every sequence's state is read from its pool slot as an initial state, the same generic
// template in float runs its one token, and the final state is written back to the slot (f32, so
// exactly). Padding slots (negative) give o = 0 and touch no state. It shares no code with
// kda_decode_cpu_f32 (which runs the optimized recurrent step).
void kda_decode_cpu_naive_f32(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  const int64_t B = p.B, per_slot = p.HV * p.K * p.V;
  const kda_cpu::DecodeStepIo io = kda_cpu::decode_step_io(p, in, out);
  Tensor& pool = *io.pool;
  const std::vector<int64_t>& slots = io.slots;
  TensorMap f32;
  for (const auto& [name, t] : in)
    if (name != "state_indices") f32[name] = t.dtype() == DType::f64 ? convert(t, DType::f32) : t;
  std::vector<int64_t> h0_shape = pool.shape();   // [slots, HV, K, V] (V-first: [slots, HV, V, K])
  h0_shape[0] = B;
  Tensor h0(DType::f32, h0_shape);
  std::vector<double> buf(static_cast<size_t>(per_slot), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    if (slots[static_cast<size_t>(b)] >= 0) pool.read(slots[static_cast<size_t>(b)] * per_slot, buf);
    else std::fill(buf.begin(), buf.end(), 0.0);
    h0.write(b * per_slot, std::span<const double>(buf));
  }
  f32["h0"] = h0;
  KdaParams step = p;
  step.has_h0 = true;
  KdaReferenceOptions opt;
  opt.plain_f32 = true;
  opt.threads = 1;
  const KdaReferenceResult r = kda_reference(Tier::f64, step, f32, opt);
  std::vector<double> o = r.o;
  const int64_t o_row = p.HV * p.V;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t slot = slots[static_cast<size_t>(b)];
    if (slot < 0) {
      std::fill(o.begin() + b * o_row, o.begin() + (b + 1) * o_row, 0.0);
      continue;
    }
    pool.write(slot * per_slot, std::span<const double>(r.ht.data() + b * per_slot, static_cast<size_t>(per_slot)));
  }
  io.o->write(0, std::span<const double>(o));
}

DG_REGISTER_CANDIDATE(kda_decode_cpu_naive_f32,
                      CandidateInfo{"kda_decode_cpu_naive_f32", "kda_decode", "cpu", "naive", DType::f32, DType::f32,
                                    DType::f32, "the naive f32 decode step of the policy: FLA's naive recurrence in plain f32 loops, one token per call"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        kda_decode_cpu_naive_f32(kda_params(c), in, out);
                      });

DG_REGISTER_CANDIDATE(kda_cpu_naive_f32,
                      CandidateInfo{"kda_cpu_naive_f32", "kda", "cpu", "naive", DType::f32, DType::f32, DType::f32,
                                    "the naive f32 KDA of the policy: FLA's naive recurrence in plain f32 loops, one thread"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        kda_cpu_naive_f32(kda_params(c), in, out);
                      });

}  // namespace dg
