// CPU candidate of kda_decode_fused (harness/ops/kda_decode_fused.cpp), f32 arithmetic:
//   kda_decode_fused_cpu_f32  one decode step of the layer as the composition of the CPU pieces: the
//                             conv of each q, k, v channel against its conv-state slot (updated in
//                             place; causal_conv1d.h), the f32 KDA step of kda_decode_cpu_f32, the
//                             gated norm per value head (rmsnorm_gated.h); the CUDA kernel
//                             kda_decode_cuda_f32state_fused does it in one
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/causal_conv1d.h"
#include "candidates/cpu/kda_cpu.h"
#include "candidates/cpu/op_io.h"
#include "candidates/cpu/rmsnorm_gated.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using causal_conv1d_cpu::conv_tap;
using causal_conv1d_cpu::silu;
using rmsnorm_gated_cpu::gated_norm_rows;

// One step: conv of `C` channels of sequence b (row b of the [B,1,C] input) against pool slot s
// (pool [N, C, W-1], f32, updated), into out[b * C ..).
void conv_step(const Tensor& x, const float* w, Tensor& pool, int64_t b, int64_t s, int64_t C, int64_t W, float* y) {
  const int64_t S = W - 1;
  float* ps = pool.data<float>() + s * C * S;
  std::vector<float> xr(static_cast<size_t>(C)), h(static_cast<size_t>(W));
  load_row(x, b * C, C, xr.data());
  for (int64_t d = 0; d < C; ++d) {
    std::copy_n(ps + d * S, S, h.data());
    h[static_cast<size_t>(S)] = xr[static_cast<size_t>(d)];
    y[d] = silu(conv_tap(w + d * W, h.data(), W));
    std::copy_n(h.data() + 1, S, ps + d * S);
  }
}

void fused_cpu(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "kda_decode_fused";
  const KdaParams p = kda_params(c);
  if (p.T != 1) throw std::invalid_argument("kda_decode_fused: a step takes one token per sequence (T=1)");
  const int64_t B = p.B, H = p.H, HV = p.HV, K = p.K, V = p.V, W = c.integer("W"), Cq = H * K, Cv = HV * V;
  Tensor& state = need_out(out, "state", need(out, "state", op).numel(), op);
  const std::vector<int64_t> slots = kda_cpu::state_slots(in, B, state.numel() / (HV * K * V));
  Tensor* pools[3] = {&out.at("conv_q"), &out.at("conv_k"), &out.at("conv_v")};
  for (Tensor* t : pools)
    if (t->dtype() != DType::f32) throw std::invalid_argument("kda_decode_fused: conv-state pools must be f32");
  std::vector<float> wq(static_cast<size_t>(Cq * W)), wk(wq.size()), wv(static_cast<size_t>(Cv * W));
  load_row(need(in, "wq", op), 0, Cq * W, wq.data());
  load_row(need(in, "wk", op), 0, Cq * W, wk.data());
  load_row(need(in, "wv", op), 0, Cv * W, wv.data());
  // 1. The convs, each channel against its sequence's conv-state slot.
  Tensor q(DType::f32, {B, 1, H, K}), k(DType::f32, {B, 1, H, K}), v(DType::f32, {B, 1, HV, V});
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = slots[static_cast<size_t>(b)];
    if (s < 0) continue;
    conv_step(need(in, "xq", op), wq.data(), *pools[0], b, s, Cq, W, q.data<float>() + b * Cq);
    conv_step(need(in, "xk", op), wk.data(), *pools[1], b, s, Cq, W, k.data<float>() + b * Cq);
    conv_step(need(in, "xv", op), wv.data(), *pools[2], b, s, Cv, W, v.data<float>() + b * Cv);
  }
  // 2. The KDA step of kda_decode_cpu_f32 on them.
  TensorMap kin = {{"q", q}, {"k", k}, {"v", v}, {"g", need(in, "g", op)}, {"beta", need(in, "beta", op)},
                   {"state_indices", need(in, "state_indices", op)}};
  for (const char* name : {"A_log", "dt_bias"})
    if (in.count(name)) kin[name] = in.at(name);
  TensorMap kout = {{"o", Tensor(DType::f32, {B, 1, HV, V})}, {"state", state}};
  kda_decode_cpu_f32(p, kin, kout);
  // 3. The gated norm of each value head's output (padding rows stay zero).
  std::vector<float> g(static_cast<size_t>(B * Cv)), w(static_cast<size_t>(V)), y(g.size(), 0.0f);
  load_row(need(in, "ogate", op), 0, B * Cv, g.data());
  load_row(need(in, "nweight", op), 0, V, w.data());
  const float* ok = kout.at("o").data<float>();
  for (int64_t b = 0; b < B; ++b)
    if (slots[static_cast<size_t>(b)] >= 0)
      gated_norm_rows(ok + b * Cv, g.data() + b * Cv, w.data(), HV, V, static_cast<float>(c.real("eps")), y.data() + b * Cv);
  store_row(need_out(out, "o", B * Cv, op), 0, B * Cv, y.data());
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_decode_fused_cpu_f32,
                      CandidateInfo{"kda_decode_fused_cpu_f32", "kda_decode_fused", "cpu", "composed", DType::f32,
                                    DType::f32, DType::f32,
                                    "the decode layer as the CPU pieces composed: conv, kda_decode_cpu_f32, gated norm"},
                      fused_cpu);

}  // namespace dg
