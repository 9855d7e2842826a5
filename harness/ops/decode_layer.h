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
  std::string kind;        // linear (a KDA layer); mla (a NoPE-MLA layer: not in this build)
  int64_t B = 1;           // sequences decoded together (tokens per step)
  int64_t T = 1;           // decode steps
  int64_t D = 0;           // hidden size
  int64_t H = 0;           // KDA heads (q/k and value heads alike)
  int64_t K = 0;           // head dim (K = V)
  int64_t W = 4;           // short-conv width
  int64_t E = 0;           // routed experts
  int64_t topk = 0;        // experts per token
  int64_t I = 0;           // expert intermediate size (the shared expert's too)
  double rsf = 2.5;        // routed scaling factor
  double limit = 10;       // swiglu_limit
  double eps = 1e-5;       // the layer's RMSNorms and the KDA output norm
  DType dtype = DType::bf16;   // the stored hidden states and the bf16 weights

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
Case gemm(int64_t M, int64_t N, int64_t K, const char* dtype);
Case kda(const DecodeLayerParams& p, int64_t steps, const char* dtype);
Case router(const DecodeLayerParams& p, int64_t rows);
Case swiglu(const DecodeLayerParams& p, int64_t rows, const char* dtype);
Case combine(const DecodeLayerParams& p, int64_t rows, const char* dtype);
}  // namespace decode_layer_ops

}  // namespace dg
