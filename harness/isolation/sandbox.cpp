// The worker sandbox: namespaces, the init, Landlock, the output pipe, temp dirs and signals
// (sandbox.h).
#include "harness/isolation/sandbox.h"
#include "harness/core/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

extern char** environ;

namespace dg {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail_errno(const std::string& what, int err) {
  throw std::runtime_error(fmt::format("sandbox: {}: {}", what, std::strerror(err)));
}

// A comma list of sandbox mechanisms (sandbox.h) -> the set it names; an unknown word throws.
SandboxRelax parse_relax(const char* var, const char* text) {
  SandboxRelax r;
  std::string s = text ? text : "";
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string w = s.substr(pos, comma - pos);
    pos = comma + 1;
    if (w.empty()) continue;
    if (w == "namespaces") {
      r.pidns = r.netns = true;
    } else if (w == "pidns") {
      r.pidns = true;
    } else if (w == "netns") {
      r.netns = true;
    } else if (w == "landlock") {
      r.landlock_fs = r.landlock_net = r.landlock_scope = true;
    } else if (w == "landlock-fs") {
      r.landlock_fs = true;
    } else if (w == "landlock-net") {
      r.landlock_net = true;
    } else if (w == "landlock-scope") {
      r.landlock_scope = true;
    } else if (w != "none") {
      throw std::runtime_error(fmt::format(
          "{}: unknown sandbox mechanism '{}' (use a comma list of namespaces, pidns, netns, landlock, "
          "landlock-fs, landlock-net, landlock-scope, or none)",
          var, w));
    }
  }
  return r;
}

// --- what the signal cleanup must undo ------------------------------------------------------------
struct Live {
  std::mutex mu;
  std::set<pid_t> kill;                   // inits (and, degraded, workers: negative = a group)
  std::map<std::string, int> dirs;        // temp dir -> its lock descriptor
  std::set<std::string> files;
};
Live& live() {
  static Live* l = new Live;   // never destroyed: the signal thread may use it during exit
  return *l;
}

void track_kill(pid_t p, bool add) {
  std::lock_guard<std::mutex> g(live().mu);
  if (add)
    live().kill.insert(p);
  else
    live().kill.erase(p);
}

// --- Landlock (raw syscalls; <linux/landlock.h> of older distributions lacks the newer fields) ---
constexpr uint64_t kFsWriteFile = 1ULL << 1, kFsRemoveDir = 1ULL << 4, kFsRemoveFile = 1ULL << 5,
                   kFsMakeChar = 1ULL << 6, kFsMakeDir = 1ULL << 7, kFsMakeReg = 1ULL << 8,
                   kFsMakeSock = 1ULL << 9, kFsMakeFifo = 1ULL << 10, kFsMakeBlock = 1ULL << 11,
                   kFsMakeSym = 1ULL << 12, kFsRefer = 1ULL << 13, kFsTruncate = 1ULL << 14;
constexpr uint64_t kNetBindTcp = 1ULL << 0, kNetConnectTcp = 1ULL << 1;
constexpr uint64_t kScopeAbstractUnix = 1ULL << 0, kScopeSignal = 1ULL << 1;
constexpr uint32_t kCreateRulesetVersion = 1U << 0;
constexpr int kRulePathBeneath = 1;

struct RulesetAttr {
  uint64_t handled_access_fs, handled_access_net, scoped;
};
struct __attribute__((packed)) PathBeneath {
  uint64_t allowed_access;
  int32_t parent_fd;
};

bool add_path_rule(int ruleset, const std::string& path, uint64_t access) {
  const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return false;
  PathBeneath pb{access, fd};
  const long rc = ::syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &pb, 0);
  ::close(fd);
  return rc == 0;
}

