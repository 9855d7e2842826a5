// kda_cpu_recurrent_f32: KDA as a token loop over an f32 state, in the order of FLA's fused-recurrent
// (decode) kernel, notes §2.3. Per (sequence n, value head hv), with h = hv / (HV / H):
//
//   S = h0[n, hv] (f32, K x V) or 0
//   for each token t of sequence n:
//     q = l2norm(q[t, h]) * scale, k = l2norm(k[t, h])       f32, x * (1 / sqrt(sum x^2 + 1e-6))
//     g = gate(g[t, hv]), beta = beta(beta[t, hv])           f32, in-kernel gate and beta modes
//     S *= exp(g)[:, None];  r = v - S^T k;  r *= beta;  S += k r^T;  o[t, hv] = S^T q
//   ht[n, hv] = S
//
// Threads run over (sequence, value head) pairs. This file also holds what the CPU KDA candidates
// share: dtype-aware row loads and stores, token preparation, state layout and the worker loop.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "candidates/cpu/kda_chunk.h"
#include "candidates/cpu/kda_cpu.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"

namespace dg {
namespace kda_cpu {
namespace {

const Tensor& input(const TensorMap& in, const char* name) {
  auto it = in.find(name);
  if (it == in.end()) throw std::invalid_argument(std::string("kda: input tensor '") + name + "' is missing");
  return it->second;
}

[[noreturn]] void bad_dtype(const Tensor& t) {
  throw std::invalid_argument(std::string("kda: tensor of dtype ") + std::string(name(t.dtype())) +
                              " is not a float tensor");
}

// x *= 1 / sqrt(sum x^2 + 1e-6): lane l of a 16-lane sum takes x[l], x[l + 16], ... in order
// (the tail zero-padded), then the lanes meet in a pairwise tree.
void l2norm(float* x, int64_t n) {
  V16 part = V16::zero();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const V16 xi = V16::load(x + i);
    part = fma(xi, xi, part);
  }
  if (i < n) {
    alignas(64) float tail[16] = {};
    std::memcpy(tail, x + i, static_cast<size_t>(n - i) * sizeof(float));
    const V16 xi = V16::load(tail);
    part = fma(xi, xi, part);
  }
  const float rstd = 1.0f / std::sqrt(hsum(part) + static_cast<float>(KdaParams::kL2NormEps));
  for (int64_t j = 0; j < n; ++j) x[j] *= rstd;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// FLA's kernel softplus: x above 20, else log(1 + exp(x)) (here with an accurate log1p).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void round_bf16_row(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) round_bf16(V16::load(x + i)).store(x + i);
  for (; i < n; ++i) x[i] = dg::round_bf16(x[i]);
}

}  // namespace

void load_row(const Tensor& t, int64_t offset, int64_t n, float* dst) {
  const std::byte* base = t.bytes();
  size_t off = static_cast<size_t>(offset);
  switch (t.dtype()) {
    case DType::f32:
    case DType::tf32:
      std::memcpy(dst, base + off * 4, static_cast<size_t>(n) * 4);
      return;
    case DType::bf16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_bf16(s[i]);
      return;
    }
    case DType::f16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_f16(s[i]);
      return;
    }
    case DType::f64: {
      const double* s = reinterpret_cast<const double*>(base) + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::e4m3:
    case DType::e5m2: {
      const uint8_t* s = reinterpret_cast<const uint8_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(decode(t.dtype(), s[i]));
      return;
    }
    default:
      bad_dtype(t);
  }
}

void store_row(Tensor& t, int64_t offset, int64_t n, const float* src) {
  std::byte* base = t.bytes();
  size_t off = static_cast<size_t>(offset);
  switch (t.dtype()) {
    case DType::f32:
      std::memcpy(base + off * 4, src, static_cast<size_t>(n) * 4);
      return;
    case DType::bf16: {
      uint16_t* d = reinterpret_cast<uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) d[i] = bf16_from_f32(src[i]);
      return;
    }
    case DType::f16: {
      uint16_t* d = reinterpret_cast<uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) d[i] = f16_from_f32(src[i]);
      return;
    }
    case DType::f64: {
      double* d = reinterpret_cast<double*>(base) + off;
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<double>(src[i]);
      return;
    }
    case DType::tf32:
    case DType::e4m3:
    case DType::e5m2: {
      int w = info(t.dtype()).storage_bytes;
      for (int64_t i = 0; i < n; ++i) {
        uint64_t bits = encode(t.dtype(), static_cast<double>(src[i]));
        std::memcpy(base + (off + static_cast<size_t>(i)) * static_cast<size_t>(w), &bits, static_cast<size_t>(w));
      }
      return;
    }
    default:
      bad_dtype(t);
  }
}

