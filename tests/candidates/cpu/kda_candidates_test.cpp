// Tests of the CPU KDA candidates (candidates/cpu/kda_*.cpp) against two double-precision oracles
// written here from notes §1.4 and §2.1: the token recurrence and the chunked WY/UT form.
//
//   chunk_f64 == recurrent_f64 to ~1e-12 (the chunk algebra itself, every gate and beta mode)
//   f32 candidates vs recurrent_f64: RMS ratio < 1e-5; bf16 chunk: < 2e-2 and clearly worse
//   layout, varlen, GVA, h0, ragged chunks, decode-vs-prefill, strong/zero gates, collinear keys
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "candidates/cpu/kda_chunk.h"
#include "candidates/cpu/kda_cpu.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

// --- inputs ---------------------------------------------------------------------------------------
struct Rng {   // splitmix64
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform(double lo = 0, double hi = 1) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1p-53; }
  double normal() { return std::sqrt(-2 * std::log(1 - uniform())) * std::cos(6.283185307179586 * uniform()); }
};

enum class GateValues { random, strong_decay, zero, full_forget };
struct Recipe {
  DType dtype = DType::f32;              // of q, k, v, g, beta
  GateValues gates = GateValues::random;
  bool collinear_keys = false;           // all-positive keys, all nearly the same
  double beta = -1;                      // >= 0: every (given) beta equals this
};

std::vector<int64_t> state_shape(const KdaParams& p) {
  return p.state_v_first ? std::vector<int64_t>{p.num_seqs(), p.HV, p.V, p.K}
                         : std::vector<int64_t>{p.num_seqs(), p.HV, p.K, p.V};
}

Tensor fill(DType dt, std::vector<int64_t> shape, const std::function<double(int64_t)>& f) {
  Tensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, f(i));
  return t;
}

TensorMap make_inputs(const KdaParams& p, const Recipe& r, uint64_t seed) {
  Rng rng{seed};
  TensorMap in;
  const double qlo = r.collinear_keys ? 0.0 : -1.0;
  in["q"] = fill(r.dtype, {p.B, p.T, p.H, p.K}, [&](int64_t) { return rng.uniform(qlo, 1); });
  std::vector<double> base(static_cast<size_t>(p.K));
  for (double& b : base) b = rng.uniform(0.5, 1);
  in["k"] = fill(r.dtype, {p.B, p.T, p.H, p.K}, [&](int64_t i) {
    return r.collinear_keys ? base[static_cast<size_t>(i % p.K)] + 1e-3 * rng.uniform() : rng.uniform(-1, 1);
  });
  in["v"] = fill(r.dtype, {p.B, p.T, p.HV, p.V}, [&](int64_t) { return rng.uniform(-1, 1); });
  in["g"] = fill(r.dtype, {p.B, p.T, p.HV, p.K}, [&](int64_t) {
    if (p.gate != KdaGate::pregated) return rng.normal();
    switch (r.gates) {
      case GateValues::random: return 0.25 * std::log(1 / (1 + std::exp(-rng.normal())));   // logsigmoid / 4
      case GateValues::strong_decay: return -5 + rng.uniform(-0.5, 0.5);
      case GateValues::zero: return 0.0;
      case GateValues::full_forget: return -40 + rng.uniform(-1, 1);
    }
    return 0.0;
  });
  in["beta"] = fill(r.dtype, {p.B, p.T, p.HV}, [&](int64_t) {
    if (p.beta != KdaBeta::given) return rng.normal();
    return r.beta >= 0 ? r.beta : rng.uniform(0.05, 0.95);
  });
  in["A_log"] = fill(DType::f32, {p.HV}, [&](int64_t) { return std::log(rng.uniform(1, 4)); });
  in["dt_bias"] = fill(DType::f32, {p.HV * p.K}, [&](int64_t) { return -2 + 0.5 * rng.normal(); });
  if (p.has_h0) in["h0"] = fill(DType::f32, state_shape(p), [&](int64_t) { return 0.3 * rng.normal(); });
  return in;
}

// --- double-precision oracles ---------------------------------------------------------------------
struct Tok { std::vector<double> q, k, v, g; double beta = 0; };

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<double> row(const Tensor& t, int64_t offset, int64_t n) {
  std::vector<double> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = t.get(offset + i);
  return r;
}

