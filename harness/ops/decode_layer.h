// What the decode_layer op (harness/ops/decode_layer.cpp) shares with its regimes and candidates:
// the typed parameters of a case, the column layout of its input projection, and the cases of the
// ops it is composed of (the composed reference calls their references on these cases, the chain
// candidates their candidates).
#pragma once

#include <cstdint>
#include <string>

#include "harness/cases/case.h"

namespace dg {

struct DecodeLayerParams {
  std::string kind;        // linear (a KDA layer); mla (a NoPE-MLA layer)
  int64_t B = 1;           // sequences decoded together (tokens per step)
  int64_t T = 1;           // decode steps
  int64_t D = 0;           // hidden size
  int64_t H = 0;           // KDA heads (q/k and value heads alike); MLA query heads n_h
  int64_t K = 0;           // head dim (K = V)
  int64_t W = 4;           // short-conv width
  int64_t E = 0;           // routed experts
  int64_t topk = 0;        // experts per token
  int64_t I = 0;           // expert intermediate size (the shared expert's too)
  double rsf = 2.5;        // routed scaling factor
  double limit = 10;       // swiglu_limit
  double eps = 1e-5;       // the layer's RMSNorms and the KDA output norm
  DType dtype = DType::bf16;   // the stored hidden states and the bf16 weights
  // kind=mla (GLM-5.3-Flash's NoPE geometry: ql 1536, dc 512, dn 256, dv 256, no rope)
  int64_t ql = 0;          // q_lora_rank
  int64_t dc = 0;          // kv_lora_rank: the latent's width
  int64_t dn = 0;          // qk_nope_head_dim (the softmax scale is dn^-0.5, 1/16 at 256)
  int64_t dv = 0;          // v_head_dim
  int64_t ctx = 0;         // latent rows in the cache before the first step

  // MLA: the latent cache's rows per sequence after T steps; kv_b_proj's rows per head [W_UK | W_UV].
  int64_t cap() const { return ctx + T; }
  int64_t kvb_rows() const { return dn + dv; }
  float mla_scale() const;   // dn^-0.5 rounded to f32

  int64_t HK() const { return H * K; }
  // The input projection's output row: [q | k | v | g | beta | ogate], widths HK, HK, HK, HK, H, HK.
  int64_t n_in() const { return 5 * H * K + H; }
  int64_t col_q() const { return 0; }
  int64_t col_k() const { return HK(); }
  int64_t col_v() const { return 2 * HK(); }
  int64_t col_g() const { return 3 * HK(); }
  int64_t col_beta() const { return 4 * HK(); }
  int64_t col_ogate() const { return 4 * HK() + H; }
};

DecodeLayerParams decode_layer_params(const Case& c);

// The cases of the layer's ops on `rows` tokens (`steps` decode steps for the KDA step), with the
// stored dtype `dtype` ("f64" for the composed reference: no rounding of the residual stream inside
// the layer; "f32" for the chain candidates).
namespace decode_layer_ops {
Case norm(const DecodeLayerParams& p, int64_t rows, bool add, const char* dtype);
Case norm_width(const DecodeLayerParams& p, int64_t rows, int64_t width, const char* dtype);   // rmsnorm over `width`
// mla_decode on the B sequences of one step, `len` latent rows each, one page of `page` rows per
// sequence (sequence b's page: its slot) and a spare page, the softmax scale `scale`.
Case mla(const DecodeLayerParams& p, int64_t len, int64_t page, float scale, const char* dtype);
Case gemm(int64_t M, int64_t N, int64_t K, const char* dtype);
Case kda(const DecodeLayerParams& p, int64_t steps, const char* dtype);
Case router(const DecodeLayerParams& p, int64_t rows);
Case swiglu(const DecodeLayerParams& p, int64_t rows, const char* dtype);
Case combine(const DecodeLayerParams& p, int64_t rows, const char* dtype);
}  // namespace decode_layer_ops

// W_UK,h^T [dc, dn] of the stored kv_b_proj weight w_kvb [H*(dn+dv), dc] (exact: a transpose), and
// W_UV,h [dv, dc]; with `untransposed`, the [dn, dc] block read as a [dc, dn] matrix (a mutant's).
Tensor mla_w_uk_t(const DecodeLayerParams& p, const Tensor& w_kvb, int64_t h, bool untransposed = false);
Tensor mla_w_uv(const DecodeLayerParams& p, const Tensor& w_kvb, int64_t h);

}  // namespace dg