Buffer make_buffer(size_t n) {
  n = std::max<size_t>(n, 16);
  float* p = static_cast<float*>(::operator new[](n * sizeof(float), std::align_val_t(64)));
  std::memset(p, 0, n * sizeof(float));
  return Buffer(p);
}

Tensor& output(TensorMap& out, const char* name, int64_t numel) {
  auto it = out.find(name);
  if (it == out.end()) throw std::invalid_argument(std::string("kda: output tensor '") + name + "' is missing");
  if (it->second.numel() != numel)
    throw std::invalid_argument(std::string("kda: output tensor '") + name + "' has shape " + it->second.shape_str() +
                                ", expected " + std::to_string(numel) + " elements");
  return it->second;
}

TokenReader::TokenReader(const KdaParams& p, const TensorMap& in, int64_t hv, bool fold_scale, bool bf16_storage)
    : p_(p), q_(input(in, "q")), k_(input(in, "k")), v_(input(in, "v")), g_(input(in, "g")),
      beta_(input(in, "beta")), h_(hv / p.group()), hv_(hv), fold_scale_(fold_scale), bf16_(bf16_storage),
      scale_(static_cast<float>(p.scale_value())), lb_(static_cast<float>(p.lower_bound)) {
  if (p.gate == KdaGate::pregated) return;
  if (p.use_A_log) {
    float a_log = 0;
    load_row(input(in, "A_log"), hv, 1, &a_log);
    a_ = std::exp(a_log);
  }
  dt_bias_.assign(static_cast<size_t>(p.K), 0.0f);
  if (in.count("dt_bias")) load_row(in.at("dt_bias"), hv * p.K, p.K, dt_bias_.data());
}

float TokenReader::load(int64_t tok, float* q, float* k, float* v, float* g) const {
  const int64_t K = p_.K, V = p_.V, H = p_.H, HV = p_.HV;
  load_row(q_, (tok * H + h_) * K, K, q);
  load_row(k_, (tok * H + h_) * K, K, k);
  load_row(v_, (tok * HV + hv_) * V, V, v);
  load_row(g_, (tok * HV + hv_) * K, K, g);
  float b = 0;
  load_row(beta_, tok * HV + hv_, 1, &b);
  if (bf16_) {
    for (float* x : {q, k, g}) round_bf16_row(x, K);
    round_bf16_row(v, V);
    b = dg::round_bf16(b);
  }
  if (p_.qk_l2norm) {
    l2norm(q, K);
    l2norm(k, K);
    if (bf16_) {
      round_bf16_row(q, K);
      round_bf16_row(k, K);
    }
  }
  if (fold_scale_)
    for (int64_t d = 0; d < K; ++d) q[d] *= scale_;
  switch (p_.gate) {
    case KdaGate::pregated:
      break;
    case KdaGate::softplus:
      for (int64_t d = 0; d < K; ++d) g[d] = -a_ * softplus(g[d] + dt_bias_[static_cast<size_t>(d)]);
      break;
    case KdaGate::lower_bound:
      for (int64_t d = 0; d < K; ++d) {
        float x = g[d] + dt_bias_[static_cast<size_t>(d)];
        if (p_.use_A_log) x = a_ * x;
        g[d] = lb_ * sigmoid(x);
      }
      break;
  }
  switch (p_.beta) {
    case KdaBeta::given: return b;
    case KdaBeta::sigmoid: return sigmoid(b);
    case KdaBeta::sigmoid2: return 2.0f * sigmoid(b);
  }
  return b;
}

void recurrent_step(float* S, int64_t ldS, int64_t K, int64_t V, const float* q, const float* k,
                    const float* v, const float* g, float beta, float* o, float* work) {
  float* __restrict r = work;
  float* __restrict out = o;
  std::fill(r, r + V, 0.0f);
  for (int64_t d = 0; d < K; ++d) {   // S *= exp(g); r = S^T k
    const float a = std::exp(g[d]), kd = k[d];
    float* __restrict row = S + d * ldS;
    for (int64_t j = 0; j < V; ++j) {
      const float s = row[j] * a;
      row[j] = s;
      r[j] = std::fma(kd, s, r[j]);
    }
  }
  for (int64_t j = 0; j < V; ++j) r[j] = (v[j] - r[j]) * beta;   // r = (v - S^T k) beta
  std::fill(out, out + V, 0.0f);
  for (int64_t d = 0; d < K; ++d) {   // S += k r^T; o = S^T q
    const float kd = k[d], qd = q[d];
    float* __restrict row = S + d * ldS;
    for (int64_t j = 0; j < V; ++j) {
      const float s = std::fma(kd, r[j], row[j]);
      row[j] = s;
      out[j] = std::fma(qd, s, out[j]);
    }
  }
}