Tok prepare(const KdaParams& p, const TensorMap& in, int64_t tok, int64_t hv) {
  const int64_t K = p.K, V = p.V, h = hv / p.group();
  Tok t{row(in.at("q"), (tok * p.H + h) * K, K), row(in.at("k"), (tok * p.H + h) * K, K),
        row(in.at("v"), (tok * p.HV + hv) * V, V), row(in.at("g"), (tok * p.HV + hv) * K, K)};
  if (p.qk_l2norm)
    for (std::vector<double>* x : {&t.q, &t.k}) {
      double ss = 0;
      for (double e : *x) ss += e * e;
      for (double& e : *x) e /= std::sqrt(ss + KdaParams::kL2NormEps);
    }
  for (double& e : t.q) e *= p.scale_value();
  const double a = p.use_A_log && p.gate != KdaGate::pregated ? std::exp(in.at("A_log").get(hv)) : 1.0;
  for (int64_t d = 0; d < K; ++d) {
    double& g = t.g[static_cast<size_t>(d)];
    const double x = p.gate == KdaGate::pregated ? 0.0 : g + in.at("dt_bias").get(hv * K + d);
    if (p.gate == KdaGate::softplus) g = -a * (x > 20 ? x : std::log1p(std::exp(x)));
    if (p.gate == KdaGate::lower_bound) g = p.lower_bound * sigmoid(a * x);
  }
  const double b = in.at("beta").get(tok * p.HV + hv);
  t.beta = p.beta == KdaBeta::given ? b : p.beta == KdaBeta::sigmoid ? sigmoid(b) : 2 * sigmoid(b);
  return t;
}

struct Out { std::vector<double> o, ht; };

using Mat = std::vector<std::vector<double>>;
Mat zeros(int64_t r, int64_t c) { return Mat(static_cast<size_t>(r), std::vector<double>(static_cast<size_t>(c))); }

int64_t state_index(const KdaParams& p, int64_t n, int64_t hv, int64_t d, int64_t j) {
  const int64_t base = (n * p.HV + hv) * p.K * p.V;
  return base + (p.state_v_first ? j * p.K + d : d * p.V + j);
}

// Runs `per_pair(n, hv, S, o)` for every pair, with S from h0 and ht from S afterwards.
Out run_pairs(const KdaParams& p, const TensorMap& in, const std::function<void(int64_t, int64_t, Mat&, Out&)>& body) {
  Out out;
  out.o.assign(static_cast<size_t>(p.B * p.T * p.HV * p.V), 0.0);
  out.ht.assign(static_cast<size_t>(p.num_seqs() * p.HV * p.K * p.V), 0.0);
  for (int64_t n = 0; n < p.num_seqs(); ++n)
    for (int64_t hv = 0; hv < p.HV; ++hv) {
      Mat S = zeros(p.K, p.V);
      for (int64_t d = 0; d < p.K; ++d)
        for (int64_t j = 0; j < p.V; ++j)
          S[static_cast<size_t>(d)][static_cast<size_t>(j)] = p.has_h0 ? in.at("h0").get(state_index(p, n, hv, d, j)) : 0.0;
      body(n, hv, S, out);
      for (int64_t d = 0; d < p.K; ++d)
        for (int64_t j = 0; j < p.V; ++j)
          out.ht[static_cast<size_t>(state_index(p, n, hv, d, j))] = S[static_cast<size_t>(d)][static_cast<size_t>(j)];
    }
  return out;
}

Out recurrent_f64(const KdaParams& p, const TensorMap& in) {
  const size_t K = static_cast<size_t>(p.K), V = static_cast<size_t>(p.V);
  return run_pairs(p, in, [&](int64_t n, int64_t hv, Mat& S, Out& out) {
    for (int64_t tok = p.seq_begin(n); tok < p.seq_end(n); ++tok) {
      Tok t = prepare(p, in, tok, hv);
      std::vector<double> r(t.v);
      for (size_t d = 0; d < K; ++d)
        for (size_t j = 0; j < V; ++j) S[d][j] *= std::exp(t.g[d]);
      for (size_t d = 0; d < K; ++d)
        for (size_t j = 0; j < V; ++j) r[j] -= S[d][j] * t.k[d];
      for (size_t d = 0; d < K; ++d)
        for (size_t j = 0; j < V; ++j) S[d][j] += t.k[d] * t.beta * r[j];
      for (size_t j = 0; j < V; ++j) {
        double o = 0;
        for (size_t d = 0; d < K; ++d) o += S[d][j] * t.q[d];
        out.o[static_cast<size_t>(tok * p.HV + hv) * V + j] = o;
      }
    }
  });
}

