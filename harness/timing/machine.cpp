// This machine's limits: FMA peak, STREAM-triad bandwidth, cache sizes (see machine.h for the
// conventions), and their cache file.
#include "harness/timing/machine.h"

#include <immintrin.h>
#include <iostream>
#include <sched.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "harness/core/json_limits.h"
#include "harness/core/output_path.h"
#include "harness/report/report.h"

namespace dg {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// --- FMA peak ------------------------------------------------------------------------------------
// One vector type per precision with the three operations the kernel needs; the widest the build
// targets. Explicit FMA intrinsics: the build has -ffp-contract=off, so a * b + c would not fuse.
#if defined(__AVX512F__)
struct F32 {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V set1(double x) { return _mm512_set1_ps(static_cast<float>(x)); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static double sum(V a) {   // (GCC 12 warns falsely inside _mm512_reduce_add_ps)
    alignas(64) float t[16];
    _mm512_store_ps(t, a);
    double s = 0;
    for (float x : t) s += x;
    return s;
  }
};
struct F64 {
  using V = __m512d;
  static constexpr int kLanes = 8;
  static V set1(double x) { return _mm512_set1_pd(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static double sum(V a) {
    alignas(64) double t[8];
    _mm512_store_pd(t, a);
    double s = 0;
    for (double x : t) s += x;
    return s;
  }
};
#elif defined(__AVX__) && defined(__FMA__)
struct F32 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V set1(double x) { return _mm256_set1_ps(static_cast<float>(x)); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static double sum(V a) {
    alignas(32) float t[8];
    _mm256_store_ps(t, a);
    double s = 0;
    for (float x : t) s += x;
    return s;
  }
};
struct F64 {
  using V = __m256d;
  static constexpr int kLanes = 4;
  static V set1(double x) { return _mm256_set1_pd(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static double sum(V a) {
    alignas(32) double t[4];
    _mm256_store_pd(t, a);
    return t[0] + t[1] + t[2] + t[3];
  }
};
#else
struct F32 {
  using V = float;
  static constexpr int kLanes = 1;
  static V set1(double x) { return static_cast<float>(x); }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  static double sum(V a) { return a; }
};
struct F64 {
  using V = double;
  static constexpr int kLanes = 1;
  static V set1(double x) { return x; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  static double sum(V a) { return a; }
};
#endif

// Independent accumulation chains per thread: FMA latency (4 cycles) times FMA ports (2) needs at
// least 8 in flight; 12 leaves headroom and still fits the 16 (AVX2) or 32 (AVX-512) registers.
constexpr int kChains = 12;

// acc <- acc * 0.9999 + 1e-4 converges to 1: no overflow, no subnormals, nothing to fold away.
template <class K>
__attribute__((noinline)) double fma_chains(int64_t iters) {
  typename K::V acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = K::set1(1.0 + 0.01 * c);
  const typename K::V mul = K::set1(0.9999), add = K::set1(1e-4);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = K::fma(acc[c], mul, add);
  }
  double s = 0;
  for (int c = 0; c < kChains; ++c) s += K::sum(acc[c]);
  return s;
}

// The CPUs of this process's affinity mask, in order.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Pins the calling thread to one CPU (best effort: a failure leaves it where it was).
void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

// Runs work(tid) on `threads` threads at once, `reps` times, and returns the shortest wall time of
// one rep (start released together, end = last thread done). The calling thread is thread 0.
// With several threads each is pinned to its own CPU: left to the scheduler, two of our threads
// can share one CPU for long stretches while another process holds the other, and the all-core
// figure would then read as one core's.
double best_parallel_seconds(int threads, int reps, const std::function<void(int)>& work) {
  const std::vector<int> cpus = threads > 1 ? allowed_cpus() : std::vector<int>{};
  const bool pin = static_cast<int>(cpus.size()) >= threads;
  cpu_set_t saved;
  CPU_ZERO(&saved);
  const bool restore = pin && sched_getaffinity(0, sizeof saved, &saved) == 0;
  if (pin) pin_to(cpus[0]);

  std::atomic<int> released{0}, done{0};
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      if (pin) pin_to(cpus[static_cast<size_t>(t)]);
      for (int r = 1; r <= reps; ++r) {
        while (released.load(std::memory_order_acquire) < r) std::this_thread::yield();
        work(t);
        done.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }
  double best = std::numeric_limits<double>::infinity();
  for (int r = 1; r <= reps; ++r) {
    while (done.load(std::memory_order_acquire) < (r - 1) * (threads - 1)) std::this_thread::yield();
    const auto t0 = Clock::now();
    released.store(r, std::memory_order_release);
    work(0);
    while (done.load(std::memory_order_acquire) < r * (threads - 1)) std::this_thread::yield();
    best = std::min(best, seconds_since(t0));
  }
  for (auto& th : pool) th.join();
  if (restore) sched_setaffinity(0, sizeof saved, &saved);
  return best;
}

std::atomic<double> g_sink{0};   // keeps the kernels' results alive

// Best GFLOP/s of `threads` threads each running the FMA kernel, over about `slice_s` seconds.
template <class K>
double fma_gflops(int threads, double slice_s) {
  int64_t iters = 1 << 12;
  double chunk_s = 0;
  for (;;) {   // calibrate one chunk to >= 1 ms on one thread (also warms the vector units up)
    const auto t0 = Clock::now();
    g_sink.store(fma_chains<K>(iters), std::memory_order_relaxed);
    chunk_s = seconds_since(t0);
    if (chunk_s >= 1e-3 || iters >= (int64_t{1} << 40)) break;
    iters *= 2;
  }
  const int reps = std::clamp(static_cast<int>(slice_s / chunk_s), 3, 100000);
  const double best = best_parallel_seconds(threads, reps, [&](int) {
    g_sink.store(fma_chains<K>(iters), std::memory_order_relaxed);
  });
  const double flops = 2.0 * K::kLanes * kChains * static_cast<double>(iters) * threads;
  return flops / best / 1e9;
}

// --- STREAM triad --------------------------------------------------------------------------------

// 2 MiB alignment; no MADV_HUGEPAGE: with THP in madvise mode the first touch can stall for seconds
// in memory compaction, while 4 KiB pages cost a steady ~0.2 s per GiB.
constexpr size_t kPageAlign = size_t{2} << 20;

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
using Array = std::unique_ptr<double[], FreeDeleter>;

Array alloc_array(size_t n) {
  const size_t bytes = (n * sizeof(double) + kPageAlign - 1) / kPageAlign * kPageAlign;
  auto* p = static_cast<double*>(std::aligned_alloc(kPageAlign, bytes));
  if (!p) throw std::runtime_error(fmt::format("measure_machine: cannot allocate {} bytes", bytes));
  return Array(p);
}

// a[i] = b[i] + s * c[i] over [0, n), n a multiple of 8, pointers 64-byte aligned.
void triad(double* a, const double* b, const double* c, double s, size_t n) {
#if defined(__AVX512F__)
  const __m512d vs = _mm512_set1_pd(s);
  for (size_t i = 0; i < n; i += 8)
    _mm512_stream_pd(a + i, _mm512_add_pd(_mm512_load_pd(b + i), _mm512_mul_pd(vs, _mm512_load_pd(c + i))));
  _mm_sfence();
#elif defined(__AVX__)
  const __m256d vs = _mm256_set1_pd(s);
  for (size_t i = 0; i < n; i += 4)
    _mm256_stream_pd(a + i, _mm256_add_pd(_mm256_load_pd(b + i), _mm256_mul_pd(vs, _mm256_load_pd(c + i))));
  _mm_sfence();
#else
  for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
#endif
}

int64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

struct TriadResult {
  double gbs_core = 0, gbs_all = 0;
};

TriadResult measure_triad(int64_t l3_bytes, int threads, const std::function<double()>& seconds_left) {
  int64_t total = std::clamp<int64_t>(4 * l3_bytes, int64_t{256} << 20, int64_t{2} << 30);
  if (const int64_t avail = mem_available_bytes(); avail > 0) total = std::min(total, avail / 4);
  const size_t n = static_cast<size_t>(std::max<int64_t>(total / 24, 1 << 16)) / 64 * 64;
  Array a = alloc_array(n), b = alloc_array(n), c = alloc_array(n);

  // Thread t owns the 8-aligned block [start(t), start(t + 1)) of every array.
  auto block_start = [n](int t, int nt) { return n / 8 * static_cast<size_t>(t) / static_cast<size_t>(nt) * 8; };
  const double s = 3.0;
  best_parallel_seconds(threads, 1, [&](int t) {   // first touch by the owner thread
    for (size_t i = block_start(t, threads); i < block_start(t + 1, threads); ++i) {
      a[i] = 0.0;
      b[i] = 1.0;
      c[i] = 2.0;
    }
  });
  auto pass = [&](int nt) {
    return best_parallel_seconds(nt, 1, [&](int t) {
      const size_t lo = block_start(t, nt), hi = block_start(t + 1, nt);
      triad(a.get() + lo, b.get() + lo, c.get() + lo, s, hi - lo);
    });
  };
  // Passes of each kind until its half of the remaining time is used, at least 2, at most 20.
  auto best_of = [&](int nt, double slice) {
    const auto t0 = Clock::now();
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < 20 && (r < 2 || seconds_since(t0) < slice); ++r) best = std::min(best, pass(nt));
    return best;
  };
  const double all_s = best_of(threads, 0.5 * seconds_left());
  const double core_s = best_of(1, seconds_left());
  for (size_t i : {size_t{0}, n / 2, n - 1})
    if (a[i] != 1.0 + s * 2.0) throw std::runtime_error("measure_machine: triad produced a wrong value");
  const double bytes = 24.0 * static_cast<double>(n);
  return {bytes / core_s / 1e9, bytes / all_s / 1e9};
}

// --- caches, identity, time ----------------------------------------------------------------------

int64_t parse_cache_size(const std::string& text) {   // "48K", "2048K", "32M"
  size_t pos = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &pos);
  } catch (const std::exception&) {
    return 0;
  }
  const char unit = pos < text.size() ? text[pos] : ' ';
  if (unit == 'K' || unit == 'k') return v << 10;
  if (unit == 'M' || unit == 'm') return v << 20;
  if (unit == 'G' || unit == 'g') return v << 30;
  return v;
}

std::string read_first_line(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return line;
}

void read_cache_sizes(MachineLimits& m) {
  namespace fs = std::filesystem;
  const fs::path root = "/sys/devices/system/cpu/cpu0/cache";
  for (int i = 0; i < 16; ++i) {
    const fs::path dir = root / fmt::format("index{}", i);
    std::error_code ec;
    if (!fs::exists(dir, ec)) break;
    const std::string level = read_first_line(dir / "level");
    const std::string type = read_first_line(dir / "type");
    const int64_t size = parse_cache_size(read_first_line(dir / "size"));
    if (level == "1" && type == "Data") m.l1d_bytes = size;
    if (level == "2" && type != "Instruction") m.l2_bytes = size;
    if (level == "3" && type != "Instruction") m.l3_bytes = size;
  }
}

std::string utc_now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

template <class T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.is_object() || !j.contains(name))
    throw std::runtime_error(fmt::format("machine limits JSON: missing field '{}'", name));
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("machine limits JSON: field '{}' has the wrong type ({})", name, e.what()));
  }
}

}  // namespace

