// The KDA reference: a hand-derived case, every gate and beta mode against a straightforward double
// implementation written here, varlen, GVA, state layouts, initial state, sampling, input errors,
// the vectorized kernels against the generic template, and streaming memory at long T.
#include "reference/kda.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "harness/cases/case.h"

namespace dg {
namespace {

const double kLog16 = std::log(16.0);

TensorMap make_inputs(const KdaParams& p, uint64_t seed, DType dt = DType::f64) {
  std::mt19937_64 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  const int64_t BT = p.B * p.T, N = p.num_seqs();
  TensorMap in;
  auto fill = [&](const char* name, std::vector<int64_t> shape, double lo, double hi) {
    Tensor t(dt, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, uni(lo, hi));
    in[name] = t;
  };
  fill("q", {p.B, p.T, p.H, p.K}, -1.0, 1.0);
  fill("k", {p.B, p.T, p.H, p.K}, -1.0, 1.0);
  fill("v", {p.B, p.T, p.HV, p.V}, -1.0, 1.0);
  if (p.gate == KdaGate::pregated) fill("g", {p.B, p.T, p.HV, p.K}, -0.5, 0.0);
  else fill("g", {p.B, p.T, p.HV, p.K}, -3.0, 3.0);
  if (p.beta == KdaBeta::given) fill("beta", {p.B, p.T, p.HV}, 0.05, 1.0);
  else fill("beta", {p.B, p.T, p.HV}, -3.0, 3.0);
  fill("A_log", {p.HV}, 0.0, kLog16);
  fill("dt_bias", {p.HV * p.K}, -6.9, -2.3);
  if (p.has_h0) {
    if (p.state_v_first) fill("h0", {N, p.HV, p.V, p.K}, -1.0, 1.0);
    else fill("h0", {N, p.HV, p.K, p.V}, -1.0, 1.0);
  }
  (void)BT;
  return in;
}

// The recurrence of kda.h in plain double, written independently of the reference.
struct Naive {
  std::vector<double> o, ht;
};
Naive naive_kda(const KdaParams& p, const TensorMap& in) {
  const int64_t H = p.H, HV = p.HV, K = p.K, V = p.V, N = p.num_seqs();
  auto at = [&](const char* name, int64_t i) { return in.at(name).get(i); };
  auto sigm = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  auto softplus = [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); };
  Naive r;
  r.o.assign(static_cast<size_t>(p.B * p.T * HV * V), NAN);
  r.ht.assign(static_cast<size_t>(N * HV * K * V), NAN);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t h = hv / (HV / H);
      std::vector<double> S(static_cast<size_t>(K * V), 0.0);
      auto s = [&](int64_t k, int64_t v) -> double& { return S[static_cast<size_t>(k * V + v)]; };
      if (p.has_h0) {
        for (int64_t k = 0; k < K; ++k)
          for (int64_t v = 0; v < V; ++v)
            s(k, v) = at("h0", p.state_v_first ? ((n * HV + hv) * V + v) * K + k : ((n * HV + hv) * K + k) * V + v);
      }
      for (int64_t t = p.seq_begin(n); t < p.seq_end(n); ++t) {
        std::vector<double> q(static_cast<size_t>(K)), k(static_cast<size_t>(K)), g(static_cast<size_t>(K));
        for (int64_t i = 0; i < K; ++i) {
          q[static_cast<size_t>(i)] = at("q", (t * H + h) * K + i);
          k[static_cast<size_t>(i)] = at("k", (t * H + h) * K + i);
        }
        if (p.qk_l2norm) {
          for (auto* x : {&q, &k}) {
            double ss = 0.0;
            for (double e : *x) ss += e * e;
            for (double& e : *x) e /= std::sqrt(ss + 1e-6);
          }
        }
        for (double& e : q) e *= p.scale_value();
        for (int64_t i = 0; i < K; ++i) {
          double f = at("g", (t * HV + hv) * K + i), gi = f;
          if (p.gate != KdaGate::pregated) {
            double x = f + at("dt_bias", hv * K + i);
            double a = p.use_A_log ? std::exp(at("A_log", hv)) : 1.0;
            if (p.gate == KdaGate::softplus) gi = -a * softplus(x);
            else gi = p.lower_bound * sigm(p.use_A_log ? a * x : x);
          }
          g[static_cast<size_t>(i)] = gi;
        }
        double b = at("beta", t * HV + hv);
        if (p.beta == KdaBeta::sigmoid) b = sigm(b);
        if (p.beta == KdaBeta::sigmoid2) b = 2.0 * sigm(b);
        for (int64_t i = 0; i < K; ++i)
          for (int64_t v = 0; v < V; ++v) s(i, v) *= std::exp(g[static_cast<size_t>(i)]);
        for (int64_t v = 0; v < V; ++v) {
          double pred = 0.0;
          for (int64_t i = 0; i < K; ++i) pred += s(i, v) * k[static_cast<size_t>(i)];
          double res = at("v", (t * HV + hv) * V + v) - pred;
          for (int64_t i = 0; i < K; ++i) s(i, v) += b * k[static_cast<size_t>(i)] * res;
        }
        for (int64_t v = 0; v < V; ++v) {
          double o = 0.0;
          for (int64_t i = 0; i < K; ++i) o += s(i, v) * q[static_cast<size_t>(i)];
          r.o[static_cast<size_t>((t * HV + hv) * V + v)] = o;
        }
      }
      for (int64_t k = 0; k < K; ++k)
        for (int64_t v = 0; v < V; ++v)
          r.ht[static_cast<size_t>(p.state_v_first ? ((n * HV + hv) * V + v) * K + k : ((n * HV + hv) * K + k) * V + v)] = s(k, v);
    }
  }
  return r;
}

