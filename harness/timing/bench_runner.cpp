#include "harness/timing/bench_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/timing/device_timing.h"
#include "harness/isolation/guard.h"
#include "harness/judge/verify.h"

namespace dg {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxInputSets = 512;
constexpr int kMaxReruns = 8;             // untimed re-runs per candidate
constexpr int kMinGeneratedSets = 4;      // input sets drawn from the generator; the rest are rotations
constexpr int64_t kMaxPeriod = int64_t{1} << 40;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

uint64_t mix64(uint64_t x) {   // MurmurHash3's finaliser
  x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdULL;
  x = (x ^ (x >> 33)) * 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// The identity of a set of input contents: equal hashes, equal bytes (up to a 2^-64 collision).
uint64_t hash_inputs(const TensorMap& in) {
  uint64_t h = 0x2545f4914f6cdd1dULL;
  for (const auto& [name, t] : in)
    h = mix64(h ^ hash_tensor(t) ^ hash_bytes(name.data(), name.size(), 1));
  return h;
}

// --- input rotation ------------------------------------------------------------------------------

// Float inputs of rank >= 2 rotate along axis 1 within each index of axis 0 (tokens of [B,T,...],
// heads of [N,HV,K,V]); other inputs (integer offsets, per-head vectors) stay as generated.
bool rotatable(const Tensor& t) { return info(t.dtype()).is_float && t.rank() >= 2 && t.dim(1) > 1 && t.numel() > 0; }

size_t row_bytes(const Tensor& t) { return t.nbytes() / static_cast<size_t>(t.dim(0) * t.dim(1)); }

// dst[i0][i] = src[i0][(i + k) mod D]: a left rotation by k along axis 1. dst is a separate tensor.
void rotate_copy(const Tensor& src, Tensor& dst, int64_t k) {
  const int64_t D = src.dim(1);
  k = ((k % D) + D) % D;
  const size_t row = row_bytes(src), slice = row * static_cast<size_t>(D), head = row * static_cast<size_t>(k);
  for (int64_t i0 = 0; i0 < src.dim(0); ++i0) {
    const std::byte* s = src.bytes() + static_cast<size_t>(i0) * slice;
    std::byte* d = dst.bytes() + static_cast<size_t>(i0) * slice;
    std::memcpy(d, s + head, slice - head);
    std::memcpy(d + (slice - head), s, head);
  }
}

// The same rotation by m, in place (the tensor keeps its address).
void rotate_in_place(Tensor& t, int64_t m, std::vector<std::byte>& tmp) {
  const int64_t D = t.dim(1);
  m %= D;
  if (m == 0) return;
  const size_t row = row_bytes(t), slice = row * static_cast<size_t>(D), head = row * static_cast<size_t>(m);
  tmp.resize(head);
  for (int64_t i0 = 0; i0 < t.dim(0); ++i0) {
    std::byte* s = t.bytes() + static_cast<size_t>(i0) * slice;
    std::memcpy(tmp.data(), s, head);
    std::memmove(s, s + head, slice - head);
    std::memcpy(s + (slice - head), tmp.data(), head);
  }
}

// Each rotatable input moves at its own pace: the j-th (in name order) by j + 1 rows per visit. One
// pace for all would leave a contraction invariant: gemm's x [M,K] and w [N,K] rotated together
// along K give the same sums in another order, which a bf16 output rounds to the same bits (a false
// "result replay" of an honest kernel).
std::map<std::string, int64_t> rotation_steps(const TensorMap& in) {
  std::map<std::string, int64_t> steps;
  int64_t j = 0;
  for (const auto& [name, t] : in)
    if (rotatable(t)) steps[name] = ++j;
  return steps;
}

// After how many visits the inputs repeat: the lcm over the rotated tensors of D / gcd(step, D)
// (capped).
int64_t rotation_period(const TensorMap& in) {
  int64_t p = 1;
  for (const auto& [name, step] : rotation_steps(in)) {
    const int64_t D = in.at(name).dim(1);
    p = std::min(kMaxPeriod, std::lcm(p, D / std::gcd(step, D)));
  }
  return p;
}

// A fresh copy of `in` as it is k visits on (every rotatable tensor by k times its step; the others
// copied as they are).
TensorMap rotated(const TensorMap& in, int64_t k) {
  const std::map<std::string, int64_t> steps = rotation_steps(in);
  TensorMap out;
  for (const auto& [name, t] : in) {
    Tensor copy(t.dtype(), t.shape());
    if (auto it = steps.find(name); it != steps.end())
      rotate_copy(t, copy, (k % t.dim(1)) * it->second);
    else if (t.nbytes())
      std::memcpy(copy.bytes(), t.bytes(), t.nbytes());
    out[name] = std::move(copy);
  }
  return out;
}

// --- outputs -------------------------------------------------------------------------------------

struct OutputSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool inout = false;   // an in-out tensor (starts from zeros), else an output (starts poisoned)
};

// Outputs poisoned with the format's quiet NaN (the worker's first poison); in-out tensors start
// from zeros, as run_candidate allocates them.
void reset_outputs(TensorMap& out, const std::vector<OutputSpec>& specs) {
  for (const OutputSpec& s : specs) {
    Tensor& t = out.at(s.name);
    if (s.inout && t.nbytes())
      std::memset(t.bytes(), 0, t.nbytes());
    else if (!s.inout)
      fill_poison(t, Poison::quiet_nan);
  }
}

TensorMap alloc_outputs(const Candidate& cand, const std::vector<OutputSpec>& specs) {
  TensorMap out;
  for (const OutputSpec& s : specs) out[s.name] = Tensor(output_dtype(s.name, cand.info()), s.shape);
  reset_outputs(out, specs);
  return out;
}

// --- Google Benchmark plumbing -------------------------------------------------------------------

std::mutex g_gbench_mutex;   // the library's registry and flags are process-wide

// Sets the library's flags through benchmark::Initialize, as a command line would: random
// interleaving on or off, and every flag that could make it print, write a file, warm up, report
// only aggregates or read hardware counters pinned to its default (the environment can set them).
void init_gbench(bool interleave) {
  std::vector<std::string> args = {
      "driftgate", fmt::format("--benchmark_enable_random_interleaving={}", interleave ? "true" : "false"),
      "--benchmark_min_warmup_time=0", "--benchmark_report_aggregates_only=false",
      "--benchmark_display_aggregates_only=false", "--benchmark_list_tests=false", "--benchmark_format=console",
      "--benchmark_out_format=json", "--benchmark_out=", "--benchmark_perf_counters=", "--benchmark_color=false",
      "--v=0"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  benchmark::Initialize(&argc, argv.data());
}

// Keeps every repetition's time (seconds per call), keyed by the registered benchmark name;
// aggregates are dropped (the harness computes its own statistics) and nothing is printed.
class KeepEveryRepetition : public benchmark::BenchmarkReporter {
 public:
  struct Repetition {
    int64_t index = 0;
    double real_s = 0, cpu_s = 0;
    bool error = false;
    std::string message;
  };
  std::map<std::string, std::vector<Repetition>> runs;

  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& report) override {
    for (const Run& r : report) {
      if (r.run_type != Run::RT_Iteration) continue;
      double iters = r.iterations > 0 ? static_cast<double>(r.iterations) : 1.0;
      runs[r.run_name.function_name].push_back(
          {r.repetition_index, r.real_accumulated_time / iters, r.cpu_accumulated_time / iters, r.error_occurred,
           r.error_message});
    }
  }
};

// --- the runner ----------------------------------------------------------------------------------

enum class CallKind : uint8_t { warmup, timed, rerun };

struct CallRecord {
  int cand = 0;
  CallKind kind = CallKind::timed;
  int slot = 0;
  int64_t visit = 0;            // the slot's visit (a re-run: the visit it repeats)
  uint64_t content = 0;         // hash_inputs of what the call saw
  int64_t sample = -1;          // timed: index in the candidate's samples; re-run: the call it repeats
  std::vector<uint64_t> hashes; // per output (spec order)
  std::string replaced;         // an output tensor the candidate replaced instead of writing
  bool wrote_inputs = false;    // the inputs' bytes changed during the call
};

struct Slot {
  TensorMap in;
  uint64_t seed = 0;            // of the generated set it derives from
  int64_t base = 0;             // its rotation at visit 0
  int64_t visits = 0;
  uint64_t content = 0;         // hash_inputs(in), kept current so that no call reads `in` just before it runs
};

// Which call a problem is about, for its message.
std::string describe(const CallRecord& r) {
  switch (r.kind) {
    case CallKind::warmup: return std::string("the warm-up call");
    case CallKind::timed: return fmt::format("timed call {}", r.sample + 1);
    case CallKind::rerun: return fmt::format("the re-run of timed call {}", r.sample + 1);
  }
  return std::string("?");
}

int64_t total_bytes(const TensorMap& in) {
  int64_t bytes = 0;
  for (const auto& [_, t] : in) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

class Runner {
 public:
  Runner(const std::vector<const Candidate*>& cands, const Case& c, const BenchOptions& opt)
      : cands_(cands), c_(c), opt_(opt), op_(find_op(c.op())), samples_(cands.size()), cpu_(cands.size()),
        device_(cands.size()), calls_(cands.size(), 0), out_next_(cands.size(), 0), timed_count_(cands.size(), 0) {
    for (const auto& [name, shape] : op_->output_shapes(c)) {
      bool inout = false;
      for (const TensorSpec& t : op_->tensors)
        if (t.name == name) inout = t.role == TensorRole::inout;
      specs_.push_back({name, shape, inout});
    }
  }

  // The input slots and every candidate's output slots, before any call.
  void prepare(uint64_t invocation) {
    std::vector<TensorMap> groups;
    groups.push_back(generate_inputs(c_.with("seed", std::to_string(input_seed(invocation, 0)))));
    const int S = input_set_count(total_bytes(groups[0]));
    const int64_t period = rotation_period(groups[0]);
    // Slot i derives from generated set i % G, first seen rotated by (i / G) * stride, where stride
    // bounds the visits of one slot: the contents then never repeat within this run when G is large
    // enough for S * stride <= G * period.
    int64_t calls_max = static_cast<int64_t>(cands_.size()) * (opt_.max_repetitions + 1);
    int64_t stride = calls_max / S + 2;
    int64_t need = (static_cast<int64_t>(S) * stride + period - 1) / period;
    int G = static_cast<int>(std::min<int64_t>(S, std::max<int64_t>(std::min(S, kMinGeneratedSets), need)));
    for (int g = 1; g < G; ++g)
      groups.push_back(generate_inputs(c_.with("seed", std::to_string(input_seed(invocation, g)))));
    fill_input_slots(groups, invocation, S, G, stride);
    alloc_output_slots(S);
  }

  // One untimed call per candidate, through the same slots as the timed calls.
  void warm_up() {
    for (size_t ci = 0; ci < cands_.size(); ++ci) {
      Pending p = begin(static_cast<int>(ci), CallKind::warmup);
      try {
        run(p);
      } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format("{} threw on its warm-up call: {}", cands_[ci]->name(), e.what()));
      }
      finish(p);
    }
  }