double compute_peak_factor(DType input, const std::string& cpu_flags) {
  if (info(input).storage_bytes > 2) return 1.0;
  std::istringstream words(cpu_flags);
  bool dot2 = false;
  for (std::string w; words >> w;) {
    if (w.rfind("amx_", 0) == 0) return std::numeric_limits<double>::infinity();
    if (w == "avx512_bf16" || w == "avx512_fp16") dot2 = true;
  }
  return dot2 ? 2.0 : 1.0;
}

double compute_peak_factor(DType input) {
  static const std::string flags = [] {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') == std::string::npos ? 0 : line.find(':') + 1);
    return std::string();
  }();
  return compute_peak_factor(input, flags);
}

std::string this_cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      const size_t start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? std::string() : line.substr(start);
    }
  return "unknown";
}

int this_machine_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

MachineLimits measure_machine(double seconds_budget) {
  const double budget = std::max(seconds_budget, 0.05);
  MachineLimits m;
  m.cpu = this_cpu_model();
  m.cores = this_machine_cores();
  read_cache_sizes(m);
  const auto start = Clock::now();
  const double fma_slice = 0.1 * budget;   // four FMA figures: 40% of the budget
  m.f32_fma_gflops_core = fma_gflops<F32>(1, fma_slice);
  m.f32_fma_gflops_all = fma_gflops<F32>(m.cores, fma_slice);
  m.f64_fma_gflops_core = fma_gflops<F64>(1, fma_slice);
  m.f64_fma_gflops_all = fma_gflops<F64>(m.cores, fma_slice);
  // The triad gets the rest, first touch of its arrays included.
  const TriadResult triad =
      measure_triad(m.l3_bytes, m.cores, [&] { return std::max(0.0, budget - seconds_since(start)); });
  m.stream_triad_gbs_core = triad.gbs_core;
  m.stream_triad_gbs_all = triad.gbs_all;
  // All cores can always do what one core does: an all-core reading below the one-core one is
  // another process's load, and the limits are used as floors on time, so keep the larger.
  m.f32_fma_gflops_all = std::max(m.f32_fma_gflops_all, m.f32_fma_gflops_core);
  m.f64_fma_gflops_all = std::max(m.f64_fma_gflops_all, m.f64_fma_gflops_core);
  m.stream_triad_gbs_all = std::max(m.stream_triad_gbs_all, m.stream_triad_gbs_core);
  m.measured_at = utc_now_iso8601();
  return m;
}