// A ruleset of the parts asked for ('f' writes beneath `dir` only, 'p' and writes to files beneath
// /proc (a device worker's, once harden_proc() made all but the processes' own files read-only),
// 'n' no TCP, 's' the signal and abstract-socket scope; see sandbox.h); -1 (abi 0) when Landlock is missing or refused, or when
// none of the asked parts exists at this ABI.
int make_ruleset(const std::string& dir, const std::string& parts, int* abi_out) {
  *abi_out = 0;
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
  if (abi < 1) return -1;
  const bool fs = parts.find('f') != std::string::npos, net = parts.find('n') != std::string::npos,
             scope = parts.find('s') != std::string::npos;
  uint64_t write = kFsWriteFile | kFsRemoveDir | kFsRemoveFile | kFsMakeChar | kFsMakeDir | kFsMakeReg |
                   kFsMakeSock | kFsMakeFifo | kFsMakeBlock | kFsMakeSym;
  if (abi >= 2) write |= kFsRefer;
  if (abi >= 3) write |= kFsTruncate;
  const uint64_t file_write = kFsWriteFile | (abi >= 3 ? kFsTruncate : 0);
  RulesetAttr attr{fs ? write : 0, net && abi >= 4 ? kNetBindTcp | kNetConnectTcp : 0,
                   scope && abi >= 6 ? kScopeAbstractUnix | kScopeSignal : 0};
  if (attr.handled_access_fs == 0 && attr.handled_access_net == 0 && attr.scoped == 0) return -1;
  const size_t size = abi >= 6 ? 24 : abi >= 4 ? 16 : 8;
  const long rs = ::syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (rs < 0) return -1;
  const int ruleset = static_cast<int>(rs);
  bool ok = !fs || (add_path_rule(ruleset, dir, write) && add_path_rule(ruleset, "/dev/null", file_write));
  if (ok && fs && parts.find('p') != std::string::npos) ok = add_path_rule(ruleset, "/proc", file_write);
  if (ok && fs) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator("/dev", ec))
      if (e.path().filename().string().rfind("nvidia", 0) == 0)
        add_path_rule(ruleset, e.path().string(), e.is_directory(ec) ? write : file_write);
  }
  if (!ok) {
    ::close(ruleset);
    return -1;
  }
  *abi_out = static_cast<int>(abi);
  return ruleset;
}

// --- the init's helpers ------------------------------------------------------------------------
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> v;
  std::ifstream f(fmt::format("/proc/{0}/task/{0}/children", pid));
  pid_t c = 0;
  while (f >> c) v.push_back(c);
  return v;
}

// Degraded containment: SIGKILL every child (orphans are reparented to us, a subreaper) until none
// is left.
void kill_all_descendants() {
  for (;;) {
    for (pid_t c : children_of(::getpid())) ::kill(c, SIGKILL);
    if (::waitpid(-1, nullptr, 0) < 0 && errno == ECHILD) return;
  }
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// The pid driftgate sees for the init's child whose pid inside the namespace is `inner`.
pid_t outer_pid_of(pid_t init, pid_t inner, bool in_namespace) {
  if (!in_namespace) return inner;
  for (pid_t c : children_of(init)) {
    std::ifstream f(fmt::format("/proc/{}/status", c));
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("NSpid:", 0) != 0) continue;
      std::istringstream ss(line.substr(6));
      pid_t p = 0, last = 0;
      while (ss >> p) last = p;
      if (last == inner) return c;
    }
  }
  return 0;
}

// The tail buffer: the last kTailBytes of everything appended, and how much came before.
struct Tail {
  std::string buf;
  int64_t dropped = 0;
  void add(const char* p, size_t n) {
    buf.append(p, n);
    if (buf.size() > 2 * kTailBytes) {
      const size_t cut = buf.size() - kTailBytes;
      dropped += static_cast<int64_t>(cut);
      buf.erase(0, cut);
    }
  }
  std::string text() {
    if (buf.size() > kTailBytes) {
      dropped += static_cast<int64_t>(buf.size() - kTailBytes);
      buf.erase(0, buf.size() - kTailBytes);
    }
    for (char& ch : buf) {
      const auto u = static_cast<unsigned char>(ch);
      if (!(u == '\n' || u == '\t' || (u >= 0x20 && u < 0x7f))) ch = '?';
    }
    return buf;
  }
};

// Reads what is there now; false at end of file.
bool drain(int fd, const std::function<void(const char*, size_t)>& sink) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      sink(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

// Every entry of the own /proc that is not a process's (sys, sysrq-trigger, irq, bus, driver, ...)
// bind-mounted read-only over itself: what a device worker may write beneath /proc is then the
// files of the processes in its own PID namespace (their comm, ...). Landlock forbids the worker
// to unmount them. False when any of them could not be made read-only.
bool harden_proc() {
  DIR* d = ::opendir("/proc");
  if (!d) return false;
  std::vector<std::string> entries;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == ".." || std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    entries.push_back("/proc/" + n);
  }
  ::closedir(d);
  for (const std::string& p : entries) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) continue;   // self, thread-self, mounts, net
    if (::mount(p.c_str(), p.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        ::mount(nullptr, p.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                nullptr) != 0)
      return false;
  }
  return true;
}

}  // namespace