  // One round: `reps` timed calls per candidate, interleaved by Google Benchmark.
  void round(int reps, int round_index) {
    KeepEveryRepetition reporter;
    std::string prefix = fmt::format("driftgate_bench_{}_", round_index);
    for (size_t ci = 0; ci < cands_.size(); ++ci) {
      int cand = static_cast<int>(ci);
      benchmark::RegisterBenchmark((prefix + std::to_string(ci)).c_str(),
                                   [this, cand](benchmark::State& st) { timed_call(st, cand); })
          ->Iterations(1)
          ->Repetitions(reps)
          ->UseManualTime()
          ->MeasureProcessCPUTime()
          ->Unit(benchmark::kNanosecond);
    }
    benchmark::RunSpecifiedBenchmarks(&reporter, "^" + prefix);
    benchmark::ClearRegisteredBenchmarks();
    if (!error_.empty()) throw std::runtime_error(error_);
    keep_round_samples(reporter, prefix, reps);
  }

  const std::vector<std::vector<double>>& samples() const { return samples_; }

  std::vector<BenchSamples> results() {
    std::vector<BenchSamples> out(cands_.size());
    for (size_t ci = 0; ci < cands_.size(); ++ci) {
      std::vector<std::string> problems = check(static_cast<int>(ci), out[ci].rerun_picks, out[ci].reruns);
      out[ci].candidate = cands_[ci]->name();
      out[ci].seconds = samples_[ci];
      out[ci].cpu_seconds = cpu_[ci];
      out[ci].wall_seconds = device_[ci].wall;
      out[ci].throttled = device_[ci].throttled;
      out[ci].low_clock = device_[ci].low_clock;
      out[ci].device_peak_gbs = device_[ci].peak_gbs;
      out[ci].device = device_[ci].device;
      out[ci].calls = calls_[ci];
      out[ci].outputs_consistent = problems.empty();
      if (problems.size() == 1) out[ci].inconsistency = problems[0];
      if (problems.size() > 1) out[ci].inconsistency = fmt::format("{}; and {} more", problems[0], problems.size() - 1);
    }
    return out;
  }