Out chunk_f64(const KdaParams& p, const TensorMap& in, int64_t C = 64) {
  const size_t K = static_cast<size_t>(p.K), V = static_cast<size_t>(p.V);
  return run_pairs(p, in, [&](int64_t n, int64_t hv, Mat& S, Out& out) {
    for (int64_t t0 = p.seq_begin(n); t0 < p.seq_end(n); t0 += C) {
      const size_t c = static_cast<size_t>(std::min(C, p.seq_end(n) - t0));
      std::vector<Tok> x;
      for (size_t i = 0; i < c; ++i) x.push_back(prepare(p, in, t0 + static_cast<int64_t>(i), hv));
      Mat G = zeros(static_cast<int64_t>(c), p.K);
      for (size_t i = 0; i < c; ++i)
        for (size_t d = 0; d < K; ++d) G[i][d] = (i ? G[i - 1][d] : 0.0) + x[i].g[d];
      Mat L = zeros(static_cast<int64_t>(c), static_cast<int64_t>(c)), Aqk = L, Ai = L;
      for (size_t i = 0; i < c; ++i)
        for (size_t j = 0; j <= i; ++j)
          for (size_t d = 0; d < K; ++d) {
            const double e = std::exp(G[i][d] - G[j][d]);   // j <= i: argument <= 0
            Aqk[i][j] += x[i].q[d] * x[j].k[d] * e;
            if (j < i) L[i][j] += x[i].beta * x[i].k[d] * x[j].k[d] * e;
          }
      for (size_t i = 0; i < c; ++i) {   // Ai = (I + L)^-1, forward substitution
        Ai[i][i] = 1;
        for (size_t j = 0; j < i; ++j)
          for (size_t m = 0; m <= j; ++m) Ai[i][m] -= L[i][j] * Ai[j][m];
      }
      Mat W = zeros(static_cast<int64_t>(c), p.K), U = zeros(static_cast<int64_t>(c), p.V);
      for (size_t i = 0; i < c; ++i)
        for (size_t m = 0; m <= i; ++m) {
          for (size_t d = 0; d < K; ++d) W[i][d] += Ai[i][m] * x[m].beta * x[m].k[d] * std::exp(G[m][d]);
          for (size_t j = 0; j < V; ++j) U[i][j] += Ai[i][m] * x[m].beta * x[m].v[j];
        }
      Mat Vn = U;
      for (size_t i = 0; i < c; ++i)
        for (size_t d = 0; d < K; ++d)
          for (size_t j = 0; j < V; ++j) Vn[i][j] -= W[i][d] * S[d][j];
      for (size_t i = 0; i < c; ++i)
        for (size_t j = 0; j < V; ++j) {
          double o = 0;
          for (size_t d = 0; d < K; ++d) o += x[i].q[d] * std::exp(G[i][d]) * S[d][j];
          for (size_t m = 0; m <= i; ++m) o += Aqk[i][m] * Vn[m][j];
          out.o[static_cast<size_t>((t0 + static_cast<int64_t>(i)) * p.HV + hv) * V + j] = o;
        }
      for (size_t d = 0; d < K; ++d)
        for (size_t j = 0; j < V; ++j) {
          double s = std::exp(G[c - 1][d]) * S[d][j];
          for (size_t i = 0; i < c; ++i) s += x[i].k[d] * std::exp(G[c - 1][d] - G[i][d]) * Vn[i][j];
          S[d][j] = s;
        }
    }
  });
}

// --- running candidates and comparing -------------------------------------------------------------
using KdaFn = void (*)(const KdaParams&, const TensorMap&, TensorMap&);

std::vector<double> values(const Tensor& t) { return row(t, 0, t.numel()); }

// Outputs poisoned with all-ones bytes (NaN in every float format) so a missed element shows.
Out run(KdaFn fn, const KdaParams& p, const TensorMap& in, DType o_dtype = DType::f32) {
  TensorMap out;
  out["o"] = Tensor(o_dtype, {p.B, p.T, p.HV, p.V});
  out["ht"] = Tensor(DType::f32, state_shape(p));
  for (auto& [name, t] : out) std::memset(t.bytes(), 0xff, t.nbytes());
  fn(p, in, out);
  return {values(out.at("o")), values(out.at("ht"))};
}

double rms_ratio(const std::vector<double>& ref, const std::vector<double>& x) {
  EXPECT_EQ(ref.size(), x.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(x[i])) return std::numeric_limits<double>::infinity();
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / (std::sqrt(den) + 1e-30);
}

double max_rel(const std::vector<double>& ref, const std::vector<double>& x) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(x[i] - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return num / (den + 1e-300);
}

KdaParams params(int64_t T, int64_t K = 32, int64_t V = 24, int64_t H = 1, int64_t HV = 2) {
  KdaParams p;
  p.B = 1; p.T = T; p.H = H; p.HV = HV; p.K = K; p.V = V;
  p.has_h0 = true;
  return p;
}

const KdaGate kGates[] = {KdaGate::pregated, KdaGate::softplus, KdaGate::lower_bound};
const KdaBeta kBetas[] = {KdaBeta::given, KdaBeta::sigmoid, KdaBeta::sigmoid2};
const KdaFn kF32[] = {kda_cpu_recurrent_f32, kda_cpu_chunk_f32, kda_cpu_naive_f32};
const KdaFn kPrefill[] = {kda_cpu_recurrent_f32, kda_cpu_chunk_f32, kda_cpu_chunk_bf16, kda_cpu_naive_f32};