// ||a - b|| / ||b|| over all elements (both NaN at the same places, else infinity).
double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0.0, n = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
      continue;
    }
    d += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  return n == 0.0 ? std::sqrt(d) : std::sqrt(d / n);
}

KdaParams small(int64_t T = 7, int64_t K = 5, int64_t V = 6) {
  KdaParams p;
  p.B = 2;
  p.T = T;
  p.H = 1;
  p.HV = 1;
  p.K = K;
  p.V = V;
  return p;
}

TEST(KdaReference, HandDerivedTwoTokens) {
  // K = V = 2, scale 1, no l2norm, pregated g, given beta, S0 = 0.
  // t=0: q=[1,0] k=[1,0] v=[2,4] g=[0,0] (alpha 1) beta=0.5
  //   decay: S = 0;  r = v - S^T k = [2,4];  S += 0.5 [1,0]^T [2,4] = [[1,2],[0,0]]
  //   o0 = S^T q = [1,2]
  // t=1: q=[1,2] k=[1,1] v=[1,0] g=[ln 1/2, 0] (alpha [1/2, 1]) beta=1
  //   decay: S = [[1/2,1],[0,0]];  S^T k = [1/2, 1];  r = [1,0] - [1/2,1] = [1/2,-1]
  //   S += [1,1]^T [1/2,-1] = [[1,0],[1/2,-1]];  o1 = S^T q = [1 + 1, 0 - 2] = [2,-2]
  // ht = [[1,0],[1/2,-1]]
  KdaParams p;
  p.T = 2; p.K = 2; p.V = 2; p.qk_l2norm = false; p.scale = 1.0;
  TensorMap in;
  auto make = [&](const char* name, std::vector<int64_t> shape, std::vector<double> x) {
    Tensor t(DType::f64, std::move(shape));
    for (size_t i = 0; i < x.size(); ++i) t.set(static_cast<int64_t>(i), x[i]);
    in[name] = t;
  };
  make("q", {1, 2, 1, 2}, {1, 0, 1, 2});
  make("k", {1, 2, 1, 2}, {1, 0, 1, 1});
  make("v", {1, 2, 1, 2}, {2, 4, 1, 0});
  make("g", {1, 2, 1, 2}, {0, 0, std::log(0.5), 0});
  make("beta", {1, 2, 1}, {0.5, 1.0});
  for (Tier tier : {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256, Tier::f128}) {
    KdaReferenceResult r = kda_reference(tier, p, in);
    const std::vector<double> o = {1, 2, 2, -2}, ht = {1, 0, 0.5, -1};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_NEAR(r.o[i], o[i], 1e-15) << tier_name(tier) << " o[" << i << "]";
      EXPECT_NEAR(r.ht[i], ht[i], 1e-15) << tier_name(tier) << " ht[" << i << "]";
    }
  }
}

