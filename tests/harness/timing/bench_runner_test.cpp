// bench_runner: samples per candidate, interleaving, fresh inputs per call, the checks that catch
// cached and skipped calls, the compare.py JSON, the time budget and the stop hook.
#include "harness/timing/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/timing/device_timing.h"
#include "harness/judge/policy.h"
#include "harness/timing/speed.h"
#include "harness/judge/verify.h"

namespace dg {
namespace {

using ::testing::HasSubstr;

// --- test-only candidates ------------------------------------------------------------------------

const Candidate& recurrent() { return *find_candidate("kda_cpu_recurrent_f32"); }

struct CallLog {
  std::string candidate;
  const std::byte* q = nullptr;
  uint64_t q_hash = 0;
};
std::mutex g_log_mutex;
std::vector<CallLog> g_log;

uint64_t bytes_hash(const Tensor& t) {
  return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(t.bytes()), t.nbytes()));
}

// Records every call (name, address and contents of q), then computes the real thing.
RunFn recorder(std::string name) {
  return [name](const Case& c, const TensorMap& in, TensorMap& out) {
    {
      std::lock_guard<std::mutex> lock(g_log_mutex);
      g_log.push_back({name, in.at("q").bytes(), bytes_hash(in.at("q"))});
    }
    recurrent().run(c, in, out);
  };
}

void copy_outputs(const TensorMap& from, TensorMap& to) {
  for (auto& [name, t] : to) std::memcpy(t.bytes(), from.at(name).bytes(), t.nbytes());
}

TensorMap clone_all(const TensorMap& m) {
  TensorMap c;
  for (const auto& [name, t] : m) c[name] = t.clone();
  return c;
}

// Replays results cached by the address of q.
void pointer_cache(const Case& c, const TensorMap& in, TensorMap& out) {
  static std::map<const std::byte*, TensorMap> cache;
  auto it = cache.find(in.at("q").bytes());
  if (it != cache.end()) return copy_outputs(it->second, out);
  recurrent().run(c, in, out);
  cache[in.at("q").bytes()] = clone_all(out);
}

// Replays results cached by an order-insensitive fingerprint of q's contents (its sum).
void sum_cache(const Case& c, const TensorMap& in, TensorMap& out) {
  static std::map<double, TensorMap> cache;
  const Tensor& q = in.at("q");
  double sum = 0;
  for (int64_t i = 0; i < q.numel(); ++i) sum += q.get(i);
  auto it = cache.find(sum);
  if (it != cache.end()) return copy_outputs(it->second, out);
  recurrent().run(c, in, out);
  cache[sum] = clone_all(out);
}

// Batch-and-skip: does the work on every other call and hands back the previous outputs otherwise.
void skip_every_other(const Case& c, const TensorMap& in, TensorMap& out) {
  static int64_t calls = 0;
  static TensorMap last;
  if (calls++ % 2 == 1 && !last.empty()) return copy_outputs(last, out);
  recurrent().run(c, in, out);
  last = clone_all(out);
}

// Nondeterministic: o[0] depends on how many calls came before.
void call_counter(const Case& c, const TensorMap& in, TensorMap& out) {
  static int64_t calls = 0;
  recurrent().run(c, in, out);
  out.at("o").set(0, out.at("o").get(0) + static_cast<double>(++calls));
}

// Computes into a tensor of its own and swaps it into the output map.
void replaces_output(const Case& c, const TensorMap& in, TensorMap& out) {
  recurrent().run(c, in, out);
  out["o"] = out.at("o").clone();
}

// Scribbles on its inputs (the Tensor handle shares storage with the harness's buffer).
void writes_inputs(const Case& c, const TensorMap& in, TensorMap& out) {
  recurrent().run(c, in, out);
  Tensor q = in.at("q");
  q.set(0, q.get(0) + 1.0);
}

void slow(const Case& c, const TensorMap& in, TensorMap& out) {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  recurrent().run(c, in, out);
}

void throws(const Case&, const TensorMap&, TensorMap&) { throw std::runtime_error("kernel launch failed"); }