 private:
  struct Pending {
    int cand = 0;
    CallKind kind = CallKind::timed;
    int slot = 0;
    size_t out_slot = 0;
    TensorMap out;   // shares storage with out_slots_[cand][out_slot]
  };

  static int64_t available_memory_bytes() {
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    for (int64_t kb = 0; f >> key >> kb >> unit;)
      if (key == "MemAvailable:") return kb * 1024;
    return 0;
  }

  // --- preparation --------------------------------------------------------------------------------

  // The seed of generated input set g: differs per invocation of time_candidates, and from the case's own.
  uint64_t input_seed(uint64_t invocation, int g) const {
    uint64_t s = mix64(opt_.seed * 0x9e3779b97f4a7c15ULL + invocation * 0xbf58476d1ce4e5b9ULL + static_cast<uint64_t>(g) + 1) &
                 0x7fffffffULL;
    return s == c_.seed() ? s + 1 : s;
  }

  // One output set of every candidate: the bytes a slot's outputs take.
  int64_t output_bytes_per_slot() const {
    int64_t out_bytes = 0;
    for (const OutputSpec& o : specs_) {
      int64_t n = 1;
      for (int64_t d : o.shape) n *= d;
      for (const Candidate* cand : cands_) out_bytes += n * info(output_dtype(o.name, cand->info())).storage_bytes;
    }
    return out_bytes;
  }