TEST(KdaReference, EveryGateAndBetaModeMatchesNaiveDouble) {
  for (KdaGate gate : {KdaGate::pregated, KdaGate::softplus, KdaGate::lower_bound}) {
    for (KdaBeta beta : {KdaBeta::given, KdaBeta::sigmoid, KdaBeta::sigmoid2}) {
      for (bool use_a_log : {true, false}) {
        if (!use_a_log && gate != KdaGate::lower_bound) continue;
        KdaParams p = small();
        p.gate = gate;
        p.beta = beta;
        p.use_A_log = use_a_log;
        p.lower_bound = -3.0;
        p.qk_l2norm = beta != KdaBeta::sigmoid;  // both l2norm settings covered
        TensorMap in = make_inputs(p, 17);
        if (!use_a_log) in.erase("A_log");  // absent when unused
        Naive ref = naive_kda(p, in);
        for (Tier tier : {Tier::f64, Tier::dd}) {
          KdaReferenceResult r = kda_reference(tier, p, in);
          std::string what = std::string(tier_name(tier)) + " gate " + std::to_string(int(gate)) + " beta " +
                             std::to_string(int(beta)) + " A_log " + std::to_string(use_a_log);
          EXPECT_LT(rel_diff(r.o, ref.o), 1e-13) << what;
          EXPECT_LT(rel_diff(r.ht, ref.ht), 1e-13) << what;
        }
      }
    }
  }
}

TEST(KdaReference, VarlenEqualsSeparateSequences) {
  KdaParams p = small();
  p.B = 1;
  p.T = 12;
  p.cu_seqlens = {0, 1, 6, 6, 12};  // lengths 1, 5, 0, 6
  p.has_h0 = true;
  TensorMap in = make_inputs(p, 5);
  KdaReferenceResult packed = kda_reference(Tier::dd, p, in);
  for (int64_t n = 0; n < 4; ++n) {
    KdaParams ps = p;
    ps.cu_seqlens.clear();
    ps.T = p.seq_end(n) - p.seq_begin(n);
    TensorMap seg;
    auto slice = [&](const char* name, int64_t per_token) {
      Tensor t(DType::f64, {1, ps.T, per_token});
      for (int64_t i = 0; i < t.numel(); ++i) t.set(i, in.at(name).get(p.seq_begin(n) * per_token + i));
      seg[name] = t;
    };
    slice("q", p.H * p.K);
    slice("k", p.H * p.K);
    slice("v", p.HV * p.V);
    slice("g", p.HV * p.K);
    slice("beta", p.HV);
    Tensor h0(DType::f64, {1, p.HV, p.K, p.V});
    for (int64_t i = 0; i < h0.numel(); ++i) h0.set(i, in.at("h0").get(n * h0.numel() + i));
    seg["h0"] = h0;
    KdaReferenceResult one = kda_reference(Tier::dd, ps, seg);
    for (size_t i = 0; i < one.o.size(); ++i)
      EXPECT_EQ(one.o[i], packed.o[static_cast<size_t>(p.seq_begin(n) * p.V) + i]) << "seq " << n;
    for (size_t i = 0; i < one.ht.size(); ++i)
      EXPECT_EQ(one.ht[i], packed.ht[static_cast<size_t>(n) * one.ht.size() + i]) << "seq " << n;
  }
  Naive ref = naive_kda(p, in);
  EXPECT_LT(rel_diff(packed.o, ref.o), 1e-13);
  EXPECT_LT(rel_diff(packed.ht, ref.ht), 1e-13);
}