CandidateInfo info(const char* name, const char* algo) {
  return {name, "kda", "cpu", algo, DType::f32, DType::f32, DType::f32, "bench_runner_test"};
}

DG_REGISTER_CANDIDATE(rec_a, info("kda_test_recorder_a_f32", "recorder"), recorder("a"));
DG_REGISTER_CANDIDATE(rec_b, info("kda_test_recorder_b_f32", "recorder"), recorder("b"));
DG_REGISTER_CANDIDATE(ptr_cache, info("kda_test_pointer_cache_f32", "cache"), pointer_cache);
DG_REGISTER_CANDIDATE(sum_cache, info("kda_test_sum_cache_f32", "cache"), sum_cache);
DG_REGISTER_CANDIDATE(skip, info("kda_test_skip_f32", "skip"), skip_every_other);
DG_REGISTER_CANDIDATE(counter, info("kda_test_counter_f32", "counter"), call_counter);
DG_REGISTER_CANDIDATE(replace, info("kda_test_replace_f32", "replace"), replaces_output);
DG_REGISTER_CANDIDATE(writes_inputs, info("kda_test_writes_inputs_f32", "writes"), writes_inputs);
// A stand-in for a device candidate: computes on the host, and inside a timing scope reports two
// launches of 0.25 ms device time each (0.6 ms of host wall), one of them re-measured after a clock
// drop, on a device of `peak` GB/s.
RunFn fake_device(double peak_gbs) {
  return [peak_gbs](const Case& c, const TensorMap& in, TensorMap& out) {
    recurrent().run(c, in, out);
    if (DeviceCall* d = active_device_timing()) {
      for (int launch = 0; launch < 2; ++launch) {
        d->device_s += 0.25e-3;
        d->launch_wall_s += 0.3e-3;
        ++d->launches;
      }
      d->throttled += 1;
      d->peak_gbs = peak_gbs;
      d->device = "test device";
    }
  };
}

DG_REGISTER_CANDIDATE(slow, info("kda_test_slow_f32", "slow"), slow);
DG_REGISTER_CANDIDATE(fake_device, info("kda_test_fake_device_f32", "device"), fake_device(1e3));
DG_REGISTER_CANDIDATE(fake_device_fast, info("kda_test_fake_device_too_fast_f32", "device"), fake_device(1e-3));
DG_REGISTER_CANDIDATE(bench_throws, info("kda_test_bench_throws_f32", "throws"), throws);

// --- helpers -------------------------------------------------------------------------------------

Case small_case() { return parse_case("kda(T=96,H=1,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)"); }

std::vector<const Candidate*> cands(std::initializer_list<const char*> names) {
  std::vector<const Candidate*> v;
  for (const char* n : names) v.push_back(find_candidate(n));
  return v;
}

BenchOptions fixed(int reps, int sets = 3) {
  BenchOptions o;
  o.min_repetitions = o.max_repetitions = reps;
  o.input_sets = sets;
  o.max_time_s = 60;
  return o;
}

std::vector<CallLog> take_log() {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::vector<CallLog> v;
  v.swap(g_log);
  return v;
}

// --- tests ---------------------------------------------------------------------------------------

TEST(BenchRunner, RealCandidatesGiveOneSamplePerRepetition) {
  std::vector<BenchSamples> r = time_candidates(cands({"kda_cpu_recurrent_f32", "kda_cpu_chunk_f32"}), small_case(), fixed(8));
  ASSERT_EQ(r.size(), 2u);
  for (const BenchSamples& b : r) {
    EXPECT_EQ(b.seconds.size(), 8u) << b.candidate;
    EXPECT_EQ(b.cpu_seconds.size(), 8u) << b.candidate;
    for (double s : b.seconds) EXPECT_GT(s, 0) << b.candidate;
    EXPECT_TRUE(b.outputs_consistent) << b.candidate << ": " << b.inconsistency;
    EXPECT_GE(b.calls, 1 + 8 + 1) << b.candidate;   // warm-up, timed, at least one re-run
    EXPECT_LE(b.calls, 1 + 8 + 3) << b.candidate;   // one re-run per input set at most
  }
  EXPECT_EQ(r[0].candidate, "kda_cpu_recurrent_f32");
  EXPECT_EQ(r[1].candidate, "kda_cpu_chunk_f32");
}

