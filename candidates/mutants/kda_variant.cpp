// The hooked KDA recurrence behind every KDA mutant and equivalent variant (kda_variant.h).
#include "candidates/mutants/kda_variant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "candidates/cpu/kda_cpu.h"
#include "harness/core/dtype.h"

namespace dg::mutants {
namespace {

using kda_cpu::TokenReader;

float narrow(Narrow n, float x) {
  switch (n) {
    case Narrow::none: return x;
    case Narrow::bf16: return round_bf16(x);
    case Narrow::f16: return f32_from_f16(f16_from_f32(x));
  }
  return x;
}

// exp(x) as a fast path would: 2^(x log2 e), the integer part as an exponent, the fraction through
// a cubic (relative error about 1e-4, where expf is within half an ulp, 6e-8).
float exp_cubic(float x) {
  const float y = x * 1.44269504f;
  if (y < -126.0f) return 0.0f;
  const float i = std::floor(y), f = y - i;
  const float p = 1.0f + f * (0.6960656f + f * (0.2244943f + f * 0.0794402f));
  return std::ldexp(p, static_cast<int>(i));
}

// log(y), y > 0, as a fast path would: the exponent, and log2 of the mantissa 1 + t through a quartic
// fitted by least squares on [0, 1) (absolute error 1.9e-4 in log2, where logf is within half an ulp).
float log_quartic(float y) {
  int e = 0;
  const float m = std::frexp(y, &e);   // y = m 2^e, m in [0.5, 1)
  const float t = 2.0f * m - 1.0f;     // y = (1 + t) 2^(e - 1)
  const float l2 = t * (1.43854679f + t * (-0.67808149f + t * (0.32363037f + t * -0.08428509f)));
  return (static_cast<float>(e - 1) + l2) * 0.69314718f;
}

float sigmoid_cubic(float x) { return 1.0f / (1.0f + exp_cubic(-x)); }

// The gate and beta of a token from their raw inputs (the reader's pregated g, given beta), with the
// variant's fast sigmoid or log; the other functions as the honest reader computes them
// (candidates/cpu/kda_recurrent.cpp TokenReader::load).
float activate(const KdaVariant& var, const KdaParams& p, float a, const std::vector<float>& dt_bias, float* g,
               float b) {
  auto sig = [&](float x) { return var.approx_sigmoid ? sigmoid_cubic(x) : 1.0f / (1.0f + std::exp(-x)); };
  auto softplus = [&](float x) {
    if (x > 20.0f) return x;
    return var.approx_log ? log_quartic(1.0f + std::exp(x)) : std::log1p(std::exp(x));
  };
  for (int64_t d = 0; d < p.K; ++d) {
    const float x = g[d] + dt_bias[static_cast<size_t>(d)];
    if (p.gate == KdaGate::softplus) g[d] = -a * softplus(x);
    else if (p.gate == KdaGate::lower_bound) g[d] = static_cast<float>(p.lower_bound) * sig(p.use_A_log ? a * x : x);
  }
  switch (p.beta) {
    case KdaBeta::given: return b;
    case KdaBeta::sigmoid: return sig(b);
    case KdaBeta::sigmoid2: return 2.0f * sig(b);
  }
  return b;
}

// x *= 1 / sqrt(sum x^2 + eps) (the right one, eps = 1e-6, or 1e-12), or x /= sqrt(sum x^2) + eps.
void l2norm(float* x, int64_t n, L2Eps where) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss = std::fma(x[i], x[i], ss);
  const float eps = static_cast<float>(KdaParams::kL2NormEps);
  const float rstd = where == L2Eps::inside_sqrt ? 1.0f / std::sqrt(ss + eps)
                     : where == L2Eps::tiny       ? 1.0f / std::sqrt(ss + 1e-12f)
                                                  : 1.0f / (std::sqrt(ss) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= rstd;
}

// One (sequence, value head) pair's state and the token step, with every hook.
class Pair {
 public:
  Pair(const KdaVariant& var, int64_t K, int64_t V) : var_(var), K_(K), V_(V), S_(static_cast<size_t>(K * V), 0.0f) {}

