// OpSpec of decode_layer: one whole GLM-5.3-Flash decoder layer at decode, T steps of B sequences
// (notes/model-ops.md sections 1.2, 1.5, 1.7, shapes in section 2). kind=linear, the KDA layer, per
// step and token, with x the hidden state entering the layer:
//   a     = rmsnorm(x, in_norm)                                  input_layernorm
//   p     = a W_in^T = [q | k | v | g | beta | ogate]            the in-projection (g and ogate full rank)
//   o     = kda_decode_fused(p, conv states, KDA state)          conv + SiLU, KDA step, gated norm
//   h     = x + o W_o^T;  a2 = rmsnorm(h, post_norm)             add_rmsnorm: the residual stream
//   ids, w = moe_router(a2 W_r^T, router_bias)                   sigmoid, top-k of the biased scores
//   e_j   = W_d[j] swiglu(W_gu[j] a2) per routed expert;  s = the same with the shared expert
//   y     = h + moe_combine(e, w, rsf, s)                        the layer's output, the next residual
// The residual stream is not rounded inside the layer (the layer is defined in exact arithmetic from
// its stored inputs: x, the bf16 weights and the f32 parameters); a candidate keeps it in f32.
// mHC (section 1.6) is not part of this layer: its streams are the op mhc's.
//
// The reference is the composition of the op references at the tier, through their OpSpecs: rmsnorm,
// gemm, kda_decode_fused, add_rmsnorm, moe_router, swiglu, moe_combine, each on its case at dtype f64
// (decode_layer_ops); the values passed between them are their outputs, doubles rounded to odd.
// Certification measures both error sources: the tier against the tier above, and the interfaces by
// composing again with every passed value moved one double ULP away from zero (each rounding to odd
// moves a value by less than that).
//
// The driver runs T steps against pools that live in the candidate between steps, as
// kda_decode_fused's: the KDA state ("state", the candidate's state dtype) and the conv states
// ("conv_q", "conv_k", "conv_v", f32), sequence b in slot kda_decode_slot(b, B).
//
// kind=mla, the NoPE-MLA layer (section 1.3; GLM-5.3-Flash: ql 1536, dc 512, dn 256, dv 256, no
// rope), per step and token; the MoE half (ffn_half, moe) is the linear layer's:
//   a     = rmsnorm(x, in_norm)
//   c_q   = rmsnorm(a W_qa^T, q_norm);  q = c_q W_qb^T             [H, dn]
//   c_kv  = rmsnorm(a W_kva^T, kv_norm)                          appended to the latent cache first
//   q~_h  = W_UK,h^T q_h                                         the absorption (gemm per head)
//   o~    = mla_decode(q~, the cache's ctx + t + 1 rows)         scale dn^-0.5 (1/16), dense
//   att   = [W_UV,h o~_h]_h W_o^T                                then ffn_half as above
// with W_UK,h and W_UV,h the rows [dn | dv] of head h of kv_b_proj (w_kvb). The cache before the
// first step is the input kv0 [B,ctx,dc]; the output "latent" [B,ctx+T,dc] is the cache after T
// steps. mla_ref composes the references as linear_ref does; the driver carries the cache in an f32
// pool [B+1, ctx+T, dc] (sequence b in page kda_decode_slot(b, B), a spare page), step t's case
// having T=1 and ctx = ctx+t (the rows already cached).
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/decode_layer.h"
#include "harness/ops/kda.h"
#include "harness/ops/op_common.h"

namespace dg {

DecodeLayerParams decode_layer_params(const Case& c) {
  DecodeLayerParams p;
  p.kind = c.text("kind");
  p.B = c.integer("B");
  p.T = c.integer("T");
  p.D = c.integer("D");
  p.H = c.integer("H");
  p.K = c.integer("K");
  p.W = c.integer("W");
  p.E = c.integer("E");
  p.topk = c.integer("k");
  p.I = c.integer("I");
  p.rsf = c.real("rsf");
  p.limit = c.real("limit");
  p.eps = c.real("eps");
  p.dtype = c.dtype();
  p.ql = c.integer("ql");
  p.dc = c.integer("dc");
  p.dn = c.integer("dn");
  p.dv = c.integer("dv");
  p.ctx = c.integer("ctx");
  return p;
}

float DecodeLayerParams::mla_scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dn))); }

Tensor mla_w_uk_t(const DecodeLayerParams& p, const Tensor& w_kvb, int64_t h, bool untransposed) {
  Tensor t(w_kvb.dtype(), {p.dc, p.dn});
  const int64_t r0 = h * p.kvb_rows() * p.dc;
  for (int64_t i = 0; i < p.dn; ++i)
    for (int64_t j = 0; j < p.dc; ++j) {
      const double v = w_kvb.get(r0 + i * p.dc + j);
      if (untransposed) t.set(i * p.dc + j, v);
      else t.set(j * p.dn + i, v);
    }
  return t;
}
Tensor mla_w_uv(const DecodeLayerParams& p, const Tensor& w_kvb, int64_t h) {
  Tensor t(w_kvb.dtype(), {p.dv, p.dc});
  const int64_t r0 = (h * p.kvb_rows() + p.dn) * p.dc;
  for (int64_t i = 0; i < p.dv * p.dc; ++i) t.set(i, w_kvb.get(r0 + i));
  return t;
}