  // How many input slots: the option, else auto_input_sets within the available memory.
  int input_set_count(int64_t set_bytes) const {
    // Every slot also holds one output set per candidate: the memory limit is scaled so that it
    // bounds inputs and outputs together.
    int64_t out_bytes = output_bytes_per_slot();
    int64_t memory = available_memory_bytes();
    memory = set_bytes > 0 ? static_cast<int64_t>(static_cast<double>(memory) * static_cast<double>(set_bytes) /
                                                  static_cast<double>(set_bytes + out_bytes))
                           : memory;
    return opt_.input_sets > 0 ? opt_.input_sets : auto_input_sets(set_bytes, last_level_cache_bytes(), memory);
  }

  // S slots from the G generated sets: slot i is set i % G rotated by (i / G) * stride.
  void fill_input_slots(const std::vector<TensorMap>& groups, uint64_t invocation, int S, int G, int64_t stride) {
    for (int i = 0; i < S; ++i) {
      Slot s;
      s.seed = input_seed(invocation, i % G);
      s.base = static_cast<int64_t>(i / G) * stride;
      s.in = rotated(groups[static_cast<size_t>(i % G)], s.base);
      s.content = hash_inputs(s.in);
      slots_.push_back(std::move(s));
    }
  }

  void alloc_output_slots(int S) {
    for (const Candidate* cand : cands_) {
      std::vector<TensorMap> outs;
      for (int i = 0; i < S; ++i) outs.push_back(alloc_outputs(*cand, specs_));
      out_slots_.push_back(std::move(outs));
    }
  }

  // --- calls --------------------------------------------------------------------------------------

