// CPU candidates of decode_layer (harness/ops/decode_layer.cpp), f32 values between the ops (the
// chains also run kind=mla: rmsnorm, gemm and mla_decode's candidates against the latent pool):
//   decode_layer_cpu_chain_f32    the policy's naive: the registered naive CPU candidates of each op
//                                 called in the layer's order (rmsnorm, gemm, kda_decode_fused,
//                                 add_rmsnorm, moe_router, swiglu, moe_combine), the residual adds in f32
//   decode_layer_cpu_blocked_f32  the same chain on the optimized CPU kernels: the blocked norms and
//                                 GEMMs (a GPU block's reduction order, FMA), the grouped router, the
//                                 packed split-KV mla_decode
//   decode_layer_cpu_fused_f32    one kernel per token: every op's math written out here in f32 (FMA
//                                 dot products), no call to another candidate; both kinds
// Each op's candidate runs on its own case (decode_layer_ops: dtype f32, so no op rounds the residual
// stream) and reads its inputs as they come: the stored bf16 weights, the f32 values of the op before.
#include "candidates/cpu/decode_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
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

// Columns [c0, c0 + w) of row group h of [B, G*w]-shaped m, as [B, w].
Tensor head(const Tensor& m, int64_t h, int64_t w) { return columns(m, h * w, w, {m.shape()[0], w}); }

// The MLA block on a [B, D]: q_a, q_norm, q_b; kv_a, kv_norm, the row appended to the pool at row
// ctx of each sequence's page; W_UK absorbed per head; mla_decode's candidate; W_UV per head; o_proj.
Tensor mla_attention(const Chain& ch, const DecodeLayerParams& p, const TensorMap& in, TensorMap& out, const Tensor& a) {
  const int64_t B = p.B, H = p.H, dc = p.dc;
  need(out, "latent", "decode_layer");
  Tensor& pool = out.at("latent");
  if (pool.dtype() != DType::f32 || pool.rank() != 3 || pool.dim(0) != B + 1 || pool.dim(2) != dc || pool.dim(1) <= p.ctx)
    throw std::invalid_argument("decode_layer: the latent pool must be f32 [B+1, > ctx, dc]");
  const int64_t page = pool.dim(1);
  const Tensor cq = call(ch.norm, ops::norm_width(p, B, p.ql, "f32"), {{"x", gemm(ch, a, in.at("w_qa"))}, {"weight", in.at("q_norm")}},
                         "y", B, p.ql);
  const Tensor q = gemm(ch, cq, in.at("w_qb"));
  Tensor ckv = gemm(ch, a, in.at("w_kva"));
  if (!ch.mla_no_kv_norm) ckv = call(ch.norm, ops::norm_width(p, B, dc, "f32"), {{"x", ckv}, {"weight", in.at("kv_norm")}}, "y", B, dc);
  const std::vector<int64_t> slots = kda_cpu::state_slots(in, B, B + 1);
  for (int64_t sl : slots)
    if (sl < 0) throw std::invalid_argument("decode_layer: kind=mla has no padding slots");
  auto append = [&] {
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(pool.data<float>() + (slots[size_t(b)] * page + p.ctx) * dc, ckv.data<float>() + b * dc, size_t(dc) * 4);
  };
  if (!ch.mla_append_after) append();
  Tensor qt = f32({B, H, dc}), table(DType::i32, {B, 1}), lens(DType::i32, {B});
  for (int64_t h = 0; h < H; ++h) {
    const Tensor qh = gemm(ch, head(q, h, p.dn), mla_w_uk_t(p, in.at("w_kvb"), h, ch.mla_uk_untransposed));
    for (int64_t b = 0; b < B; ++b) std::memcpy(qt.data<float>() + (b * H + h) * dc, qh.data<float>() + b * dc, size_t(dc) * 4);
  }
  for (int64_t b = 0; b < B; ++b) {
    table.data<int32_t>()[b] = static_cast<int32_t>(slots[size_t(b)]);
    lens.data<int32_t>()[b] = static_cast<int32_t>(p.ctx + 1);
  }
  const float scale = ch.mla_latent_scale ? static_cast<float>(1.0 / std::sqrt(double(dc))) : p.mla_scale();
  TensorMap mout = {{"o", f32({B, H, dc})}, {"lse", f32({B, H})}};
  require_candidate(ch.mla).run(ops::mla(p, p.ctx + 1, page, scale, "f32"), {{"q", qt}, {"latent", pool}, {"page_table", table}, {"seqlens", lens}},
                                mout);
  if (ch.mla_append_after) append();
  Tensor heads = f32({B, H * p.dv});
  Tensor ot = f32({B, H * dc});   // o~ [B, H, dc] as rows of heads
  std::memcpy(ot.bytes(), mout.at("o").bytes(), ot.nbytes());
  for (int64_t h = 0; h < H; ++h) {
    const Tensor oh = gemm(ch, head(ot, h, dc), mla_w_uv(p, in.at("w_kvb"), h));
    for (int64_t b = 0; b < B; ++b) std::memcpy(heads.data<float>() + (b * H + h) * p.dv, oh.data<float>() + b * p.dv, size_t(p.dv) * 4);
  }
  return gemm(ch, heads, in.at("w_o"));
}

}  // namespace

