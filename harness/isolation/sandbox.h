// The sandbox every worker runs in: what a candidate cannot leave, cannot write and cannot keep
// running, whatever it does. The parent side of isolation (harness/isolation/worker.h) starts every worker
// through run_sandboxed; nothing else should start candidate code.
//
// Containment (nothing a candidate starts outlives its row):
//   driftgate clones a small init of its own (`driftgate sandbox-init`, a hidden verb handled before
//   anything else in main) into a new PID namespace, a new network namespace and a new mount
//   namespace (for its own /proc, below). The init is PID 1
//   there; it forks the real worker (never PID 1 itself: PID 1 ignores the signals it sends itself,
//   so abort() would not end it), reaps every process that ends in the namespace, reports the
//   worker's exact wait status to driftgate on a pipe only the init holds, and exits when the worker
//   ends: the kernel then kills every process left in the namespace, whatever it did with process
//   groups and sessions, and driftgate's wait returns only once they are all gone. The wall limit
//   SIGKILLs the init, which takes the whole namespace with it. The init has PR_SET_PDEATHSIG
//   SIGKILL, so a driftgate killed by SIGKILL takes every worker and everything they started too.
//   Degraded ("subreaper"; where clone(CLONE_NEWPID|CLONE_NEWNET) is refused: not root and no user
//   namespaces, some containers): the init is a plain child with PR_SET_CHILD_SUBREAPER; when the
//   worker ends it SIGKILLs every process that was reparented to it until none is left; the wall
//   limit SIGKILLs the worker, its group and (5 s later, if the init has not finished) the init.
//   There the init's death signal is SIGTERM, on which it kills the whole tree before it exits; a
//   candidate that kills the init first (possible without Landlock's signal scope, ABI < 6) can
//   outlive a driftgate killed by SIGKILL.
//
// Confinement (no writes outside the worker's own directory, no network):
//   Landlock (raw syscalls, ABI 1 and up, applied by the init to the worker before it runs:
//   PR_SET_NO_NEW_PRIVS + landlock_restrict_self, inherited by everything the worker starts):
//   creating, writing, truncating, renaming and removing files is allowed beneath the worker's
//   directory and nowhere else, except writing /dev/null and the GPU's /dev/nvidia* nodes (a
//   plugin or an exec program may drive the GPU whatever its backend says; the nodes hold no file);
//   reading is not restricted. ABI >= 4 also forbids TCP bind/connect; ABI >= 6 forbids signalling
//   processes outside the sandbox (driftgate, the init) and abstract unix sockets. The network
//   namespace has only a loopback that is down. TMPDIR is the worker's directory. Where Landlock is
//   missing, writes are not confined and the confinement string says so.
//
// Output: the worker's stdout and stderr are one pipe the parent drains while it waits; only the
// last kTailBytes are kept, with the count of bytes dropped (a candidate that writes gigabytes costs
// no disk and no memory).
//
// Device workers (a candidate of backend "cuda", SandboxSpec::device): the CUDA driver names its
// threads by writing /proc/self/task/TID/comm, which Landlock's write rules refused (on an H200
// every CUDA row was NOT_SUPPORTED, "OS call failed"; scripts/gpu-check.sh probes each mechanism
// alone and straces the failed calls). A device worker's init therefore makes every entry of its
// own /proc that is not a process's read-only (bind mounts; Landlock forbids the worker to unmount
// them) and its Landlock rules also allow writing files beneath /proc: what it may write there is
// the files of the processes of its own PID namespace. Everything else holds as for any worker.
// Where /proc cannot be made so (no own /proc: no PID namespace), the device worker's writes are
// not confined and the row says so. kDeviceRelax (sandbox.cpp, "none") lists mechanisms a device
// worker leaves out on top; an operator may set another list with DRIFTGATE_DEVICE_SANDBOX_DISABLE
// (same words as below). The row's confinement ends in "; device worker".
//
// Own /proc: with a PID namespace the init is cloned into a mount namespace too, makes every mount
// private and mounts a procfs of its PID namespace on /proc, so pids and thread ids under /proc are
// the ones the worker's getpid()/gettid() give (in the host's /proc the driver's
// /proc/self/task/TID is not found), and nothing outside the sandbox is listed. Where that mount
// fails the row says "no /proc of its own".
//
// What held is one string, as on the row (Record::confinement): "pid+net namespace, landlock abi 7",
// "pid+net namespace, landlock abi 7 + its processes' /proc files; device worker", "subreaper (no
// namespaces: disabled), no landlock (disabled)", ... DRIFTGATE_SANDBOX_DISABLE (for tests and
// diagnosis) leaves mechanisms out for every worker: a comma list of namespaces (= pidns,netns),
// pidns, netns, landlock (= landlock-fs,landlock-net,landlock-scope), landlock-fs, landlock-net,
// landlock-scope; an unknown word is bad input (exit 2). Without the PID namespace the init is a
// subreaper (the degraded containment above), with or without the network namespace.
//
// Temp dirs and signals: every worker directory ("driftgate-worker-XXXXXX") holds a lock file
// (flock, held by the driftgate that made it). sweep_stale_temp_dirs() (called at every start)
// removes the driftgate dirs under the temp roots whose lock it can take: their driftgate is dead
// (lockless dirs only when untouched for an hour: dirs of older driftgates; never
// one being created). install_signal_cleanup() makes SIGINT, SIGTERM and SIGHUP kill every live
// init (hence every worker), remove the live temp dirs and registered temp files (half-written
// results, and the .safetensors files write_safetensors is writing: it installs their hooks), then
// end driftgate with that signal; results already renamed into place stay valid.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dg {