  Pending begin(int cand, CallKind kind) {
    Pending p;
    p.cand = cand;
    p.kind = kind;
    p.slot = static_cast<int>(next_slot_++ % static_cast<int64_t>(slots_.size()));
    p.out_slot = out_next_[static_cast<size_t>(cand)]++ % out_slots_[static_cast<size_t>(cand)].size();
    p.out = out_slots_[static_cast<size_t>(cand)][p.out_slot];
    return p;
  }

  // The timed part: the candidate's call, through the op's driver as run_candidate calls it.
  double run(Pending& p) {
    const Candidate& cand = *cands_[static_cast<size_t>(p.cand)];
    const TensorMap& in = slots_[static_cast<size_t>(p.slot)].in;
    ++calls_[static_cast<size_t>(p.cand)];
    DeviceTimingScope scope;
    TimedCallHook* hook = p.kind == CallKind::timed ? opt_.hook : nullptr;
    if (hook) hook->begin(p.cand);
    auto t0 = Clock::now();
    try {
      invoke(cand, in, p.out);
    } catch (...) {
      if (hook) hook->end(p.cand, -1);   // the call did not complete: no sample
      throw;
    }
    const double wall = seconds_since(t0);
    if (hook) hook->end(p.cand, wall);
    const DeviceCall& d = scope.call();
    if (d.launches == 0) return wall;
    if (p.kind == CallKind::timed) keep_device_call(p.cand, d);
    return d.device_s;
  }

  // A timed call that ran device work: its launches' wall time, clock findings and device.
  void keep_device_call(int cand, const DeviceCall& d) {
    DeviceRecord& r = device_[static_cast<size_t>(cand)];
    r.wall.push_back(d.launch_wall_s);
    r.throttled += d.throttled;
    r.low_clock += d.low_clock;
    r.peak_gbs = d.peak_gbs;
    r.device = d.device;
  }

  void invoke(const Candidate& cand, const TensorMap& in, TensorMap& out) const {
    if (op_->drive)
      op_->drive(cand, c_, in, out);
    else
      cand.run(c_, in, out);
  }

  // Untimed, after the call: hash the outputs, poison the output slot for its next use, check that
  // the inputs are as they were, and move the input slot on to new contents.
  void finish(Pending& p) {
    Slot& slot = slots_[static_cast<size_t>(p.slot)];
    int64_t sample = p.kind == CallKind::timed ? timed_count_[static_cast<size_t>(p.cand)]++ : -1;
    CallRecord r{p.cand, p.kind, p.slot, slot.visits, slot.content, sample, {}, {}, false};
    TensorMap& mine = out_slots_[static_cast<size_t>(p.cand)][p.out_slot];
    hash_outputs(p.out, mine, r);
    reset_outputs(mine, specs_);
    r.wrote_inputs = hash_inputs(slot.in) != slot.content;
    move_slot_on(slot, r.wrote_inputs);
    log_.push_back(std::move(r));
  }

  // The slot's contents at its next visit: rotated by one more step, or regenerated where the call wrote
  // to them; then hashed.
  void move_slot_on(Slot& slot, bool written) {
    ++slot.visits;
    if (written) {
      regenerate_slot(slot);
    } else {
      for (const auto& [name, step] : rotation_steps(slot.in)) rotate_in_place(slot.in.at(name), step, tmp_);
    }
    slot.content = hash_inputs(slot.in);
  }

  // Regenerate, in place, what the slot holds at its next visit.
  void regenerate_slot(Slot& slot) {
    const TensorMap fresh = rotated(generate_inputs(c_.with("seed", std::to_string(slot.seed))), slot.base + slot.visits);
    for (auto& [name, t] : slot.in)
      if (t.nbytes()) std::memcpy(t.bytes(), fresh.at(name).bytes(), t.nbytes());
  }

  void hash_outputs(const TensorMap& got, const TensorMap& mine, CallRecord& r) const {
    for (const OutputSpec& s : specs_) {
      auto it = got.find(s.name);
      if (it == got.end()) {
        r.hashes.push_back(0);
        if (r.replaced.empty()) r.replaced = s.name;
        continue;
      }
      if (it->second.bytes() != mine.at(s.name).bytes() && r.replaced.empty()) r.replaced = s.name;
      r.hashes.push_back(hash_tensor(it->second));
    }
  }

