// Candidate isolation, parent side: run one candidate on one case's inputs in a worker process
// (`driftgate worker`, harness/isolation/worker_main.h) and read back its outputs, the anti-gaming checks and
// what happened to it. The reference and the results never live in that process: a segfault,
// abort, hang, out-of-memory or exception in the candidate becomes a WorkerResult, never a crash
// of the caller.
//
// How: a case's inputs are written once, as .safetensors with the case string in __metadata__,
// into a sealed memfd (WorkerInputs: memfd_create + F_SEAL_WRITE|SHRINK|GROW|SEAL; a request
// without one gets its own). Every worker receives that descriptor as fd 3 (`--in-fd 3`, read
// through /proc/self/fd/3): nobody, the candidate included, can change what any worker of the case
// reads, so the order in which candidates run cannot matter (where the kernel cannot seal a memfd:
// a private copy checked by digest after every run, see WorkerInputs). Each worker gets a private temp dir
// (make_temp_dir under worker_temp_root: $TMPDIR, /dev/shm or /tmp; "driftgate-worker-XXXXXX") for
// its outputs and report, and runs in the sandbox (harness/isolation/sandbox.h: its own PID and network
// namespaces under an init of ours, Landlock confining its writes to that dir, stdout and stderr
// into a pipe whose last 4 KiB are kept, the wall limit killing everything it started). The temp
// dir is removed (unless keep_temp).
//
// The outputs read back are checked here, in the parent, before any metric: exactly the op's
// output names (OpSpec::output_shapes), each with its shape and the candidate's declared dtype
// (output_dtype), no extra tensor. A mismatch violates the rule `outputs` (INVALID, naming the
// tensor and the problem) and the outputs are dropped: a forged out.safetensors never reaches the
// metrics.
//
// Status, and how out-of-memory is told apart (RLIMIT_AS only makes allocations fail; the kernel
// sends no signal for it):
//   ok             the worker wrote its report: the candidate returned from every run (the checks
//                  may still have found violations)
//   threw          the candidate threw (message: what())
//   out_of_memory  the candidate threw std::bad_alloc (certain); or the worker died of a SIGKILL
//                  driftgate did not send and it had not used up its CPU limit (the kernel's OOM
//                  killer, most likely: the message says so with a question mark)
//   timed_out      the wall limit passed (driftgate killed the sandbox), or the CPU limit did
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

#include "harness/core/tensor.h"

namespace dg {

enum class Disposition : uint8_t;   // harness/judge/verify.h
class WorkerInputs;

struct WorkerLimits {
  double wall_seconds = 600;                    // <= 0: no wall limit
  int64_t memory_bytes = int64_t{8} << 30;      // RLIMIT_AS of the worker (not for cuda candidates); <= 0: none
  double cpu_seconds = 0;                       // RLIMIT_CPU; 0: wall_seconds * cores; < 0: none
  bool device = false;                          // drives a GPU: the sandbox's device profile (sandbox.h)
};

// Whether the named candidate drives a GPU (backend "cuda"), so its worker needs the device profile.
bool is_device_candidate(const std::string& name);

struct WorkerRequest {
  std::string exe;                  // the driftgate executable; empty: this one (/proc/self/exe)
  std::string candidate;
  std::string case_str;
  TensorMap inputs;                 // the op's input tensors (shared storage, not copied)
  WorkerLimits limits;
  int runs = 2;                     // check runs (>= 1; the nondeterministic rule needs 2)
  std::vector<std::string> extra_args;   // appended to the worker's command line (e.g. --plugin lib.so)
  // Set: the inputs are already sealed in this (WorkerInputs, written once for all the candidates
  // of a case; it must outlive the call) and `inputs` is not used.
  const WorkerInputs* shared_inputs = nullptr;
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
// `outputs` is the parent's (see above); the others are the worker's.
struct WorkerChecks {
  CheckResult guard, input_mutation, alias, nondeterministic, outputs;
  // (name, result) pairs in a fixed order: guard, input_mutation, alias, nondeterministic, outputs.
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
  int64_t output_dropped = 0;       // bytes of its stdout + stderr before that tail, not kept
  std::string confinement;          // the sandbox that held (sandbox.h): "pid+net namespace, landlock abi 7"
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
// process (exit 137) once its parent (the sandbox's init) is gone, checked twice a second: a second
// line of defence where the sandbox is degraded (sandbox.h).
void exit_with_parent();

// A case's inputs written once for the workers of all its candidates (req.shared_inputs): a sealed
// memfd (see above), closed with this object. Throws std::runtime_error when it cannot be made.
//
// Fallback, where the kernel cannot make or seal a memfd (memfd_create or F_ADD_SEALS refused: old
// kernels, seccomp profiles of some containers; DRIFTGATE_NO_MEMFD=1 forces it): a private copy,
// mode 0400 in a 0700 directory of driftgate's, passed read-only. Landlock already keeps a
// confined worker from writing it; where nothing confines the worker (or it runs as root, which
// file modes do not stop), the SHA-256 of the copy is checked after every worker run
// (check_unchanged): a run after which it differs violates the rule input_mutation, and the copy is
// written again from the case's tensors before the next worker reads it, so a candidate that
// rewrites it is caught and the others still read the case's inputs.
class WorkerInputs {
 public:
  WorkerInputs(const TensorMap& inputs, const std::string& case_str);
  ~WorkerInputs();
  WorkerInputs(const WorkerInputs&) = delete;
  WorkerInputs& operator=(const WorkerInputs&) = delete;
  int fd() const { return fd_; }          // read-only (sealed, or the checked private copy)
  int64_t bytes() const { return bytes_; }
  bool sealed() const { return sealed_; }
  // Sealed: "". Private copy: "" when it still holds what was written; else what changed, after
  // writing a fresh copy (fd() then names the new one). Throws std::runtime_error when it cannot.
  std::string check_unchanged() const;

 private:
  void write_copy() const;   // the fallback: a fresh private copy and its digest
  mutable int fd_ = -1;
  mutable int64_t bytes_ = 0;
  bool sealed_ = true;
  TensorMap inputs_;         // fallback only: to write the copy again (shared storage)
  std::string case_str_;
  mutable std::string dir_, digest_;
};

// The problem with a worker's outputs against what the op and candidate declare (see above): ""
// when they match. `cand` may be null (then the dtype must only be a float type).
std::string check_outputs(const TensorMap& outputs, const std::string& case_str, const std::string& candidate);

// Runs the candidate in a worker. Throws std::runtime_error only when the harness itself fails
// (temp dir, writing the inputs, spawning); everything the candidate does is in the result.
WorkerResult run_in_worker(const WorkerRequest& req);

// Extra channels of a worker started by run_worker_args: descriptors the worker process gets
// as 3, 4, ... in order (the caller keeps and closes its own copies), and a call, from the
// waiting thread, with the pid (as driftgate sees it) of the process that runs the candidate,
// once it runs, so the caller can read its CPU clock (clock_getcpuclockid) while it waits.
struct WorkerChannels { std::vector<int> fds; std::function<void(pid_t worker, pid_t init)> on_start; };

// Runs `driftgate ARGS... --report FILE EXTRA...` as a worker (the same sandbox, limits, output
// tail) for workers that return something other than tensors (timing samples): on status ok,
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