// --- building blocks of kda_chunk.h ----------------------------------------------------------------
TEST(KdaChunkKernels, VectorExpBf16RoundingTransposeGemm) {
  using namespace kda_cpu;
  Rng rng{7};
  alignas(64) float x[16], y[16];
  double worst_ulp = 0;
  for (int it = 0; it < 4000; ++it) {   // exp on [-110, 0]: <= 2 ulp, subnormals within 2 quanta
    for (float& e : x) e = static_cast<float>(rng.uniform(-110, 0));
    x[0] = it == 0 ? 0.0f : x[0];
    exp16(V16::load(x)).store(y);
    for (int l = 0; l < 16; ++l) {
      const double ex = std::exp(static_cast<double>(x[l]));
      const double quantum = ex >= FLT_MIN ? std::ldexp(1.0, std::ilogb(ex) - 23) : std::ldexp(1.0, -149);
      worst_ulp = std::max(worst_ulp, std::abs(y[l] - ex) / quantum);
    }
    if (it == 0) {
      EXPECT_EQ(y[0], 1.0f);
    }
  }
  EXPECT_LE(worst_ulp, 2.0);
  for (int it = 0; it < 4000; ++it) {   // vector bf16 rounding == the scalar one, bit for bit
    for (float& e : x) e = f32_from_bits(static_cast<uint32_t>(rng.next()));
    x[1] = f32_from_bits(0x3f808000u);   // a tie
    x[2] = std::numeric_limits<float>::infinity();
    x[3] = FLT_MAX;
    round_bf16(V16::load(x)).store(y);
    for (int l = 0; l < 16; ++l) {
      if (std::isnan(x[l])) EXPECT_TRUE(std::isnan(y[l]));
      else ASSERT_EQ(f32_bits(y[l]), f32_bits(dg::round_bf16(x[l]))) << x[l];
    }
  }
  std::vector<float> a(16 * 20), t(16 * 24);
  for (float& e : a) e = static_cast<float>(rng.uniform());
  transpose16(a.data(), 20, t.data(), 24);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) ASSERT_EQ(t[static_cast<size_t>(c * 24 + r)], a[static_cast<size_t>(r * 20 + c)]);
  const int64_t M = 13, N = 48, kc = 37;   // C = A B, A plain / lower / transposed, vs double loops
  std::vector<float> A(M * 40), At(kc * 16), B(kc * 50), pack(kc * 32), C(M * N);
  for (float& e : A) e = static_cast<float>(rng.uniform(-1, 1));
  for (float& e : B) e = static_cast<float>(rng.uniform(-1, 1));
  for (AForm form : {AForm::plain, AForm::lower, AForm::transposed}) {
    auto a_at = [&](int64_t i, int64_t k) -> float& { return form == AForm::transposed ? At[static_cast<size_t>(k * 16 + i)] : A[static_cast<size_t>(i * 40 + k)]; };
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < kc; ++k) a_at(i, k) = form == AForm::lower && k > i ? 0.0f : A[static_cast<size_t>(i * 40 + k)];
    gemm(M, N, kc, form == AForm::transposed ? At.data() : A.data(), form == AForm::transposed ? 16 : 40, form, B.data(), 50,
         pack.data(), [&](int64_t i, int64_t j, V16 acc) { acc.store(C.data() + i * N + j); });
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double ref = 0;
        for (int64_t k = 0; k < kc; ++k) ref += static_cast<double>(a_at(i, k)) * B[static_cast<size_t>(k * 50 + j)];
        ASSERT_NEAR(C[static_cast<size_t>(i * N + j)], ref, 1e-5) << int(form) << " " << i << " " << j;
      }
  }
}

// --- the chunk algebra in f64 ---------------------------------------------------------------------
TEST(KdaChunkF64, EqualsRecurrenceForEveryGateAndBetaMode) {
  for (KdaGate gate : kGates)
    for (bool a_log : {true, false}) {
      if (!a_log && gate != KdaGate::lower_bound) continue;
      for (KdaBeta beta : kBetas)
        for (int64_t T : {1, 63, 64, 65, 200}) {
          KdaParams p = params(T);
          p.gate = gate; p.use_A_log = a_log; p.beta = beta;
          TensorMap in = make_inputs(p, {}, static_cast<uint64_t>(T) * 7 + static_cast<uint64_t>(beta));
          Out rec = recurrent_f64(p, in), chk = chunk_f64(p, in);
          SCOPED_TRACE(testing::Message() << "gate " << int(gate) << " a_log " << a_log << " beta " << int(beta) << " T " << T);
          EXPECT_LT(max_rel(rec.o, chk.o), 1e-12);
          EXPECT_LT(max_rel(rec.ht, chk.ht), 1e-12);
        }
    }
}

// --- f32 and bf16 candidates against the f64 recurrence -------------------------------------------
// Every gate x beta mode at K = V = 64, T = 200; then odd head dims and ragged last chunks.
TEST(KdaCpuCandidates, F32WithinF32BoundsForEveryModeAndShape) {
  struct Config { KdaGate gate; KdaBeta beta; int64_t K, V, T; };
  std::vector<Config> configs;
  for (KdaGate gate : kGates)
    for (KdaBeta beta : kBetas) configs.push_back({gate, beta, 64, 64, 200});
  for (Config c : {Config{KdaGate::lower_bound, KdaBeta::sigmoid, 100, 60, 130}, {KdaGate::softplus, KdaBeta::given, 128, 128, 193},
                   {KdaGate::pregated, KdaBeta::sigmoid2, 60, 100, 1}})
    configs.push_back(c);
  uint64_t seed = 11;
  for (const Config& c : configs) {
    KdaParams p = params(c.T, c.K, c.V);
    p.gate = c.gate; p.beta = c.beta;
    TensorMap in = make_inputs(p, {}, seed++);
    Out ref = recurrent_f64(p, in);
    for (KdaFn fn : kF32) {
      Out r = run(fn, p, in);
      SCOPED_TRACE(testing::Message() << "config " << seed - 11 << (fn == kF32[0] ? " recurrent" : " chunk"));
      EXPECT_LT(rms_ratio(ref.o, r.o), 1e-5);
      EXPECT_LT(rms_ratio(ref.ht, r.ht), 1e-5);
    }
  }
}