// --- the init ---------------------------------------------------------------------------------------
namespace {
volatile sig_atomic_t g_parent_gone = 0;   // degraded mode: driftgate died (PR_SET_PDEATHSIG SIGTERM)
}  // namespace

// --- stopping what runs in a sandbox (stop_sandbox_processes) ----------------------------------
namespace {

std::vector<pid_t> tasks_of(pid_t pid) {
  std::vector<pid_t> v;
  if (DIR* d = ::opendir(fmt::format("/proc/{}/task", pid).c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') v.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    ::closedir(d);
  }
  return v;
}

// Every descendant of `root` (not root itself): the children listed by each of each process's
// threads, recursively.
std::vector<pid_t> descendants_of(pid_t root) {
  std::vector<pid_t> out, todo = {root};
  std::set<pid_t> seen = {root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (pid_t t : tasks_of(p)) {
      std::ifstream f(fmt::format("/proc/{}/task/{}/children", p, t));
      for (pid_t c = 0; f >> c;)
        if (seen.insert(c).second) out.push_back(c), todo.push_back(c);
    }
  }
  return out;
}

// A thread's state letter ('R', 'S', 'T', ...), or 0 when it is gone.
char task_state(pid_t pid, pid_t tid) {
  char buf[512];
  const int fd = ::open(fmt::format("/proc/{}/task/{}/stat", pid, tid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  return p && p[1] == ' ' ? p[2] : 0;
}

}  // namespace

std::vector<pid_t> stop_sandbox_processes(pid_t init, pid_t keep, std::string* problem, double timeout_s) {
  if (problem) problem->clear();
  std::vector<pid_t> stopped;
  if (init <= 0) return stopped;
  std::set<pid_t> signalled;
  auto walk = [&] {
    bool fresh = false;
    for (pid_t p : descendants_of(init))
      if (p != keep && signalled.insert(p).second) fresh = true, ::kill(p, SIGSTOP), stopped.push_back(p);
    return fresh;
  };
  for (int i = 0; walk(); ++i)
    if (i > 1000) {
      if (problem) *problem = fmt::format("more than {} processes kept appearing", signalled.size());
      return stopped;
    }
  if (stopped.empty()) return stopped;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (int i = 0;; ++i) {
    std::string running;
    for (pid_t p : stopped) {
      for (pid_t t : tasks_of(p)) {
        const char st = task_state(p, t);
        if (st && st != 'T' && st != 't' && st != 'Z' && st != 'X') {
          running = fmt::format("process {} thread {} is in state '{}'", p, t, st);
          break;
        }
      }
      if (!running.empty()) break;
    }
    // A process started after the last walk was forked by one not yet stopped: walk once more.
    if (walk()) running = "a new process appeared";
    if (running.empty()) return stopped;
    if (std::chrono::steady_clock::now() > deadline) {
      if (problem) *problem = fmt::format("not stopped after {:.0f} ms: {}", 1e3 * timeout_s, running);
      return stopped;
    }
    if (i > 20)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    else
      std::this_thread::yield();
  }
}

void continue_processes(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) ::kill(p, SIGCONT);
}

// argv: EXE sandbox-init STATUS_FD DIR LANDLOCK -- WORKER ARGV...; LANDLOCK: the ruleset's parts,
// "-" for none (make_ruleset).
int sandbox_init_main(int argc, char** argv) {
  if (argc < 7 || std::strcmp(argv[5], "--") != 0) {
    std::fputs("driftgate sandbox-init: started by driftgate only\n", stderr);
    return 2;
  }
  const int status_fd = std::atoi(argv[2]);
  const std::string dir = argv[3];
  const std::string landlock = std::strcmp(argv[4], "-") == 0 ? "" : argv[4];
  const bool in_namespace = ::getpid() == 1;
  if (!in_namespace) {
    // Degraded: we adopt every orphan of the worker's tree, and when driftgate dies (SIGTERM
    // instead of the SIGKILL the namespace mode keeps) we kill that tree before we go.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_parent_gone = 1; };
    ::sigaction(SIGTERM, &sa, nullptr);   // no SA_RESTART: waitpid below returns EINTR
    ::prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    if (::getppid() == 1) g_parent_gone = 1;
  }
  // In a PID namespace (cloned with a mount namespace too), a /proc of that namespace: pids and
  // thread ids there are the ones getpid() and gettid() give (the CUDA driver names its threads
  // through /proc/self/task/TID/comm), and no process outside is listed. Mounts are made private
  // first, so nothing propagates back to driftgate's /proc.
  int own_proc = 0;
  if (in_namespace && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
      ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0)
    own_proc = 1;
  // A device worker may write files beneath its own /proc (the CUDA driver names its threads there)
  // once all else there is read-only; where that cannot be made so, its writes are not confined.
  std::string parts = landlock;
  int proc_writes = 0;   // 1: granted beneath a hardened /proc; 2: asked but not possible, fs rules off
  if (parts.find('p') != std::string::npos) {
    if (own_proc && harden_proc()) {
      proc_writes = 1;
    } else {
      proc_writes = 2;
      parts.erase(std::remove_if(parts.begin(), parts.end(), [](char c) { return c == 'f' || c == 'p'; }), parts.end());
    }
  }
  int abi = 0;
  const int ruleset = parts.empty() ? -1 : make_ruleset(dir, parts, &abi);

  // A close-on-exec pipe tells us when the worker has exec'd: only then is it reported as running.
  int exec_pipe[2] = {-1, -1};
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) exec_pipe[0] = exec_pipe[1] = -1;
  const pid_t worker = ::fork();
  if (worker < 0) {
    write_all(status_fd, fmt::format("E fork: {}\n", std::strerror(errno)));
    return 3;
  }
  if (worker == 0) {
    ::close(status_fd);
    if (exec_pipe[0] >= 0) ::close(exec_pipe[0]);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGTERM, &dfl, nullptr);
    if (ruleset >= 0) {
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
        std::fprintf(stderr, "driftgate sandbox-init: landlock_restrict_self: %s\n", std::strerror(errno));
        ::_exit(126);
      }
      ::close(ruleset);
    }
    ::execv(argv[6], argv + 6);
    std::fprintf(stderr, "driftgate sandbox-init: cannot run %s: %s\n", argv[6], std::strerror(errno));
    ::_exit(127);
  }
  if (ruleset >= 0) ::close(ruleset);
  if (exec_pipe[1] >= 0) {
    ::close(exec_pipe[1]);
    char c = 0;
    while (::read(exec_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::close(exec_pipe[0]);
  }
  write_all(status_fd, fmt::format("R {} {} {} {}\n", abi, worker, own_proc, proc_writes));
  int worker_status = 0;
  for (;;) {
    int st = 0;
    if (g_parent_gone) break;
    const pid_t p = ::waitpid(-1, &st, 0);
    if (p < 0 && errno == EINTR) continue;
    if (p < 0) break;
    if (p == worker) {
      worker_status = st;
      break;
    }
  }
  // In the namespace, our exit kills everything left in it; degraded, we kill it ourselves.
  if (!in_namespace) kill_all_descendants();
  write_all(status_fd, fmt::format("X {}\n", worker_status));
  return 0;
}

// --- the parent -------------------------------------------------------------------------------------
namespace {

// What a device worker's sandbox leaves out (sandbox.h: "Device workers").
constexpr const char* kDeviceRelax = "none";

SandboxRelax relax_for(const SandboxSpec& spec) {
  const char* env = std::getenv("DRIFTGATE_SANDBOX_DISABLE");
  SandboxRelax r = parse_relax("DRIFTGATE_SANDBOX_DISABLE", env);
  if (spec.device) {
    const char* dev = std::getenv("DRIFTGATE_DEVICE_SANDBOX_DISABLE");
    const SandboxRelax d = parse_relax("DRIFTGATE_DEVICE_SANDBOX_DISABLE", dev ? dev : kDeviceRelax);
    r.pidns |= d.pidns;
    r.netns |= d.netns;
    r.landlock_fs |= d.landlock_fs;
    r.landlock_net |= d.landlock_net;
    r.landlock_scope |= d.landlock_scope;
  }
  return r;
}

// Row text of what held: "pid+net namespace, landlock abi 7", "pid namespace, landlock abi 7 (no
// tcp rules, no scope)", "subreaper (no namespaces: disabled), no landlock (disabled)".
std::string confinement_text(bool pidns, bool netns, const std::string& degraded_why, const SandboxRelax& relax,
                             bool want_landlock, int abi) {
  std::string t = pidns && netns ? "pid+net namespace"
                  : pidns        ? "pid namespace"
                  : netns        ? "net namespace, subreaper"
                                 : fmt::format("subreaper (no namespaces: {})", degraded_why);
  if (!want_landlock) {
    t += ", no landlock (disabled)";
  } else if (abi > 0) {
    t += fmt::format(", landlock abi {}", abi);
    std::vector<std::string> off;
    if (relax.landlock_fs) off.push_back("writes not confined");
    if (relax.landlock_net && abi >= 4) off.push_back("no tcp rules");
    if (relax.landlock_scope && abi >= 6) off.push_back("no scope");
    if (!off.empty()) t += fmt::format(" ({})", fmt::join(off, ", "));
  } else if (abi == 0) {
    t += relax.landlock_fs ? ", no landlock (unavailable)" : ", no landlock (unavailable: writes not confined)";
  }
  return t;
}

}  // namespace

SandboxRelax sandbox_relax_from_text(const std::string& var, const std::string& text) {
  return parse_relax(var.c_str(), text.c_str());
}

SandboxResult run_sandboxed(const SandboxSpec& spec) {
  // The init is the worker's own executable (driftgate: it knows the sandbox-init verb).
  const std::string exe = spec.argv.at(0);
  SandboxResult r;
  const SandboxRelax relax = relax_for(spec);
  const bool want_pidns = !relax.pidns, want_netns = !relax.netns;
  std::string landlock_parts;
  if (!relax.landlock_fs) landlock_parts += spec.device ? "fp" : "f";
  if (!relax.landlock_net) landlock_parts += 'n';
  if (!relax.landlock_scope) landlock_parts += 's';
  const bool want_landlock = !landlock_parts.empty();

  int outp[2], stp[2];
  if (::pipe2(outp, O_CLOEXEC) != 0) fail_errno("pipe", errno);
  if (::pipe2(stp, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(outp[0]);
    ::close(outp[1]);
    fail_errno("pipe", e);
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

  // Everything the child needs is prepared here: between clone and execve it only makes
  // async-signal-safe calls (the parent has threads).
  const int n = static_cast<int>(spec.fds.size());
  std::vector<int> src = {devnull, outp[1], outp[1]};
  src.insert(src.end(), spec.fds.begin(), spec.fds.end());
  src.push_back(stp[1]);
  int base = 3 + n + 1;
  for (int fd : src) base = std::max(base, fd + 1);
  std::vector<std::string> args = {exe, "sandbox-init", std::to_string(3 + n), spec.dir,
                                   want_landlock ? landlock_parts : "-", "--"};
  args.insert(args.end(), spec.argv.begin(), spec.argv.end());
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0) env.emplace_back(*e);
  env.push_back("TMPDIR=" + spec.dir);
  std::vector<char*> argv_c, env_c;
  for (std::string& a : args) argv_c.push_back(a.data());
  argv_c.push_back(nullptr);
  for (std::string& e : env) env_c.push_back(e.data());
  env_c.push_back(nullptr);
  std::vector<int> high(src.size());
  const pid_t parent = ::getpid();

  // in_namespace: the init is PID 1 of its own PID namespace (the containment sandbox.h describes);
  // otherwise it is a subreaper.
  bool in_namespace = want_pidns, in_netns = want_netns;
  std::string degraded_why = want_pidns || want_netns ? "" : "disabled";
  long pid = -1;
  if (want_pidns || want_netns) {
    const unsigned long flags = (want_pidns ? CLONE_NEWPID | CLONE_NEWNS : 0UL) | (want_netns ? CLONE_NEWNET : 0UL);
    pid = ::syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
    if (pid < 0) {
      degraded_why = std::strerror(errno);
      in_namespace = in_netns = false;
    }
  }
  if (pid < 0) pid = ::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (!in_namespace && ::getppid() != parent) ::_exit(127);
    for (size_t i = 0; i < src.size(); ++i) high[i] = ::fcntl(src[i], F_DUPFD, base);
    for (size_t i = 0; i < src.size(); ++i) ::dup2(high[i], static_cast<int>(i));
    ::syscall(SYS_close_range, static_cast<unsigned>(src.size()), ~0U, 0U);
    ::execve(exe.c_str(), argv_c.data(), env_c.data());
    ::_exit(127);
  }
  const int clone_errno = errno;
  ::close(outp[1]);
  ::close(stp[1]);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) {
    ::close(outp[0]);
    ::close(stp[0]);
    fail_errno("cannot start " + exe, clone_errno);
  }
  const pid_t init = static_cast<pid_t>(pid);
  track_kill(init, true);
  ::fcntl(outp[0], F_SETFL, O_NONBLOCK);
  ::fcntl(stp[0], F_SETFL, O_NONBLOCK);

  Tail tail;
  std::string status_text;
  bool out_open = true, status_open = true, started = false, have_worker_status = false;
  int abi = -1, worker_status = 0, own_proc = 0, proc_writes = 0;
  pid_t worker = 0;
  auto read_status = [&] {
    if (!status_open) return;
    status_open = drain(stp[0], [&](const char* p, size_t k) { status_text.append(p, std::min(k, size_t{4096})); });
    size_t nl;
    while ((nl = status_text.find('\n')) != std::string::npos) {
      const std::string line = status_text.substr(0, nl);
      status_text.erase(0, nl + 1);
      if (line.rfind("R ", 0) == 0 && !started) {
        started = true;
        int inner = 0;
        std::sscanf(line.c_str() + 2, "%d %d %d %d", &abi, &inner, &own_proc, &proc_writes);
        worker = outer_pid_of(init, inner, in_namespace);
        if (worker > 0 && !in_namespace) {
          track_kill(worker, true);
          track_kill(-worker, true);
        }
        if (worker > 0 && spec.on_start) spec.on_start(worker, init);
      } else if (line.rfind("X ", 0) == 0) {
        have_worker_status = true;
        worker_status = std::atoi(line.c_str() + 2);
      }
    }
  };

  const auto t0 = std::chrono::steady_clock::now();
  double kill_init_at = -1;   // degraded: when the init itself is killed if it has not ended
  for (;;) {
    pollfd pfd[2] = {{out_open ? outp[0] : -1, POLLIN, 0}, {status_open ? stp[0] : -1, POLLIN, 0}};
    ::poll(pfd, 2, 20);
    if (out_open) out_open = drain(outp[0], [&](const char* p, size_t k) { tail.add(p, k); });
    read_status();
    siginfo_t si{};
    if (::waitid(P_PID, static_cast<id_t>(init), &si, WEXITED | WNOHANG | WNOWAIT) != 0 && errno != EINTR)
      fail_errno("waitid", errno);
    if (si.si_pid == init) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.killed_for_wall && spec.wall_seconds > 0 && elapsed > spec.wall_seconds) {
      r.killed_for_wall = true;
      if (in_namespace) {
        ::kill(init, SIGKILL);   // and with it, the whole namespace
      } else {
        if (worker > 0) {
          ::kill(worker, SIGKILL);
          ::kill(-worker, SIGKILL);
        }
        kill_init_at = elapsed + 5;
      }
    }
    if (have_worker_status && kill_init_at < 0) kill_init_at = elapsed + 5;
    if (kill_init_at >= 0 && elapsed > kill_init_at) ::kill(init, SIGKILL);
  }
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int init_status = 0;
  while (::wait4(init, &init_status, 0, &r.usage) < 0)
    if (errno != EINTR) fail_errno("wait4", errno);
  track_kill(init, false);
  if (worker > 0 && !in_namespace) {
    track_kill(worker, false);
    track_kill(-worker, false);
  }
  // Whatever is left in the pipes now (degraded, a stray process could hold them open: no waiting).
  if (out_open) drain(outp[0], [&](const char* p, size_t k) { tail.add(p, k); });
  read_status();
  ::close(outp[0]);
  ::close(stp[0]);

  if (have_worker_status && !r.killed_for_wall)
    r.wait_status = worker_status;
  else if (r.killed_for_wall)
    r.wait_status = SIGKILL;   // "killed by SIGKILL", as the wall limit did
  else
    r.wait_status = init_status;   // the init itself failed (it could not start the worker)
  r.output_tail = tail.text();
  r.output_dropped = tail.dropped;
  r.confinement = confinement_text(in_namespace, in_netns, degraded_why, relax, want_landlock, abi);
  if (proc_writes == 1) r.confinement += " + its processes' /proc files";
  if (proc_writes == 2) r.confinement += ", writes not confined (no read-only /proc for the device driver)";
  if (in_namespace && started && !own_proc) r.confinement += "; no /proc of its own";
  if (spec.device) r.confinement += "; device worker";
  return r;
}