void step(const Chain& ch, const Case& c, const TensorMap& in, TensorMap& out) {
  const DecodeLayerParams p = decode_layer_params(c);
  if (p.kind != "linear" && p.kind != "mla") throw NotSupported("decode_layer: this candidate implements kind=linear and kind=mla");
  if (p.T != 1) throw std::invalid_argument("decode_layer: a step takes one token per sequence (T=1)");
  const int64_t B = p.B, D = p.D;
  Tensor x = f32({B, D});
  load_row(need(in, "x", "decode_layer"), 0, B * D, x.data<float>());
  const Tensor a = call(ch.norm, ops::norm(p, B, false, "f32"), {{"x", x}, {"weight", in.at("in_norm")}}, "y", B, D);
  Tensor att = p.kind == "mla" ? mla_attention(ch, p, in, out, a) : gemm(ch, attention(ch, p, in, out, gemm(ch, a, in.at("w_in"))), in.at("w_o"));
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

Chain blocked() {
  Chain ch;
  ch.norm = "rmsnorm_cpu_blocked_f32";
  ch.add_norm = "add_rmsnorm_cpu_blocked_f32";
  ch.gemm = "gemm_cpu_blocked_f32";
  ch.router = "moe_router_cpu_grouped_f32";
  ch.mla = "mla_decode_cpu_packed_f32";
  return ch;
}

namespace {

// decode_layer_cpu_fused_f32: the step as one kernel, token by token, every op's math written out in
// f32 here (no call to another candidate): dot products by FMA in increasing index order, the conv
// and the KDA step against the pools in place, the router's top-k by a stable partial sort, the
// experts and the combine in slot order. The weights are read as f32 row by row, by each token.
namespace fused {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
std::vector<float> load(const Tensor& t, int64_t off, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  load_row(t, off, n, v.data());
  return v;
}
float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}
// y[r] = W[r, :] x for the R rows of W [R, C] starting at row r0 of `w`.
std::vector<float> matvec(const Tensor& w, int64_t r0, int64_t R, int64_t C, const float* x) {
  std::vector<float> row(static_cast<size_t>(C)), y(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    load_row(w, (r0 + r) * C, C, row.data());
    y[size_t(r)] = dot(row.data(), x, C);
  }
  return y;
}
std::vector<float> rmsnorm(const float* x, const std::vector<float>& w, float eps) {
  const int64_t D = static_cast<int64_t>(w.size());
  const float r = 1.0f / std::sqrt(dot(x, x, D) / static_cast<float>(D) + eps);
  std::vector<float> y(w.size());
  for (int64_t i = 0; i < D; ++i) y[size_t(i)] = x[i] * r * w[size_t(i)];
  return y;
}

// The conv of HK channels c0.. of the projection p against pool slot s (updated), SiLU.
void conv(const DecodeLayerParams& p, const Tensor& wt, Tensor& pool, int64_t s, const float* x, float* y) {
  const int64_t HK = p.HK(), W = p.W, S = W - 1;
  const std::vector<float> w = load(wt, 0, HK * W);
  float* ps = pool.data<float>() + s * HK * S;
  std::vector<float> h(static_cast<size_t>(W));
  for (int64_t d = 0; d < HK; ++d) {
    std::copy_n(ps + d * S, S, h.data());
    h[size_t(S)] = x[d];
    const float z = dot(w.data() + d * W, h.data(), W);
    y[d] = z / (1.0f + std::exp(-z));
    std::copy_n(h.data() + 1, S, ps + d * S);
  }
}

// One KDA head: gates, l2 norms, the delta-rule step on the K x V state St (K-first), the gated norm.
void kda_head(const DecodeLayerParams& p, const TensorMap& in, int64_t h, const float* q0, const float* k0, const float* v,
              const float* graw, float braw, const float* og, float* St, float* o) {
  const int64_t K = p.K;
  std::vector<float> q(q0, q0 + K), k(k0, k0 + K), bias = load(in.at("dt_bias"), h * K, K), nw = load(in.at("nweight"), 0, K);
  const float rq = 1.0f / std::sqrt(dot(q.data(), q.data(), K) + 1e-6f), rk = 1.0f / std::sqrt(dot(k.data(), k.data(), K) + 1e-6f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(K)), a = std::exp(static_cast<float>(in.at("A_log").get(h)));
  for (int64_t i = 0; i < K; ++i) {
    q[size_t(i)] *= rq * scale;
    k[size_t(i)] *= rk;
  }
  const float beta = sigmoid(braw);
  std::vector<float> acc(static_cast<size_t>(K), 0.0f), out(acc.size(), 0.0f);
  for (int64_t i = 0; i < K; ++i) {
    const float alpha = std::exp(-5.0f * sigmoid(a * (graw[i] + bias[size_t(i)])));
    for (int64_t j = 0; j < K; ++j) {
      St[i * K + j] *= alpha;
      acc[size_t(j)] = std::fma(St[i * K + j], k[size_t(i)], acc[size_t(j)]);
    }
  }
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < K; ++j) {
      St[i * K + j] = std::fma(beta * k[size_t(i)], v[j] - acc[size_t(j)], St[i * K + j]);
      out[size_t(j)] = std::fma(St[i * K + j], q[size_t(i)], out[size_t(j)]);
    }
  const float r = 1.0f / std::sqrt(dot(out.data(), out.data(), K) / static_cast<float>(K) + static_cast<float>(p.eps));
  for (int64_t j = 0; j < K; ++j) o[j] = out[size_t(j)] * r * nw[size_t(j)] * sigmoid(og[j]);
}

// The expert `e` (e < 0: the shared one) on a2.
std::vector<float> expert(const DecodeLayerParams& p, const TensorMap& in, int64_t e, const float* a2) {
  const int64_t D = p.D, I = p.I;
  const std::vector<float> gu = e < 0 ? matvec(in.at("ws_gu"), 0, 2 * I, D, a2) : matvec(in.at("w_gu"), e * 2 * I, 2 * I, D, a2);
  const float L = static_cast<float>(p.limit);
  std::vector<float> act(static_cast<size_t>(I));
  for (int64_t i = 0; i < I; ++i) {
    float g = gu[size_t(i)], u = gu[size_t(I + i)];
    if (L > 0) {
      g = std::min(g, L);
      u = std::clamp(u, -L, L);
    }
    act[size_t(i)] = g / (1.0f + std::exp(-g)) * u;
  }
  return e < 0 ? matvec(in.at("ws_down"), 0, D, I, act.data()) : matvec(in.at("w_down"), e * D, D, I, act.data());
}

// The MoE block on a2: the router (top-k of s + b, weights from s), the experts in slot order, the shared one.
std::vector<float> moe(const DecodeLayerParams& p, const TensorMap& in, const float* a2) {
  const std::vector<float> z = matvec(in.at("w_router"), 0, p.E, p.D, a2), b = load(in.at("router_bias"), 0, p.E);
  std::vector<float> s(z.size()), sel(z.size());
  for (size_t e = 0; e < z.size(); ++e) {
    s[e] = sigmoid(z[e]);
    sel[e] = s[e] + b[e];
  }
  std::vector<int64_t> ids(static_cast<size_t>(p.E));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int64_t x, int64_t y) { return sel[size_t(x)] > sel[size_t(y)]; });
  ids.resize(static_cast<size_t>(p.topk));
  float sum = 0.0f;
  for (int64_t e : ids) sum += s[size_t(e)];
  std::vector<float> m(static_cast<size_t>(p.D), 0.0f);
  for (int64_t e : ids) {
    const float w = static_cast<float>(p.rsf) * (s[size_t(e)] / (sum + 1e-20f));
    const std::vector<float> y = expert(p, in, e, a2);
    for (int64_t d = 0; d < p.D; ++d) m[size_t(d)] = std::fma(w, y[size_t(d)], m[size_t(d)]);
  }
  const std::vector<float> sh = expert(p, in, -1, a2);
  for (int64_t d = 0; d < p.D; ++d) m[size_t(d)] += sh[size_t(d)];
  return m;
}