// A call that ran device work is timed by its device time; its host wall time, the re-measured
// launches and the device's bandwidth come along, and the physical bound is the device's.
TEST(BenchRunner, DeviceCallsAreTimedByTheirDeviceTime) {
  const Case c = small_case();
  std::vector<BenchSamples> r =
      time_candidates(cands({"kda_cpu_recurrent_f32", "kda_test_fake_device_f32", "kda_test_fake_device_too_fast_f32"}), c, fixed(6));
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(r[0].wall_seconds.empty());   // a host candidate: wall time is the sample
  EXPECT_EQ(r[0].device_peak_gbs, 0);
  for (int i : {1, 2}) {
    ASSERT_EQ(r[i].seconds.size(), 6u);
    for (double s : r[i].seconds) EXPECT_DOUBLE_EQ(s, 0.5e-3);
    ASSERT_EQ(r[i].wall_seconds.size(), 6u);
    for (double w : r[i].wall_seconds) EXPECT_DOUBLE_EQ(w, 0.6e-3);
    EXPECT_EQ(r[i].throttled, 6);
    EXPECT_EQ(r[i].device, "test device");
    EXPECT_TRUE(r[i].outputs_consistent) << r[i].inconsistency;
  }
  MachineLimits m;   // no host limits: only the device's bound can fire
  Throughput host = throughput_of(r[0], c, m);
  EXPECT_FALSE(host.device);
  Throughput dev = throughput_of(r[1], c, m);
  EXPECT_TRUE(dev.device);
  EXPECT_DOUBLE_EQ(dev.median_s, 0.5e-3);
  EXPECT_NEAR(dev.host_overhead, 1.0 - 0.5 / 0.6, 1e-12);
  EXPECT_EQ(dev.peak_gbs, 1e3);
  EXPECT_FALSE(dev.below_physical_bound);   // the case's bytes at 1 TB/s take well under 0.5 ms
  // At 1 MB/s the same bytes need far more than 0.5 ms: a time below the device's bound is INVALID.
  Throughput fast = throughput_of(r[2], c, m);
  EXPECT_TRUE(fast.below_physical_bound);
  Policy p = default_policy();
  SpeedRow row = speed_row({r[0], r[2]}, c, p, m);
  EXPECT_TRUE(row.patch_on_device);
  EXPECT_TRUE(row.below_physical_bound);
  std::vector<Check> checks = speed_checks(row, std::nullopt, p);
  EXPECT_FALSE(checks[0].passed);
  EXPECT_THAT(checks[0].detail, HasSubstr("device's memory bandwidth"));
}

TEST(BenchRunner, DecodeRunsThroughTheOpsDriver) {
  Case c = parse_case("kda_decode(T=8,B=2,H=1,K=16,V=16,regime=kimi_linear,dtype=f32,seed=0)");
  std::vector<BenchSamples> r = time_candidates(cands({"kda_decode_cpu_f32", "kda_decode_cpu_bf16state"}), c, fixed(4));
  ASSERT_EQ(r.size(), 2u);
  for (const BenchSamples& b : r) {
    EXPECT_EQ(b.seconds.size(), 4u);
    EXPECT_TRUE(b.outputs_consistent) << b.candidate << ": " << b.inconsistency;
  }
}

TEST(BenchRunner, RepetitionsAreInterleavedAcrossCandidates) {
  take_log();
  const int reps = 16;
  std::vector<BenchSamples> r =
      time_candidates(cands({"kda_test_recorder_a_f32", "kda_test_recorder_b_f32"}), small_case(), fixed(reps));
  std::vector<CallLog> log = take_log();
  // Warm-ups (a, b), then 2 * reps timed calls, then the re-runs.
  ASSERT_GE(log.size(), 2u + 2 * reps);
  EXPECT_EQ(log[0].candidate, "a");
  EXPECT_EQ(log[1].candidate, "b");
  int a = 0, switches = 0;
  for (size_t i = 2; i < 2 + 2 * reps; ++i) {
    a += log[i].candidate == "a";
    if (i > 2 && log[i].candidate != log[i - 1].candidate) ++switches;
  }
  EXPECT_EQ(a, reps);
  // A blocked order (aaaa...bbbb) has one switch; a random order of 16 + 16 has about 16, and fewer
  // than 4 with probability below 1e-6.
  EXPECT_GE(switches, 4);
  for (const BenchSamples& b : r) EXPECT_EQ(b.seconds.size(), static_cast<size_t>(reps));
}

