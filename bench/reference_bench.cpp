// Speed of the KDA reference per tier on one core: K = V = 128, one value head, f32 inputs.
// Counters: tokens/s, and GFLOP/s = 8 K V tokens/s / 1e9 (decay, residual, write and read, each
// K V multiply-adds). Targets (one core, AVX-512): f64 >= 300,000 tokens/s, dd >= 60,000 tokens/s
// (README "driftgate's own speed" has the figures measured, and the AVX2 build's).
//   build-ref/bench/reference_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <random>

#include "reference/kda.h"

namespace dg {
namespace {

TensorMap bench_inputs(const KdaParams& p) {
  std::mt19937 rng(7);
  TensorMap in;
  auto fill = [&](const char* name, std::vector<int64_t> shape, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    Tensor t(DType::f32, std::move(shape));
    float* x = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) x[i] = d(rng);
    in[name] = t;
  };
  fill("q", {1, p.T, p.H, p.K}, -1.0f, 1.0f);
  fill("k", {1, p.T, p.H, p.K}, -1.0f, 1.0f);
  fill("v", {1, p.T, p.HV, p.V}, -1.0f, 1.0f);
  if (p.gate == KdaGate::pregated) fill("g", {1, p.T, p.HV, p.K}, -0.05f, 0.0f);
  else fill("g", {1, p.T, p.HV, p.K}, -3.0f, 3.0f);
  fill("beta", {1, p.T, p.HV}, 0.0f, 0.5f);
  fill("A_log", {p.HV}, 0.0f, 2.7f);
  fill("dt_bias", {p.HV * p.K}, -6.9f, -2.3f);
  return in;
}

// state.range(0): tier; range(1): gate (0 pregated, 1 softplus); range(2): tokens per call.
void BM_KdaReference(benchmark::State& state) {
  const auto tier = static_cast<Tier>(state.range(0));
  KdaParams p;
  p.T = state.range(2);
  p.K = 128;
  p.V = 128;
  p.gate = state.range(1) == 0 ? KdaGate::pregated : KdaGate::softplus;
  const TensorMap in = bench_inputs(p);
  KdaReferenceOptions opt;
  opt.threads = 1;
  for (auto _ : state) {
    KdaReferenceResult r = kda_reference(tier, p, in, opt);
    benchmark::DoNotOptimize(r.o.data());
  }
  const double tokens = static_cast<double>(p.T) * static_cast<double>(state.iterations());
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(tokens * p.flops_per_token_head() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(tier_name(tier)) + (p.gate == KdaGate::pregated ? " pregated" : " softplus"));
}

BENCHMARK(BM_KdaReference)
    ->ArgNames({"tier", "gate", "T"})
    ->Args({static_cast<int64_t>(Tier::f64), 0, 2048})
    ->Args({static_cast<int64_t>(Tier::f64), 1, 2048})
    ->Args({static_cast<int64_t>(Tier::dd), 0, 512})
    ->Args({static_cast<int64_t>(Tier::dd), 1, 512})
    ->Args({static_cast<int64_t>(Tier::mpfr127), 0, 8})
    ->Args({static_cast<int64_t>(Tier::mpfr256), 0, 4})
    ->Args({static_cast<int64_t>(Tier::f128), 0, 8})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dg

BENCHMARK_MAIN();