// kind=linear: the in-projection, the three convs and the KDA heads against pool slot s, the o-projection.
std::vector<float> kda_attention(const DecodeLayerParams& p, const TensorMap& in, TensorMap& out, int64_t s, const std::vector<float>& a) {
  const int64_t D = p.D, H = p.H, K = p.K, HK = p.HK();
  const std::vector<float> pr = matvec(in.at("w_in"), 0, p.n_in(), D, a.data());
  std::vector<float> qkv(static_cast<size_t>(3 * HK)), o(static_cast<size_t>(HK));
  conv(p, in.at("wq"), out.at("conv_q"), s, pr.data() + p.col_q(), qkv.data());
  conv(p, in.at("wk"), out.at("conv_k"), s, pr.data() + p.col_k(), qkv.data() + HK);
  conv(p, in.at("wv"), out.at("conv_v"), s, pr.data() + p.col_v(), qkv.data() + 2 * HK);
  float* state = out.at("state").data<float>() + s * H * K * K;
  for (int64_t h = 0; h < H; ++h)
    kda_head(p, in, h, qkv.data() + h * K, qkv.data() + HK + h * K, qkv.data() + 2 * HK + h * K, pr.data() + p.col_g() + h * K,
             pr[size_t(p.col_beta() + h)], pr.data() + p.col_ogate() + h * K, state + h * K * K, o.data() + h * K);
  return matvec(in.at("w_o"), 0, D, HK, o.data());
}