TEST(BenchRunner, WithoutInterleavingEachCandidateRunsItsRepetitionsInABlock) {
  take_log();
  BenchOptions o = fixed(6);
  o.interleave = false;
  time_candidates(cands({"kda_test_recorder_a_f32", "kda_test_recorder_b_f32"}), small_case(), o);
  std::vector<CallLog> log = take_log();
  ASSERT_GE(log.size(), 14u);
  for (size_t i = 2; i < 8; ++i) EXPECT_EQ(log[i].candidate, "a") << i;
  for (size_t i = 8; i < 14; ++i) EXPECT_EQ(log[i].candidate, "b") << i;
}

TEST(BenchRunner, EveryCallSeesFreshContentsAndConsecutiveCallsFreshBuffers) {
  take_log();
  const int reps = 12, sets = 3;
  time_candidates(cands({"kda_test_recorder_a_f32", "kda_test_recorder_b_f32"}), small_case(), fixed(reps, sets));
  std::vector<CallLog> log = take_log();
  const size_t n = 2 + 2 * reps;   // warm-ups and timed calls
  ASSERT_GE(log.size(), n);
  std::set<uint64_t> contents;
  std::set<const std::byte*> buffers;
  for (size_t i = 0; i < n; ++i) {
    contents.insert(log[i].q_hash);
    buffers.insert(log[i].q);
    if (i > 0) {
      EXPECT_NE(log[i].q, log[i - 1].q) << "call " << i << " reused the previous call's buffer";
      EXPECT_NE(log[i].q_hash, log[i - 1].q_hash) << "call " << i;
    }
  }
  EXPECT_EQ(contents.size(), n) << "input contents repeated across calls";
  EXPECT_EQ(buffers.size(), static_cast<size_t>(sets)) << "each input set lives in its own allocation";
  // Re-runs use fresh copies: new addresses, contents of a timed call.
  for (size_t i = n; i < log.size(); ++i) {
    EXPECT_EQ(buffers.count(log[i].q), 0u) << "re-run " << i - n;
    EXPECT_EQ(contents.count(log[i].q_hash), 1u) << "re-run " << i - n;
  }
}

TEST(BenchRunner, HonestCandidatesAreConsistentAndCheatsAreNot) {
  std::vector<BenchSamples> r = time_candidates(
      cands({"kda_cpu_recurrent_f32", "kda_test_pointer_cache_f32", "kda_test_sum_cache_f32", "kda_test_skip_f32",
             "kda_test_counter_f32", "kda_test_replace_f32", "kda_test_writes_inputs_f32"}),
      small_case(), fixed(6));
  ASSERT_EQ(r.size(), 7u);
  EXPECT_TRUE(r[0].outputs_consistent) << r[0].inconsistency;
  // One re-run per input set the timed calls used (2 or 3 of the 3 here) is compared bitwise with
  // its timed call: picks skipped because their inputs could not be recreated would show here.
  EXPECT_GE(r[0].rerun_picks, 2);
  EXPECT_EQ(r[0].reruns, r[0].rerun_picks);
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_FALSE(r[i].outputs_consistent) << r[i].candidate;
    EXPECT_THAT(r[i].inconsistency, HasSubstr("call")) << r[i].candidate;
  }
  // The address-keyed cache is caught by a re-run (a fresh copy of the inputs at a new address); the
  // content-keyed cache fools the re-run too, and is caught because it returns one call's outputs
  // for another call's (different) inputs; the skipping candidate by either.
  EXPECT_THAT(r[1].inconsistency, HasSubstr("output 'ht', 'o' differ bitwise from an untimed re-run"));
  EXPECT_THAT(r[2].inconsistency, HasSubstr("on different inputs (result replay)"));
  EXPECT_THAT(r[3].inconsistency, HasSubstr("bitwise"));   // by a re-run or as a replay
  EXPECT_THAT(r[4].inconsistency, HasSubstr("output 'o' differs bitwise from an untimed re-run"));
  EXPECT_THAT(r[5].inconsistency, HasSubstr("output 'o' was replaced"));
  EXPECT_THAT(r[6].inconsistency, HasSubstr("the warm-up call: the candidate wrote to its inputs"));
}