TEST(KdaReference, GvaValueHeadsReadTheirQkHead) {
  // H = 2, HV = 4: value heads 2h and 2h + 1 read q/k head h. Each value head must equal a
  // one-head case made of that head's v, g, beta and q/k head h.
  KdaParams p = small();
  p.H = 2;
  p.HV = 4;
  p.gate = KdaGate::softplus;
  TensorMap in = make_inputs(p, 9);
  KdaReferenceResult all = kda_reference(Tier::f64, p, in);
  EXPECT_LT(rel_diff(all.o, naive_kda(p, in).o), 1e-13);
  for (int64_t hv = 0; hv < p.HV; ++hv) {
    const int64_t h = hv / 2;
    KdaParams p1 = p;
    p1.H = 1;
    p1.HV = 1;
    TensorMap one;
    auto pick = [&](const char* name, int64_t heads, int64_t head, int64_t width) {
      Tensor t(DType::f64, {p.B, p.T, 1, width});
      for (int64_t bt = 0; bt < p.B * p.T; ++bt)
        for (int64_t i = 0; i < width; ++i) t.set(bt * width + i, in.at(name).get((bt * heads + head) * width + i));
      one[name] = t;
    };
    pick("q", p.H, h, p.K);
    pick("k", p.H, h, p.K);
    pick("v", p.HV, hv, p.V);
    pick("g", p.HV, hv, p.K);
    pick("beta", p.HV, hv, 1);
    Tensor a(DType::f64, {1}), d(DType::f64, {p.K});
    a.set(0, in.at("A_log").get(hv));
    for (int64_t i = 0; i < p.K; ++i) d.set(i, in.at("dt_bias").get(hv * p.K + i));
    one["A_log"] = a;
    one["dt_bias"] = d;
    KdaReferenceResult r = kda_reference(Tier::f64, p1, one);
    for (int64_t bt = 0; bt < p.B * p.T; ++bt)
      for (int64_t v = 0; v < p.V; ++v)
        ASSERT_EQ(r.o[static_cast<size_t>(bt * p.V + v)], all.o[static_cast<size_t>((bt * p.HV + hv) * p.V + v)]);
  }
}

TEST(KdaReference, KFirstEqualsVFirstTransposed) {
  KdaParams p = small();
  p.has_h0 = true;
  TensorMap in = make_inputs(p, 3);
  KdaParams pv = p;
  pv.state_v_first = true;
  TensorMap inv = in;
  Tensor h0t(DType::f64, {p.B, p.HV, p.V, p.K});
  for (int64_t nh = 0; nh < p.B * p.HV; ++nh)
    for (int64_t k = 0; k < p.K; ++k)
      for (int64_t v = 0; v < p.V; ++v)
        h0t.set((nh * p.V + v) * p.K + k, in.at("h0").get((nh * p.K + k) * p.V + v));
  inv["h0"] = h0t;
  for (Tier tier : {Tier::f64, Tier::dd}) {
    KdaReferenceResult a = kda_reference(tier, p, in), b = kda_reference(tier, pv, inv);
    EXPECT_EQ(a.o, b.o);
    for (int64_t nh = 0; nh < p.B * p.HV; ++nh)
      for (int64_t k = 0; k < p.K; ++k)
        for (int64_t v = 0; v < p.V; ++v)
          ASSERT_EQ(a.ht[static_cast<size_t>((nh * p.K + k) * p.V + v)], b.ht[static_cast<size_t>((nh * p.V + v) * p.K + k)]);
  }
}