namespace decode_layer_ops {
Case norm(const DecodeLayerParams& p, int64_t rows, bool add, const char* dtype) {
  return parse_case(fmt::format("{}(N={},D={},eps={},regime=hidden,dtype={},seed=0)", add ? "add_rmsnorm" : "rmsnorm", rows,
                                p.D, p.eps, dtype));
}
Case norm_width(const DecodeLayerParams& p, int64_t rows, int64_t width, const char* dtype) {
  return parse_case(fmt::format("rmsnorm(N={},D={},eps={},regime=hidden,dtype={},seed=0)", rows, width, p.eps, dtype));
}
Case mla(const DecodeLayerParams& p, int64_t len, int64_t page, float scale, const char* dtype) {
  return parse_case(fmt::format("mla_decode(B={},n_h={},d_c={},rope=0,page={},split=1,ctx={},scale={:.9g},regime=typical,dtype={},seed=0)",
                                p.B, p.H, p.dc, page, len, scale, dtype));
}
Case gemm(int64_t M, int64_t N, int64_t K, const char* dtype) {
  return parse_case(fmt::format("gemm(M={},N={},K={},regime=activations,dtype={},seed=0)", M, N, K, dtype));
}
Case kda(const DecodeLayerParams& p, int64_t steps, const char* dtype) {
  return parse_case(fmt::format("kda_decode_fused(T={},B={},H={},K={},V={},W={},eps={},gate=lower_bound,lb=-5,beta=sigmoid,"
                                "h0=1,regime=glm_safe_gate,dtype={},seed=0)",
                                steps, p.B, p.H, p.K, p.K, p.W, p.eps, dtype));
}
Case router(const DecodeLayerParams& p, int64_t rows) {
  return parse_case(fmt::format("moe_router(T={},E={},k={},rsf=1,regime=production,dtype=f32,seed=0)", rows, p.E, p.topk));
}
Case swiglu(const DecodeLayerParams& p, int64_t rows, const char* dtype) {
  return parse_case(fmt::format("swiglu(N={},I={},limit={},regime=expert,dtype={},seed=0)", rows, p.I, p.limit, dtype));
}
Case combine(const DecodeLayerParams& p, int64_t rows, const char* dtype) {
  return parse_case(fmt::format("moe_combine(T={},topk={},H={},rsf={},rsf_on=weights,shared=1,regime=production,dtype={},seed=0)",
                                rows, p.topk, p.D, p.rsf, dtype));
}
}  // namespace decode_layer_ops