void load_state(const Tensor& t, int64_t slot, int64_t hv, const KdaParams& p, float* S, int64_t ldS, int64_t c0,
                int64_t c1) {
  const int64_t K = p.K, V = p.V, base = (slot * p.HV + hv) * K * V;
  if (c1 < 0) c1 = V;
  if (!p.state_v_first) {
    for (int64_t d = 0; d < K; ++d) load_row(t, base + d * V + c0, c1 - c0, S + d * ldS);
    return;
  }
  std::vector<float> col(static_cast<size_t>(K));
  for (int64_t j = c0; j < c1; ++j) {
    load_row(t, base + j * K, K, col.data());
    for (int64_t d = 0; d < K; ++d) S[d * ldS + (j - c0)] = col[static_cast<size_t>(d)];
  }
}

void store_state(Tensor& t, int64_t slot, int64_t hv, const KdaParams& p, const float* S, int64_t ldS, int64_t c0,
                 int64_t c1) {
  const int64_t K = p.K, V = p.V, base = (slot * p.HV + hv) * K * V;
  if (c1 < 0) c1 = V;
  if (!p.state_v_first) {
    for (int64_t d = 0; d < K; ++d) store_row(t, base + d * V + c0, c1 - c0, S + d * ldS);
    return;
  }
  std::vector<float> col(static_cast<size_t>(K));
  for (int64_t j = c0; j < c1; ++j) {
    for (int64_t d = 0; d < K; ++d) col[static_cast<size_t>(d)] = S[d * ldS + (j - c0)];
    store_row(t, base + j * K, K, col.data());
  }
}

}  // namespace kda_cpu

void kda_cpu_recurrent_f32(const KdaParams& p, const TensorMap& in, TensorMap& out) {
  using namespace kda_cpu;
  const int64_t K = p.K, V = p.V, HV = p.HV, N = p.num_seqs(), Vp = round_up16(V);
  Tensor& o = output(out, "o", p.B * p.T * HV * V);
  Tensor& ht = output(out, "ht", N * HV * K * V);
  const Tensor* h0 = p.has_h0 ? &input(in, "h0") : nullptr;
  const double flops_per_pair = p.flops_per_token_head() * static_cast<double>(p.B * p.T) / static_cast<double>(N);
  const int64_t parts = column_parts(N * HV, V, p.B * p.T / N);
  for_each_pair(
      N * HV * parts, flops_per_pair / static_cast<double>(parts),
      [&] { return make_buffer(static_cast<size_t>(K * Vp + 3 * K + 3 * Vp)); },
      [&](int64_t item, Buffer& buf) {
        const int64_t pair = item / parts, n = pair / HV, hv = pair % HV;
        const ColumnRange cols = column_range(V, parts, item % parts);
        const int64_t W = cols.width(), Wp = round_up16(W);
        float* S = buf.get();
        float *q = S + K * Vp, *k = q + K, *g = k + K, *v = g + K, *ob = v + Vp, *work = ob + Vp;
        if (h0) load_state(*h0, n, hv, p, S, Wp, cols.c0, cols.c1);
        else std::fill(S, S + K * Wp, 0.0f);
        TokenReader reader(p, in, hv, /*fold_scale=*/true, /*bf16_storage=*/false);
        for (int64_t tok = p.seq_begin(n); tok < p.seq_end(n); ++tok) {
          float beta = reader.load(tok, q, k, v, g);
          recurrent_step(S, Wp, K, W, q, k, v + cols.c0, g, beta, ob, work);
          store_row(o, (tok * HV + hv) * V + cols.c0, W, ob);
        }
        store_state(ht, n, hv, p, S, Wp, cols.c0, cols.c1);
      });
}

DG_REGISTER_CANDIDATE(kda_cpu_recurrent_f32,
                      CandidateInfo{"kda_cpu_recurrent_f32", "kda", "cpu", "recurrent", DType::f32, DType::f32,
                                    DType::f32, "token loop, f32 state, FLA fused-recurrent order (notes §2.3)"},
                      [](const Case& c, const TensorMap& in, TensorMap& out) {
                        kda_cpu_recurrent_f32(kda_params(c), in, out);
                      });

}  // namespace dg