  void timed_call(benchmark::State& st, int cand) {
    if (!error_.empty()) {
      st.SkipWithError("an earlier call threw");
      return;
    }
    try {
      Pending p = begin(cand, CallKind::timed);
      for (auto _ : st) {
        double s = 0;
        try {
          s = run(p);
        } catch (const std::exception& e) {
          error_ = fmt::format("{} threw on timed call {}: {}", cands_[static_cast<size_t>(cand)]->name(),
                               timed_count_[static_cast<size_t>(cand)] + 1, e.what());
          st.SkipWithError(error_.c_str());
        }
        st.SetIterationTime(s);
      }
      if (error_.empty()) finish(p);
    } catch (const std::exception& e) {   // harness work outside the timed call (allocation)
      if (error_.empty()) error_ = fmt::format("bench harness error around {}: {}", cands_[static_cast<size_t>(cand)]->name(), e.what());
      st.SkipWithError(error_.c_str());
    }
  }

  // The round's repetitions of every candidate, in repetition order, appended to its samples.
  void keep_round_samples(KeepEveryRepetition& reporter, const std::string& prefix, int reps) {
    for (size_t ci = 0; ci < cands_.size(); ++ci) {
      std::vector<KeepEveryRepetition::Repetition>& runs = reporter.runs[prefix + std::to_string(ci)];
      std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
      if (runs.size() != static_cast<size_t>(reps))
        throw std::runtime_error(fmt::format("Google Benchmark reported {} repetitions of {}, expected {}", runs.size(),
                                             cands_[ci]->name(), reps));
      for (const auto& r : runs) {
        if (r.error) throw std::runtime_error(fmt::format("{}: {}", cands_[ci]->name(), r.message));
        samples_[ci].push_back(r.real_s);
        cpu_[ci].push_back(r.cpu_s);
      }
    }
  }

  // --- the checks after timing --------------------------------------------------------------------

  // The checks after timing, for one candidate; returns the problems found, in call order, and sets
  // `picked` and `compared` to the numbers of re-runs picked and compared. Picks whose inputs
  // cannot be recreated are skipped (only a call that wrote to its inputs, itself a problem, leaves
  // such a slot); when every pick is skipped the re-run check has not run, and that is a problem of
  // its own, never a pass.
  std::vector<std::string> check(int cand, int& picked, int& compared) {
    std::vector<std::string> problems = write_problems(cand);
    const std::vector<const CallRecord*> picks = pick_reruns(cand);
    const std::vector<CallRecord> reruns = rerun_and_compare(cand, picks, problems);
    picked = static_cast<int>(picks.size());
    compared = static_cast<int>(reruns.size());
    if (!picks.empty() && reruns.empty())
      problems.push_back(fmt::format("none of the {} picked timed calls could be re-run on the inputs it saw (they changed "
                                     "after the call): the re-run check did not run",
                                     picks.size()));
    check_replay(cand, reruns, problems);
    return problems;
  }

  // Calls that replaced an output tensor or wrote to their inputs.
  std::vector<std::string> write_problems(int cand) const {
    std::vector<std::string> problems;
    for (const CallRecord& r : log_) {
      if (r.cand != cand) continue;
      if (!r.replaced.empty())
        problems.push_back(fmt::format("{}: output '{}' was replaced instead of written in place", describe(r), r.replaced));
      if (r.wrote_inputs)
        problems.push_back(fmt::format("{}: the candidate wrote to its inputs (input set {})", describe(r), r.slot));
    }
    return problems;
  }

  // Re-runs: up to kMaxReruns timed calls on distinct slots, first calls on a slot this candidate
  // had used before (where a result cached by address would be handed back), then others; a
  // seeded sample within each group.
  std::vector<const CallRecord*> pick_reruns(int cand) const {
    std::vector<const CallRecord*> revisits, firsts;
    std::set<int> used;
    for (const CallRecord& r : log_) {
      if (r.cand != cand) continue;
      if (r.kind == CallKind::timed) (used.count(r.slot) ? revisits : firsts).push_back(&r);
      used.insert(r.slot);
    }
    std::mt19937_64 rng(opt_.seed ^ mix64(static_cast<uint64_t>(cand) + 1));
    std::shuffle(revisits.begin(), revisits.end(), rng);
    std::shuffle(firsts.begin(), firsts.end(), rng);
    std::vector<const CallRecord*> picks;
    std::set<int> picked_slots;
    for (const auto* group : {&revisits, &firsts})
      for (const CallRecord* r : *group)
        if (picks.size() < static_cast<size_t>(kMaxReruns) && picked_slots.insert(r->slot).second) picks.push_back(r);
    std::sort(picks.begin(), picks.end(), [](const CallRecord* a, const CallRecord* b) { return a->sample < b->sample; });
    return picks;
  }