// A contraction over inputs that move together keeps its value: gemm's x [M,K] and w [N,K] rotated
// by the same k along K give the same sums in another order, which a bf16 output rounds to the same
// bits, so an honest kernel read as a result replay. Each input moves at its own pace, and honest
// bf16-output GEMMs are consistent.
TEST(BenchRunner, AContractionsInputsMoveApartSoHonestBf16OutputsDiffer) {
  const Case c = parse_case("gemm(M=4,N=64,K=256,regime=activations,dtype=bf16,seed=0)");
  std::vector<BenchSamples> r = time_candidates(cands({"gemm_cpu_blocked_bf16"}), c, fixed(12));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].outputs_consistent) << r[0].inconsistency;
}

TEST(BenchRunner, CompareJsonHasTheFieldsCompareToolsRead) {
  Case c = small_case();
  std::vector<BenchSamples> r = time_candidates(cands({"kda_cpu_recurrent_f32", "kda_test_skip_f32"}), c, fixed(5));
  nlohmann::json ctx = {{"git_commit", "abc123"}, {"seed", 0}};
  nlohmann::json j = nlohmann::json::parse(compare_py_json(r, c, ctx));
  ASSERT_TRUE(j.contains("context"));
  EXPECT_EQ(j["context"]["git_commit"], "abc123");
  EXPECT_TRUE(j["context"].contains("num_cpus"));
  EXPECT_TRUE(j["context"].contains("caches"));
  ASSERT_TRUE(j["benchmarks"].is_array());
  EXPECT_EQ(j["benchmarks"].size(), 2u * (5 + 4));   // 5 repetitions and 4 aggregates each
  std::map<std::string, int> iterations_by_name;
  for (const auto& b : j["benchmarks"]) {
    for (const char* key : {"name", "run_name", "run_type", "repetitions", "threads", "iterations", "real_time",
                            "cpu_time", "time_unit", "family_index", "per_family_instance_index"})
      EXPECT_TRUE(b.contains(key)) << key << " missing in " << b.dump();
    EXPECT_EQ(b["time_unit"], "ns");
    EXPECT_EQ(b["repetitions"], 5);
    if (b["run_type"] == "iteration") {
      EXPECT_TRUE(b.contains("repetition_index"));
      EXPECT_EQ(b["iterations"], 1);
      EXPECT_EQ(b["name"], b["run_name"]);
      ++iterations_by_name[b["name"].get<std::string>()];
      const BenchSamples& s = b["family_index"] == 0 ? r[0] : r[1];
      size_t i = b["repetition_index"].get<size_t>();
      EXPECT_DOUBLE_EQ(b["real_time"].get<double>(), s.seconds[i] * 1e9);
    } else {
      EXPECT_EQ(b["run_type"], "aggregate");
      EXPECT_TRUE(b.contains("aggregate_name"));
      EXPECT_EQ(b["name"], b["run_name"].get<std::string>() + "_" + b["aggregate_name"].get<std::string>());
    }
  }
  EXPECT_EQ(iterations_by_name["kda_cpu_recurrent_f32/" + c.str()], 5);
  EXPECT_EQ(iterations_by_name["kda_test_skip_f32/" + c.str()], 5);
  // The inconsistent candidate carries its reason; the sound one has no label.
  EXPECT_FALSE(j["benchmarks"][0].contains("label"));
  EXPECT_THAT(j["benchmarks"][9]["label"].get<std::string>(), HasSubstr("outputs inconsistent"));
}