TEST(KdaReference, InitialStateIsUsed) {
  KdaParams p = small();
  p.has_h0 = true;
  TensorMap in = make_inputs(p, 4);
  KdaReferenceResult with = kda_reference(Tier::dd, p, in);
  EXPECT_LT(rel_diff(with.o, naive_kda(p, in).o), 1e-13);
  EXPECT_LT(rel_diff(with.ht, naive_kda(p, in).ht), 1e-13);
  KdaParams p0 = p;
  p0.has_h0 = false;
  EXPECT_GT(rel_diff(kda_reference(Tier::dd, p0, in).o, with.o), 1e-3);
}

TEST(KdaReference, SamplingLeavesNaNElsewhere) {
  KdaParams p = small(9);
  p.HV = 3;
  TensorMap in = make_inputs(p, 8);
  KdaReferenceResult full = kda_reference(Tier::dd, p, in);
  KdaReferenceOptions opt;
  opt.max_tokens = 4;
  opt.heads = {1};
  KdaReferenceResult part = kda_reference(Tier::dd, p, in, opt);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t t = 0; t < p.T; ++t)
      for (int64_t hv = 0; hv < p.HV; ++hv)
        for (int64_t v = 0; v < p.V; ++v) {
          size_t i = static_cast<size_t>(((b * p.T + t) * p.HV + hv) * p.V + v);
          if (t < 4 && hv == 1) EXPECT_EQ(part.o[i], full.o[i]);
          else EXPECT_TRUE(std::isnan(part.o[i]));
        }
  for (double x : part.ht) EXPECT_TRUE(std::isnan(x));  // sequences cut short: no final state
  opt.state_after_prefix = true;
  KdaReferenceResult pre = kda_reference(Tier::dd, p, in, opt);
  size_t finite = 0;
  for (double x : pre.ht) finite += std::isfinite(x);
  EXPECT_EQ(finite, static_cast<size_t>(p.B * p.K * p.V));
  opt.max_tokens = 100;  // longer than the sequences: the real final state
  opt.state_after_prefix = false;
  KdaReferenceResult all_tokens = kda_reference(Tier::dd, p, in, opt);
  for (size_t i = 0; i < full.ht.size(); ++i) {
    const bool head1 = (i / static_cast<size_t>(p.K * p.V)) % static_cast<size_t>(p.HV) == 1;
    if (head1) EXPECT_EQ(all_tokens.ht[i], full.ht[i]);
    else EXPECT_TRUE(std::isnan(all_tokens.ht[i]));
  }
}

TEST(KdaReference, NonFiniteInputNamesTheTensor) {
  KdaParams p = small();
  for (const char* name : {"q", "k", "v", "g", "beta"}) {
    TensorMap in = make_inputs(p, 2);
    in[name] = in[name].clone();
    in[name].set(in[name].numel() - 1, std::strcmp(name, "v") == 0 ? INFINITY : NAN);
    try {
      kda_reference(Tier::f64, p, in);
      ADD_FAILURE() << "no InputError for " << name;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(in[name].numel() - 1)), std::string::npos) << e.what();
    }
  }
  TensorMap in = make_inputs(p, 2);
  in.erase("beta");
  EXPECT_THROW(kda_reference(Tier::f64, p, in), InputError);
  in = make_inputs(p, 2);
  in["q"] = Tensor(DType::f64, {1, 2, 3});
  EXPECT_THROW(kda_reference(Tier::f64, p, in), InputError);
}

