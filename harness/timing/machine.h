// This machine's limits, measured once and cached in results/machine.json: FMA peak (f32, f64) on
// one core and on all cores, STREAM-triad memory bandwidth on one core and on all cores, and the
// cache sizes. Speed rows divide by these to print % of the limit, and the gate's physical-bound
// rule (a time below bytes / bandwidth or flops / peak is INVALID) reads them.
//
// Conventions:
//   - GFLOP/s count 2 flops per lane per fused multiply-add (the vendor convention), with the
//     widest vectors the build targets (AVX-512 under -march=native on this machine, AVX2+FMA
//     otherwise, scalar std::fma as a last resort).
//   - GB/s are 1e9 bytes per second. The triad a[i] = b[i] + s * c[i] over doubles counts 24 bytes
//     per element (two 8-byte reads, one 8-byte write), STREAM's own convention. The kernel writes
//     `a` with non-temporal (streaming) stores, so no write-allocate read of `a` happens and 24 bytes
//     is the traffic the memory actually moves; a kernel with ordinary stores moves 32 bytes per
//     element for the same 24 counted. Kernels declare their bytes the same way (read + written,
//     no write-allocate), so `bytes / stream_triad_gbs` is a floor on their time.
//   - "cores" is the number of CPUs this process may run on (its affinity mask): the all-core
//     figures use one thread per such CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/core/dtype.h"

namespace dg {

struct MachineLimits {
  std::string cpu;          // /proc/cpuinfo "model name"
  int cores = 0;
  double f32_fma_gflops_core = 0, f32_fma_gflops_all = 0;
  double f64_fma_gflops_core = 0, f64_fma_gflops_all = 0;
  double stream_triad_gbs_core = 0, stream_triad_gbs_all = 0;
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;   // 0 where sysfs does not say
  std::string measured_at;  // UTC, ISO 8601 (2026-03-01T12:00:00Z)
};

// Measures this machine in about `seconds_budget` seconds: 40% for the four FMA figures, the rest
// for the triad, the first touch of its arrays included (each triad figure takes at least two
// passes, so a tiny budget overruns by up to a second). FMA peak: 12 independent FMA chains per
// thread, best rate over repeated ~1 ms runs. Triad: arrays of 4x the last-level cache in total (at
// least 256 MiB, at most 2 GiB and a quarter of the available memory), first touched by the
// threads that use them, best of several passes. All-core runs pin one thread to each CPU; an
// all-core figure is never reported below its one-core figure (all cores can do what one does, so
// a lower reading is another process's load, and these limits serve as floors on time). A
// larger budget gives more repetitions, i.e. a better chance of an undisturbed run on a shared
// machine; it does not change the array sizes.
MachineLimits measure_machine(double seconds_budget = 2.0);

// How many times the f32 FMA peak an honest kernel can reach here on inputs of dtype `input`: the
// compute part of the physical-bound rule's floor divides by it. Inputs of 16 bits and narrower
// have dot-product instructions of twice the f32 FMA rate where `cpu_flags` (/proc/cpuinfo's flags
// line) lists avx512_bf16 or avx512_fp16 (VDPBF16PS: 32 bf16 products a lane pair per instruction
// where VFMADD231PS does 16), and AMX tiles (amx_bf16, amx_fp16, amx_int8) a multiple no FMA
// figure bounds: there it returns +inf (no compute floor; the memory floor stays). 1 otherwise.
double compute_peak_factor(DType input, const std::string& cpu_flags);
// The same for this machine's flags.
double compute_peak_factor(DType input);

// What this process sees now: the CPU model string and the CPU count of its affinity mask.
std::string this_cpu_model();
int this_machine_cores();

// JSON object with every field above (names as in the struct) and "schema_version".
nlohmann::json to_json(const MachineLimits& m);
// Throws std::runtime_error naming the first missing or mistyped field.
MachineLimits machine_from_json(const nlohmann::json& j);

// Why a measurement (or a cache file, which anyone can edit) cannot be trusted, or "" when it can. A
// measurement is suspect when:
//   - a figure is NaN, infinite, zero or negative, or the CPU model or core count is missing;
//   - an all-core figure is below its one-core figure, or f32 FMA is below f64 FMA (f32 lanes do
//     twice the work per instruction: a lower reading means the run was disturbed);
//   - one core measured below kMinCoreGflops f32 GFLOP/s or kMinCoreGbs GB/s (any x86 CPU since
//     2005 does more: another process held the core), or above kMaxCoreGflops / kMaxCoreGbs per core
//     (no CPU does that: a forged cache, which would make the physical-bound rule pass anything).
// Low figures would turn honest kernels INVALID ("faster than the machine"), high ones would let
// cheats through, so neither is cached.
inline constexpr double kMinCoreGflops = 1, kMinCoreGbs = 0.5, kMaxCoreGflops = 1000, kMaxCoreGbs = 400;
inline constexpr int kMachineAttempts = 3;
std::string machine_suspect(const MachineLimits& m);

// Reads `path` (normally results/machine.json) when it exists, parses, was measured on this CPU model
// with this core count, and is not suspect; otherwise (or when `remeasure`) measures, up to
// kMachineAttempts times while the measurement is suspect. A measurement that is not suspect is
// written to `path` atomically (temporary file + rename, creating the folder) and returned. When
// every attempt is suspect, the last one is used for this run only (a note on stderr), never cached;
// when it is unusable (a figure NaN, infinite or <= 0), std::runtime_error. A cache file that cannot
// be parsed is replaced, not an error.
MachineLimits load_or_measure_machine(const std::string& path, bool remeasure, double seconds_budget = 2.0);
// The same with the measurement passed in (the tests count its calls).
MachineLimits load_or_measure_machine(const std::string& path, bool remeasure,
                                      const std::function<MachineLimits()>& measure);

// A short human-readable table of the limits.
std::string describe_machine(const MachineLimits& m);

}  // namespace dg