nlohmann::json to_json(const MachineLimits& m) {
  return {{"schema_version", 1},
          {"cpu", m.cpu},
          {"cores", m.cores},
          {"f32_fma_gflops_core", m.f32_fma_gflops_core},
          {"f32_fma_gflops_all", m.f32_fma_gflops_all},
          {"f64_fma_gflops_core", m.f64_fma_gflops_core},
          {"f64_fma_gflops_all", m.f64_fma_gflops_all},
          {"stream_triad_gbs_core", m.stream_triad_gbs_core},
          {"stream_triad_gbs_all", m.stream_triad_gbs_all},
          {"l1d_bytes", m.l1d_bytes},
          {"l2_bytes", m.l2_bytes},
          {"l3_bytes", m.l3_bytes},
          {"measured_at", m.measured_at}};
}

MachineLimits machine_from_json(const nlohmann::json& j) {
  MachineLimits m;
  m.cpu = field<std::string>(j, "cpu");
  m.cores = field<int>(j, "cores");
  m.f32_fma_gflops_core = field<double>(j, "f32_fma_gflops_core");
  m.f32_fma_gflops_all = field<double>(j, "f32_fma_gflops_all");
  m.f64_fma_gflops_core = field<double>(j, "f64_fma_gflops_core");
  m.f64_fma_gflops_all = field<double>(j, "f64_fma_gflops_all");
  m.stream_triad_gbs_core = field<double>(j, "stream_triad_gbs_core");
  m.stream_triad_gbs_all = field<double>(j, "stream_triad_gbs_all");
  m.l1d_bytes = field<int64_t>(j, "l1d_bytes");
  m.l2_bytes = field<int64_t>(j, "l2_bytes");
  m.l3_bytes = field<int64_t>(j, "l3_bytes");
  m.measured_at = field<std::string>(j, "measured_at");
  return m;
}

