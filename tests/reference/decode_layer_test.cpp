// The decode_layer reference (harness/ops/decode_layer.cpp) against the layer composed here another
// way, from the op references at MPFR (127 bits): step by step (T = 1 cases of kda_decode_fused,
// the KDA and conv states carried from one step's outputs to the next step's inputs) and the routed
// experts token by token (M = 1 GEMMs) where the reference runs all steps at once and groups the
// tokens by expert; kind=mla step by step in the expanded form (keys W_UK,h c_kv and values
// W_UV,h c_kv of every cached row through attention_decode, where the reference absorbs W_UK into the
// query and calls mla_decode); the tiers and certification; a cut case; bad parameters refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "harness/ops/decode_layer.h"
#include "harness/ops/kda.h"
#include "reference/certify.h"

namespace dg {
namespace {

namespace ops = decode_layer_ops;
using Values = std::vector<double>;

const char* kTiny = "decode_layer(kind=linear,T=3,B=2,D=32,H=2,K=8,E=4,k=2,I=16,regime=glm_flash,dtype=bf16,seed=5)";

Tensor f64(std::vector<int64_t> shape, const Values& v) {
  Tensor t(DType::f64, std::move(shape));
  std::memcpy(t.bytes(), v.data(), t.nbytes());
  return t;
}
Values all(const Tensor& t) {
  Values v(static_cast<size_t>(t.numel()));
  t.read(0, v);
  return v;
}
RefOutputs ref(const char* op, const Case& c, const TensorMap& in) { return find_op(op)->reference(c, in, Tier::mpfr127, -1); }
Values gemm(const Values& x, int64_t M, const Tensor& w) {
  const int64_t N = w.shape()[0], K = w.shape()[1];
  return ref("gemm", ops::gemm(M, N, K, "f64"), {{"x", f64({M, K}, x)}, {"w", w}}).at("y");
}
Tensor slice(const Tensor& w, int64_t e) {   // matrix e of a stacked [E, R, C] weight
  Tensor t(w.dtype(), {w.shape()[1], w.shape()[2]});
  std::memcpy(t.bytes(), w.bytes() + static_cast<size_t>(e) * t.nbytes(), t.nbytes());
  return t;
}
Values expert(const DecodeLayerParams& p, const Values& row, int64_t n, const Tensor& gu, const Tensor& down) {
  const Values h = gemm(row, n, gu);
  return gemm(ref("swiglu", ops::swiglu(p, n, "f64"), {{"x", f64({n, 2 * p.I}, h)}}).at("y"), n, down);
}

Values ffn(const DecodeLayerParams& p, const TensorMap& in, const Values& x, const Values& att);

// One step of the B tokens x [B, D] against the carried states `st` (h0, conv_*0: updated).
Values layer_step(const DecodeLayerParams& p, const TensorMap& in, const Values& x, TensorMap& st) {
  const int64_t B = p.B, D = p.D, HK = p.HK();
  const Values a = ref("rmsnorm", ops::norm(p, B, false, "f64"), {{"x", f64({B, D}, x)}, {"weight", in.at("in_norm")}}).at("y");
  const Values pr = gemm(a, B, in.at("w_in"));
  auto part = [&](int64_t c0, int64_t w) {
    Values v(static_cast<size_t>(B * w));
    for (int64_t b = 0; b < B; ++b) std::copy_n(pr.begin() + b * p.n_in() + c0, w, v.begin() + b * w);
    return v;
  };
  TensorMap kin = st;
  for (const char* w : {"wq", "wk", "wv", "A_log", "dt_bias", "nweight"}) kin[w] = in.at(w);
  kin["xq"] = f64({B, 1, p.H, p.K}, part(p.col_q(), HK));
  kin["xk"] = f64({B, 1, p.H, p.K}, part(p.col_k(), HK));
  kin["xv"] = f64({B, 1, p.H, p.K}, part(p.col_v(), HK));
  kin["g"] = f64({B, 1, p.H, p.K}, part(p.col_g(), HK));
  kin["beta"] = f64({B, 1, p.H}, part(p.col_beta(), p.H));
  kin["ogate"] = f64({B, 1, p.H, p.K}, part(p.col_ogate(), HK));
  RefOutputs kr = ref("kda_decode_fused", ops::kda(p, 1, "f64"), kin);
  st["h0"] = f64(st.at("h0").shape(), kr.at("ht"));
  for (const char* s : {"conv_q", "conv_k", "conv_v"}) st[std::string(s) + "0"] = f64(st.at(std::string(s) + "0").shape(), kr.at(s));
  return ffn(p, in, x, gemm(kr.at("o"), B, in.at("w_o")));
}

// The MoE half of a step: add_rmsnorm, the router, the experts token by token, the combine, the residual.
Values ffn(const DecodeLayerParams& p, const TensorMap& in, const Values& x, const Values& att) {
  const int64_t B = p.B, D = p.D, k = p.topk;
  RefOutputs an = ref("add_rmsnorm", ops::norm(p, B, true, "f64"),
                      {{"x", f64({B, D}, att)}, {"residual", f64({B, D}, x)}, {"weight", in.at("post_norm")}});
  const Values& a2 = an.at("y");
  RefOutputs rt = ref("moe_router", ops::router(p, B), {{"logits", f64({B, p.E}, gemm(a2, B, in.at("w_router")))},
                                                         {"bias", in.at("router_bias")}});
  Values eo(static_cast<size_t>(B * k * D));
  for (int64_t s = 0; s < B * k; ++s) {   // token by token, slot by slot
    const int64_t e = static_cast<int64_t>(rt.at("topk_ids")[size_t(s)]);
    const Values row(a2.begin() + (s / k) * D, a2.begin() + (s / k + 1) * D);
    const Values y = expert(p, row, 1, slice(in.at("w_gu"), e), slice(in.at("w_down"), e));
    std::copy(y.begin(), y.end(), eo.begin() + s * D);
  }
  const Values shared = expert(p, a2, B, in.at("ws_gu"), in.at("ws_down"));
  const Values m = ref("moe_combine", ops::combine(p, B, "f64"),
                       {{"expert_out", f64({B, k, D}, eo)}, {"weights", f64({B, k}, rt.at("topk_weights"))}, {"shared", f64({B, D}, shared)}})
                       .at("y");
  return ref("add_rmsnorm", ops::norm(p, B, true, "f64"),
             {{"x", f64({B, D}, m)}, {"residual", f64({B, D}, an.at("residual_out"))}, {"weight", in.at("post_norm")}})
      .at("residual_out");
}

RefOutputs stepwise(const Case& c, const TensorMap& in) {
  const DecodeLayerParams p = decode_layer_params(c);
  TensorMap st;
  for (const char* s : {"h0", "conv_q0", "conv_k0", "conv_v0"}) st[s] = f64(in.at(s).shape(), all(in.at(s)));
  Values y(static_cast<size_t>(p.B * p.T * p.D));
  for (int64_t t = 0; t < p.T; ++t) {
    const Values yt = layer_step(p, in, all(token_slice(in.at("x"), t)), st);
    for (int64_t b = 0; b < p.B; ++b) std::copy_n(yt.begin() + b * p.D, p.D, y.begin() + (b * p.T + t) * p.D);
  }
  return {{"y", y}, {"ht", all(st.at("h0"))}, {"conv_q", all(st.at("conv_q0"))}, {"conv_k", all(st.at("conv_k0"))},
          {"conv_v", all(st.at("conv_v0"))}};
}

const char* kTinyMla = "decode_layer(kind=mla,T=3,B=2,D=32,H=2,ql=24,dc=16,dn=8,dv=12,ctx=4,E=4,k=2,I=16,regime=glm_flash,dtype=bf16,seed=5)";

// Rows [r0, r0 + n) of the block [rows, cols] of a stacked weight starting at row `first`, as a tensor.
Tensor block(const Tensor& w, int64_t first, int64_t n) {
  const int64_t cols = w.shape()[1];
  Tensor t(w.dtype(), {n, cols});
  for (int64_t i = 0; i < n * cols; ++i) t.set(i, w.get(first * cols + i));
  return t;
}

// One MLA step in the expanded form (the HF model's: keys W_UK,h c_kv and values W_UV,h c_kv of every
// cached row, attention_decode with n_kv = n_h over them), the cache `cache` [B][rows*dc] appended.
Values mla_step(const DecodeLayerParams& p, const TensorMap& in, const Values& x, std::vector<Values>& cache) {
  const int64_t B = p.B, D = p.D, H = p.H, dc = p.dc, dn = p.dn, dv = p.dv;
  auto norm = [&](const Values& v, int64_t w, const char* weight) {
    return ref("rmsnorm", ops::norm_width(p, B, w, "f64"), {{"x", f64({B, w}, v)}, {"weight", in.at(weight)}}).at("y");
  };
  const Values a = ref("rmsnorm", ops::norm(p, B, false, "f64"), {{"x", f64({B, D}, x)}, {"weight", in.at("in_norm")}}).at("y");
  const Values q = gemm(norm(gemm(a, B, in.at("w_qa")), p.ql, "q_norm"), B, in.at("w_qb"));
  const Values ckv = norm(gemm(a, B, in.at("w_kva")), dc, "kv_norm");
  for (int64_t b = 0; b < B; ++b) cache[size_t(b)].insert(cache[size_t(b)].end(), ckv.begin() + b * dc, ckv.begin() + (b + 1) * dc);
  const int64_t L = static_cast<int64_t>(cache[0].size()) / dc;
  Values k(static_cast<size_t>((B + 1) * L * H * dn)), v(static_cast<size_t>((B + 1) * L * H * dv));   // page b: sequence b
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const Values kh = gemm(cache[size_t(b)], L, block(in.at("w_kvb"), h * (dn + dv), dn));
      const Values vh = gemm(cache[size_t(b)], L, block(in.at("w_kvb"), h * (dn + dv) + dn, dv));
      for (int64_t j = 0; j < L; ++j) {
        std::copy_n(kh.begin() + j * dn, dn, k.begin() + ((b * L + j) * H + h) * dn);
        std::copy_n(vh.begin() + j * dv, dv, v.begin() + ((b * L + j) * H + h) * dv);
      }
    }
  Tensor table(DType::i32, {B, 1}), lens(DType::i32, {B});
  for (int64_t b = 0; b < B; ++b) {
    table.data<int32_t>()[b] = static_cast<int32_t>(b);
    lens.data<int32_t>()[b] = static_cast<int32_t>(L);
  }
  const Case ac = parse_case(fmt::format("attention_decode(B={},n_h={},n_kv={},d={},dv={},page={},ctx={},regime=typical,dtype=f64,seed=0)",
                                         B, H, H, dn, dv, L, L));
  const Values o = ref("attention_decode", ac, {{"q", f64({B, H, dn}, q)}, {"k_cache", f64({B + 1, L, H, dn}, k)},
                                                 {"v_cache", f64({B + 1, L, H, dv}, v)}, {"page_table", table}, {"seqlens", lens}})
                       .at("o");
  return ffn(p, in, x, gemm(o, B, in.at("w_o")));
}

TEST(DecodeLayerReference, MlaMatchesAStepwiseExpandedMpfrComposition) {
  const Case c = parse_case(kTinyMla);
  const DecodeLayerParams p = decode_layer_params(c);
  const TensorMap in = generate_inputs(c);
  std::vector<Values> cache(static_cast<size_t>(p.B));
  for (int64_t b = 0; b < p.B; ++b) {
    cache[size_t(b)].resize(static_cast<size_t>(p.ctx * p.dc));
    in.at("kv0").read(b * p.ctx * p.dc, cache[size_t(b)]);
  }
  Values y(static_cast<size_t>(p.B * p.T * p.D));
  for (int64_t t = 0; t < p.T; ++t) {
    const Values yt = mla_step(p, in, all(token_slice(in.at("x"), t)), cache);
    for (int64_t b = 0; b < p.B; ++b) std::copy_n(yt.begin() + b * p.D, p.D, y.begin() + (b * p.T + t) * p.D);
  }
  Values latent;
  for (const Values& rows : cache) latent.insert(latent.end(), rows.begin(), rows.end());
  for (Tier tier : {Tier::f64, Tier::dd, Tier::mpfr127}) {
    const RefOutputs got = find_op("decode_layer")->reference(c, in, tier, -1);
    ASSERT_EQ(got.at("y").size(), y.size());
    ASSERT_EQ(got.at("latent").size(), latent.size());
    EXPECT_GT(agreement_bits(got.at("y"), y), 44.0) << tier_name(tier);
    EXPECT_GT(agreement_bits_max_elem(got.at("y"), y), 40.0) << tier_name(tier);
    EXPECT_GT(agreement_bits(got.at("latent"), latent), 44.0) << tier_name(tier);
  }
  // The appended rows are this layer's c_kv, not zeros: the first ctx rows are kv0's.
  EXPECT_NE(latent[static_cast<size_t>(p.ctx * p.dc)], 0.0);
}

TEST(DecodeLayerReference, MlaCertifiesAndACutCaseKeepsItsSteps) {
  const Case c = parse_case(kTinyMla);
  const TensorMap in = generate_inputs(c);
  const Certification cert = find_op("decode_layer")->certify(c, in, Tier::f64);
  EXPECT_GT(cert.ref_bits, 40.0) << cert.sample;
  const RefOutputs full = find_op("decode_layer")->reference(c, in, Tier::f64, -1);
  const RefOutputs cut = find_op("decode_layer")->reference(c, in, Tier::f64, 2);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 3; ++t) {
      const size_t i = static_cast<size_t>((b * 3 + t) * 32);
      if (t < 2) EXPECT_EQ(cut.at("y")[i], full.at("y")[i]);
      else EXPECT_TRUE(std::isnan(cut.at("y")[i]));
    }
  EXPECT_TRUE(std::isnan(cut.at("latent")[0]));
}

