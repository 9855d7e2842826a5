// A plugin that is the example plugin's honest f32 token loop in its check runs and misbehaves
// after them (FAULT_KIND, set by CMake, one MODULE library each):
//   1  SIGSEGV once timed (more calls in its process than a check worker's two runs)
//   2  sleeps forever once timed
//   3  answers DG_NOT_SUPPORTED for every case
// The example's driftgate_run is renamed and wrapped; its list and version entry points are its own.
#include <driftgate/candidate_abi.h>

#define driftgate_run example_driftgate_run
#include "candidates/examples/plugin/kda_example_plugin.cpp"
#undef driftgate_run

#include <atomic>
#include <chrono>
#include <thread>

DRIFTGATE_EXPORT int32_t driftgate_run(const char* candidate, const char* params_json, const dg_tensor* inputs,
                                       int32_t n_inputs, dg_tensor* outputs, int32_t n_outputs, char* error,
                                       size_t error_size) {
  static std::atomic<int> calls{0};
  const bool timed = ++calls > 2;
#if FAULT_KIND == 1
  if (timed) {
    volatile int* volatile p = nullptr;
    *p = 42;
  }
#elif FAULT_KIND == 2
  if (timed)
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
#elif FAULT_KIND == 3
  (void)timed;
  std::snprintf(error, error_size, "kda_plugin_recurrent_f32: this build supports no case");
  return DG_NOT_SUPPORTED;
#endif
  return example_driftgate_run(candidate, params_json, inputs, n_inputs, outputs, n_outputs, error, error_size);
}
