// The worker side of candidate isolation: `driftgate worker` (a hidden subcommand) runs one
// candidate on stored inputs under the anti-gaming rules and writes its outputs and a JSON report.
// The parent side (harness/isolation/worker.h) spawns it; nothing else should. It ends (exit 137) when its
// parent is gone (exit_with_parent), so a killed driftgate leaves no candidate running.
//
//   driftgate worker --candidate NAME (--in-fd FD | --in IN.safetensors) --out OUT.safetensors
//                    --report REPORT.json [--mem-limit BYTES] [--cpu-limit SECONDS] [--runs N]
//
// The parent passes the inputs as a sealed memfd (--in-fd 3, read through /proc/self/fd/3; nobody
// can change it); --in reads a file instead (by hand, for debugging).
//
// 1. Finds the candidate (unknown: InputError, exit 2, message on stderr), then limits itself:
//    RLIMIT_AS = --mem-limit (address space, not resident memory; 0: none; never for backend cuda,
//    whose driver reserves more address space than any such limit), RLIMIT_CPU = --cpu-limit (soft;
//    the hard limit is 5 s later; 0: none), RLIMIT_CORE = 0. A failed allocation prints
//    "driftgate worker: an allocation failed" to stderr once (the parent reads it when the process
//    later dies of a signal).
// 2. Reads the inputs and the case (the file's __metadata__ "case"); a missing case or bad inputs
//    throw InputError (exit 2).
// 3. Runs the candidate N times (default 2), each run on inputs freshly read from IN (new addresses,
//    pristine contents; the previous run's are freed only after) into freshly allocated guarded
//    outputs poisoned with poison_for_run(run) (guard.h), timing each run. After each run:
//      guard             both guard regions of every output are intact
//      input_mutation    every input has the same address, dtype, shape and hash as before the run
//      alias             every output tensor in the map still views the storage the harness
//                        allocated for it this run, and overlaps no input and no other output
//      nondeterministic  run k's output bits equal run 1's (catches unwritten elements, since the
//                        poisons differ, reads of the outputs' old contents, and stale state)
// 4. Writes run 1's outputs (read from the harness's own storage, whatever the candidate put in the
//    map) to OUT and the report to REPORT, both atomically, and exits 0:
//      {"status": "ok" | "threw" | "out_of_memory", "message": "...", "candidate": "...",
//       "case": "...", "runs": N, "memory_limit": BYTES (0: not applied), "poisons": ["quiet_nan", "negative_max"], "seconds": [s1, s2],
//       "checks": {"guard": {"state": "ok" | "violated" | "not_run", "detail": "..."},
//                  "input_mutation": {...}, "alias": {...}, "nondeterministic": {...}}}
//    "threw": the candidate threw (message: what()); "out_of_memory": it threw std::bad_alloc.
//    Neither writes OUT. A crash, hang or exit inside the candidate leaves no report: the parent
//    reads what happened from the exit status.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dg {

// Printed to stderr by the worker, once, when an allocation fails (RLIMIT_AS reached).
inline constexpr std::string_view kAllocationFailedMarker = "driftgate worker: an allocation failed";

struct WorkerArgs {
  std::string candidate;
  std::string in, out, report;
  int in_fd = -1;             // >= 0: read the inputs from this descriptor (overrides in)
  int64_t mem_limit = 0;      // bytes of address space; 0: no limit
  double cpu_limit = 0;       // seconds of CPU time; 0: no limit
  int runs = 2;               // >= 1; with 1 the nondeterministic rule is not run
};

// Returns the process exit code (0 when a report was written); throws InputError for bad input.
int worker_main(const WorkerArgs& args);

}  // namespace dg