  // Element (d, j) of the state, in the variant's memory layout.
  float& s(int64_t d, int64_t j) { return S_[static_cast<size_t>(var_.v_first_state ? j * K_ + d : d * V_ + j)]; }
  std::vector<float>& raw() { return S_; }

  // out[j] = sum_d w[d] S[d][j] in the variant's accumulation and order. Every form sums over d in
  // order (reverse_k: backwards); a K-first state runs the V loop inside, a V-first one the K loop,
  // so the inner loop always walks contiguous memory.
  void dot(const float* w, float* out) {
    if (var_.v_first_state) {
      for (int64_t j = 0; j < V_; ++j) {
        const float* col = S_.data() + j * K_;
        float acc = 0;
        for (int64_t d = 0; d < K_; ++d) acc = std::fma(w[d], col[d], acc);
        out[j] = acc;
      }
      return;
    }
    if (var_.f64_accum) {
      acc64_.assign(static_cast<size_t>(V_), 0.0);
      for (int64_t d = 0; d < K_; ++d) {
        const float* row = S_.data() + d * V_;
        const double wd = w[d];
        for (int64_t j = 0; j < V_; ++j)
          acc64_[static_cast<size_t>(j)] = std::fma(wd, static_cast<double>(row[j]), acc64_[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j < V_; ++j) out[j] = static_cast<float>(acc64_[static_cast<size_t>(j)]);
      return;
    }
    std::fill(out, out + V_, 0.0f);
    for (int64_t i = 0; i < K_; ++i) {
      const int64_t d = var_.reverse_k ? K_ - 1 - i : i;
      const float* row = S_.data() + d * V_;
      const float wd = w[d];
      if (var_.dot == Narrow::bf16)
        for (int64_t j = 0; j < V_; ++j) out[j] = round_bf16(std::fma(wd, row[j], out[j]));
      else if (var_.dot == Narrow::f16)
        for (int64_t j = 0; j < V_; ++j) out[j] = narrow(Narrow::f16, std::fma(wd, row[j], out[j]));
      else
        for (int64_t j = 0; j < V_; ++j) out[j] = std::fma(wd, row[j], out[j]);
    }
  }

  void decay(const float* a) {
    if (var_.v_first_state) {
      for (int64_t j = 0; j < V_; ++j)
        for (int64_t d = 0; d < K_; ++d) S_[static_cast<size_t>(j * K_ + d)] *= a[d];
      return;
    }
    for (int64_t d = 0; d < K_; ++d) {
      float* row = S_.data() + d * V_;
      const float ad = a[d];
      for (int64_t j = 0; j < V_; ++j) row[j] *= ad;
    }
  }

  // S += k r^T, or with the decay fused in, S = fma(a, S, k r^T).
  void write(const float* k, const float* r) {
    if (var_.v_first_state) {
      for (int64_t j = 0; j < V_; ++j) {
        float* col = S_.data() + j * K_;
        for (int64_t d = 0; d < K_; ++d) col[d] = std::fma(k[d], r[j], col[d]);
      }
      return;
    }
    for (int64_t d = 0; d < K_; ++d) {
      float* row = S_.data() + d * V_;
      const float kd = k[d];
      if (var_.fused_decay) {
        const float ad = a_[static_cast<size_t>(d)];
        for (int64_t j = 0; j < V_; ++j) row[j] = std::fma(ad, row[j], kd * r[j]);
      } else {
        for (int64_t j = 0; j < V_; ++j) row[j] = std::fma(kd, r[j], row[j]);
      }
    }
  }

  void step(const float* q, const float* k, const float* v, const float* g, float beta, float* o) {
    a_.resize(static_cast<size_t>(K_));
    r_.resize(static_cast<size_t>(V_));
    for (int64_t d = 0; d < K_; ++d)
      a_[static_cast<size_t>(d)] = narrow(var_.decay, var_.approx_exp ? exp_cubic(g[d]) : std::exp(g[d]));
    if (var_.fused_decay) {
      ak_.resize(static_cast<size_t>(K_));
      for (int64_t d = 0; d < K_; ++d) ak_[static_cast<size_t>(d)] = a_[static_cast<size_t>(d)] * k[d];
      dot(ak_.data(), r_.data());   // (Diag(a) S)^T k without forming Diag(a) S
    } else if (var_.residual_before_decay) {
      dot(k, r_.data());
      decay(a_.data());
    } else {
      decay(a_.data());
      dot(k, r_.data());
    }
    for (int64_t j = 0; j < V_; ++j) r_[static_cast<size_t>(j)] = (v[j] - r_[static_cast<size_t>(j)]) * beta;
    if (var_.read_before_write) dot(q, o);
    write(k, r_.data());
    if (!var_.read_before_write) dot(q, o);
    if (var_.state == Narrow::bf16)
      for (float& x : S_) x = round_bf16(x);
    else if (var_.state == Narrow::f16)
      for (float& x : S_) x = narrow(Narrow::f16, x);
  }

 private:
  const KdaVariant& var_;
  int64_t K_, V_;
  std::vector<float> S_, a_, r_, ak_;
  std::vector<double> acc64_;
};

}  // namespace

void run_kda_variant(const KdaVariant& var, const KdaParams& p, const TensorMap& in, TensorMap& out) {
  using namespace kda_cpu;
  const int64_t K = p.K, V = p.V, H = p.H, HV = p.HV, N = p.num_seqs();
  Tensor& o = output(out, "o", p.B * p.T * HV * V);
  Tensor& ht = output(out, "ht", N * HV * K * V);
  auto h0_it = in.find("h0");
  const Tensor* h0 = p.has_h0 && h0_it != in.end() ? &h0_it->second : nullptr;
  // The l2norm mutants normalise here: their reader leaves q and k raw and unscaled.
  const bool own_l2 = var.l2 != L2Eps::inside_sqrt && p.qk_l2norm;
  KdaParams raw = p;
  if (own_l2) raw.qk_l2norm = false;
  // The fast sigmoid/log mutants activate here: their reader returns the raw gate and beta inputs.
  const bool own_act = var.approx_sigmoid || var.approx_log;
  if (own_act) {
    raw.gate = KdaGate::pregated;
    raw.beta = KdaBeta::given;
  }
  KdaParams h0_layout = p;
  if (var.h0_transposed) h0_layout.state_v_first = !p.state_v_first;
  // Token range of sequence n: with varlen_late_boundary every inner boundary moves one token later
  // (the first token of sequence n is run as the last of sequence n - 1).
  auto begin = [&](int64_t n) { return p.seq_begin(n) + (var.varlen_late_boundary && n > 0 ? 1 : 0); };
  auto end = [&](int64_t n) { return p.seq_end(n) + (var.varlen_late_boundary && n + 1 < N ? 1 : 0); };
  const double flops_per_pair = p.flops_per_token_head() * static_cast<double>(p.B * p.T) / static_cast<double>(N);
  for_each_pair(
      N * HV, flops_per_pair, [&] { return std::vector<float>(static_cast<size_t>(4 * K + 2 * V + K * V)); },
      [&](int64_t pair, std::vector<float>& buf) {
        const int64_t n = pair / HV, hv = pair % HV;
        float *q = buf.data(), *k = q + K, *g = k + K, *qk_g = g + K, *v = qk_g + K, *ob = v + V, *kv = ob + V;
        Pair st(var, K, V);
        if (h0) {
          load_state(*h0, n, hv, h0_layout, kv, V);
          for (int64_t d = 0; d < K; ++d)
            for (int64_t j = 0; j < V; ++j) st.s(d, j) = kv[d * V + j];
        }
        TokenReader reader(raw, in, hv, /*fold_scale=*/!own_l2, /*bf16_storage=*/false);
        // The GVA mutant reads q and k through a reader of a value head whose key head is hv % H.
        const int64_t group = p.group();
        TokenReader qk_reader(raw, in, var.gva_mod_head ? (hv % H) * group : hv, !own_l2, false);
        const float scale = static_cast<float>(p.scale_value());
        float a = 1.0f;   // exp(A_log[hv]) and dt_bias[hv] of the gate, for own_act
        std::vector<float> dt_bias(static_cast<size_t>(K), 0.0f);
        if (own_act && p.gate != KdaGate::pregated) {
          if (p.use_A_log) a = std::exp(static_cast<float>(in.at("A_log").get(hv)));
          if (in.count("dt_bias"))
            for (int64_t d = 0; d < K; ++d) dt_bias[static_cast<size_t>(d)] = static_cast<float>(in.at("dt_bias").get(hv * K + d));
        }
        const int64_t b = begin(n);
        for (int64_t tok = b; tok < end(n); ++tok) {
          const int64_t pos = tok - b;
          if (pos > 0 && var.reset_every > 0 && pos % var.reset_every == 0) std::fill(st.raw().begin(), st.raw().end(), 0.0f);
          if (pos > 0 && var.checkpoint_every > 0 && pos % var.checkpoint_every == 0)
            for (float& x : st.raw()) x = round_bf16(x);
          const int64_t src = var.position_wrap > 0 ? b + pos % var.position_wrap : tok;
          float beta = reader.load(src, q, k, v, g);
          if (own_act) beta = activate(var, p, a, dt_bias, g, beta);
          if (var.gva_mod_head) qk_reader.load(src, q, k, ob, qk_g);   // ob: scratch for its v
          if (own_l2) {
            l2norm(q, K, var.l2);
            l2norm(k, K, var.l2);
            for (int64_t d = 0; d < K; ++d) q[d] *= scale;
          }
          st.step(q, k, v, g, beta, ob);
          store_row(o, (tok * HV + hv) * V, V, ob);
        }
        for (int64_t d = 0; d < K; ++d)
          for (int64_t j = 0; j < V; ++j) kv[d * V + j] = st.s(d, j);
        store_state(ht, n, hv, p, kv, V);
      });
}

}  // namespace dg::mutants

namespace dg::mutants {

void run_kda_decode_variant(const KdaVariant& var, const KdaParams& p, const TensorMap& in, TensorMap& out) {
  using namespace kda_cpu;
  const int64_t B = p.B, H = p.H, HV = p.HV, K = p.K, V = p.V;
  const DecodeStepIo io = decode_step_io(p, in, out);
  Tensor &o = *io.o, &pool = *io.pool;
  const std::vector<int64_t>& slots = io.slots;
  const bool own_l2 = var.l2 != L2Eps::inside_sqrt && p.qk_l2norm;
  KdaParams raw = p;
  if (own_l2) raw.qk_l2norm = false;
  KdaParams pool_layout = p;
  if (var.h0_transposed) pool_layout.state_v_first = !p.state_v_first;   // the pool read and written transposed
  for_each_pair(
      B * HV, p.flops_per_token_head(), [&] { return std::vector<float>(static_cast<size_t>(4 * K + 2 * V + K * V)); },
      [&](int64_t pair, std::vector<float>& buf) {
        const int64_t b = pair / HV, hv = pair % HV;
        const int64_t slot = var.slot_is_sequence ? b : slots[static_cast<size_t>(b)];
        float *q = buf.data(), *k = q + K, *g = k + K, *qk_g = g + K, *v = qk_g + K, *ob = v + V, *kv = ob + V;
        if (slot < 0) {
          std::fill(ob, ob + V, 0.0f);
          store_row(o, (b * HV + hv) * V, V, ob);
          return;
        }
        Pair st(var, K, V);
        load_state(pool, slot, hv, pool_layout, kv, V);
        for (int64_t d = 0; d < K; ++d)
          for (int64_t j = 0; j < V; ++j) st.s(d, j) = kv[d * V + j];
        TokenReader reader(raw, in, hv, /*fold_scale=*/!own_l2, /*bf16_storage=*/false);
        TokenReader qk_reader(raw, in, var.gva_mod_head ? (hv % H) * p.group() : hv, !own_l2, false);
        const float beta = reader.load(b, q, k, v, g);   // token b of the [B, 1] token axis
        if (var.gva_mod_head) qk_reader.load(b, q, k, ob, qk_g);
        if (own_l2) {
          const float scale = static_cast<float>(p.scale_value());
          l2norm(q, K, var.l2);
          l2norm(k, K, var.l2);
          for (int64_t d = 0; d < K; ++d) q[d] *= scale;
        }
        st.step(q, k, v, g, beta, ob);
        store_row(o, (b * HV + hv) * V, V, ob);
        for (int64_t d = 0; d < K; ++d)
          for (int64_t j = 0; j < V; ++j) kv[d * V + j] = st.s(d, j);
        store_state(pool, slot, hv, pool_layout, kv, V);
      });
}

}  // namespace dg::mutants
