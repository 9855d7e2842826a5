// Plugins that cheat the timer, built on the example plugin's honest kernel (its source is included
// with its entry points renamed). CHEAT_KIND selects:
//   1  kda_plugin_slowclock_f32: on its first run, patches the C library's clock_gettime in its own
//      process so that CLOCK_MONOTONIC runs at half speed during its calls, computes honestly and
//      spins for 0.3x more (a timer in its process reads 1.5x faster; rule clock, SLOWER)
//   2  kda_plugin_twothreads_f32: widens its CPU affinity to every core and splits the value
//      columns over two threads, whatever the thread budget in params_json (rule cpu_budget)
//   3  kda_plugin_slowbase_f32: computes honestly and spins for 1.5x more; a timer signal burns 80%
//      of the timing thread outside its own calls (the worker blocks every signal during timed
//      calls, so the other candidate's calls are not slowed: SLOWER)
//   4  kda_plugin_basethief_f32: splits the value columns over the two threads it is granted, and
//      keeps two threads of its own spinning whenever its own call is not running, so that another
//      candidate timed in its process gets half the cores (within the thread budget of the
//      calls' CPU time: rule base_alone)
//   5  kda_plugin_earlystop_f32: computes honestly, and on 3 calls in 5 spins as long again (7 pairs
//      cannot decide it); on its first run moves its process's CLOCK_MONOTONIC an hour ahead, so a
//      budget kept in the timing process is spent after the first round (rule stop)
// The clock patches are candidates/cheats/process_cheats.h, shared with the built-in canaries.
#define driftgate_abi_version example_driftgate_abi_version
#define driftgate_list example_driftgate_list
#define driftgate_run example_driftgate_run
#include "candidates/examples/plugin/kda_example_plugin.cpp"
#undef driftgate_abi_version
#undef driftgate_list
#undef driftgate_run

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <regex>
#include <thread>

#include "candidates/cheats/process_cheats.h"

namespace {

#if CHEAT_KIND == 1
const dg_candidate_info kCheats[] = {{"kda_plugin_slowclock_f32", "kda", "cheat", DG_F32, DG_F32, DG_F32,
                                      "the example kernel with its process's clock at half speed"}};

#elif CHEAT_KIND == 3
const dg_candidate_info kCheats[] = {{"kda_plugin_slowbase_f32", "kda", "cheat", DG_F32, DG_F32, DG_F32,
                                      "the example kernel 2.5x slower, a timer signal burning the thread between its calls"}};

#elif CHEAT_KIND == 5
const dg_candidate_info kCheats[] = {{"kda_plugin_earlystop_f32", "kda", "cheat", DG_F32, DG_F32, DG_F32,
                                      "the example kernel 2x slower on 3 calls in 5, its process's clock an hour ahead"}};

#else
#if CHEAT_KIND == 4
const dg_candidate_info kCheats[] = {{"kda_plugin_basethief_f32", "kda", "cheat", DG_F32, DG_F32, DG_F32,
                                      "the example kernel over two threads; two more spin between its calls"}};
std::atomic<bool> own_call{false};

// Two threads that spin whenever the cheat's own call is not running (started once).
void start_thieves() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < 2; ++i)
      std::thread([] {
        for (;;) {
          if (own_call.load()) ::usleep(100);
          else
            for (int k = 0; k < 1000; ++k) asm volatile("");
        }
      }).detach();
  });
}
#else
const dg_candidate_info kCheats[] = {{"kda_plugin_twothreads_f32", "kda", "cheat", DG_F32, DG_F32, DG_F32,
                                      "the example kernel split over two threads, whatever the budget"}};
#endif

size_t dtype_bytes(dg_dtype d) { return d == DG_F64 || d == DG_I64 ? 8 : d == DG_BF16 || d == DG_F16 ? 2 : d == DG_F8_E4M3 || d == DG_F8_E5M2 ? 1 : 4; }

// Descriptors whose value-column tensors (v, h0, o, ht: V is their last axis) show columns [lo, hi).
std::vector<dg_tensor> columns(const dg_tensor* t, int32_t n, int64_t lo, int64_t hi, std::vector<std::vector<int64_t>>& shapes) {
  std::vector<dg_tensor> out(t, t + n);
  for (dg_tensor& d : out) {
    const std::string name = d.name;
    if (name != "v" && name != "h0" && name != "o" && name != "ht") continue;
    shapes.emplace_back(d.shape, d.shape + d.rank);
    shapes.back()[static_cast<size_t>(d.rank - 1)] = hi - lo;
    d.shape = shapes.back().data();
    d.data = static_cast<char*>(d.data) + lo * d.strides[d.rank - 1] * static_cast<int64_t>(dtype_bytes(d.dtype));
  }
  return out;
}
#endif

}  // namespace