TEST(KdaReference, VectorizedKernelsMatchTheGenericTemplate) {
  // Both gates the dd tier vectorizes (z = g + dt_bias in [-9.9, 0.7]: both signs, and |z| < 0.9
  // where softplus's expm1 takes its other branch), then gates out of exp's fast range (|z| > 690),
  // which take the generic loop.
  for (bool far : {false, true}) {
    for (KdaGate gate : {KdaGate::lower_bound, KdaGate::softplus}) {
      KdaParams p = small(40, 16, 24);
      p.gate = gate;
      TensorMap in = make_inputs(p, 12, DType::f32);
      if (far) {
        for (int64_t i = 0; i < in["g"].numel(); i += 7) in["g"].set(i, i % 2 == 0 ? -800.0 : 800.0);
      }
      const std::string what = std::string(gate == KdaGate::softplus ? "softplus" : "lower_bound") +
                               (far ? ", far gates" : "");
      KdaReferenceOptions generic;
      generic.generic_kernels = true;
      EXPECT_LT(rel_diff(kda_reference(Tier::f64, p, in).o, kda_reference(Tier::f64, p, in, generic).o), 1e-14)
          << what;
      // dd: compare the full values (tails), far below a double's precision.
      generic.tails = true;
      KdaReferenceOptions fast;
      fast.tails = true;
      KdaReferenceResult a = kda_reference(Tier::dd, p, in, fast), b = kda_reference(Tier::dd, p, in, generic);
      double worst = 0.0, scale = 0.0;
      for (size_t i = 0; i < a.o.size(); ++i) {
        double d = (a.o[i] - b.o[i]) + (a.o_tail[2 * i] - b.o_tail[2 * i]) + (a.o_tail[2 * i + 1] - b.o_tail[2 * i + 1]);
        worst = std::max(worst, std::fabs(d));
        scale = std::max(scale, std::fabs(b.o[i]));
      }
      EXPECT_GT(scale, 0.0) << what;
      EXPECT_LT(worst, 0x1p-95 * scale) << what;
    }
  }
}

TEST(KdaReference, ThreadCountDoesNotChangeBits) {
  KdaParams p = small(20, 8, 8);
  p.HV = 4;
  p.H = 2;
  TensorMap in = make_inputs(p, 6);
  for (Tier tier : {Tier::f64, Tier::dd, Tier::mpfr127}) {
    KdaReferenceOptions one, four;
    one.threads = 1;
    four.threads = 4;
    KdaReferenceResult a = kda_reference(tier, p, in, one), b = kda_reference(tier, p, in, four);
    EXPECT_EQ(a.o, b.o) << tier_name(tier);
    EXPECT_EQ(a.ht, b.ht) << tier_name(tier);
  }
}

long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(KdaReference, LongRunStreamsWithSmallMemory) {
  // T = 262144, K = V = 32, f32 inputs (about 130 MB): the reference may allocate its outputs (o is
  // 64 MB of doubles) and O(K V) per worker, never a double copy of an input (q alone would be 64 MB).
  KdaParams p;
  p.T = 262144;
  p.K = 32;
  p.V = 32;
  p.gate = KdaGate::pregated;
  TensorMap in;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), ug(-0.01f, 0.0f), ub(0.0f, 0.1f);
  auto fill = [&](const char* name, std::vector<int64_t> shape, std::uniform_real_distribution<float>& d) {
    Tensor t(DType::f32, std::move(shape));
    float* x = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) x[i] = d(rng);
    in[name] = t;
  };
  fill("q", {1, p.T, 1, p.K}, u);
  fill("k", {1, p.T, 1, p.K}, u);
  fill("v", {1, p.T, 1, p.V}, u);
  fill("g", {1, p.T, 1, p.K}, ug);
  fill("beta", {1, p.T, 1}, ub);
  const long before = peak_rss_kb();
  KdaReferenceResult r = kda_reference(Tier::f64, p, in);
  const long grown_kb = peak_rss_kb() - before;
  const long outputs_kb = static_cast<long>((r.o.size() + r.ht.size()) * sizeof(double) / 1024);
  EXPECT_LT(grown_kb, outputs_kb + 16 * 1024) << "peak grew " << grown_kb << " KB for " << outputs_kb << " KB of outputs";
  size_t finite = 0;
  for (double x : r.o) finite += std::isfinite(x);
  EXPECT_EQ(finite, r.o.size());
}

}  // namespace
}  // namespace dg
