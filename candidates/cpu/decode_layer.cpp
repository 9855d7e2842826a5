// CPU candidates of decode_layer (harness/ops/decode_layer.cpp), kind=linear, f32 values between the
// ops:
//   decode_layer_cpu_chain_f32    the policy's naive: the registered naive CPU candidates of each op
//                                 called in the layer's order (rmsnorm, gemm, kda_decode_fused,
//                                 add_rmsnorm, moe_router, swiglu, moe_combine), the residual adds in f32
//   decode_layer_cpu_blocked_f32  the same chain on the optimized CPU kernels: the blocked norms and
//                                 GEMMs (a GPU block's reduction order, FMA) and the grouped router
// Each op's candidate runs on its own case (decode_layer_ops: dtype f32, so no op rounds the residual
// stream) and reads its inputs as they come: the stored bf16 weights, the f32 values of the op before.
#include "candidates/cpu/decode_layer.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "candidates/cpu/op_io.h"
#include "harness/core/dtype.h"
#include "harness/ops/decode_layer.h"

namespace dg::decode_layer_cpu {
namespace {

namespace ops = decode_layer_ops;

Tensor f32(std::vector<int64_t> shape) { return Tensor(DType::f32, std::move(shape)); }

// Runs candidate `name` on case `c`; returns its output `what`, allocated [rows, cols] in f32.
Tensor call(const std::string& name, const Case& c, const TensorMap& in, const char* what, int64_t rows, int64_t cols) {
  TensorMap out = {{what, f32({rows, cols})}};
  require_candidate(name).run(c, in, out);
  return out.at(what);
}
Tensor gemm(const Chain& ch, const Tensor& x, const Tensor& w) {
  const int64_t M = x.numel() / w.shape()[1], N = w.shape()[0], K = w.shape()[1];
  return call(ch.gemm, ops::gemm(M, N, K, "f32"), {{"x", x}, {"w", w}}, "y", M, N);
}
// Matrix e of a stacked [E, R, C] weight.
Tensor expert_matrix(const Tensor& w, int64_t e) {
  const int64_t R = w.shape()[1], C = w.shape()[2];
  Tensor t(w.dtype(), {R, C});
  const size_t n = t.nbytes();
  std::memcpy(t.bytes(), w.bytes() + static_cast<size_t>(e) * n, n);
  return t;
}
// Columns [c0, c0 + w) of the [N, cols] f32 matrix m, shaped `shape`.
Tensor columns(const Tensor& m, int64_t c0, int64_t w, std::vector<int64_t> shape) {
  const int64_t N = m.shape()[0], cols = m.shape()[1];
  Tensor t = f32(std::move(shape));
  for (int64_t n = 0; n < N; ++n) std::memcpy(t.data<float>() + n * w, m.data<float>() + n * cols + c0, static_cast<size_t>(w) * 4);
  return t;
}
Tensor expert(const Chain& ch, const DecodeLayerParams& p, const Tensor& rows, const Tensor& w_gu, const Tensor& w_down) {
  const int64_t n = rows.numel() / p.D;
  const Tensor gu = gemm(ch, rows, w_gu);
  const Tensor act = call(ch.swiglu, ops::swiglu(p, n, "f32"), {{"x", gu}}, "y", n, p.I);
  return gemm(ch, act, w_down);
}

// The MoE block on a2 [B, D]: the router, the routed experts (grouped by expert, or token by token),
// the shared expert, the combine.
Tensor moe(const Chain& ch, const DecodeLayerParams& p, const TensorMap& in, const Tensor& a2) {
  const int64_t B = a2.shape()[0], D = p.D, k = p.topk;
  Tensor logits = gemm(ch, a2, in.at("w_router"));
  if (ch.bf16_router)
    for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = round_bf16(logits.data<float>()[i]);
  TensorMap rout = {{"topk_ids", Tensor(DType::i32, {B, k})}, {"topk_weights", f32({B, k})}};
  require_candidate(ch.router).run(ops::router(p, B), {{"logits", logits}, {"bias", in.at("router_bias")}}, rout);
  const Tensor& ids = rout.at("topk_ids");
  Tensor& wts = rout.at("topk_weights");
  if (ch.biased_weights)   // the weights from the selection scores s + b, renormalised
    for (int64_t t = 0; t < B; ++t) {
      float sum = 0;
      std::vector<float> sel(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = static_cast<int64_t>(ids.get(t * k + j));
        const float z = logits.data<float>()[t * p.E + e];
        sel[size_t(j)] = 1.0f / (1.0f + std::exp(-z)) + static_cast<float>(in.at("router_bias").get(e));
        sum += sel[size_t(j)];
      }
      for (int64_t j = 0; j < k; ++j) wts.set(t * k + j, sel[size_t(j)] / (sum + 1e-20f));
    }
  Tensor eo = f32({B, k, D});
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(p.E));   // token * k + slot per expert
  for (int64_t s = 0; s < B * k; ++s) slots[static_cast<size_t>(ids.get(s))].push_back(s);
  for (int64_t e = 0; e < p.E; ++e) {
    const std::vector<int64_t>& sl = slots[size_t(e)];
    if (sl.empty()) continue;
    const Tensor wg = expert_matrix(in.at("w_gu"), e), wd = expert_matrix(in.at("w_down"), e);
    const size_t group = ch.per_token_experts ? 1 : sl.size();
    for (size_t s0 = 0; s0 < sl.size(); s0 += group) {
      const int64_t n = static_cast<int64_t>(std::min(group, sl.size() - s0));
      Tensor rows = f32({n, D});
      for (int64_t r = 0; r < n; ++r) std::memcpy(rows.data<float>() + r * D, a2.data<float>() + (sl[s0 + size_t(r)] / k) * D, size_t(D) * 4);
      const Tensor y = expert(ch, p, rows, wg, wd);
      for (int64_t r = 0; r < n; ++r) std::memcpy(eo.data<float>() + sl[s0 + size_t(r)] * D, y.data<float>() + r * D, size_t(D) * 4);
    }
  }
  const Tensor shared = expert(ch, p, a2, in.at("ws_gu"), in.at("ws_down"));
  return call(ch.combine, ops::combine(p, B, "f32"), {{"expert_out", eo}, {"weights", wts}, {"shared", shared}}, "y", B, D);
}

// The KDA block: kda_decode_fused's candidate on the projection's columns, against the pools.
Tensor attention(const Chain& ch, const DecodeLayerParams& p, const TensorMap& in, TensorMap& out, const Tensor& proj) {
  const int64_t B = p.B, H = p.H, K = p.K, HK = p.HK();
  TensorMap kin = {{"xq", columns(proj, p.col_q(), HK, {B, 1, H, K})},   {"xk", columns(proj, p.col_k(), HK, {B, 1, H, K})},
                   {"xv", columns(proj, p.col_v(), HK, {B, 1, H, K})},   {"g", columns(proj, p.col_g(), HK, {B, 1, H, K})},
                   {"beta", columns(proj, p.col_beta(), H, {B, 1, H})}, {"ogate", columns(proj, p.col_ogate(), HK, {B, 1, H, K})}};
  for (const char* name : {"wq", "wk", "wv", "A_log", "dt_bias", "nweight", "state_indices"}) kin[name] = in.at(name);
  TensorMap kout = {{"o", f32({B, 1, H, K})}, {"state", out.at("state")}};
  for (const char* name : {"conv_q", "conv_k", "conv_v"}) kout[name] = out.at(name);
  // The mutants that do not write a state back: the step runs on copies of the pools.
  auto copy = [](const Tensor& t) {
    Tensor c(t.dtype(), t.shape());
    std::memcpy(c.bytes(), t.bytes(), t.nbytes());
    return c;
  };
  if (ch.reset_state) kout["state"] = copy(out.at("state"));
  if (ch.reset_conv)
    for (const char* name : {"conv_q", "conv_k", "conv_v"}) kout[name] = copy(out.at(name));
  require_candidate(ch.kda).run(ops::kda(p, 1, "f32"), kin, kout);
  if (ch.bf16_state) {
    Tensor& s = out.at("state");
    for (int64_t i = 0; i < s.numel(); ++i) s.set(i, round_bf16(static_cast<float>(s.get(i))));
  }
  return kout.at("o");
}

}  // namespace