namespace {

namespace ops = decode_layer_ops;
using Values = std::vector<double>;

Tensor f64_tensor(std::vector<int64_t> shape, const Values& v) {
  Tensor t(DType::f64, std::move(shape));
  std::memcpy(t.bytes(), v.data(), t.nbytes());
  return t;
}
Values values_of(const Tensor& t) {
  Values v(static_cast<size_t>(t.numel()));
  t.read(0, v);
  return v;
}
// Rows [r0, r0 + rows) of the [.., cols] matrix `e` of a stacked [E, rows_e, cols] weight, as a tensor.
Tensor expert_matrix(const Tensor& w, int64_t e, int64_t rows, int64_t cols) {
  Tensor t(w.dtype(), {rows, cols});
  const size_t n = static_cast<size_t>(rows * cols) * static_cast<size_t>(info(w.dtype()).storage_bytes);
  std::memcpy(t.bytes(), w.bytes() + static_cast<size_t>(e) * n, n);
  return t;
}
// Columns [c0, c0 + w) of an [N, cols] row-major matrix.
Values columns(const Values& m, int64_t N, int64_t cols, int64_t c0, int64_t w) {
  Values out(static_cast<size_t>(N * w));
  for (int64_t n = 0; n < N; ++n) std::copy_n(m.begin() + n * cols + c0, w, out.begin() + n * w);
  return out;
}

// One composition: the op references at `tier`; with `nudge`, every value passed between them
// moved one double ULP away from zero.
struct Composer {
  Tier tier;
  bool nudge;
  RefOutputs run(const char* op, const Case& c, const TensorMap& in) const {
    RefOutputs r = find_op(op)->reference(c, in, tier, -1);
    if (nudge)
      for (auto& [name, v] : r)
        if (name != "topk_ids")
          for (double& x : v)
            if (x != 0 && std::isfinite(x)) x = std::nextafter(x, x > 0 ? INFINITY : -INFINITY);
    return r;
  }
  Values gemm(const Values& x, int64_t M, const Tensor& w) const {
    const int64_t N = w.shape()[0], K = w.shape()[1];
    return run("gemm", ops::gemm(M, N, K, "f64"), {{"x", f64_tensor({M, K}, x)}, {"w", w}}).at("y");
  }
};

// The routed experts and the shared expert on the rows a2 [N, D], combined: moe_combine's output.
Values moe(const DecodeLayerParams& p, const Composer& cx, const TensorMap& in, const Values& a2, int64_t N) {
  const int64_t D = p.D, I = p.I, k = p.topk;
  RefOutputs rt = cx.run("moe_router", ops::router(p, N),
                         {{"logits", f64_tensor({N, p.E}, cx.gemm(a2, N, in.at("w_router")))}, {"bias", in.at("router_bias")}});
  const Values &ids = rt.at("topk_ids"), &wts = rt.at("topk_weights");
  auto expert = [&](const Values& rows, int64_t n, const Tensor& w_gu, const Tensor& w_down) {
    const Values gu = cx.gemm(rows, n, w_gu);
    const Values act = cx.run("swiglu", ops::swiglu(p, n, "f64"), {{"x", f64_tensor({n, 2 * I}, gu)}}).at("y");
    return cx.gemm(act, n, w_down);
  };
  Values eo(static_cast<size_t>(N * k * D));
  for (int64_t e = 0; e < p.E; ++e) {
    std::vector<int64_t> slots;   // token * k + slot of each row routed to e
    for (int64_t s = 0; s < N * k; ++s)
      if (static_cast<int64_t>(ids[static_cast<size_t>(s)]) == e) slots.push_back(s);
    if (slots.empty()) continue;
    const int64_t n = static_cast<int64_t>(slots.size());
    Values rows(static_cast<size_t>(n * D));
    for (int64_t r = 0; r < n; ++r) std::copy_n(a2.begin() + (slots[size_t(r)] / k) * D, D, rows.begin() + r * D);
    const Values y = expert(rows, n, expert_matrix(in.at("w_gu"), e, 2 * I, D), expert_matrix(in.at("w_down"), e, D, I));
    for (int64_t r = 0; r < n; ++r) std::copy_n(y.begin() + r * D, D, eo.begin() + slots[size_t(r)] * D);
  }
  const Values shared = expert(a2, N, in.at("ws_gu"), in.at("ws_down"));
  return cx.run("moe_combine", ops::combine(p, N, "f64"),
                {{"expert_out", f64_tensor({N, k, D}, eo)}, {"weights", f64_tensor({N, k}, wts)}, {"shared", f64_tensor({N, D}, shared)}})
      .at("y");
}

// The layer's second half, the same for every kind: h = x + att (add_rmsnorm), the MoE block on
// rmsnorm(h), y = h + moe.
Values ffn_half(const DecodeLayerParams& p, const Composer& cx, const TensorMap& in, const Tensor& x, const Values& att, int64_t N) {
  const int64_t D = p.D;
  RefOutputs an = cx.run("add_rmsnorm", ops::norm(p, N, true, "f64"),
                         {{"x", f64_tensor({N, D}, att)}, {"residual", x}, {"weight", in.at("post_norm")}});
  const Values m = moe(p, cx, in, an.at("y"), N);
  return cx
      .run("add_rmsnorm", ops::norm(p, N, true, "f64"),
           {{"x", f64_tensor({N, D}, m)}, {"residual", f64_tensor({N, D}, an.at("residual_out"))}, {"weight", in.at("post_norm")}})
      .at("residual_out");
}

// The linear layer on the first Tc steps (Tc = T when max_tokens < 0); a cut case's y past Tc and
// its final states are NaN.
RefOutputs linear_ref(const Case& c, const TensorMap& in, Tier tier, int64_t max_tokens, bool nudge = false) {
  const DecodeLayerParams p = decode_layer_params(c);
  const Composer cx{tier, nudge};
  const int64_t B = p.B, T = p.T, Tc = max_tokens >= 0 ? std::min(max_tokens, T) : T, N = B * Tc, D = p.D, HK = p.HK();
  auto cut = [&](const char* name) { return Tc == T ? in.at(name) : leading_slice(in.at(name), 1, Tc); };
  const Tensor x = f64_tensor({N, D}, values_of(cut("x")));
  const Values a = cx.run("rmsnorm", ops::norm(p, N, false, "f64"), {{"x", x}, {"weight", in.at("in_norm")}}).at("y");
  const Values proj = cx.gemm(a, N, in.at("w_in"));
  auto part = [&](int64_t c0, int64_t w, std::vector<int64_t> shape) { return f64_tensor(shape, columns(proj, N, p.n_in(), c0, w)); };
  TensorMap kin = {{"xq", part(p.col_q(), HK, {B, Tc, p.H, p.K})},   {"xk", part(p.col_k(), HK, {B, Tc, p.H, p.K})},
                   {"xv", part(p.col_v(), HK, {B, Tc, p.H, p.K})},   {"g", part(p.col_g(), HK, {B, Tc, p.H, p.K})},
                   {"beta", part(p.col_beta(), p.H, {B, Tc, p.H})}, {"ogate", part(p.col_ogate(), HK, {B, Tc, p.H, p.K})}};
  for (const char* name : {"wq", "wk", "wv", "conv_q0", "conv_k0", "conv_v0", "A_log", "dt_bias", "h0", "nweight"}) kin[name] = in.at(name);
  RefOutputs kr = cx.run("kda_decode_fused", ops::kda(p, Tc, "f64"), kin);
  Values y = ffn_half(p, cx, in, x, cx.gemm(kr.at("o"), N, in.at("w_o")), N);
  RefOutputs out;
  if (Tc == T) {
    out["y"] = std::move(y);
    for (const char* s : {"ht", "conv_q", "conv_k", "conv_v"}) out[s] = std::move(kr.at(s));
    return out;
  }
  Values yc(static_cast<size_t>(B * T * D), NAN);
  for (int64_t b = 0; b < B; ++b) std::copy_n(y.begin() + b * Tc * D, Tc * D, yc.begin() + b * T * D);
  out["y"] = std::move(yc);
  for (const char* s : {"ht", "conv_q", "conv_k", "conv_v"}) out[s] = Values(kr.at(s).size(), NAN);
  return out;
}

// Columns [c0, c0 + w) of the rows of step t (rows b * Tc + t) of an [N, cols] matrix, as [B, w].
Values step_rows(const Values& m, int64_t B, int64_t Tc, int64_t t, int64_t cols, int64_t c0, int64_t w) {
  Values out(static_cast<size_t>(B * w));
  for (int64_t b = 0; b < B; ++b) std::copy_n(m.begin() + (b * Tc + t) * cols + c0, w, out.begin() + b * w);
  return out;
}

// The absorbed attention of the N = B * Tc tokens: q~_h = W_UK,h^T q_nope,h; mla_decode step by step
// over the latent cache (kv0's ctx rows, then every step's c_kv appended before its attention);
// o_h = W_UV,h o~_h. Returns the heads' outputs [N, H*dv] and the cache [B, cap, dc] (rows past the
// last step's zero).
std::pair<Values, Values> mla_attention(const DecodeLayerParams& p, const Composer& cx, const TensorMap& in, const Values& q,
                                        const Values& ckv, int64_t Tc) {
  const int64_t B = p.B, H = p.H, N = B * Tc, dc = p.dc, cap = p.cap();
  Values qt(static_cast<size_t>(N * H * dc));   // [N, H, dc]
  for (int64_t h = 0; h < H; ++h) {
    const Values qh = cx.gemm(columns(q, N, H * p.dn, h * p.dn, p.dn), N, mla_w_uk_t(p, in.at("w_kvb"), h));
    for (int64_t n = 0; n < N; ++n) std::copy_n(qh.begin() + n * dc, dc, qt.begin() + (n * H + h) * dc);
  }
  Values cache(static_cast<size_t>((B + 1) * cap * dc), 0.0);   // page b: sequence b; a spare page
  for (int64_t b = 0; b < B; ++b) {
    Values kv0(static_cast<size_t>(p.ctx * dc));
    in.at("kv0").read(b * p.ctx * dc, kv0);
    std::copy(kv0.begin(), kv0.end(), cache.begin() + b * cap * dc);
    for (int64_t t = 0; t < Tc; ++t) std::copy_n(ckv.begin() + (b * Tc + t) * dc, dc, cache.begin() + (b * cap + p.ctx + t) * dc);
  }
  Tensor table(DType::i32, {B, 1});
  for (int64_t b = 0; b < B; ++b) table.data<int32_t>()[b] = static_cast<int32_t>(b);
  Values ot(qt.size());
  for (int64_t t = 0; t < Tc; ++t) {
    const int64_t len = p.ctx + t + 1;
    Tensor lens(DType::i32, {B});
    for (int64_t b = 0; b < B; ++b) lens.data<int32_t>()[b] = static_cast<int32_t>(len);
    const Values o = cx.run("mla_decode", ops::mla(p, len, cap, p.mla_scale(), "f64"),
                            {{"q", f64_tensor({B, H, dc}, step_rows(qt, B, Tc, t, H * dc, 0, H * dc))},
                             {"latent", f64_tensor({B + 1, cap, dc}, cache)}, {"page_table", table}, {"seqlens", lens}})
                         .at("o");
    for (int64_t b = 0; b < B; ++b) std::copy_n(o.begin() + b * H * dc, H * dc, ot.begin() + (b * Tc + t) * H * dc);
  }
  Values heads(static_cast<size_t>(N * H * p.dv));
  for (int64_t h = 0; h < H; ++h) {
    const Values oh = cx.gemm(columns(ot, N, H * dc, h * dc, dc), N, mla_w_uv(p, in.at("w_kvb"), h));
    for (int64_t n = 0; n < N; ++n) std::copy_n(oh.begin() + n * p.dv, p.dv, heads.begin() + (n * H + h) * p.dv);
  }
  cache.resize(static_cast<size_t>(B * cap * dc));
  return {std::move(heads), std::move(cache)};
}

// The MLA layer on the first Tc steps, as linear_ref: rmsnorm; q_a, q_norm, q_b; kv_a, kv_norm; the
// absorbed attention; o_proj; ffn_half. A cut case's y past Tc and its cache are NaN.
RefOutputs mla_ref(const Case& c, const TensorMap& in, Tier tier, int64_t max_tokens, bool nudge = false) {
  const DecodeLayerParams p = decode_layer_params(c);
  const Composer cx{tier, nudge};
  const int64_t B = p.B, T = p.T, Tc = max_tokens >= 0 ? std::min(max_tokens, T) : T, N = B * Tc, D = p.D;
  const Tensor x = f64_tensor({N, D}, values_of(Tc == T ? in.at("x") : leading_slice(in.at("x"), 1, Tc)));
  const Values a = cx.run("rmsnorm", ops::norm(p, N, false, "f64"), {{"x", x}, {"weight", in.at("in_norm")}}).at("y");
  const Values cq = cx.run("rmsnorm", ops::norm_width(p, N, p.ql, "f64"),
                           {{"x", f64_tensor({N, p.ql}, cx.gemm(a, N, in.at("w_qa")))}, {"weight", in.at("q_norm")}})
                        .at("y");
  const Values ckv = cx.run("rmsnorm", ops::norm_width(p, N, p.dc, "f64"),
                            {{"x", f64_tensor({N, p.dc}, cx.gemm(a, N, in.at("w_kva")))}, {"weight", in.at("kv_norm")}})
                         .at("y");
  auto [heads, cache] = mla_attention(p, cx, in, cx.gemm(cq, N, in.at("w_qb")), ckv, Tc);
  Values y = ffn_half(p, cx, in, x, cx.gemm(heads, N, in.at("w_o")), N);
  RefOutputs out;
  if (Tc == T) {
    out["y"] = std::move(y);
    out["latent"] = std::move(cache);
    return out;
  }
  Values yc(static_cast<size_t>(B * T * D), NAN);
  for (int64_t b = 0; b < B; ++b) std::copy_n(y.begin() + b * Tc * D, Tc * D, yc.begin() + b * T * D);
  out["y"] = std::move(yc);
  out["latent"] = Values(cache.size(), NAN);
  return out;
}

RefOutputs kind_ref(const Case& c, const TensorMap& in, Tier tier, int64_t max_tokens, bool nudge = false) {
  return c.text("kind") == "mla" ? mla_ref(c, in, tier, max_tokens, nudge) : linear_ref(c, in, tier, max_tokens, nudge);
}

// The reference of a case's kind.
RefOutputs layer_ref(const Case& c, const TensorMap& in, Tier tier, int64_t max_tokens) { return kind_ref(c, in, tier, max_tokens); }

// The MoE half's weights (every kind) and the hidden states.
std::map<std::string, InputSpec> shared_inputs(const DecodeLayerParams& p) {
  const DType dt = p.dtype, f32 = DType::f32;
  return {{"x", {dt, {p.B, p.T, p.D}}},         {"in_norm", {dt, {p.D}}},           {"post_norm", {dt, {p.D}}},
          {"w_router", {f32, {p.E, p.D}}},      {"router_bias", {f32, {p.E}}},      {"w_gu", {dt, {p.E, 2 * p.I, p.D}}},
          {"w_down", {dt, {p.E, p.D, p.I}}},    {"ws_gu", {dt, {2 * p.I, p.D}}},    {"ws_down", {dt, {p.D, p.I}}}};
}

std::map<std::string, InputSpec> layer_inputs(const Case& c) {
  const DecodeLayerParams p = decode_layer_params(c);
  const DType dt = p.dtype, f32 = DType::f32;
  if (p.kind == "mla") {
    std::map<std::string, InputSpec> in = shared_inputs(p);
    in.insert({{"w_qa", {dt, {p.ql, p.D}}},
               {"q_norm", {dt, {p.ql}}},
               {"w_qb", {dt, {p.H * p.dn, p.ql}}},
               {"w_kva", {dt, {p.dc, p.D}}},
               {"kv_norm", {dt, {p.dc}}},
               {"w_kvb", {dt, {p.H * p.kvb_rows(), p.dc}}},
               {"w_o", {dt, {p.D, p.H * p.dv}}},
               {"kv0", {dt, {p.B, p.ctx, p.dc}}}});
    return in;
  }
  const int64_t HK = p.HK(), S = p.W - 1;
  return {{"x", {dt, {p.B, p.T, p.D}}},          {"in_norm", {dt, {p.D}}},
          {"w_in", {dt, {p.n_in(), p.D}}},        {"wq", {f32, {HK, p.W}}},
          {"wk", {f32, {HK, p.W}}},               {"wv", {f32, {HK, p.W}}},
          {"conv_q0", {f32, {p.B, HK, S}}},       {"conv_k0", {f32, {p.B, HK, S}}},
          {"conv_v0", {f32, {p.B, HK, S}}},       {"A_log", {f32, {p.H}}},
          {"dt_bias", {f32, {HK}}},               {"h0", {f32, {p.B, p.H, p.K, p.K}}},
          {"nweight", {f32, {p.K}}},              {"w_o", {dt, {p.D, HK}}},
          {"post_norm", {dt, {p.D}}},             {"w_router", {f32, {p.E, p.D}}},
          {"router_bias", {f32, {p.E}}},          {"w_gu", {dt, {p.E, 2 * p.I, p.D}}},
          {"w_down", {dt, {p.E, p.D, p.I}}},      {"ws_gu", {dt, {2 * p.I, p.D}}},
          {"ws_down", {dt, {p.D, p.I}}}};
}

void layer_validate(const Case& c) {
  const DecodeLayerParams p = decode_layer_params(c);
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw InputError("decode_layer: " + what);
  };
  need(p.kind == "linear" || p.kind == "mla", fmt::format("kind must be linear or mla, got '{}'", p.kind));
  need(p.B >= 1 && p.T >= 1, fmt::format("B and T must be >= 1, got B={} T={}", p.B, p.T));
  need(p.D >= 1 && p.H >= 1 && p.I >= 1, fmt::format("D, H and I must be >= 1, got D={} H={} I={}", p.D, p.H, p.I));
  if (p.kind == "mla") {
    need(p.H <= 128, fmt::format("kind=mla: H (query heads) must be at most 128, got {}", p.H));
    need(p.ql >= 1 && p.dn >= 1 && p.dv >= 1, fmt::format("kind=mla: ql, dn and dv must be >= 1, got ql={} dn={} dv={}", p.ql, p.dn, p.dv));
    need(p.dc >= 1 && p.dc <= 1024, fmt::format("kind=mla: dc must be in [1, 1024], got {}", p.dc));
    need(p.ctx >= 0 && p.ctx <= (int64_t{1} << 20), fmt::format("kind=mla: ctx must be in [0, 2^20], got {}", p.ctx));
    checked_product("decode_layer: B*(ctx+T)*dc", {p.B + 1, p.cap(), p.dc});
    checked_product("decode_layer: H*(dn+dv)*dc", {p.H, p.kvb_rows(), p.dc});
    checked_product("decode_layer: H*dn*ql", {p.H, p.dn, p.ql});
  }
  need(p.K >= 1 && p.K <= 256, fmt::format("K must be in [1, 256], got {}", p.K));
  need(p.W >= 1 && p.W <= 8, fmt::format("W must be in [1, 8], got {}", p.W));
  need(p.E >= 1 && p.topk >= 1 && p.topk <= p.E, fmt::format("need 1 <= k <= E, got k={} E={}", p.topk, p.E));
  need(p.rsf > 0 && std::isfinite(p.rsf), fmt::format("rsf must be > 0, got {}", p.rsf));
  need(p.limit >= 0 && std::isfinite(p.limit), fmt::format("limit must be >= 0, got {}", p.limit));
  need(p.eps > 0 && std::isfinite(p.eps), fmt::format("eps must be > 0, got {}", p.eps));
  checked_product("decode_layer: E*2I*D", {p.E, 2 * p.I, p.D});
  checked_product("decode_layer: B*T*D", {p.B, p.T, p.D});
  checked_product("decode_layer: (5HK+H)*D", {p.n_in(), p.D});
  checked_product("decode_layer: B*H*K*K", {p.B, p.H, p.K, p.K});
}

