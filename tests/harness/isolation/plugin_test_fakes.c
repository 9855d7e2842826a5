/* Fake plugins for plugin_test, written in C99 (built with -std=c99 -pedantic, which also checks
 * that driftgate/candidate_abi.h is plain C). FAKE_KIND selects the library:
 *   1  echo: one candidate, kda_plugin_echo_f32, that fills its outputs with 1.0 when every tensor
 *      is a contiguous host tensor, else fails; with the case's "T" = 2 it instead fails with a
 *      message holding the params_json and each tensor's name, dtype, rank, shape and strides
 *   2  built for ABI version 99
 *   3  lists a candidate of an unknown op
 *   4  lists a candidate whose name is built into driftgate (kda_cpu_recurrent_f32)
 */
#include <stdio.h>
#include <string.h>

#include "driftgate/candidate_abi.h"

#if FAKE_KIND == 3
static const dg_candidate_info candidates[] = {
    {"nosuchop_plugin_fake_f32", "nosuchop", "fake", DG_F32, DG_F32, DG_F32, "an op driftgate does not know"}};
#elif FAKE_KIND == 4
static const dg_candidate_info candidates[] = {
    {"kda_cpu_recurrent_f32", "kda", "fake", DG_F32, DG_F32, DG_F32, "a name driftgate already has"}};
#else
static const dg_candidate_info candidates[] = {
    {"kda_plugin_echo_f32", "kda", "echo", DG_F32, DG_F32, DG_F32, "fills its outputs with 1.0"}};
#endif

DRIFTGATE_EXPORT int32_t driftgate_abi_version(void) {
#if FAKE_KIND == 2
  return 99;
#else
  return DRIFTGATE_ABI_VERSION;
#endif
}

DRIFTGATE_EXPORT int32_t driftgate_list(const dg_candidate_info** out, int32_t* count) {
  *out = candidates;
  *count = 1;
  return 0;
}

static int contiguous_host(const dg_tensor* t) {
  int64_t stride = 1;
  int32_t d;
  if (t->device != DG_HOST || t->data == NULL) return 0;
  for (d = t->rank - 1; d >= 0; --d) {
    if (t->strides[d] != stride) return 0;
    stride *= t->shape[d];
  }
  return 1;
}

static void describe(char* buf, size_t size, const dg_tensor* t) {
  int32_t d;
  size_t n = strlen(buf);
  n += (size_t)snprintf(buf + n, n < size ? size - n : 0, " %s:%d:%d:[", t->name, (int)t->dtype, (int)t->rank);
  for (d = 0; d < t->rank && n < size; ++d)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld/%lld", d ? "," : "", (long long)t->shape[d], (long long)t->strides[d]);
  if (n < size) snprintf(buf + n, size - n, "]");
}

DRIFTGATE_EXPORT int32_t driftgate_run(const char* candidate, const char* params_json, const dg_tensor* inputs,
                                       int32_t n_inputs, dg_tensor* outputs, int32_t n_outputs, char* error,
                                       size_t error_size) {
  int32_t i;
  int64_t j, n;
  if (strstr(params_json, "\"T\":2,") != NULL) {
    snprintf(error, error_size, "echo %s |", params_json);
    for (i = 0; i < n_inputs; ++i) describe(error, error_size, &inputs[i]);
    strncat(error, " | out", error_size - strlen(error) - 1);
    for (i = 0; i < n_outputs; ++i) describe(error, error_size, &outputs[i]);
    return 7;
  }
  for (i = 0; i < n_inputs; ++i)
    if (!contiguous_host(&inputs[i])) {
      snprintf(error, error_size, "%s: input %s is not a contiguous host tensor", candidate, inputs[i].name);
      return 1;
    }
  for (i = 0; i < n_outputs; ++i) {
    if (!contiguous_host(&outputs[i]) || outputs[i].dtype != DG_F32) {
      snprintf(error, error_size, "%s: output %s is not a contiguous f32 host tensor", candidate, outputs[i].name);
      return 1;
    }
    for (n = 1, j = 0; j < outputs[i].rank; ++j) n *= outputs[i].shape[j];
    for (j = 0; j < n; ++j) ((float*)outputs[i].data)[j] = 1.0f;
  }
  return 0;
}