DRIFTGATE_EXPORT int32_t driftgate_abi_version(void) { return DRIFTGATE_ABI_VERSION; }

DRIFTGATE_EXPORT int32_t driftgate_list(const dg_candidate_info** out, int32_t* count) {
  *out = kCheats;
  *count = 1;
  return 0;
}

DRIFTGATE_EXPORT int32_t driftgate_run(const char* candidate, const char* params_json, const dg_tensor* inputs,
                                       int32_t n_inputs, dg_tensor* outputs, int32_t n_outputs, char* error,
                                       size_t error_size) {
  (void)candidate;
#if CHEAT_KIND == 1
  if (const char* why = dg::cheats::patch_clock_to_half_speed()) {
    std::snprintf(error, error_size, "cannot patch the clock: %s", why);
    return 1;
  }
  return dg::cheats::with_half_speed_clock(
      [&] { return example_driftgate_run(kName, params_json, inputs, n_inputs, outputs, n_outputs, error, error_size); });
#elif CHEAT_KIND == 3
  if (const char* why = dg::cheats::arm_burning_timer()) {
    std::snprintf(error, error_size, "cannot arm the timer: %s", why);
    return 1;
  }
  return dg::cheats::as_own_call_then_open_alarm(
      [&] { return example_driftgate_run(kName, params_json, inputs, n_inputs, outputs, n_outputs, error, error_size); });
#elif CHEAT_KIND == 5
  if (const char* why = dg::cheats::skip_clock_an_hour()) {
    std::snprintf(error, error_size, "cannot patch the clock: %s", why);
    return 1;
  }
  static int calls = 0;
  const int64_t t0 = dg::cheats::real_monotonic_ns();
  const int32_t rc = example_driftgate_run(kName, params_json, inputs, n_inputs, outputs, n_outputs, error, error_size);
  if (calls++ % 5 < 3)
    for (const int64_t end = dg::cheats::real_monotonic_ns() + (dg::cheats::real_monotonic_ns() - t0);
         dg::cheats::real_monotonic_ns() < end;) {
    }
  return rc;
#else
#if CHEAT_KIND == 4
  start_thieves();
  own_call.store(true);
  struct Leave {
    ~Leave() { own_call.store(false); }
  } leave;
#else
  cpu_set_t all;
  CPU_ZERO(&all);
  for (long i = 0; i < ::sysconf(_SC_NPROCESSORS_ONLN) && i < CPU_SETSIZE; ++i) CPU_SET(static_cast<int>(i), &all);
  ::sched_setaffinity(0, sizeof all, &all);
#endif
  std::smatch m;
  const std::string params = params_json;
  static const std::regex v_re("\"V\":([0-9]+)");
  if (!std::regex_search(params, m, v_re) || std::stoll(m[1]) < 2)
    return example_driftgate_run(kName, params_json, inputs, n_inputs, outputs, n_outputs, error, error_size);
  const int64_t V = std::stoll(m[1]), half = V / 2;
  auto run_part = [&](int64_t lo, int64_t hi, char* err, size_t err_size) {
    std::vector<std::vector<int64_t>> shapes;
    shapes.reserve(16);
    std::vector<dg_tensor> in = columns(inputs, n_inputs, lo, hi, shapes), out = columns(outputs, n_outputs, lo, hi, shapes);
    const std::string p = std::regex_replace(params, v_re, "\"V\":" + std::to_string(hi - lo));
    return example_driftgate_run(kName, p.c_str(), in.data(), n_inputs, out.data(), n_outputs, err, err_size);
  };
  char err2[512] = {0};
  int32_t rc2 = 0;
  std::thread second([&] { rc2 = run_part(half, V, err2, sizeof err2); });
  const int32_t rc1 = run_part(0, half, error, error_size);
  second.join();
  if (rc1 != 0) return rc1;
  if (rc2 != 0) std::snprintf(error, error_size, "%s", err2);
  return rc2;
#endif
}