// --- temp dirs ----------------------------------------------------------------------------------------
std::string make_temp_dir(const std::string& root) {
  // Made and registered under the cleanup's lock: a signal's cleanup (which holds it until the
  // process ends) either sees the dir or runs before it exists.
  std::lock_guard<std::mutex> g(live().mu);
  std::string tmpl = root + "/driftgate-worker-XXXXXX";
  if (!::mkdtemp(tmpl.data())) fail_errno("mkdtemp " + tmpl, errno);
  // The lock file appears already locked (made under another name, locked, renamed): another
  // driftgate's sweep that opened a fresh ".lock" before this one locked it would have taken the
  // lock and removed the dir. Until the rename the dir has no lock file, and a sweep spares it.
  const std::string fresh = tmpl + "/.lock.new";
  const int fd = ::open(fresh.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::rename(fresh.c_str(), (tmpl + "/.lock").c_str()) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    std::error_code ec;
    fs::remove_all(tmpl, ec);
    fail_errno("lock " + tmpl, e);
  }
  live().dirs[tmpl] = fd;
  return tmpl;
}

void remove_temp_dir(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::lock_guard<std::mutex> g(live().mu);
  auto it = live().dirs.find(dir);
  if (it != live().dirs.end()) {
    ::close(it->second);
    live().dirs.erase(it);
  }
}