// One MLA head on its absorbed query qt [dc] over the latent rows [0, n) of lat: scores by FMA dot
// products times the configured scale, one online softmax in row order (f32 m, l and acc, rescaled
// at each new maximum), then W_UV,h (rows dn.. of the head's block of w_kvb) on acc / l into oh [dv].
void mla_head(const DecodeLayerParams& p, const TensorMap& in, int64_t h, const std::vector<float>& qt, const float* lat, int64_t n,
              float* oh) {
  const int64_t dc = p.dc;
  const float scale = p.mla_scale();
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  std::vector<float> acc(static_cast<size_t>(dc), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* r = lat + t * dc;
    const float sc = dot(qt.data(), r, dc) * scale;
    const float m_new = std::max(m, sc), alpha = std::exp(m - m_new), e = std::exp(sc - m_new);
    l = l * alpha + e;
    for (int64_t j = 0; j < dc; ++j) acc[size_t(j)] = std::fma(e, r[j], acc[size_t(j)] * alpha);
    m = m_new;
  }
  for (float& v : acc) v = v / l;   // n >= 1: the token's own row is always there
  const std::vector<float> o = matvec(in.at("w_kvb"), h * p.kvb_rows() + p.dn, p.dv, dc, acc.data());
  std::copy(o.begin(), o.end(), oh);
}

// kind=mla against latent page s (rows [0, ctx) cached, row ctx this token's): q_a, q_norm, q_b;
// kv_a, kv_norm, the row written before the attention; per head W_UK,h absorbed into the query (its
// rows scaled by q_h and added in increasing row order), mla_head; the o-projection.
std::vector<float> mla_attention(const DecodeLayerParams& p, const TensorMap& in, Tensor& pool, int64_t s, const std::vector<float>& a) {
  const int64_t H = p.H, dc = p.dc, dn = p.dn, page = pool.dim(1);
  const float eps = static_cast<float>(p.eps);
  const std::vector<float> cq = rmsnorm(matvec(in.at("w_qa"), 0, p.ql, p.D, a.data()).data(), load(in.at("q_norm"), 0, p.ql), eps);
  const std::vector<float> q = matvec(in.at("w_qb"), 0, H * dn, p.ql, cq.data());
  const std::vector<float> ckv = rmsnorm(matvec(in.at("w_kva"), 0, dc, p.D, a.data()).data(), load(in.at("kv_norm"), 0, dc), eps);
  float* lat = pool.data<float>() + s * page * dc;
  std::copy(ckv.begin(), ckv.end(), lat + p.ctx * dc);
  std::vector<float> heads(static_cast<size_t>(H * p.dv)), qt(static_cast<size_t>(dc)), row(static_cast<size_t>(dc));
  for (int64_t h = 0; h < H; ++h) {
    std::fill(qt.begin(), qt.end(), 0.0f);
    for (int64_t i = 0; i < dn; ++i) {
      load_row(in.at("w_kvb"), (h * p.kvb_rows() + i) * dc, dc, row.data());
      for (int64_t j = 0; j < dc; ++j) qt[size_t(j)] = std::fma(q[size_t(h * dn + i)], row[size_t(j)], qt[size_t(j)]);
    }
    mla_head(p, in, h, qt, lat, p.ctx + 1, heads.data() + h * p.dv);
  }
  return matvec(in.at("w_o"), 0, p.D, H * p.dv, heads.data());
}