TEST(KdaCpuCandidates, Bf16ChunkWithinBf16BoundsAndWorseThanF32) {
  KdaParams p = params(300, 64, 64);
  p.gate = KdaGate::softplus; p.beta = KdaBeta::sigmoid;
  TensorMap in = make_inputs(p, {.dtype = DType::bf16}, 5);
  Out ref = recurrent_f64(p, in);
  Out f32 = run(kda_cpu_chunk_f32, p, in), b16 = run(kda_cpu_chunk_bf16, p, in, DType::bf16);
  const double e32 = rms_ratio(ref.o, f32.o), e16 = rms_ratio(ref.o, b16.o);
  EXPECT_LT(e32, 1e-5);
  EXPECT_LT(e16, 2e-2);
  EXPECT_GT(e16, 30 * e32);
  EXPECT_LT(rms_ratio(ref.ht, b16.ht), 2e-2);
  EXPECT_GT(rms_ratio(ref.ht, b16.ht), 30 * rms_ratio(ref.ht, f32.ht));
}

// --- layout, varlen, GVA, h0 ----------------------------------------------------------------------
TEST(KdaCpuCandidates, VFirstEqualsKFirst) {
  KdaParams p = params(150, 32, 48);
  TensorMap in = make_inputs(p, {}, 21);
  KdaParams pv = p;
  pv.state_v_first = true;
  TensorMap inv = in;
  inv["h0"] = Tensor(DType::f32, state_shape(pv));
  for (int64_t hv = 0; hv < p.HV; ++hv)
    for (int64_t d = 0; d < p.K; ++d)
      for (int64_t j = 0; j < p.V; ++j) inv["h0"].set(state_index(pv, 0, hv, d, j), in["h0"].get(state_index(p, 0, hv, d, j)));
  for (KdaFn fn : kPrefill) {
    Out a = run(fn, p, in), b = run(fn, pv, inv);
    EXPECT_EQ(a.o, b.o);
    for (int64_t hv = 0; hv < p.HV; ++hv)
      for (int64_t d = 0; d < p.K; ++d)
        for (int64_t j = 0; j < p.V; ++j)
          ASSERT_EQ(a.ht[static_cast<size_t>(state_index(p, 0, hv, d, j))], b.ht[static_cast<size_t>(state_index(pv, 0, hv, d, j))]);
  }
}

TEST(KdaCpuCandidates, VarlenEqualsSeparateSequences) {
  const std::vector<int64_t> cu = {0, 1, 64, 129, 129, 200, 263};   // lengths 1, 63, 65, 0, 71, 63
  KdaParams p = params(cu.back());
  p.cu_seqlens = cu;
  p.gate = KdaGate::softplus;
  TensorMap in = make_inputs(p, {}, 31);
  Out ref = recurrent_f64(p, in);
  for (KdaFn fn : kPrefill) {
    Out packed = run(fn, p, in);
    if (fn != kda_cpu_chunk_bf16) {
      EXPECT_LT(rms_ratio(ref.o, packed.o), 1e-5);
    }
    const int64_t per = p.HV * p.K * p.V;
    for (size_t n = 0; n + 1 < cu.size(); ++n) {
      KdaParams ps = params(cu[n + 1] - cu[n]);
      ps.gate = p.gate;
      const std::vector<double> ht_n(packed.ht.begin() + static_cast<int64_t>(n) * per, packed.ht.begin() + static_cast<int64_t>(n + 1) * per);
      if (ps.T == 0) {   // an empty sequence passes its initial state through
        EXPECT_EQ(ht_n, row(in["h0"], static_cast<int64_t>(n) * per, per));
        continue;
      }
      TensorMap one = in;
      for (const char* name : {"q", "k", "v", "g", "beta"}) {
        const Tensor& t = in[name];
        std::vector<int64_t> shape = t.shape();
        const int64_t row = t.numel() / shape[1];
        shape[1] = ps.T;
        one[name] = fill(t.dtype(), shape, [&](int64_t i) { return t.get(cu[n] * row + i); });
      }
      one["h0"] = fill(DType::f32, state_shape(ps), [&](int64_t i) { return in["h0"].get(static_cast<int64_t>(n) * per + i); });
      Out sep = run(fn, ps, one);
      EXPECT_EQ(sep.o, std::vector<double>(packed.o.begin() + cu[n] * p.HV * p.V, packed.o.begin() + cu[n + 1] * p.HV * p.V)) << n;
      EXPECT_EQ(sep.ht, ht_n) << n;
    }
  }
}