MachineLimits load_or_measure_machine(const std::string& path, bool remeasure, double seconds_budget) {
  return load_or_measure_machine(path, remeasure, [seconds_budget] { return measure_machine(seconds_budget); });
}

std::string machine_suspect(const MachineLimits& m) {
  if (m.cpu.empty()) return "no CPU model";
  if (m.cores < 1) return fmt::format("{} cores", m.cores);
  const std::pair<const char*, double> figures[] = {
      {"f32_fma_gflops_core", m.f32_fma_gflops_core},     {"f32_fma_gflops_all", m.f32_fma_gflops_all},
      {"f64_fma_gflops_core", m.f64_fma_gflops_core},     {"f64_fma_gflops_all", m.f64_fma_gflops_all},
      {"stream_triad_gbs_core", m.stream_triad_gbs_core}, {"stream_triad_gbs_all", m.stream_triad_gbs_all}};
  for (const auto& [name, v] : figures)
    if (!std::isfinite(v) || v <= 0) return fmt::format("{} is {}", name, v);
  if (m.f32_fma_gflops_all < m.f32_fma_gflops_core || m.f64_fma_gflops_all < m.f64_fma_gflops_core ||
      m.stream_triad_gbs_all < m.stream_triad_gbs_core)
    return "an all-core figure below its one-core figure";
  if (m.f32_fma_gflops_core < m.f64_fma_gflops_core || m.f32_fma_gflops_all < m.f64_fma_gflops_all)
    return "f32 FMA slower than f64 FMA (a disturbed run: f32 lanes do twice the work)";
  if (m.f32_fma_gflops_core < kMinCoreGflops || m.stream_triad_gbs_core < kMinCoreGbs)
    return fmt::format("one core measured below {} GFLOP/s or {} GB/s (a machine under heavy contention)",
                       kMinCoreGflops, kMinCoreGbs);
  if (m.f32_fma_gflops_core > kMaxCoreGflops || m.stream_triad_gbs_core > kMaxCoreGbs ||
      m.f32_fma_gflops_all > kMaxCoreGflops * m.cores || m.stream_triad_gbs_all > kMaxCoreGbs * m.cores)
    return fmt::format("above {} GFLOP/s or {} GB/s per core (no CPU is that fast)", kMaxCoreGflops, kMaxCoreGbs);
  return {};
}

