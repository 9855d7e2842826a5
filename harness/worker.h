// Candidate isolation, parent side: run one candidate on one case's inputs in a worker process
// (`driftgate worker`, harness/worker_main.h) and read back its outputs, the anti-gaming checks and
// what happened to it. The reference and the results never live in that process: a segfault,
// abort, hang, out-of-memory or exception in the candidate becomes a WorkerResult, never a crash
// of the caller.
//
// How: the inputs go to a private temp dir (worker_temp_root: $TMPDIR, /dev/shm or /tmp;
// "driftgate-worker-XXXXXX") as in.safetensors with the case string in __metadata__, or come from
// a file written once for all the candidates of a case (WorkerInputs); the worker is started with posix_spawn
// (never a fork of a threaded parent) in its own process group, stdin from /dev/null, stdout and
// stderr into log.txt in the temp dir, no other descriptors; the parent polls it against the wall
// limit and on timeout SIGKILLs the whole group. After the worker ends, any process it left in its
// group is killed too. The temp dir is removed (unless keep_temp).
//
// Status, and how out-of-memory is told apart (RLIMIT_AS only makes allocations fail; the kernel
// sends no signal for it):
//   ok             the worker wrote its report: the candidate returned from every run (the checks
//                  may still have found violations)
//   threw          the candidate threw (message: what())
//   out_of_memory  the candidate threw std::bad_alloc (certain); or the worker died of a SIGKILL
//                  driftgate did not send and it had not used up its CPU limit (the kernel's OOM
//                  killer, most likely: the message says so with a question mark)
//   timed_out      the wall limit passed (driftgate killed the group), or the CPU limit did
//                  (SIGXCPU, or SIGKILL at the hard CPU limit)
//   crashed        any other signal (SIGSEGV, SIGABRT, SIGBUS, ...). When an allocation had failed
//                  first (the worker's marker line, or "std::bad_alloc" from std::terminate in the
//                  stderr tail) or its peak RSS reached 90% of the limit, memory_limit_hit is set and
//                  the message adds "memory limit X exceeded?": the signal is real, its cause likely.
//   bad_exit       a non-zero exit without a signal (2: bad input, e.g. an unknown candidate), or a
//                  zero exit without a report (the candidate called exit())
//   not_supported  the candidate threw NotSupported (registry.h): no device, an unimplemented layout
//
// Mapping to Record dispositions (worker_disposition below; verify wires it in):
//   crashed, timed_out, out_of_memory, threw, bad_exit  -> ERRORED, reason "<status>: <message>"
//                                                          plus the last stderr line(s)
//   not_supported                                       -> NOT_SUPPORTED, reason the message
//   ok with any check violated                          -> INVALID, reason "rule <name>: <detail>"
//                                                          for every violated rule
//   ok with every check passed                          -> none: the metrics decide
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/tensor.h"