TEST(KdaCpuCandidates, GvaMapsValueHeadsToTheirQkHead) {
  KdaParams p = params(100, 32, 32, 2, 6);   // group of 3
  p.gate = KdaGate::lower_bound;
  TensorMap in = make_inputs(p, {}, 41);
  Out ref = recurrent_f64(p, in);
  // The same case with q, k repeated per value head (H = HV) must give the same bits.
  KdaParams pr = p;
  pr.H = pr.HV;
  TensorMap rep = in;
  for (const char* name : {"q", "k"})
    rep[name] = fill(DType::f32, {1, p.T, pr.H, p.K}, [&](int64_t i) {
      int64_t d = i % p.K, hv = i / p.K % pr.H, t = i / p.K / pr.H;
      return in[name].get((t * p.H + hv / p.group()) * p.K + d);
    });
  for (KdaFn fn : kPrefill) {
    Out a = run(fn, p, in), b = run(fn, pr, rep);
    EXPECT_EQ(a.o, b.o);
    EXPECT_EQ(a.ht, b.ht);
    if (fn != kda_cpu_chunk_bf16) {
      EXPECT_LT(rms_ratio(ref.o, a.o), 1e-5);
    }
  }
}

// Enough work for several threads: the pairs they share out give the bits one thread gives.
TEST(KdaCpuCandidates, ThreadsOverPairsGiveTheSameBits) {
  KdaParams p = params(300, 64, 64, 2, 4);
  p.B = 3;
  TensorMap in = make_inputs(p, {}, 131);
  for (KdaFn fn : kPrefill) {
    set_num_threads(1);
    Out one = run(fn, p, in);
    set_num_threads(4);
    Out many = run(fn, p, in);
    set_num_threads(0);
    EXPECT_EQ(one.o, many.o);
    EXPECT_EQ(one.ht, many.ht);
  }
}

// One long sequence of one head and several threads: the columns are split between them
// (kda_cpu.h, column_parts), and every split gives exactly the bits of the whole pair. Odd V (the
// ranges end mid-block), both state layouts, an in-op gate and bf16 outputs for the bf16 chunk.
TEST(KdaCpuCandidates, ColumnSplitsOfOnePairGiveTheSameBits) {
  for (bool v_first : {false, true}) {
    KdaParams p = params(1100, 32, 100, 1, 1);
    p.state_v_first = v_first;
    p.gate = KdaGate::softplus;
    p.beta = KdaBeta::sigmoid;
    TensorMap in = make_inputs(p, {}, 77);
    for (KdaFn fn : kPrefill) {
      const DType od = fn == kda_cpu_chunk_bf16 ? DType::bf16 : DType::f32;
      set_num_threads(1);
      ASSERT_EQ(kda_cpu::column_parts(1, p.V, p.T), 1);
      Out one = run(fn, p, in, od);
      for (int threads : {2, 3, 7}) {
        set_num_threads(threads);
        ASSERT_GT(kda_cpu::column_parts(1, p.V, p.T), 1);
        Out split = run(fn, p, in, od);
        EXPECT_EQ(one.o, split.o) << threads << " threads, v_first " << v_first;
        EXPECT_EQ(one.ht, split.ht) << threads << " threads, v_first " << v_first;
      }
      set_num_threads(0);
    }
  }
}

TEST(KdaCpuCandidates, InitialStateIsUsed) {
  KdaParams p = params(5);   // short: the gates forget h0 at about e^-0.2 per token
  TensorMap in = make_inputs(p, {}, 51);
  KdaParams pz = p;
  pz.has_h0 = false;
  Out ref = recurrent_f64(pz, in);
  for (KdaFn fn : kF32) {
    Out with = run(fn, p, in), without = run(fn, pz, in);
    EXPECT_GT(rms_ratio(without.ht, with.ht), 1e-2);
    EXPECT_LT(rms_ratio(ref.o, without.o), 1e-5);
  }
}

TEST(KdaCpuCandidates, InputsUntouchedAndNarrowInputsReadExactly) {
  KdaParams p = params(80);
  TensorMap in16 = make_inputs(p, {.dtype = DType::bf16}, 61);
  TensorMap in32;
  for (auto& [name, t] : in16) in32[name] = fill(DType::f32, t.shape(), [&](int64_t i) { return t.get(i); });
  std::vector<std::vector<double>> before;
  for (auto& [name, t] : in16) before.push_back(values(t));
  for (KdaFn fn : kF32) {
    Out a = run(fn, p, in16), b = run(fn, p, in32);
    EXPECT_EQ(a.o, b.o);
    EXPECT_EQ(a.ht, b.ht);
  }
  size_t i = 0;
  for (auto& [name, t] : in16) EXPECT_EQ(values(t), before[i++]) << name;
}