// Each step's y [B,1,D] into row t of y [B,T,D].
void store_step(const DecodeLayerParams& p, const Tensor& step_y, Tensor& y, int64_t t) {
  const size_t row = static_cast<size_t>(p.D) * static_cast<size_t>(info(y.dtype()).storage_bytes);
  for (int64_t b = 0; b < p.B; ++b)
    std::memcpy(y.bytes() + static_cast<size_t>(b * p.T + t) * row, step_y.bytes() + static_cast<size_t>(b) * row, row);
}

Tensor slot_indices(int64_t B) {
  Tensor indices(DType::i64, {B});
  for (int64_t b = 0; b < B; ++b) indices.data<int64_t>()[b] = kda_decode_slot(b, B);
  return indices;
}

// kind=mla: the latent pool "latent" (f32 [B+1, ctx+T, dc], sequence b's rows in page
// kda_decode_slot(b, B), a spare page) lives in the candidate between steps; step t's case has
// T=1 and ctx = ctx+t (the rows already cached), and the candidate appends its token's row.
void mla_drive(const Candidate& cand, const Case& c, const TensorMap& in, TensorMap& out) {
  const DecodeLayerParams p = decode_layer_params(c);
  const int64_t cap = p.cap(), dc = p.dc;
  Tensor pool(DType::f32, {p.B + 1, cap, dc});
  std::vector<double> rows(static_cast<size_t>(p.ctx * dc));
  for (int64_t b = 0; b < p.B; ++b) {
    in.at("kv0").read(b * p.ctx * dc, rows);
    pool.write(kda_decode_slot(b, p.B) * cap * dc, rows);
  }
  TensorMap step_in = in;
  step_in.erase("x");
  step_in.erase("kv0");
  step_in["state_indices"] = slot_indices(p.B);
  for (int64_t t = 0; t < p.T; ++t) {
    step_in["x"] = token_slice(in.at("x"), t);
    TensorMap step_out = {{"y", Tensor(out.at("y").dtype(), {p.B, 1, p.D})}, {"latent", pool}};
    cand.run(c.with("T", "1").with("ctx", std::to_string(p.ctx + t)), step_in, step_out);
    store_step(p, step_out.at("y"), out.at("y"), t);
  }
  kda_to_slots(out.at("latent"), pool, p.B, false);
}

