/* driftgate candidate ABI, version 1: the one header a kernel project builds a driftgate plugin
 * against. Plain C99, usable from C++ (the declarations are extern "C").
 *
 * A plugin is a shared library that exports the three functions below. driftgate loads it with
 * `driftgate --plugin libmine.so ...` (dlopen RTLD_NOW | RTLD_LOCAL, never unloaded), checks
 * driftgate_abi_version(), registers every candidate driftgate_list() returns (backend "plugin"),
 * and calls driftgate_run() to run one of them on one case. It does all of this in worker
 * processes only: the process that holds the reference and the verdict lists the plugin through a
 * worker and never loads it. The list may hold at most 4096 candidates; names, ops and algorithms
 * at most 256 characters, docs 4096; every dtype a floating-point type.
 *
 *   #include <driftgate/candidate_abi.h>
 *   static const dg_candidate_info mine[] = {
 *       {"kda_plugin_mykernel_f32", "kda", "chunk", DG_F32, DG_F32, DG_F32, "what it is"}};
 *   DRIFTGATE_EXPORT int32_t driftgate_abi_version(void) { return DRIFTGATE_ABI_VERSION; }
 *   DRIFTGATE_EXPORT int32_t driftgate_list(const dg_candidate_info** out, int32_t* count) {
 *     *out = mine; *count = 1; return 0;
 *   }
 *   DRIFTGATE_EXPORT int32_t driftgate_run(...) { ... }
 *
 * CMake: find_package(driftgate REQUIRED) and target_link_libraries(mine PRIVATE driftgate::abi)
 * (an include path only: a plugin links nothing of driftgate).
 *
 * Candidate names follow driftgate's scheme <op>_<backend>_<algo>_<dtype>, with backend "plugin":
 * kda_plugin_recurrent_f32. A name already registered (by driftgate or another plugin) is an error.
 *
 * params_json, the case a run is for, as one JSON object:
 *   {"case": "kda(T=64,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)",
 *    "op": "kda",
 *    "params": {"T": 64, "B": 1, "H": 1, "HV": 0, "K": 16, "V": 16, "gate": "pregated", "lb": -5.0,
 *               "a_log": true, "beta": "given", "l2norm": true, "scale": 0.0, "h0": false,
 *               "layout": "kfirst", "seqlens": [], "regime": "kimi_linear", "dtype": "bf16",
 *               "seed": 0}}
 * params_json also carries "threads": N, the thread budget of the run (driftgate's --threads, by
 * default every core). A candidate may use up to N threads; its process may be pinned to N cores,
 * and when timed, driftgate reads its CPU time from outside: more than N x 1.25 CPU-seconds per
 * second of its timed calls (or, with N = 1, other threads using more than a tenth of its CPU
 * time) makes its timing INVALID (rule cpu_budget). Exec programs get the same budget as
 * DRIFTGATE_THREADS, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS.
 *
 * "params" holds every parameter of the op (`driftgate list ops` documents them), defaults
 * included: integers and reals as JSON numbers, booleans as true/false, texts as strings, integer
 * lists as arrays. "case" is the canonical case string (its one identity). A candidate that does
 * not support a parameter's value (a layout, varlen, a gate mode it does not implement) returns
 * DG_NOT_SUPPORTED with a message naming it: driftgate reports the row as NOT_SUPPORTED, and the
 * gate's policy ([cases] not_supported) decides whether the case is skipped or rejected. Any other
 * nonzero return is a failure: the row is ERRORED with the message.
 *
 * Tensors: inputs and outputs are named as in driftgate's .safetensors files ("q", "k", "v", "g",
 * "beta", "A_log", "dt_bias", "h0", "cu_seqlens" in; "o", "ht" out); a candidate finds them by
 * name, not by position. Shapes and strides are in elements, row-major; driftgate passes
 * contiguous tensors today, and a candidate that needs contiguity should check the strides.
 * Inputs arrive in the dtype driftgate stores them in (the case's dtype, e.g. BF16, with A_log and
 * dt_bias F32 and cu_seqlens I64): a candidate converts them itself and must not write them
 * (driftgate hashes them before and after). Outputs are allocated by driftgate in the candidate's
 * declared output dtype (states such as "ht" in its state dtype), with data non-null, and every
 * element must be written: their initial contents are poison. An output that the op passes back in
 * (an in-out tensor, such as the state pool "state" of kda_decode) holds its current value on entry.
 * Pointers are valid only during the call. device is DG_HOST for host memory, or DG_CUDA with
 * device_index naming the GPU (the plugin then runs on that device, on its default stream, and
 * returns once the outputs are complete).
 *
 * driftgate serializes calls into one plugin: driftgate_run is never called concurrently.
 */