void keep_temp_dir(const std::string& dir) {
  ::unlink((dir + "/.lock").c_str());
  std::lock_guard<std::mutex> g(live().mu);
  auto it = live().dirs.find(dir);
  if (it != live().dirs.end()) {
    ::close(it->second);
    live().dirs.erase(it);
  }
}

int create_temp_file(std::string& tmpl) {
  std::lock_guard<std::mutex> g(live().mu);
  const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd >= 0) live().files.insert(tmpl);
  return fd;
}

void unregister_temp_file(const std::string& path) {
  std::lock_guard<std::mutex> g(live().mu);
  live().files.erase(path);
}

int sweep_stale_temp_dirs(const std::string& extra_root) {
  std::set<std::string> roots = {"/dev/shm", "/tmp"};
  if (const char* t = std::getenv("TMPDIR"); t && *t) roots.insert(t);
  if (!extra_root.empty()) roots.insert(extra_root);
  int removed = 0;
  const auto now = fs::file_time_type::clock::now();
  for (const std::string& root : roots) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("driftgate-worker-", 0) != 0 && name.rfind("driftgate-exec-", 0) != 0) continue;
      std::error_code ec2;
      if (!e.is_directory(ec2) || e.is_symlink(ec2)) continue;
      {
        std::lock_guard<std::mutex> g(live().mu);
        if (live().dirs.count(e.path().string())) continue;
      }
      bool stale = false;
      const int fd = ::open((e.path() / ".lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0) {
        stale = ::flock(fd, LOCK_EX | LOCK_NB) == 0;   // its driftgate is gone
      } else {
        const auto mtime = fs::last_write_time(e.path(), ec2);
        stale = !ec2 && now - mtime > std::chrono::hours(1);   // lockless: an older driftgate's
      }
      if (stale && fs::remove_all(e.path(), ec2) > 0 && !ec2) ++removed;
      if (fd >= 0) ::close(fd);
    }
  }
  return removed;
}

// --- signals ------------------------------------------------------------------------------------------
void install_signal_cleanup() {
  set_safetensors_temp_hooks(create_temp_file, unregister_temp_file);   // a half-written export too
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    while (::sigwait(&set, &sig) != 0) {
    }
    // The lock is taken for good: killing the workers wakes the threads that waited on them, and
    // one that goes on to write a results file or make a temp dir must not create it after this
    // cleanup (create_temp_file and make_temp_dir wait on this lock until the process ends).
    live().mu.lock();
    for (pid_t p : live().kill) ::kill(p, SIGKILL);
    std::error_code ec;
    for (const auto& [dir, fd] : live().dirs) fs::remove_all(dir, ec);
    for (const std::string& f : live().files) ::unlink(f.c_str());
    ::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    ::raise(sig);
    ::_exit(128 + sig);
  }).detach();
}

}  // namespace dg