void layer_drive(const Candidate& cand, const Case& c, const TensorMap& in, TensorMap& out) {
  if (c.text("kind") == "mla") return mla_drive(cand, c, in, out);
  const DecodeLayerParams p = decode_layer_params(c);
  Tensor& y = out.at("y");
  Tensor state(cand.info().state_dtype, out.at("ht").shape());
  kda_to_slots(in.at("h0"), state, p.B, true);
  std::map<std::string, Tensor> conv;
  for (const char* name : {"conv_q", "conv_k", "conv_v"}) {
    conv[name] = Tensor(DType::f32, out.at(name).shape());
    kda_to_slots(in.at(std::string(name) + "0"), conv[name], p.B, true);
  }
  Tensor indices(DType::i64, {p.B});
  for (int64_t b = 0; b < p.B; ++b) indices.data<int64_t>()[b] = kda_decode_slot(b, p.B);
  const Case step = c.with("T", "1");
  TensorMap step_in = in;   // the weights; x is replaced by each step's token
  for (const char* name : {"x", "h0", "conv_q0", "conv_k0", "conv_v0"}) step_in.erase(name);
  step_in["state_indices"] = indices;
  const size_t row = static_cast<size_t>(p.D) * static_cast<size_t>(info(y.dtype()).storage_bytes);
  for (int64_t t = 0; t < p.T; ++t) {
    step_in["x"] = token_slice(in.at("x"), t);
    TensorMap step_out;
    step_out["y"] = Tensor(y.dtype(), {p.B, 1, p.D});
    step_out["state"] = state;   // shared storage: updated in place by the candidate
    for (auto& [name, pool] : conv) step_out[name] = pool;
    cand.run(step, step_in, step_out);
    for (int64_t b = 0; b < p.B; ++b)
      std::memcpy(y.bytes() + static_cast<size_t>(b * p.T + t) * row, step_out["y"].bytes() + static_cast<size_t>(b) * row, row);
  }
  kda_to_slots(out.at("ht"), state, p.B, false);
  for (auto& [name, pool] : conv) kda_to_slots(out.at(name), pool, p.B, false);
}