// One token b of the step against pool slot s: y = the layer's output.
void token(const DecodeLayerParams& p, const TensorMap& in, TensorMap& out, int64_t b, int64_t s, float* y) {
  const int64_t D = p.D;
  const std::vector<float> x = load(in.at("x"), b * D, D);
  const std::vector<float> a = rmsnorm(x.data(), load(in.at("in_norm"), 0, D), static_cast<float>(p.eps));
  const std::vector<float> att = p.kind == "mla" ? mla_attention(p, in, out.at("latent"), s, a) : kda_attention(p, in, out, s, a);
  std::vector<float> hres(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) hres[size_t(d)] = x[size_t(d)] + att[size_t(d)];
  const std::vector<float> a2 = rmsnorm(hres.data(), load(in.at("post_norm"), 0, D), static_cast<float>(p.eps));
  const std::vector<float> m = moe(p, in, a2.data());
  for (int64_t d = 0; d < D; ++d) y[d] = hres[size_t(d)] + m[size_t(d)];
}

// The pool slot of each token (-1: padding, skipped): kind=mla's latent pages (one per slot, no
// padding), kind=linear's state and conv pools.
std::vector<int64_t> slots_of(const DecodeLayerParams& p, const TensorMap& in, TensorMap& out) {
  if (p.kind == "mla") {
    const Tensor& pool = need(out, "latent", "decode_layer");
    if (pool.dtype() != DType::f32 || pool.rank() != 3 || pool.dim(0) != p.B + 1 || pool.dim(2) != p.dc || pool.dim(1) <= p.ctx)
      throw std::invalid_argument("decode_layer: the latent pool must be f32 [B+1, > ctx, dc]");
    const std::vector<int64_t> slots = kda_cpu::state_slots(in, p.B, p.B + 1);
    for (int64_t sl : slots)
      if (sl < 0) throw std::invalid_argument("decode_layer: kind=mla has no padding slots");
    return slots;
  }
  for (const char* pool : {"state", "conv_q", "conv_k", "conv_v"})
    if (need(out, pool, "decode_layer").dtype() != DType::f32) throw std::invalid_argument("decode_layer: the pools must be f32");
  return kda_cpu::state_slots(in, p.B, out.at("state").numel() / (p.H * p.K * p.K));
}

void step(const Case& c, const TensorMap& in, TensorMap& out) {
  const DecodeLayerParams p = decode_layer_params(c);
  if (p.kind != "linear" && p.kind != "mla") throw NotSupported("decode_layer: this candidate implements kind=linear and kind=mla");
  if (p.T != 1) throw std::invalid_argument("decode_layer: a step takes one token per sequence (T=1)");
  const std::vector<int64_t> slots = slots_of(p, in, out);
  std::vector<float> y(static_cast<size_t>(p.B * p.D), 0.0f);
  for (int64_t b = 0; b < p.B; ++b)
    if (slots[size_t(b)] >= 0) token(p, in, out, b, slots[size_t(b)], y.data() + b * p.D);
  store_row(need_out(out, "y", p.B * p.D, "decode_layer"), 0, p.B * p.D, y.data());
}

}  // namespace fused

}  // namespace

DG_REGISTER_CANDIDATE(decode_layer_cpu_chain_f32,
                      CandidateInfo{"decode_layer_cpu_chain_f32", "decode_layer", "cpu", "chain", DType::f32, DType::f32, DType::f32,
                                    "the naive CPU candidates of each op in the layer's order, f32 between them (the policy's naive)"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) { step(Chain{}, c, in, out); });

DG_REGISTER_CANDIDATE(decode_layer_cpu_blocked_f32,
                      CandidateInfo{"decode_layer_cpu_blocked_f32", "decode_layer", "cpu", "chain", DType::f32, DType::f32, DType::f32,
                                    "the optimized CPU candidates in the layer's order: blocked norms and GEMMs, grouped router"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) { step(blocked(), c, in, out); });

DG_REGISTER_CANDIDATE(decode_layer_cpu_fused_f32,
                      CandidateInfo{"decode_layer_cpu_fused_f32", "decode_layer", "cpu", "fused", DType::f32, DType::f32, DType::f32,
                                    "the step as one kernel per token, every op's math written out in f32 with FMA dot products"},
                      fused::step);

}  // namespace dg::decode_layer_cpu
