// kda_decode_cpu_f32 and kda_decode_cpu_bf16state: one KDA decode step against a paged state pool,
// as FLA's fused_recurrent_kda_fwd serves vLLM (notes §2.3).
//
//   for each sequence b (state slot s = state_indices[b]; s < 0: padding, o = 0, no state touched),
//   for each value head hv:
//     S = state[s, hv]                    (f32, or bf16 widened exactly to f32)
//     one token of kda_cpu_recurrent_f32: S *= exp(g); r = (v - S^T k) beta; S += k r^T; o = S^T q
//     state[s, hv] = S                    (f32, or rounded once to bf16)
//
// The f32 candidate runs the recurrent candidate's very step (kda_cpu::recurrent_step, same token
// preparation), so T steps reproduce kda_cpu_recurrent_f32 on the same T tokens bit for bit. The
// bf16state candidate rounds its state to bf16 after every step, the drift a bf16 state pool adds
// (notes, checklist item 9).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/kda_cpu.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"

namespace dg {
namespace kda_cpu {

std::vector<int64_t> state_slots(const TensorMap& in, int64_t B, int64_t pool_slots) {
  auto it = in.find("state_indices");
  if (it == in.end()) throw std::invalid_argument("kda_decode: input tensor 'state_indices' is missing");
  const Tensor& t = it->second;
  if (t.numel() != B)
    throw std::invalid_argument("kda_decode: state_indices has " + std::to_string(t.numel()) + " elements, expected B=" +
                                std::to_string(B));
  std::vector<int64_t> slots(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    if (t.dtype() == DType::i64) slots[static_cast<size_t>(b)] = t.data<int64_t>()[b];
    else if (t.dtype() == DType::i32) slots[static_cast<size_t>(b)] = t.data<int32_t>()[b];
    else throw std::invalid_argument("kda_decode: state_indices must be i64 or i32");
  }
  std::vector<int64_t> used;
  for (int64_t s : slots) {
    if (s >= pool_slots)
      throw std::invalid_argument("kda_decode: state index " + std::to_string(s) + " is outside the pool of " +
                                  std::to_string(pool_slots) + " slots");
    if (s >= 0) used.push_back(s);
  }
  std::sort(used.begin(), used.end());
  if (std::adjacent_find(used.begin(), used.end()) != used.end())
    throw std::invalid_argument("kda_decode: two sequences share one state slot");
  return slots;
}

DecodeStepIo decode_step_io(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  const int64_t per_slot = p.HV * p.K * p.V;
  if (p.T != 1 || !p.cu_seqlens.empty())
    throw std::invalid_argument("kda_decode: a step takes one token per sequence (T=1, no cu_seqlens)");
  Tensor& o = output(out, "o", p.B * p.HV * p.V);
  auto it = out.find("state");
  if (it == out.end()) throw std::invalid_argument("kda_decode: in-out tensor 'state' is missing");
  Tensor& pool = it->second;
  if (pool.numel() % per_slot != 0)
    throw std::invalid_argument("kda_decode: state pool shape " + pool.shape_str() + " is not [N,HV,K,V]");
  return {&o, &pool, state_slots(in, p.B, pool.numel() / per_slot)};
}

namespace {

template <bool kBf16State>
void kda_decode(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  const int64_t B = p.B, HV = p.HV, K = p.K, V = p.V, Vp = round_up16(V);
  const DecodeStepIo io = decode_step_io(p, in, out);
  Tensor &o = *io.o, &pool = *io.pool;
  const std::vector<int64_t>& slots = io.slots;
  for_each_pair(
      B * HV, p.flops_per_token_head(), [&] { return make_buffer(static_cast<size_t>(K * Vp + 3 * K + 3 * Vp)); },
      [&](int64_t pair, Buffer& buf) {
        const int64_t b = pair / HV, hv = pair % HV, slot = slots[static_cast<size_t>(b)];
        float* S = buf.get();
        float *q = S + K * Vp, *k = q + K, *g = k + K, *v = g + K, *ob = v + Vp, *work = ob + Vp;
        if (slot < 0) {
          std::fill(ob, ob + V, 0.0f);
          store_row(o, (b * HV + hv) * V, V, ob);
          return;
        }
        load_state(pool, slot, hv, p, S, Vp);
        TokenReader reader(p, in, hv, /*fold_scale=*/true, /*bf16_storage=*/false);
        const float beta = reader.load(b, q, k, v, g);   // token b of the [B, 1] token axis
        recurrent_step(S, Vp, K, V, q, k, v, g, beta, ob, work);
        store_row(o, (b * HV + hv) * V, V, ob);
        if constexpr (kBf16State)
          for (int64_t d = 0; d < K; ++d)
            for (int64_t j = 0; j < V; ++j) S[d * Vp + j] = dg::round_bf16(S[d * Vp + j]);
        store_state(pool, slot, hv, p, S, Vp);
      });
}

}  // namespace
}  // namespace kda_cpu

void kda_decode_cpu_f32(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  kda_cpu::kda_decode<false>(p, in, out);
}

void kda_decode_cpu_bf16state(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  kda_cpu::kda_decode<true>(p, in, out);
}

DG_REGISTER_CANDIDATE(kda_decode_cpu_f32,
                      CandidateInfo{"kda_decode_cpu_f32", "kda_decode", "cpu", "recurrent", DType::f32, DType::f32,
                                    DType::f32, "one fused-recurrent step per call, f32 state pool (notes §2.3)"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        kda_decode_cpu_f32(kda_params(c), in, out);
                      });

DG_REGISTER_CANDIDATE(kda_decode_cpu_bf16state,
                      CandidateInfo{"kda_decode_cpu_bf16state", "kda_decode", "cpu", "recurrent", DType::f32,
                                    DType::bf16, DType::f32,
                                    "one fused-recurrent step per call, bf16 state pool rounded once per step"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        kda_decode_cpu_bf16state(kda_params(c), in, out);
                      });

}  // namespace dg