// Error by step: e_t = ||y_t - r_t|| / ||r_t|| over the B tokens of step t; the measure is the mean
// e_t of the last floor(T/2) steps over that of the first floor(T/2): 1 when error does not grow.
OpMeasure step_growth(const Case& c, const RefOutputs& ref, const TensorMap& out) {
  const DecodeLayerParams p = decode_layer_params(c);
  OpMeasure m;
  m.name = "step_growth.y";
  m.value = 1.0;
  m.relative = true;
  m.floor = 0.25;
  const int64_t half = p.T / 2;
  if (half == 0) {
    m.detail = "one step: no growth to measure";
    return m;
  }
  const Values& r = ref.at("y");
  const Tensor& y = out.at("y");
  std::vector<double> num(static_cast<size_t>(p.T)), den(num.size());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t t = 0; t < p.T; ++t)
      for (int64_t d = 0; d < p.D; ++d) {
        const int64_t i = (b * p.T + t) * p.D + d;
        const double rv = r[static_cast<size_t>(i)], e = y.get(i) - rv;
        if (std::isnan(rv)) continue;
        num[size_t(t)] += e * e;
        den[size_t(t)] += rv * rv;
      }
  double early = 0, late = 0;
  for (int64_t t = 0; t < half; ++t) {
    early += std::sqrt(num[size_t(t)] / std::max(den[size_t(t)], 1e-300));
    late += std::sqrt(num[size_t(p.T - 1 - t)] / std::max(den[size_t(p.T - 1 - t)], 1e-300));
  }
  const double tiny = 0x1p-80;
  m.value = (late / double(half) + tiny) / (early / double(half) + tiny);
  m.detail = fmt::format("mean relative rms error of y over the last {} steps / over the first {} (early {:.3g}, late {:.3g})",
                         half, half, early / double(half), late / double(half));
  return m;
}

// The attention half's flops per token: the KDA layer's, or the MLA layer's at `len` cached rows.
double attention_flops(const DecodeLayerParams& p, double len) {
  const double D = double(p.D), HK = double(p.HK()), K = double(p.K), H = double(p.H);
  if (p.kind == "mla") {
    const double ql = double(p.ql), dc = double(p.dc), dn = double(p.dn), dv = double(p.dv);
    const double proj = 2.0 * D * (ql + dc) + 2.0 * ql * H * dn + 2.0 * H * dn * dc + 2.0 * H * dc * dv + 2.0 * H * dv * D;
    return proj + H * len * (4.0 * dc + 4) + 4.0 * (ql + dc);
  }
  const double kda = H * (8.0 * K * K) + 3.0 * HK * (2.0 * double(p.W) + 4) + 10.0 * HK;
  return 2.0 * D * double(p.n_in()) + kda + 2.0 * D * HK;
}

double flops_per_token(const DecodeLayerParams& p) {
  const double D = double(p.D), I = double(p.I);
  const double experts = double(p.topk + 1) * (6.0 * D * I + 10.0 * I) + 2.0 * double(p.topk + 1) * D;
  return attention_flops(p, double(p.ctx) + double(p.T + 1) / 2.0) + 2.0 * D * double(p.E) + experts + 12.0 * D;
}