MachineLimits load_or_measure_machine(const std::string& path, bool remeasure,
                                      const std::function<MachineLimits()>& measure) {
  if (!remeasure) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {   // a cache that is not a regular file is refused (exit 2), never read
      try {
        const MachineLimits cached = machine_from_json(parse_json_bounded(read_regular_file("machine cache", path, 1 << 20)));
        if (cached.cpu == this_cpu_model() && cached.cores == this_machine_cores() && machine_suspect(cached).empty())
          return cached;
      } catch (const InputError&) {
        throw;
      } catch (const std::exception&) {
        // unreadable cache: measure again and replace it
      }
    }
  }
  std::string why;
  MachineLimits m;
  for (int attempt = 0; attempt < kMachineAttempts; ++attempt) {
    m = measure();
    why = machine_suspect(m);
    if (why.empty()) break;
  }
  if (!why.empty()) {
    if (!std::isfinite(m.f32_fma_gflops_core + m.f32_fma_gflops_all + m.f64_fma_gflops_core + m.f64_fma_gflops_all +
                       m.stream_triad_gbs_core + m.stream_triad_gbs_all) ||
        m.cores < 1 || std::min({m.f32_fma_gflops_core, m.f64_fma_gflops_core, m.stream_triad_gbs_core}) <= 0)
      throw std::runtime_error(fmt::format("machine: {} measurements in a row were unusable ({})", kMachineAttempts, why));
    std::cerr << fmt::format("driftgate: machine: the measurement looks disturbed ({}) after {} attempts; using it for "
                             "this run only, {} is not written\n",
                             why, kMachineAttempts, path);
    return m;
  }
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  write_file_atomic(path, to_json(m).dump(2) + "\n");
  return m;
}

std::string describe_machine(const MachineLimits& m) {
  auto size = [](int64_t b) {
    if (b <= 0) return std::string("?");
    if (b % (int64_t{1} << 20) == 0) return fmt::format("{} MiB", b >> 20);
    return fmt::format("{} KiB", b >> 10);
  };
  std::string s;
  s += fmt::format("cpu       {} ({} cores)\n", m.cpu, m.cores);
  s += fmt::format("f32 FMA   {:9.1f} GFLOP/s per core {:9.1f} GFLOP/s all cores\n", m.f32_fma_gflops_core,
                   m.f32_fma_gflops_all);
  s += fmt::format("f64 FMA   {:9.1f} GFLOP/s per core {:9.1f} GFLOP/s all cores\n", m.f64_fma_gflops_core,
                   m.f64_fma_gflops_all);
  s += fmt::format("triad     {:9.1f} GB/s per core    {:9.1f} GB/s all cores\n", m.stream_triad_gbs_core,
                   m.stream_triad_gbs_all);
  s += fmt::format("caches    L1d {}, L2 {}, L3 {}\n", size(m.l1d_bytes), size(m.l2_bytes), size(m.l3_bytes));
  s += fmt::format("measured  {}\n", m.measured_at);
  return s;
}

}  // namespace dg