void step(const Chain& ch, const Case& c, const TensorMap& in, TensorMap& out) {
  const DecodeLayerParams p = decode_layer_params(c);
  if (p.kind != "linear") throw NotSupported("decode_layer: this candidate implements kind=linear only");
  if (p.T != 1) throw std::invalid_argument("decode_layer: a step takes one token per sequence (T=1)");
  const int64_t B = p.B, D = p.D;
  Tensor x = f32({B, D});
  load_row(need(in, "x", "decode_layer"), 0, B * D, x.data<float>());
  const Tensor a = call(ch.norm, ops::norm(p, B, false, "f32"), {{"x", x}, {"weight", in.at("in_norm")}}, "y", B, D);
  const Tensor o = attention(ch, p, in, out, gemm(ch, a, in.at("w_in")));
  Tensor att = gemm(ch, o, in.at("w_o"));
  TensorMap nout = {{"y", f32({B, D})}, {"residual_out", f32({B, D})}};
  const Tensor zero = f32({B, D});
  const Case add = ops::norm(p, B, true, "f32");
  require_candidate(ch.add_norm).run(add, {{"x", att}, {"residual", ch.no_attn_residual ? zero : x}, {"weight", in.at("post_norm")}}, nout);
  Tensor h = nout.at("residual_out"), a2 = nout.at("y");
  float* hv = h.data<float>();
  if (ch.norm_before_add) a2 = call(ch.norm, ops::norm(p, B, false, "f32"), {{"x", att}, {"weight", in.at("post_norm")}}, "y", B, D);
  if (ch.f64_residual)
    for (int64_t i = 0; i < B * D; ++i) hv[i] = static_cast<float>(double(x.data<float>()[i]) + double(att.data<float>()[i]));
  if (ch.bf16_residual)
    for (int64_t i = 0; i < B * D; ++i) hv[i] = round_bf16(hv[i]);
  const Tensor m = moe(ch, p, in, a2);
  std::vector<float> y(static_cast<size_t>(B * D));
  for (int64_t i = 0; i < B * D; ++i) {
    const float mi = m.data<float>()[i];
    y[size_t(i)] = ch.f64_residual ? static_cast<float>(double(hv[i]) + double(mi)) : hv[i] + mi;
    if (ch.residual_twice) y[size_t(i)] += x.data<float>()[i];
  }
  store_row(need_out(out, "y", B * D, "decode_layer"), 0, B * D, y.data());
}

namespace {

Chain blocked() {
  Chain ch;
  ch.norm = "rmsnorm_cpu_blocked_f32";
  ch.add_norm = "add_rmsnorm_cpu_blocked_f32";
  ch.gemm = "gemm_cpu_blocked_f32";
  ch.router = "moe_router_cpu_grouped_f32";
  return ch;
}

}  // namespace

DG_REGISTER_CANDIDATE(decode_layer_cpu_chain_f32,
                      CandidateInfo{"decode_layer_cpu_chain_f32", "decode_layer", "cpu", "chain", DType::f32, DType::f32, DType::f32,
                                    "the naive CPU candidates of each op in the layer's order, f32 between them (the policy's naive)"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) { step(Chain{}, c, in, out); });

DG_REGISTER_CANDIDATE(decode_layer_cpu_blocked_f32,
                      CandidateInfo{"decode_layer_cpu_blocked_f32", "decode_layer", "cpu", "chain", DType::f32, DType::f32, DType::f32,
                                    "the optimized CPU candidates in the layer's order: blocked norms and GEMMs, grouped router"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) { step(blocked(), c, in, out); });

}  // namespace dg::decode_layer_cpu