std::vector<ParamSpec> layer_params() {
  std::vector<ParamSpec> v = {{"kind", ParamKind::text, "linear", "linear (KDA layer) | mla (NoPE-MLA layer)", true},
      {"T", ParamKind::integer, "8", "decode steps", true},
      {"B", ParamKind::integer, "4", "sequences decoded together", true},
      {"D", ParamKind::integer, "256", "hidden size (GLM-5.3-Flash 4096)", true},
      {"H", ParamKind::integer, "2", "KDA heads, or MLA query heads (GLM-5.3-Flash 64 each)", true},
      {"K", ParamKind::integer, "64", "KDA head dim, K = V (128)", true},
      {"W", ParamKind::integer, "4", "short-conv width (1..8)"},
      {"E", ParamKind::integer, "8", "routed experts (288)", true},
      {"k", ParamKind::integer, "2", "experts per token (8)", true},
      {"I", ParamKind::integer, "128", "expert intermediate size, routed and shared (2048)", true},
      {"rsf", ParamKind::real, "2.5", "routed_scaling_factor, on the router's weights"},
      {"limit", ParamKind::real, "10", "swiglu_limit (0: no clamp)"},
      {"eps", ParamKind::real, "1e-05", "of the RMSNorms (input, post-attention, KDA output; MLA q and kv norms)"},
      {"ql", ParamKind::integer, "1536", "kind=mla: q_lora_rank (1536)"},
      {"dc", ParamKind::integer, "512", "kind=mla: kv_lora_rank, the latent's width (512)"},
      {"dn", ParamKind::integer, "256", "kind=mla: qk_nope_head_dim (256; the softmax scale is dn^-0.5, 1/16)"},
      {"dv", ParamKind::integer, "256", "kind=mla: v_head_dim (256)"},
      {"ctx", ParamKind::integer, "64", "kind=mla: latent rows cached per sequence before the first step"},
      {"regime", ParamKind::text, "glm_flash", "input regime (driftgate list regimes)", true},
      {"dtype", ParamKind::text, "bf16", "dtype of the stored hidden states and of the bf16 weights", true, {"bf16", "f32"}},
      {"seed", ParamKind::integer, "0", "RNG seed", true}};
  return v;
}

std::vector<TensorSpec> layer_tensors() {
  std::vector<TensorSpec> v = {{"x", TensorRole::input, "[B,T,D] the hidden state entering the layer at each step"},
               {"in_norm", TensorRole::input, "[D] input_layernorm weight"},
               {"w_in", TensorRole::input, "[5HK+H,D] in-projection: q, k, v, g, beta, ogate"},
               {"wq", TensorRole::input, "[HK,W] f32 conv"}, {"wk", TensorRole::input, "[HK,W] f32 conv"},
               {"wv", TensorRole::input, "[HK,W] f32 conv"}, {"conv_q0", TensorRole::input, "[B,HK,W-1] f32"},
               {"conv_k0", TensorRole::input, "[B,HK,W-1] f32"}, {"conv_v0", TensorRole::input, "[B,HK,W-1] f32"},
               {"A_log", TensorRole::input, "[H] f32"}, {"dt_bias", TensorRole::input, "[HK] f32"},
               {"h0", TensorRole::input, "[B,H,K,K] f32 KDA state before the first step"},
               {"nweight", TensorRole::input, "[K] f32 KDA output norm weight"},
               {"w_o", TensorRole::input, "[D,HK] o-projection"}, {"post_norm", TensorRole::input, "[D] post_attention_layernorm weight"},
               {"w_router", TensorRole::input, "[E,D] f32 router gate"}, {"router_bias", TensorRole::input, "[E] f32 e_score_correction_bias"},
               {"w_gu", TensorRole::input, "[E,2I,D] routed experts' gate|up"}, {"w_down", TensorRole::input, "[E,D,I] routed experts' down"},
               {"ws_gu", TensorRole::input, "[2I,D] shared expert's gate|up"}, {"ws_down", TensorRole::input, "[D,I] shared expert's down"},
               {"w_qa", TensorRole::input, "kind=mla: [ql,D] q_a_proj"}, {"q_norm", TensorRole::input, "kind=mla: [ql] q_a_layernorm weight"},
               {"w_qb", TensorRole::input, "kind=mla: [H*dn,ql] q_b_proj"}, {"w_kva", TensorRole::input, "kind=mla: [dc,D] kv_a_proj (no rope part)"},
               {"kv_norm", TensorRole::input, "kind=mla: [dc] kv_a_layernorm weight"},
               {"w_kvb", TensorRole::input, "kind=mla: [H*(dn+dv),dc] kv_b_proj, per head [W_UK (dn rows) | W_UV (dv rows)]"},
               {"kv0", TensorRole::input, "kind=mla: [B,ctx,dc] the latent cache (c_kv of earlier tokens)"},
               {"y", TensorRole::output, "[B,T,D] the hidden state leaving the layer (the new residual)"},
               {"latent", TensorRole::output, "kind=mla: [B,ctx+T,dc] f32 the latent cache after T steps (kv0, then each step's c_kv)", DType::f32},
               {"ht", TensorRole::output, "[B,H,K,K] the KDA state after T steps (state dtype)"},
               {"conv_q", TensorRole::output, "[B,HK,W-1] f32"}, {"conv_k", TensorRole::output, "[B,HK,W-1] f32"},
               {"conv_v", TensorRole::output, "[B,HK,W-1] f32"}};
  return v;
}

