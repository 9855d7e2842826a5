// Speed of the CPU KDA candidates on one long head: B=1, T=16384, H=HV=1, K=V=128 (one (sequence,
// head) pair, so one thread each), l2norm and sigmoid beta in-op, pregated g = logsigmoid(N(0,1)).
//
// Counters: tokens/s; GFLOP/s of the op's nominal work, 8 K V flops per token per head (decay,
// residual, write, read: KdaParams::flops_per_token_head); pct_peak against one core's f32 FMA peak,
// measured by the harness (peak_GFLOP/s, see peak_gflops). The chunk candidates also report alg_GFLOP/s and
// alg_pct_peak: the flops their own algorithm executes, 2CK + C^2/3 + C(K+V) + 6KV + CV per token at chunk size C
// (intra products, inverse, W and U, V', output, state update) -- 7% more than the nominal work.
// The percentages are rate counters too, so the console prints them with a "/s" suffix.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>

#include "candidates/cpu/kda_chunk.h"
#include "candidates/cpu/kda_cpu.h"
#include "harness/timing/machine.h"
#include "harness/core/threads.h"

namespace dg {
namespace {

using KdaFn = void (*)(const KdaParams&, const TensorMap&, TensorMap&);

struct Fixture {
  KdaParams p;
  TensorMap in;
};

Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed, double (*f)(double, double)) {
  Tensor t(DType::f32, std::move(shape));
  float* x = t.data<float>();
  uint64_t s = seed;
  auto uniform = [&] {   // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1p-53;
  };
  for (int64_t i = 0; i < t.numel(); ++i) x[i] = static_cast<float>(f(uniform(), uniform()));
  return t;
}

double normal(double u1, double u2) { return std::sqrt(-2 * std::log(1 - u1)) * std::cos(6.283185307179586 * u2); }
double sym_uniform(double u1, double) { return 2 * u1 - 1; }
double log_sigmoid_normal(double u1, double u2) { return -std::log1p(std::exp(-normal(u1, u2))); }

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    KdaParams& p = x.p;
    p.B = 1; p.T = 16384; p.H = 1; p.HV = 1; p.K = 128; p.V = 128;
    p.beta = KdaBeta::sigmoid;
    x.in["q"] = random_tensor({1, p.T, 1, p.K}, 1, sym_uniform);
    x.in["k"] = random_tensor({1, p.T, 1, p.K}, 2, sym_uniform);
    x.in["v"] = random_tensor({1, p.T, 1, p.V}, 3, sym_uniform);
    x.in["g"] = random_tensor({1, p.T, 1, p.K}, 4, log_sigmoid_normal);
    x.in["beta"] = random_tensor({1, p.T, 1}, 5, normal);
    return x;
  }();
  return f;
}

// One core's f32 FMA peak: the harness's own measurement (driftgate machine; cached in
// results/machine.json when the bench runs from the repository root), so the bench and the gate
// divide by the same figure.
double peak_gflops() {
  static const double peak = load_or_measure_machine("results/machine.json", false).f32_fma_gflops_core;
  return peak;
}

double chunk_flops_per_token(double K, double V, double C) {
  return 2 * C * K + C * C / 3 + C * (K + V) + 6 * K * V + C * V;
}

// state.range(0): threads (the candidate's --threads budget; with one pair, 2 splits its columns).
// pct_peak divides by that many cores' peak.
void BM_kda(benchmark::State& state, KdaFn fn, DType o_dtype, bool chunked) {
  const Fixture& f = fixture();
  const KdaParams& p = f.p;
  const int threads = static_cast<int>(state.range(0));
  TensorMap out;
  out["o"] = Tensor(o_dtype, {p.B, p.T, p.HV, p.V});
  out["ht"] = Tensor(DType::f32, {1, p.HV, p.K, p.V});
  set_num_threads(threads);
  for (auto _ : state) {
    fn(p, f.in, out);
    benchmark::ClobberMemory();
  }
  set_num_threads(0);
  using benchmark::Counter;
  const double tokens = static_cast<double>(p.B * p.T * p.HV), peak = threads * peak_gflops();
  const double gflop = tokens * p.flops_per_token_head() / 1e9;
  state.counters["tokens/s"] = Counter(tokens, Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = Counter(gflop, Counter::kIsIterationInvariantRate);
  state.counters["pct_peak"] = Counter(100 * gflop / peak, Counter::kIsIterationInvariantRate);
  state.counters["peak_GFLOP/s"] = peak;
  if (chunked) {
    const double alg = tokens * chunk_flops_per_token(static_cast<double>(p.K), static_cast<double>(p.V), 64) / 1e9;
    state.counters["alg_GFLOP/s"] = Counter(alg, Counter::kIsIterationInvariantRate);
    state.counters["alg_pct_peak"] = Counter(100 * alg / peak, Counter::kIsIterationInvariantRate);
  }
}

BENCHMARK_CAPTURE(BM_kda, kda_cpu_recurrent_f32, kda_cpu_recurrent_f32, DType::f32, false)
    ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_kda, kda_cpu_chunk_f32, kda_cpu_chunk_f32, DType::f32, true)
    ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_kda, kda_cpu_chunk_bf16, kda_cpu_chunk_bf16, DType::bf16, true)
    ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The machine measurement the speed rows divide by (harness/timing/machine.h), with the ratios a sound
// measurement shows on a quiet machine: all cores at least one core's rate (all_over_core >= 1 for
// FMA and triad) and f32 FMA about twice f64 (f32_over_f64 ~ 2, twice the lanes). They are speed
// figures, so they live here and not in a unit test (a loaded machine upsets them).
void BM_machine(benchmark::State& state) {
  MachineLimits m;
  for (auto _ : state) m = measure_machine(0.5);
  state.counters["f32_all_over_core"] = m.f32_fma_gflops_all / m.f32_fma_gflops_core;
  state.counters["f64_all_over_core"] = m.f64_fma_gflops_all / m.f64_fma_gflops_core;
  state.counters["triad_all_over_core"] = m.stream_triad_gbs_all / m.stream_triad_gbs_core;
  state.counters["f32_over_f64"] = m.f32_fma_gflops_core / m.f64_fma_gflops_core;
  state.counters["f32_GFLOPs_core"] = m.f32_fma_gflops_core;
  state.counters["triad_GBs_all"] = m.stream_triad_gbs_all;
}
BENCHMARK(BM_machine)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace dg

BENCHMARK_MAIN();