  // Runs every pick again, untimed, on a fresh copy of the inputs it saw; outputs that differ from
  // the timed call's are a problem. Returns the re-runs' records.
  std::vector<CallRecord> rerun_and_compare(int cand, const std::vector<const CallRecord*>& picks,
                                            std::vector<std::string>& problems) {
    std::vector<CallRecord> reruns;
    for (const CallRecord* t : picks) {
      const Slot& slot = slots_[static_cast<size_t>(t->slot)];
      TensorMap in = rotated(slot.in, t->visit - slot.visits);
      if (hash_inputs(in) != t->content) continue;   // changed after that call's check: nothing to compare
      CallRecord r = rerun(cand, *t, in);
      std::vector<std::string> differ;
      for (size_t i = 0; i < specs_.size(); ++i)
        if (r.hashes[i] != t->hashes[i]) differ.push_back("'" + specs_[i].name + "'");
      if (!differ.empty())
        problems.push_back(fmt::format(
            "timed call {} (input set {}, visit {}): output {} {} bitwise from an untimed re-run on the same inputs",
            t->sample + 1, t->slot, t->visit, fmt::join(differ, ", "), differ.size() == 1 ? "differs" : "differ"));
      reruns.push_back(std::move(r));
    }
    return reruns;
  }

  // One untimed re-run of timed call `t` on `in`, into fresh outputs; its record.
  CallRecord rerun(int cand, const CallRecord& t, const TensorMap& in) {
    const Candidate& c = *cands_[static_cast<size_t>(cand)];
    TensorMap out = alloc_outputs(c, specs_);
    TensorMap mine = out;
    ++calls_[static_cast<size_t>(cand)];
    try {
      invoke(c, in, out);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{} threw on the re-run of timed call {}: {}", c.name(), t.sample + 1, e.what()));
    }
    CallRecord r{cand, CallKind::rerun, t.slot, t.visit, t.content, t.sample, {}, {}, false};
    hash_outputs(out, mine, r);
    return r;
  }

  // Replay: identical outputs on different contents.
  void check_replay(int cand, const std::vector<CallRecord>& reruns, std::vector<std::string>& problems) const {
    std::unordered_map<uint64_t, const CallRecord*> seen;
    auto replay_check = [&](const CallRecord& r) {
      uint64_t h = 0x2545f4914f6cdd1dULL;
      for (uint64_t x : r.hashes) h = mix64(h ^ x);
      auto [it, fresh] = seen.emplace(h, &r);
      if (!fresh && it->second->content != r.content)
        problems.push_back(fmt::format("{} returned outputs bitwise identical to those of {} on different inputs (result replay)",
                                       describe(r), describe(*it->second)));
    };
    for (const CallRecord& r : log_)
      if (r.cand == cand) replay_check(r);
    for (const CallRecord& r : reruns) replay_check(r);
  }

  const std::vector<const Candidate*>& cands_;
  const Case& c_;
  const BenchOptions& opt_;
  const OpSpec* op_;
  std::vector<OutputSpec> specs_;
  std::vector<Slot> slots_;
  std::vector<std::vector<TensorMap>> out_slots_;   // per candidate
  int64_t next_slot_ = 0;
  std::vector<std::vector<double>> samples_, cpu_;
  struct DeviceRecord {   // device candidates: per timed call, in call order
    std::vector<double> wall;
    int throttled = 0, low_clock = 0;
    double peak_gbs = 0;
    std::string device;
  };
  std::vector<DeviceRecord> device_;
  std::vector<int64_t> calls_;
  std::vector<size_t> out_next_;
  std::vector<int64_t> timed_count_;
  std::vector<CallRecord> log_;
  std::vector<std::byte> tmp_;
  std::string error_;
};

