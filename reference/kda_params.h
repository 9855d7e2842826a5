// The parameters of one KDA (Kimi Delta Attention) case, shared by the reference, the candidates
// and the harness. Shapes (FLA conventions):
//   q, k  [B, T, H, K]        v     [B, T, HV, V]       g  [B, T, HV, K]     beta  [B, T, HV]
//   A_log [HV] (f32)          dt_bias [HV*K] (f32)      h0, ht [N, HV, K, V] (V-first: [N, HV, V, K])
//   cu_seqlens [N+1] (i64, varlen: B == 1, sequences packed along T)     o [B, T, HV, V]
// GVA: value head hv reads q/k head hv / (HV / H).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace dg {

// How g is produced from the stored tensor "g".
enum class KdaGate : uint8_t {
  pregated,     // g is already the log-space decay
  softplus,     // g = -exp(A_log) * softplus(f + dt_bias)             (Kimi Linear)
  lower_bound,  // g = lb * sigmoid(exp(A_log) * (f + dt_bias)), or lb * sigmoid(f + dt_bias) without A_log
};

// How beta is produced from the stored tensor "beta".
enum class KdaBeta : uint8_t {
  given,        // beta as stored
  sigmoid,      // sigmoid(b)
  sigmoid2,     // 2 sigmoid(b) in (0, 2): negative eigenvalues allowed
};

struct KdaParams {
  int64_t B = 1, T = 1, H = 1, HV = 1, K = 128, V = 128;
  KdaGate gate = KdaGate::pregated;
  double lower_bound = -5.0;
  bool use_A_log = true;             // gate modes softplus / lower_bound
  KdaBeta beta = KdaBeta::given;
  bool qk_l2norm = true;             // x / sqrt(sum x^2 + 1e-6), before scaling
  double scale = 0.0;                // 0: K^-1/2
  bool has_h0 = false;               // initial state given as "h0"
  bool state_v_first = false;        // h0/ht stored [V, K] per head instead of [K, V]
  std::vector<int64_t> cu_seqlens;   // empty: B sequences of length T; else B == 1, N = size - 1

  static constexpr double kL2NormEps = 1e-6;

  int64_t num_seqs() const { return cu_seqlens.empty() ? B : static_cast<int64_t>(cu_seqlens.size()) - 1; }
  int64_t group() const { return HV / H; }                  // value heads per q/k head
  double scale_value() const { return scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(K)); }
  // Token range [begin, end) of sequence n in the flattened [B*T] token axis.
  int64_t seq_begin(int64_t n) const { return cu_seqlens.empty() ? n * T : cu_seqlens[static_cast<size_t>(n)]; }
  int64_t seq_end(int64_t n) const { return cu_seqlens.empty() ? (n + 1) * T : cu_seqlens[static_cast<size_t>(n) + 1]; }
  // Work per token per value head: decay, residual, write and read, each K*V multiply-adds.
  double flops_per_token_head() const { return 8.0 * static_cast<double>(K) * static_cast<double>(V); }
};

}  // namespace dg