#ifndef DRIFTGATE_CANDIDATE_ABI_H
#define DRIFTGATE_CANDIDATE_ABI_H

#include <stddef.h>
#include <stdint.h>

#define DRIFTGATE_ABI_VERSION 1

#if defined(_WIN32)
#define DRIFTGATE_EXPORT_VISIBILITY __declspec(dllexport)
#else
#define DRIFTGATE_EXPORT_VISIBILITY __attribute__((visibility("default")))
#endif
#ifdef __cplusplus
#define DRIFTGATE_EXPORT extern "C" DRIFTGATE_EXPORT_VISIBILITY
#else
#define DRIFTGATE_EXPORT DRIFTGATE_EXPORT_VISIBILITY
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, named as in .safetensors ("F32", "BF16", ...). TF32 is f32 storage whose low 13
 * mantissa bits are zero. The values are part of the ABI and never change. */
typedef enum dg_dtype {
  DG_F64 = 0,
  DG_F32 = 1,
  DG_TF32 = 2,
  DG_BF16 = 3,
  DG_F16 = 4,
  DG_F8_E4M3 = 5,
  DG_F8_E5M2 = 6,
  DG_I64 = 7,
  DG_I32 = 8
} dg_dtype;

typedef enum dg_device { DG_HOST = 0, DG_CUDA = 1 } dg_device;

/* One tensor: element (i0, i1, ...) lives at data + sum_d i_d * strides[d] elements. */
typedef struct dg_tensor {
  const char* name;
  dg_dtype dtype;
  int32_t rank;
  const int64_t* shape;     /* rank entries */
  const int64_t* strides;   /* rank entries, in elements */
  void* data;
  dg_device device;
  int32_t device_index;
} dg_tensor;

/* A candidate the plugin provides. The dtypes are the precision it reads its inputs in (it rounds
 * wider inputs itself), keeps its recurrent state in, and writes its outputs in. Strings and the
 * array stay valid while the plugin is loaded. */
typedef struct dg_candidate_info {
  const char* name;        /* <op>_plugin_<algo>_<dtype>, unique */
  const char* op;          /* a driftgate op: "kda", "kda_decode" */
  const char* algorithm;   /* "recurrent", "chunk", ... */
  dg_dtype input_dtype;
  dg_dtype state_dtype;
  dg_dtype output_dtype;
  const char* doc;         /* one line: what it is and what it supports */
} dg_candidate_info;

/* driftgate_run's answer for "this candidate does not implement this case" (not an error): the row
 * is NOT_SUPPORTED with the message. Every other nonzero value is an error (ERRORED). The value
 * mirrors Linux's EOPNOTSUPP; exec programs answer the same with exit code 95
 * (harness/isolation/exec_candidate.h). */
#define DG_NOT_SUPPORTED 95

/* Returns DRIFTGATE_ABI_VERSION as the plugin was built. */
DRIFTGATE_EXPORT int32_t driftgate_abi_version(void);

/* Sets *out to an array of *count candidates; returns 0, or nonzero when the plugin cannot serve
 * (driftgate then refuses to load it). */
DRIFTGATE_EXPORT int32_t driftgate_list(const dg_candidate_info** out, int32_t* count);

/* Runs `candidate` on one case. Returns 0 once every output is written; DG_NOT_SUPPORTED when the
 * candidate does not implement the case; otherwise nonzero: an error. With a nonzero return, a
 * NUL-terminated message in error[0 .. error_size) (truncated to fit). */
DRIFTGATE_EXPORT int32_t driftgate_run(const char* candidate, const char* params_json, const dg_tensor* inputs,
                                       int32_t n_inputs, dg_tensor* outputs, int32_t n_outputs, char* error,
                                       size_t error_size);

/* The entry points' types, for loaders. */
typedef int32_t (*dg_abi_version_fn)(void);
typedef int32_t (*dg_list_fn)(const dg_candidate_info** out, int32_t* count);
typedef int32_t (*dg_run_fn)(const char* candidate, const char* params_json, const dg_tensor* inputs,
                             int32_t n_inputs, dg_tensor* outputs, int32_t n_outputs, char* error,
                             size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* DRIFTGATE_CANDIDATE_ABI_H */