namespace dg {

enum class Disposition : uint8_t;   // harness/verify.h

struct WorkerLimits {
  double wall_seconds = 600;                    // <= 0: no wall limit
  int64_t memory_bytes = int64_t{8} << 30;      // RLIMIT_AS of the worker (not for cuda candidates); <= 0: none
  double cpu_seconds = 0;                       // RLIMIT_CPU; 0: wall_seconds * cores; < 0: none
};

struct WorkerRequest {
  std::string exe;                  // the driftgate executable; empty: this one (/proc/self/exe)
  std::string candidate;
  std::string case_str;
  TensorMap inputs;                 // the op's input tensors (shared storage, not copied)
  WorkerLimits limits;
  int runs = 2;                     // check runs (>= 1; the nondeterministic rule needs 2)
  std::vector<std::string> extra_args;   // appended to the worker's command line (e.g. --plugin lib.so)
  // Set: the inputs are already in this .safetensors file (WorkerInputs, written once for all the
  // candidates of a case) and `inputs` is not used.
  std::string inputs_path;
  std::string temp_root;            // empty: worker_temp_root()
  bool keep_temp = false;           // keep the temp dir (debugging); its path is in the result
};

enum class WorkerStatus : uint8_t { ok, crashed, timed_out, out_of_memory, threw, bad_exit, not_supported };
std::string_view worker_status_name(WorkerStatus s);

enum class CheckState : uint8_t { ok, violated, not_run };
std::string_view check_state_name(CheckState s);

struct CheckResult {
  CheckState state = CheckState::not_run;
  std::string detail;               // violated: "run 2: o: 1 of 64 elements differ ..."
};

// The worker's rules (worker_main.h): one result each, in this order.
struct WorkerChecks {
  CheckResult guard, input_mutation, alias, nondeterministic;
  // (name, result) pairs in a fixed order: guard, input_mutation, alias, nondeterministic.
  std::vector<std::pair<std::string_view, const CheckResult*>> all() const;
  std::vector<std::string_view> violated() const;   // names of the violated rules
};

struct WorkerResult {
  WorkerStatus status = WorkerStatus::bad_exit;
  std::string message;              // one line: what happened (empty when ok)
  int exit_code = -1;               // when it exited; -1 when a signal ended it
  int signal = 0;                   // when a signal ended it
  std::string signal_name;          // "SIGSEGV"
  std::string signal_description;   // strsignal: "Segmentation fault"
  bool memory_limit_hit = false;    // see crashed above
  std::string stderr_tail;          // the last ~4 KiB of the worker's stdout + stderr
  TensorMap outputs;                // run 1's outputs (status ok only)
  WorkerChecks checks;
  std::vector<double> run_seconds;  // the candidate's time per run
  double seconds = 0;               // the fastest run (0 when none finished)
  double wall_seconds = 0;          // the whole worker, start to end
  double cpu_seconds = 0;           // user + system CPU time of the worker
  int64_t max_rss_bytes = 0;        // peak resident memory of the worker
  std::string temp_dir;             // where it ran (removed unless keep_temp)
};

// Where worker files go when no root is given: $TMPDIR when set; else /dev/shm when it is a
// directory with room for twice `bytes` (the inputs and outputs of a case: memory-backed, so a
// gigabyte case is not written to and read back from disk once per candidate); else /tmp.
std::string worker_temp_root(int64_t bytes);

// Called first by a worker (`driftgate worker`, the timing worker): a detached thread that ends the
// process (exit 137) once its parent is gone, checked twice a second. A worker runs in a process
// group of its own, so a signal that kills driftgate (`timeout`, an agent's harness) does not reach
// it; without this a hanging candidate would outlive the run.
void exit_with_parent();

// A case's inputs written once for the workers of all its candidates (req.inputs_path), in their
// own temp dir, removed with this object.
class WorkerInputs {
 public:
  WorkerInputs(const TensorMap& inputs, const std::string& case_str, const std::string& temp_root = "");
  ~WorkerInputs();
  WorkerInputs(const WorkerInputs&) = delete;
  WorkerInputs& operator=(const WorkerInputs&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

// Runs the candidate in a worker. Throws std::runtime_error only when the harness itself fails
// (temp dir, writing the inputs, spawning); everything the candidate does is in the result.
WorkerResult run_in_worker(const WorkerRequest& req);

// Extra channels of a worker started by run_worker_args: descriptors the worker process gets
// as 3, 4, ... in order (the caller keeps and closes its own copies), and a call, from the
// waiting thread, with the pid (as driftgate sees it) of the process that runs the candidate,
// once it runs, so the caller can read its CPU clock (clock_getcpuclockid) while it waits.
struct WorkerChannels {
  std::vector<int> fds;
  std::function<void(pid_t)> on_start;
};

// Runs `driftgate ARGS... --report FILE EXTRA...` as a worker (own process group, limits, stderr
// captured) for workers that return something other than tensors (timing samples): on status ok,
// *report holds the report file's text.
WorkerResult run_worker_args(const std::vector<std::string>& args, const WorkerLimits& limits,
                             const std::vector<std::string>& extra_args, std::string* report,
                             const WorkerChannels& channels = {});

// The disposition a worker result forces, with its reason; std::nullopt when the worker ran cleanly
// and every check passed (then the metrics decide).
std::optional<Disposition> worker_disposition(const WorkerResult& r, std::string* reason);

// How the parent reads an ended worker (exposed for the tests): from the wait status, whether
// driftgate killed it for the wall limit, the limits, and r's stderr_tail, cpu_seconds and
// max_rss_bytes, it fills r's status, message, exit_code, signal, signal_name, signal_description
// and memory_limit_hit. Status ok here only means "exited 0": the report still has to be read.
void classify_exit(WorkerResult& r, int wait_status, bool killed_for_wall, const WorkerLimits& limits,
                   double cpu_limit_seconds);

// The last line(s) of a log, at most `max_chars`, for a one-line reason.
std::string last_lines(const std::string& text, size_t max_chars = 300);

}  // namespace dg
