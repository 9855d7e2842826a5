/* Plugins that attack driftgate at load time, written in C99. driftgate must refuse each with exit
 * 2 naming the plugin, and no code of theirs may run in the process that judges. BAD_KIND selects:
 *   1  crash: a constructor that dereferences a null pointer as soon as the library is loaded
 *   2  garbage: driftgate_list returns a huge count and an array pointer into unmapped memory
 *   3  badptr: one entry whose name pointer is unreadable
 *   4  intout: a candidate declaring an integer (I32) output dtype
 *   5  hang: driftgate_list never returns
 */
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "driftgate/candidate_abi.h"

#if BAD_KIND == 1
__attribute__((constructor)) static void crash_on_load(void) {
  volatile int* volatile p = NULL;
  *p = 42;
}
#endif

#if BAD_KIND == 4
static const dg_candidate_info candidates[] = {
    {"kda_plugin_intout_f32", "kda", "intout", DG_F32, DG_F32, DG_I32, "integer outputs"}};
#else
static const dg_candidate_info candidates[] = {
    {"kda_plugin_badload_f32", "kda", "badload", DG_F32, DG_F32, DG_F32, "never listed"}};
#endif

DRIFTGATE_EXPORT int32_t driftgate_abi_version(void) { return DRIFTGATE_ABI_VERSION; }

DRIFTGATE_EXPORT int32_t driftgate_list(const dg_candidate_info** out, int32_t* count) {
#if BAD_KIND == 2
  (void)candidates;
  *out = (const dg_candidate_info*)(uintptr_t)0x10;
  *count = 0x7fffffff;
#elif BAD_KIND == 3
  static dg_candidate_info bad[1];
  bad[0] = candidates[0];
  bad[0].name = (const char*)(uintptr_t)0x18;
  *out = bad;
  *count = 1;
#elif BAD_KIND == 5
  (void)out;
  (void)count;
  (void)candidates;
  for (;;) sleep(1);
#else
  *out = candidates;
  *count = 1;
#endif
  return 0;
}

DRIFTGATE_EXPORT int32_t driftgate_run(const char* candidate, const char* params_json, const dg_tensor* inputs,
                                       int32_t n_inputs, dg_tensor* outputs, int32_t n_outputs, char* error,
                                       size_t error_size) {
  (void)candidate; (void)params_json; (void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs;
  if (error_size) error[0] = '\0';
  return 1;
}