inline constexpr size_t kTailBytes = 4096;

// Sandbox mechanisms left out (DRIFTGATE_SANDBOX_DISABLE, and a device worker's own list).
struct SandboxRelax {
  bool pidns = false, netns = false;                                  // the PID / network namespace
  bool landlock_fs = false, landlock_net = false, landlock_scope = false;   // Landlock's parts
};
// Parses a comma list (namespaces, pidns, netns, landlock, landlock-fs, landlock-net,
// landlock-scope, none) read from `var`; throws std::runtime_error naming var and an unknown word.
SandboxRelax sandbox_relax_from_text(const std::string& var, const std::string& text);

struct SandboxSpec {
  std::vector<std::string> argv;   // the worker's command line; argv[0] an absolute path to driftgate
                                   // (it also runs the init)
  std::string dir;                 // the worker's own directory: its only writable place, and TMPDIR
  std::vector<int> fds;            // become descriptors 3, 4, ... in the worker (the caller keeps its own)
  double wall_seconds = 0;         // > 0: SIGKILL the whole sandbox after this long
  // Called from the waiting thread once the worker runs, with the worker's pid and its init's (as
  // driftgate sees them; the init is the root of everything the sandbox holds, see set_stopped).
  std::function<void(pid_t worker, pid_t init)> on_start;
  bool device = false;             // the worker drives a GPU: the device profile (above) applies
};

struct SandboxResult {
  int wait_status = 0;             // the worker's own wait status (SIGKILL when the wall limit hit)
  bool killed_for_wall = false;
  rusage usage{};                  // the worker and everything it waited for
  double wall_seconds = 0;
  std::string output_tail;         // the last kTailBytes of its stdout + stderr, unprintable bytes as '?'
  int64_t output_dropped = 0;      // bytes of output before the tail, not kept
  std::string confinement;         // what held, e.g. "pid+net namespace, landlock abi 7"
};

// Starts spec.argv in the sandbox and waits for it. Throws std::runtime_error only when the
// sandbox itself cannot be set up (pipes, clone); everything the worker does is in the result.
SandboxResult run_sandboxed(const SandboxSpec& spec);

// Stops (SIGSTOP) every process of a sandbox but `keep`: the descendants of its init (`init` as
// on_start gives it; the init itself, driftgate's own code, keeps running), `keep`'s children
// included. Everything a candidate starts is such a descendant whatever it does with groups and
// sessions: orphans are reparented to the init (PID 1 of the namespace, or a subreaper). SIGSTOP
// can be neither caught nor ignored. It walks the tree again until a walk finds no process it had
// not stopped (a process that forks while it is being stopped is stopped with its child or before
// the fork), then waits until every thread of every process it stopped is stopped ('T' in
// /proc/PID/task/TID/stat) or gone. Returns the pids it signalled (continue_processes takes them
// back); *problem says why not all could be stopped ("": all were): a thread still running after
// `timeout_s` (an uninterruptible wait), or more processes than a walk can stop. The timing worker
// (harness/timing/timing_worker.h) holds whatever a candidate left running stopped during timed calls.
std::vector<pid_t> stop_sandbox_processes(pid_t init, pid_t keep, std::string* problem, double timeout_s = 0.2);
void continue_processes(const std::vector<pid_t>& pids);   // SIGCONT to each

// `driftgate sandbox-init ...`: the init's side (argv as main got it). Returns the exit code.
int sandbox_init_main(int argc, char** argv);

// A fresh "driftgate-worker-XXXXXX" under `root`, locked for as long as this process lives or
// until remove_temp_dir; registered for the signal cleanup.
std::string make_temp_dir(const std::string& root);
void remove_temp_dir(const std::string& dir);   // removes it, releases its lock, unregisters it
void keep_temp_dir(const std::string& dir);     // keeps it (debugging): unlocked, without its lock
                                                // file, so a later start sweeps it after an hour

// Paths (half-written temp files) the signal cleanup removes while they are registered.
// create_temp_file makes `tmpl` (mkostemp: it ends in XXXXXX, replaced by the name) and registers it
// in one step under the cleanup's lock, so no signal can come between the two; returns the open
// descriptor, or -1 with errno. Once a signal's cleanup has begun it never returns (the process is
// ending), so nothing made after the cleanup is left behind.
int create_temp_file(std::string& tmpl);
void unregister_temp_file(const std::string& path);

// Removes the driftgate temp dirs left by dead runs under the temp roots ($TMPDIR, /dev/shm, /tmp,
// and `extra_root` when given); returns how many it removed. Never a live run's dir.
int sweep_stale_temp_dirs(const std::string& extra_root = "");

// For driftgate's main, before it starts any thread (see above).
void install_signal_cleanup();

}  // namespace dg