TEST(DecodeLayerReference, MatchesAStepwiseMpfrCompositionOfTheOpReferences) {
  const Case c = parse_case(kTiny);
  const TensorMap in = generate_inputs(c);
  const RefOutputs want = stepwise(c, in);
  for (Tier tier : {Tier::f64, Tier::dd, Tier::mpfr127}) {
    const RefOutputs got = find_op("decode_layer")->reference(c, in, tier, -1);
    for (const char* name : {"y", "ht", "conv_q", "conv_k", "conv_v"}) {
      ASSERT_EQ(got.at(name).size(), want.at(name).size()) << name;
      // Both compositions pass doubles between the references, so a tier above f64 gains little:
      // measured at seed 5, max element f64 43.3-48.7 bits, dd 46.7 (y, ht) and identical conv states.
      EXPECT_GT(agreement_bits(got.at(name), want.at(name)), 44.0) << tier_name(tier) << " " << name;
      EXPECT_GT(agreement_bits_max_elem(got.at(name), want.at(name)), 40.0) << tier_name(tier) << " " << name;
    }
  }
  // The states moved: the test would not see a reference that forgot to carry them.
  EXPECT_LT(agreement_bits(want.at("ht"), all(in.at("h0"))), 8.0);
}

TEST(DecodeLayerReference, CertifiesTheCaseAndACutCaseKeepsItsSteps) {
  const Case c = parse_case(kTiny);
  const TensorMap in = generate_inputs(c);
  const Certification cert = find_op("decode_layer")->certify(c, in, Tier::f64);
  EXPECT_EQ(cert.against, Tier::dd);
  EXPECT_GT(cert.ref_bits, 40.0) << cert.sample;
  EXPECT_THAT(cert.sample, ::testing::HasSubstr("full case"));
  const RefOutputs full = find_op("decode_layer")->reference(c, in, Tier::f64, -1);
  const RefOutputs cut = find_op("decode_layer")->reference(c, in, Tier::f64, 1);
  const int64_t D = 32, T = 3;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = static_cast<size_t>((b * T + t) * D + d);
        if (t == 0) EXPECT_EQ(cut.at("y")[i], full.at("y")[i]);
        else EXPECT_TRUE(std::isnan(cut.at("y")[i]));
      }
  EXPECT_TRUE(std::isnan(cut.at("ht")[0]));
}