TEST(BenchRunner, TimeBudgetIsRespected) {
  BenchOptions o;
  o.max_time_s = 0.5;
  o.min_repetitions = 3;
  o.max_repetitions = 100000;
  o.input_sets = 4;
  Case c = parse_case("kda(T=16,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)");
  auto t0 = std::chrono::steady_clock::now();
  std::vector<BenchSamples> r = time_candidates(cands({"kda_test_slow_f32", "kda_cpu_recurrent_f32"}), c, o);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(wall, 1.5);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].seconds.size(), r[1].seconds.size());
  EXPECT_GT(r[0].seconds.size(), 20u);    // about 0.5 s / 2 ms
  EXPECT_LT(r[0].seconds.size(), 400u);
  for (double s : r[0].seconds) EXPECT_GE(s, 0.002);
}

TEST(BenchRunner, StopHookEndsTheRunEarly) {
  BenchOptions o;
  o.max_time_s = 60;
  o.min_repetitions = 5;
  o.max_repetitions = 1000;
  o.input_sets = 3;
  int asked = 0;
  o.stop = [&](const std::vector<std::vector<double>>& samples, double elapsed) {
    ++asked;
    EXPECT_EQ(samples.size(), 2u);
    EXPECT_EQ(samples[0].size(), samples[1].size());
    EXPECT_GT(elapsed, 0);
    return samples[0].size() >= 9;
  };
  std::vector<BenchSamples> r = time_candidates(cands({"kda_cpu_recurrent_f32", "kda_cpu_chunk_f32"}), small_case(), o);
  EXPECT_GE(asked, 2);
  EXPECT_GE(r[0].seconds.size(), 9u);
  EXPECT_LT(r[0].seconds.size(), 20u);
}

TEST(BenchRunner, WithoutAStopHookItRunsToMaxRepetitions) {
  BenchOptions o;
  o.max_time_s = 60;
  o.min_repetitions = 2;
  o.max_repetitions = 11;
  o.input_sets = 2;
  std::vector<BenchSamples> r = time_candidates(cands({"kda_cpu_recurrent_f32"}), small_case(), o);
  EXPECT_EQ(r[0].seconds.size(), 11u);
}

// The bytes behind GB/s and the physical floor are what the candidate moves at least: a candidate
// that reads bf16 inputs of an f32 case (rounding them first) and writes bf16 outputs is counted at
// 2 bytes an element, so an honest bf16 kernel is never INVALID for beating an f32 count; an f32
// candidate, and any candidate on a bf16 case, is counted at the case's dtype.
TEST(Throughput, BytesCountTheNarrowerOfTheCasesAndTheCandidatesDtypes) {
  const OpSpec& op = *find_op("kda");
  const Case f32 = parse_case("kda(T=64,H=1,K=32,V=32,regime=kimi_linear,dtype=f32,seed=0)");
  const Case bf16 = f32.with("dtype", "bf16");
  const Storage narrow{DType::bf16, DType::f32, DType::bf16};
  const double tokens = 64, in_per_token = 2 * 32 + 32 + 32 + 1, out_per_token = 32;
  EXPECT_DOUBLE_EQ(op.bytes(f32, Storage{}) - op.bytes(f32, narrow), tokens * (in_per_token + out_per_token) * 2.0);
  EXPECT_DOUBLE_EQ(op.bytes(f32, require_candidate("kda_cpu_chunk_f32").info().storage()), op.bytes(f32, Storage{}));
  EXPECT_DOUBLE_EQ(op.bytes(bf16, narrow), op.bytes(bf16, Storage{}));
  // The state counts at the candidate's state dtype whatever the case's.
  const Storage f64_state{DType::f64, DType::f64, DType::f64};
  EXPECT_DOUBLE_EQ(op.bytes(bf16, f64_state) - op.bytes(bf16, Storage{}), 32.0 * 32 * 4);
}