std::atomic<uint64_t> g_invocations{0};

// time_candidates' options and candidates, checked before anything runs.
void check_bench_request(const std::vector<const Candidate*>& cands, const Case& c, const BenchOptions& opt) {
  if (opt.min_repetitions < 1 || opt.max_repetitions < opt.min_repetitions)
    throw InputError(fmt::format("bench: need 1 <= min_repetitions ({}) <= max_repetitions ({})", opt.min_repetitions,
                                 opt.max_repetitions));
  if (opt.input_sets < 0 || opt.input_sets == 1)
    throw InputError(fmt::format("bench: input_sets must be 0 (automatic) or at least 2, got {}", opt.input_sets));
  if (!(opt.max_time_s >= 0)) throw InputError(fmt::format("bench: max_time_s must be >= 0, got {}", opt.max_time_s));
  for (const Candidate* cand : cands)
    if (cand->info().op != c.op())
      throw InputError(fmt::format("bench: candidate {} implements {}, not {}", cand->name(), cand->info().op, c.op()));
}

// The next round: half the repetitions so far, as many as the remaining budget affords at the
// pace measured so far (wall time per repetition of every candidate, harness work included).
// 0: the budget affords none.
int next_round_repetitions(const BenchOptions& opt, int done, double elapsed) {
  double per_rep = elapsed / done;
  double affordable = per_rep > 0 ? std::floor((opt.max_time_s - elapsed) / per_rep) : 1e9;
  if (affordable < 1) return 0;
  return static_cast<int>(std::min<double>({static_cast<double>(opt.max_repetitions - done), affordable,
                                            static_cast<double>(std::max(1, done / 2))}));
}

}  // namespace

int64_t last_level_cache_bytes() {
  int best_level = -1;
  int64_t best = 0;
  for (int i = 0; i < 16; ++i) {
    std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", i);
    std::ifstream level_f(dir + "level"), size_f(dir + "size"), type_f(dir + "type");
    int level = 0;
    std::string size, type;
    if (!(level_f >> level) || !(size_f >> size)) break;
    if ((type_f >> type, type == "Instruction")) continue;
    int64_t bytes = std::strtoll(size.c_str(), nullptr, 10);   // "491520K"
    size_t used = size.find_first_not_of("0123456789");
    char unit = used == std::string::npos ? ' ' : size[used];
    bytes *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? int64_t{1} << 30 : 1;
    if (level > best_level || (level == best_level && bytes > best)) best_level = level, best = bytes;
  }
  return best > 0 ? best : int64_t{32} << 20;
}

int auto_input_sets(int64_t set_bytes, int64_t llc_bytes, int64_t memory_bytes) {
  if (set_bytes <= 0) return 2;
  int64_t n = std::clamp<int64_t>(2 * llc_bytes / set_bytes + 1, 2, kMaxInputSets);
  if (memory_bytes > 0) n = std::max<int64_t>(2, std::min(n, memory_bytes / 4 / set_bytes));
  return static_cast<int>(n);
}

std::vector<BenchSamples> time_candidates(const std::vector<const Candidate*>& cands, const Case& c,
                                          const BenchOptions& opt) {
  check_bench_request(cands, c, opt);
  if (cands.empty()) return {};

  std::lock_guard<std::mutex> lock(g_gbench_mutex);
  Runner runner(cands, c, opt);
  runner.prepare(g_invocations++);
  init_gbench(opt.interleave);

  auto t0 = Clock::now();
  runner.warm_up();
  int done = 0, next = opt.min_repetitions;
  for (int round = 0;; ++round) {
    runner.round(next, round);
    done += next;
    double elapsed = seconds_since(t0);
    if (done >= opt.max_repetitions) break;
    if (opt.stop && opt.stop(runner.samples(), elapsed)) break;
    if (elapsed >= opt.max_time_s) break;
    next = next_round_repetitions(opt, done, elapsed);
    if (next == 0) break;
  }
  return runner.results();
}

}  // namespace dg