void expect_refused(const std::string& bad, const std::string& says) {
  try {
    const Case c = parse_case(bad);
    find_op(c.op())->validate(c);
    generate_inputs(c);
    ADD_FAILURE() << bad << " was accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(says)) << bad;
  }
}

TEST(DecodeLayerReference, BadParametersAreRefused) {
  const std::string shape = "T=2,B=1,D=32,H=1,K=8,E=4,I=16";
  const std::string mla = "decode_layer(kind=mla,T=2,B=1,D=32,H=2,ql=24,dv=8,E=4,k=2,I=16";
  expect_refused(mla + ",dc=2000,dn=8)", "dc must be in [1, 1024]");
  expect_refused(mla + ",dc=16,dn=8,ctx=-1)", "ctx must be in [0, 2^20]");
  expect_refused(mla + ",dc=16,dn=0)", "ql, dn and dv must be >= 1");
  expect_refused(mla + ",dc=16,dn=8,regime=long_memory)", "long_memory");
  expect_refused("decode_layer(kind=gqa," + shape + ",k=2)", "kind must be linear or mla");
  expect_refused("decode_layer(kind=linear," + shape + ",k=5)", "k <= E");
  expect_refused("decode_layer(kind=linear,T=2,B=1,D=32,H=1,K=300,E=4,k=2,I=16)", "K must be in [1, 256]");
  expect_refused("decode_layer(kind=linear," + shape + ",k=2,W=9)", "W must be in [1, 8]");
  expect_refused("decode_layer(kind=linear,T=0,B=1,D=32,H=1,K=8,E=4,k=2,I=16)", "B and T must be >= 1");
  expect_refused("decode_layer(kind=linear," + shape + ",k=2,eps=0)", "eps must be > 0");
  expect_refused("decode_layer(kind=linear," + shape + ",k=2,dtype=f16)", "dtype");
}

}  // namespace
}  // namespace dg