// The compute floor loosens for narrow inputs by what this CPU's instructions allow
// (compute_peak_factor: 2x the f32 FMA peak with avx512_bf16) and no further: a compute-bound bf16
// GEMM timed at 3x the f32 peak is INVALID (a clock the candidate forged, or work it skipped), one
// at 1.5x is INVALID only where the CPU has no bf16 dot products, and an f32 GEMM at 1.5x always is.
TEST(Throughput, AComputeBoundNarrowInputCheatBeyondTheCpusBf16RateIsBelowTheBound) {
  const double factor = compute_peak_factor(DType::bf16);
  if (std::isinf(factor)) GTEST_SKIP() << "this CPU has AMX tiles: no compute floor for bf16 inputs (the memory floor stays)";
  MachineLimits m;
  m.f32_fma_gflops_all = 100;
  m.stream_triad_gbs_all = 1e6;   // the memory floor far below the compute floor
  const Case bf16 = parse_case("gemm(M=512,N=512,K=512,regime=activations,dtype=bf16,seed=0)");
  const Case f32 = bf16.with("dtype", "f32");
  const double f32_floor = find_op("gemm")->flops(bf16) / (m.f32_fma_gflops_all * 1e9);
  ASSERT_GT(f32_floor, 1e-3);
  auto below = [&](const Case& c, double speedup, const Storage& st) {
    const std::vector<double> seconds(5, f32_floor / speedup);
    return throughput_of(seconds, c, m, st).below_physical_bound;
  };
  EXPECT_TRUE(below(bf16, 3.0, Storage{}));
  EXPECT_EQ(below(bf16, 1.5, Storage{}), factor < 1.5);
  EXPECT_FALSE(below(bf16, 0.9, Storage{}));
  EXPECT_TRUE(below(f32, 1.5, Storage{}));
  // An f32 case read as bf16 by the candidate gets the bf16 rate, and no more.
  const Storage narrow{DType::bf16, DType::f32, DType::bf16};
  EXPECT_TRUE(below(f32, 3.0, narrow));
  EXPECT_EQ(below(f32, 1.5, narrow), factor < 1.5);
}

TEST(BenchRunner, AThrowingCandidateIsNamed) {
  try {
    time_candidates(cands({"kda_cpu_recurrent_f32", "kda_test_bench_throws_f32"}), small_case(), fixed(2));
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("kda_test_bench_throws_f32"));
    EXPECT_THAT(e.what(), HasSubstr("kernel launch failed"));
  }
}

TEST(BenchRunner, BadOptionsAndWrongOpsAreInputErrors) {
  BenchOptions o = fixed(2);
  o.input_sets = 1;
  EXPECT_THROW(time_candidates(cands({"kda_cpu_recurrent_f32"}), small_case(), o), InputError);
  o = fixed(2);
  o.min_repetitions = 3;
  EXPECT_THROW(time_candidates(cands({"kda_cpu_recurrent_f32"}), small_case(), o), InputError);
  Case decode = parse_case("kda_decode(T=4,B=1,H=1,K=16,V=16,regime=kimi_linear,dtype=f32,seed=0)");
  EXPECT_THROW(time_candidates(cands({"kda_cpu_recurrent_f32"}), decode, fixed(2)), InputError);
}

TEST(BenchRunner, InputSetsExceedTwiceTheLastLevelCache) {
  EXPECT_GT(last_level_cache_bytes(), 0);
  const int64_t MiB = 1 << 20;
  EXPECT_EQ(auto_input_sets(1 * MiB, 32 * MiB, 0), 65);          // 65 MiB > 64 MiB
  EXPECT_EQ(auto_input_sets(100 * MiB, 32 * MiB, 0), 2);         // at least 2
  EXPECT_EQ(auto_input_sets(1024, 480 * MiB, 0), 512);           // at most 512
  EXPECT_EQ(auto_input_sets(1 * MiB, 32 * MiB, 40 * MiB), 10);   // a quarter of the memory
  // Automatic sizing on a real case: every call still gets one sample.
  BenchOptions o = fixed(3, 0);
  std::vector<BenchSamples> r = time_candidates(cands({"kda_cpu_recurrent_f32"}), small_case(), o);
  EXPECT_EQ(r[0].seconds.size(), 3u);
  EXPECT_TRUE(r[0].outputs_consistent) << r[0].inconsistency;
}

}  // namespace
}  // namespace dg