Certification layer_certify(const Case& c, const TensorMap& in, Tier tier) {
  const std::optional<Tier> up = next_tier(tier);
  if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
  const DecodeLayerParams p = decode_layer_params(c);
  // The leading steps that 64 op budgets buy at the tier above (a layer composes about 16 op
  // references, most of them GEMMs, which the f64 and dd tiers run at Dot2 speed).
  const double per_step = double(p.B) * flops_per_token(p) * tier_cost(*up);
  const int64_t steps = std::clamp<int64_t>(static_cast<int64_t>(64.0 * kCertifyOps / std::max(per_step, 1.0)), 1, p.T);
  Certification cert;
  cert.tier = tier;
  cert.against = *up;
  cert.sample = (steps == p.T ? std::string("full case") : fmt::format("steps [0,{})", steps)) +
                "; the worse of the tier above and the values passed between the references moved one double ULP";
  const int64_t cut = steps == p.T ? -1 : steps;
  const RefOutputs lo = kind_ref(c, in, tier, cut), hi = kind_ref(c, in, *up, cut), alt = kind_ref(c, in, tier, cut, true);
  cert.ref_bits = kAgreementCapBits;
  cert.ref_bits_max_elem = kAgreementCapBits;
  for (const auto& [name, values] : lo) {
    if (cut >= 0 && name != "y") continue;   // a cut case has no final states
    for (const RefOutputs* other : {&hi, &alt}) {
      cert.ref_bits = std::min(cert.ref_bits, agreement_bits(values, other->at(name)));
      cert.ref_bits_max_elem = std::min(cert.ref_bits_max_elem, agreement_bits_max_elem(values, other->at(name)));
    }
  }
  return cert;
}

OpSpec layer_spec() {
  OpSpec s;
  s.name = "decode_layer";
  s.doc = "one GLM-5.3-Flash decoder layer at decode, composed from the op references: kind=linear is the KDA layer "
          "(rmsnorm, in-projection, kda_decode_fused, o-projection, add_rmsnorm, moe_router, SwiGLU experts + shared, "
          "moe_combine, residual); T steps of B sequences carrying the KDA and conv states; kind=mla the NoPE-MLA layer "
          "(q_a, q_norm, q_b; kv_a, kv_norm; W_UK absorbed; mla_decode over the latent cache, each step's row appended; "
          "W_UV, o_proj; the same MoE half), carrying the latent cache";
  s.params = layer_params();
  s.tensors = layer_tensors();
  s.coverage = {{"kind", {"linear", "mla"}, [](const Case& c) { return std::vector<std::string>{c.text("kind")}; }},
                {"B", {"1", ">1"}, [](const Case& c) { return std::vector<std::string>{c.integer("B") > 1 ? ">1" : "1"}; }},
                {"steps", {"1", ">1"}, [](const Case& c) { return std::vector<std::string>{c.integer("T") > 1 ? ">1" : "1"}; }}};
  s.validate = layer_validate;
  s.inputs = layer_inputs;
  s.output_shapes = [](const Case& c) -> std::map<std::string, std::vector<int64_t>> {
    const DecodeLayerParams p = decode_layer_params(c);
    if (p.kind == "mla") return std::map<std::string, std::vector<int64_t>>{{"y", {p.B, p.T, p.D}}, {"latent", {p.B, p.cap(), p.dc}}};
    const std::vector<int64_t> conv = {p.B, p.HK(), p.W - 1};
    return {{"y", {p.B, p.T, p.D}}, {"ht", {p.B, p.H, p.K, p.K}}, {"conv_q", conv}, {"conv_k", conv}, {"conv_v", conv}};
  };
  s.reference = layer_ref;
  s.certify = layer_certify;
  s.positions = [](const Case& c) {
    const DecodeLayerParams p = decode_layer_params(c);
    Positions pos;
    pos.inner = p.D;
    pos.token_position.resize(static_cast<size_t>(p.B * p.T));
    for (int64_t i = 0; i < p.B * p.T; ++i) pos.token_position[static_cast<size_t>(i)] = i % p.T;
    return std::map<std::string, Positions>{{"y", pos}};
  };
  s.drive = layer_drive;
  s.measure = [](const Case& c, const CandidateInfo&, const TensorMap&, const RefOutputs& ref, const TensorMap& out) {
    return std::vector<OpMeasure>{step_growth(c, ref, out)};
  };
  s.flops = [](const Case& c) {
    const DecodeLayerParams p = decode_layer_params(c);
    return double(p.B * p.T) * flops_per_token(p);
  };
  s.bytes = [](const Case& c, const Storage& st) {
    // at least: the weights once (the shared expert and the k routed experts of one token; more
    // tokens may share them), x and y of every token, and each step's read and write of every
    // sequence's KDA state and conv states (as kda_decode_fused counts them)
    const DecodeLayerParams p = decode_layer_params(c);
    const double D = double(p.D), HK = double(p.HK()), in = st.input_bytes(p.dtype);
    const double experts = double(p.topk + 1) * 3.0 * double(p.I) * D;
    if (p.kind == "mla") {   // the weights, x and y, and each step's read of every cached row and write of one
      const double H = double(p.H), ql = double(p.ql), dc = double(p.dc);
      const double mla = ql * D + ql + H * double(p.dn) * ql + dc * D + dc + H * double(p.kvb_rows()) * dc + D * H * double(p.dv);
      const double weights = in * (mla + 2.0 * D + experts) + 4.0 * double(p.E) * D;
      const double act = double(p.B * p.T) * D * (in + st.output_bytes(p.dtype));
      const double cache = double(p.B) * dc * (double(p.T) * double(p.ctx) + double(p.T * (p.T + 1)) / 2.0 + double(p.T)) * 4.0;
      return weights + act + cache;
    }
    const double weights = in * (double(p.n_in()) * D + D * HK + 2.0 * D + experts) + 4.0 * (double(p.E) * D + 3.0 * HK * double(p.W));
    const double act = double(p.B * p.T) * D * (in + st.output_bytes(p.dtype));
    const double state = 2.0 * double(p.B) * (double(p.H) * double(p.K * p.K) * st.state_bytes() + 4.0 * 3.0 * HK * double(p.W - 1));
    return weights + act + double(p.T) * state;
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(decode_layer, layer_spec());

}  // namespace dg