// --- hard regimes ---------------------------------------------------------------------------------
// Strong decay (g ~ -5 per token: chunk cumsums down to about -320; g ~ -40: -2560), zero gates,
// and collinear all-positive keys with beta near 1. rms_ratio is Inf when an output is not finite.
TEST(KdaCpuCandidates, HardRegimesStayFiniteAndAccurate) {
  const Recipe regimes[] = {{.gates = GateValues::strong_decay}, {.gates = GateValues::full_forget},
                            {.gates = GateValues::zero}, {.collinear_keys = true, .beta = 0.999}};
  uint64_t seed = 71;
  for (const Recipe& r : regimes) {
    KdaParams p = params(200, 64, 64);
    TensorMap in = make_inputs(p, r, seed++);
    Out ref = recurrent_f64(p, in);
    for (KdaFn fn : kPrefill) {
      Out c = run(fn, p, in);
      const double bound = fn == kda_cpu_chunk_bf16 ? 2e-2 : 1e-5;
      EXPECT_LT(rms_ratio(ref.o, c.o), bound) << seed;
      EXPECT_LT(rms_ratio(ref.ht, c.ht), bound) << seed;
    }
  }
}

// --- decode ---------------------------------------------------------------------------------------
struct Decoded { std::vector<double> o; Tensor pool; };   // o [B, T, HV, V]

// T decode steps over the tokens of `in`; sequence b uses pool slot slots[b] (-1: padding).
Decoded drive_decode(KdaFn fn, const KdaParams& p, const TensorMap& in, DType state_dtype,
                     const std::vector<int64_t>& slots, int64_t pool_slots) {
  KdaParams step = p;
  step.T = 1;
  std::vector<int64_t> shape = state_shape(p);
  shape[0] = pool_slots;
  Decoded r;
  r.pool = fill(state_dtype, shape, [](int64_t i) { return 7.0 + static_cast<double>(i % 13); });   // sentinels
  const int64_t per = p.HV * p.K * p.V;
  for (int64_t b = 0; b < p.B; ++b)
    if (slots[static_cast<size_t>(b)] >= 0)
      for (int64_t i = 0; i < per; ++i)
        r.pool.set(slots[static_cast<size_t>(b)] * per + i, p.has_h0 ? in.at("h0").get(b * per + i) : 0.0);
  r.o.assign(static_cast<size_t>(p.B * p.T * p.HV * p.V), 0.0);
  TensorMap sin;
  sin["A_log"] = in.at("A_log");
  sin["dt_bias"] = in.at("dt_bias");
  sin["state_indices"] = Tensor(DType::i64, {p.B});
  for (int64_t b = 0; b < p.B; ++b) sin["state_indices"].data<int64_t>()[b] = slots[static_cast<size_t>(b)];
  for (int64_t t = 0; t < p.T; ++t) {
    for (const char* name : {"q", "k", "v", "g", "beta"}) {
      const Tensor& full = in.at(name);
      std::vector<int64_t> s = full.shape();
      s[1] = 1;
      const int64_t row = full.numel() / (p.B * p.T);
      sin[name] = fill(full.dtype(), s, [&](int64_t i) { return full.get(((i / row) * p.T + t) * row + i % row); });
    }
    TensorMap sout;
    sout["o"] = Tensor(DType::f32, {p.B, 1, p.HV, p.V});
    std::memset(sout["o"].bytes(), 0xff, sout["o"].nbytes());
    sout["state"] = r.pool;   // shares storage: updated in place
    fn(step, sin, sout);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t i = 0; i < p.HV * p.V; ++i)
        r.o[static_cast<size_t>((b * p.T + t) * p.HV * p.V + i)] = sout["o"].get(b * p.HV * p.V + i);
  }
  return r;
}

TEST(KdaDecodeCpu, StepsReproduceRecurrentPrefillBitwise) {
  for (bool v_first : {false, true}) {
    KdaParams p = params(40, 32, 48, 1, 2);
    p.B = 3; p.state_v_first = v_first; p.gate = KdaGate::softplus; p.beta = KdaBeta::sigmoid;
    TensorMap in = make_inputs(p, {}, 101);
    Out pre = run(kda_cpu_recurrent_f32, p, in);
    const std::vector<int64_t> slots = {3, 0, 4};
    Decoded d = drive_decode(kda_decode_cpu_f32, p, in, DType::f32, slots, 5);
    EXPECT_EQ(d.o, pre.o);
    const int64_t per = p.HV * p.K * p.V;
    for (int64_t b = 0; b < p.B; ++b)
      EXPECT_EQ(row(d.pool, slots[static_cast<size_t>(b)] * per, per), std::vector<double>(pre.ht.begin() + b * per, pre.ht.begin() + (b + 1) * per));
    for (int64_t s : {1, 2})   // slots no sequence uses keep their sentinels
      for (int64_t i = 0; i < per; ++i) ASSERT_EQ(d.pool.get(s * per + i), 7.0 + static_cast<double>((s * per + i) % 13));
  }
}

TEST(KdaDecodeCpu, PaddingSlotWritesZerosAndTouchesNoState) {
  KdaParams p = params(3, 16, 16, 1, 1);
  p.B = 2;
  TensorMap in = make_inputs(p, {}, 111);
  Decoded d = drive_decode(kda_decode_cpu_f32, p, in, DType::f32, {-1, 1}, 2);
  for (int64_t i = 0; i < p.T * p.V; ++i) EXPECT_EQ(d.o[static_cast<size_t>(i)], 0.0);
  for (int64_t i = 0; i < p.K * p.V; ++i) EXPECT_EQ(d.pool.get(i), 7.0 + static_cast<double>(i % 13));
}

// The naive decode step (the policy's naive for kda_decode.f32) re-enters the naive prefill's loops
// once per token with the state kept in f32 in the pool: T steps give the naive prefill's bits, in
// either pool layout, on any slots; padding gives zeros and leaves the pool alone.
TEST(KdaDecodeCpu, NaiveStepsReproduceTheNaivePrefillAndSkipPadding) {
  for (bool v_first : {false, true}) {
    KdaParams p = params(24, 32, 48, 2, 4);
    p.B = 3; p.state_v_first = v_first; p.has_h0 = true; p.gate = KdaGate::softplus; p.beta = KdaBeta::sigmoid;
    TensorMap in = make_inputs(p, {}, 131);
    Out pre = run(kda_cpu_naive_f32, p, in);
    const std::vector<int64_t> slots = {4, 0, 2};
    Decoded d = drive_decode(kda_decode_cpu_naive_f32, p, in, DType::f32, slots, 5);
    EXPECT_EQ(d.o, pre.o);
    const int64_t per = p.HV * p.K * p.V;
    for (int64_t b = 0; b < p.B; ++b)
      EXPECT_EQ(row(d.pool, slots[static_cast<size_t>(b)] * per, per), std::vector<double>(pre.ht.begin() + b * per, pre.ht.begin() + (b + 1) * per));
    for (int64_t s : {1, 3})
      for (int64_t i = 0; i < per; ++i) ASSERT_EQ(d.pool.get(s * per + i), 7.0 + static_cast<double>((s * per + i) % 13));
  }
  KdaParams p = params(3, 16, 16, 1, 1);
  p.B = 2;
  TensorMap in = make_inputs(p, {}, 111);
  Decoded d = drive_decode(kda_decode_cpu_naive_f32, p, in, DType::f32, {-1, 1}, 2);
  for (int64_t i = 0; i < p.T * p.V; ++i) EXPECT_EQ(d.o[static_cast<size_t>(i)], 0.0);
  for (int64_t i = 0; i < p.K * p.V; ++i) EXPECT_EQ(d.pool.get(i), 7.0 + static_cast<double>(i % 13));
}

TEST(KdaDecodeCpu, Bf16StateDriftsButStaysClose) {
  KdaParams p = params(200, 64, 64, 1, 2);
  p.B = 2;
  TensorMap in = make_inputs(p, {}, 121);
  Out ref = recurrent_f64(p, in);
  Decoded f = drive_decode(kda_decode_cpu_f32, p, in, DType::f32, {1, 0}, 2);
  Decoded b = drive_decode(kda_decode_cpu_bf16state, p, in, DType::bf16, {1, 0}, 2);
  const double ef = rms_ratio(ref.o, f.o), eb = rms_ratio(ref.o, b.o);
  EXPECT_LT(ef, 1e-5);
  EXPECT_LT(eb, 2e-2);
  EXPECT_GT(eb, 30 * ef);
  for (int64_t i = 0; i < b.pool.numel(); ++i) ASSERT_EQ(b.pool.get(i), static_cast<double>(round_bf16(static_cast<float>(b.pool.get(i)))));
}

TEST(KdaCpuCandidates, RegisteredWithHonestDtypes) {
  struct Want { const char* name; const char* op; DType in, state, out; };
  for (Want w : {Want{"kda_cpu_recurrent_f32", "kda", DType::f32, DType::f32, DType::f32},
                 Want{"kda_cpu_chunk_f32", "kda", DType::f32, DType::f32, DType::f32},
                 Want{"kda_cpu_chunk_bf16", "kda", DType::bf16, DType::f32, DType::bf16},
                 Want{"kda_decode_cpu_f32", "kda_decode", DType::f32, DType::f32, DType::f32},
                 Want{"kda_decode_cpu_bf16state", "kda_decode", DType::f32, DType::bf16, DType::f32}}) {
    const Candidate* c = find_candidate(w.name);
    ASSERT_NE(c, nullptr) << w.name;
    EXPECT_EQ(c->info().op, w.op);
    EXPECT_EQ(c->info().backend, "cpu");
    EXPECT_EQ(c->info().input_dtype, w.in);
    EXPECT_EQ(c->info().state_dtype, w.state);
    EXPECT_EQ(c->info().output_dtype, w.out);
  }
}

}  // namespace
}  // namespace dg
