// run_in_worker: temp dir, posix_spawn, wall-limited wait, classification, report (worker.h).
#include "harness/worker.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/safetensors.h"
#include "harness/verify.h"
#include "harness/worker_main.h"

extern char** environ;

namespace dg {
namespace {

namespace fs = std::filesystem;
constexpr size_t kTailBytes = 4096;

[[noreturn]] void fail_errno(const std::string& what, int err) {
  throw std::runtime_error(fmt::format("worker: {}: {}", what, std::strerror(err)));
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n < 0) fail_errno("readlink /proc/self/exe", errno);
  return std::string(buf, static_cast<size_t>(n));
}

int64_t tensor_bytes(const TensorMap& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m) n += static_cast<int64_t>(t.nbytes());
  return n;
}

std::string make_temp_dir(const std::string& root, int64_t bytes = 0) {
  const std::string base = root.empty() ? worker_temp_root(bytes) : root;
  std::string tmpl = base + "/driftgate-worker-XXXXXX";
  if (!::mkdtemp(tmpl.data())) fail_errno("mkdtemp " + tmpl, errno);
  return tmpl;
}

struct TempDir {
  std::string path;
  bool keep;
  ~TempDir() {
    std::error_code ec;
    if (!keep) fs::remove_all(path, ec);
  }
};

// The last n bytes of a file with everything but printable ASCII, newlines and tabs replaced by
// '?', so the tail is safe in JSON and in a terminal.
std::string read_tail(const std::string& path, size_t n) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  f.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(std::max<std::streamoff>(0, f.tellg()));
  const size_t start = size > n ? size - n : 0;
  f.seekg(static_cast<std::streamoff>(start));
  std::string s(size - start, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(f.gcount()));
  for (char& ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (!(u == '\n' || u == '\t' || (u >= 0x20 && u < 0x7f))) ch = '?';
  }
  return s;
}

std::string bytes_text(int64_t b) {
  if (b >= (int64_t{1} << 30) && b % (int64_t{1} << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (int64_t{1} << 20) && b % (int64_t{1} << 20) == 0) return fmt::format("{} MiB", b >> 20);
  return fmt::format("{} bytes", b);
}

pid_t spawn_worker(const std::vector<std::string>& argv, const std::string& log_path,
                   const std::vector<int>& channel_fds = {}) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // Channels become 3, 4, ...: from copies above them, so no dup2 overwrites a source.
  std::vector<int> high;
  for (int fd : channel_fds) {
    const int h = ::fcntl(fd, F_DUPFD_CLOEXEC, 64 + static_cast<int>(channel_fds.size()));
    if (h < 0) fail_errno("fcntl F_DUPFD", errno);
    high.push_back(h);
  }
  for (size_t i = 0; i < high.size(); ++i) posix_spawn_file_actions_adddup2(&fa, high[i], 3 + static_cast<int>(i));
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  // no other descriptor of the caller leaks in
  posix_spawn_file_actions_addclosefrom_np(&fa, 3 + static_cast<int>(channel_fds.size()));
#endif

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);   // its own process group, led by the worker
  sigset_t all, none;
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);   // default dispositions, whatever the caller set
  posix_spawnattr_setsigmask(&attr, &none);

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  for (int h : high) ::close(h);
  if (rc != 0) fail_errno("cannot start " + argv[0], rc);
  return pid;
}

// Waits for the worker, killing its group at the wall limit. Returns the wait status; fills the
// resource usage. The group is killed again once the worker has ended but before it is reaped
// (its zombie keeps the group id from being reused), so nothing it started outlives it.
int wait_worker(pid_t pid, double wall_limit, bool& killed_for_wall, rusage& ru, double& wall_seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  auto delay = std::chrono::microseconds(500);
  killed_for_wall = false;
  for (;;) {
    siginfo_t si{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      fail_errno("waitid", errno);
    }
    if (si.si_pid == pid) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!killed_for_wall && wall_limit > 0 && elapsed > wall_limit) {
      ::kill(-pid, SIGKILL);
      killed_for_wall = true;
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::microseconds(20000));
  }
  wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) fail_errno("wait4", errno);
  }
  return status;
}

CheckResult parse_check(const nlohmann::json& j) {
  CheckResult c;
  const std::string s = j.at("state").get<std::string>();
  c.state = s == "ok" ? CheckState::ok : s == "violated" ? CheckState::violated : CheckState::not_run;
  c.detail = j.at("detail").get<std::string>();
  return c;
}

// Reads the report (and, when the candidate ran cleanly, the outputs) of a worker that exited 0.
void read_report(WorkerResult& r, const std::string& report_path, const std::string& out_path) {
  if (!fs::exists(report_path)) {
    r.status = WorkerStatus::bad_exit;
    r.message = "exited 0 without a report (did the candidate call exit()?)";
    return;
  }
  try {
    std::ifstream f(report_path);
    const nlohmann::json j = nlohmann::json::parse(f);
    const std::string s = j.at("status").get<std::string>();
    r.status = s == "ok" ? WorkerStatus::ok
               : s == "threw" ? WorkerStatus::threw
               : s == "out_of_memory" ? WorkerStatus::out_of_memory
               : s == "not_supported" ? WorkerStatus::not_supported
                                      : WorkerStatus::bad_exit;
    r.message = j.at("message").get<std::string>();
    r.run_seconds = j.at("seconds").get<std::vector<double>>();
    if (!r.run_seconds.empty()) r.seconds = *std::min_element(r.run_seconds.begin(), r.run_seconds.end());
    const nlohmann::json& c = j.at("checks");
    r.checks.guard = parse_check(c.at("guard"));
    r.checks.input_mutation = parse_check(c.at("input_mutation"));
    r.checks.alias = parse_check(c.at("alias"));
    r.checks.nondeterministic = parse_check(c.at("nondeterministic"));
    if (r.status == WorkerStatus::ok) r.outputs = read_safetensors(out_path).tensors;
  } catch (const std::exception& e) {
    r.status = WorkerStatus::bad_exit;
    r.message = fmt::format("unreadable worker report or outputs: {}", e.what());
  }
}

}  // namespace

std::string_view worker_status_name(WorkerStatus s) {
  switch (s) {
    case WorkerStatus::ok: return "ok";
    case WorkerStatus::crashed: return "crashed";
    case WorkerStatus::timed_out: return "timed_out";
    case WorkerStatus::out_of_memory: return "out_of_memory";
    case WorkerStatus::threw: return "threw";
    case WorkerStatus::bad_exit: return "bad_exit";
    case WorkerStatus::not_supported: return "not_supported";
  }
  return "?";
}

std::string_view check_state_name(CheckState s) {
  switch (s) {
    case CheckState::ok: return "ok";
    case CheckState::violated: return "violated";
    case CheckState::not_run: return "not_run";
  }
  return "?";
}

std::vector<std::pair<std::string_view, const CheckResult*>> WorkerChecks::all() const {
  return {{"guard", &guard}, {"input_mutation", &input_mutation}, {"alias", &alias},
          {"nondeterministic", &nondeterministic}};
}

std::vector<std::string_view> WorkerChecks::violated() const {
  std::vector<std::string_view> v;
  for (const auto& [name, c] : all())
    if (c->state == CheckState::violated) v.push_back(name);
  return v;
}

std::string last_lines(const std::string& text, size_t max_chars) {
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return {};
  std::string s = text.substr(0, end + 1);
  bool cut = false;
  if (s.size() > max_chars) {
    s = s.substr(s.size() - max_chars);
    cut = true;
    const size_t nl = s.find('\n');
    if (nl != std::string::npos && nl + 1 < s.size()) s = s.substr(nl + 1);
  }
  std::string out = cut ? "..." : "";
  for (char ch : s) {
    if (ch == '\n')
      out += " | ";
    else
      out += ch;
  }
  return out;
}

void classify_exit(WorkerResult& r, int st, bool killed_for_wall, const WorkerLimits& limits, double cpu_limit) {
  if (WIFEXITED(st)) {
    r.exit_code = WEXITSTATUS(st);
    r.status = r.exit_code == 0 ? WorkerStatus::ok : WorkerStatus::bad_exit;
    if (r.exit_code != 0)
      r.message = fmt::format("exited with code {}{}", r.exit_code,
                              r.exit_code == 2 ? " (bad input)" : r.exit_code == 3 ? " (internal error)" : "");
    return;
  }
  if (!WIFSIGNALED(st)) {
    r.status = WorkerStatus::bad_exit;
    r.message = fmt::format("ended with wait status {:#x}", st);
    return;
  }
  r.signal = WTERMSIG(st);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 32)
  const char* abbrev = ::sigabbrev_np(r.signal);
#else
  const char* abbrev = r.signal == SIGSEGV ? "SEGV" : r.signal == SIGABRT ? "ABRT" : r.signal == SIGKILL ? "KILL"
                       : r.signal == SIGBUS ? "BUS" : r.signal == SIGFPE ? "FPE" : r.signal == SIGILL ? "ILL"
                       : r.signal == SIGXCPU ? "XCPU" : nullptr;
#endif
  r.signal_name = abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", r.signal);
  const char* desc = ::strsignal(r.signal);
  r.signal_description = desc ? desc : "";
  const std::string sig = fmt::format("{} ({})", r.signal_name, r.signal_description);
  const int64_t mem = limits.memory_bytes;
  r.memory_limit_hit = mem > 0 && (r.stderr_tail.find(kAllocationFailedMarker) != std::string::npos ||
                                   r.stderr_tail.find("std::bad_alloc") != std::string::npos ||
                                   static_cast<double>(r.max_rss_bytes) >= 0.9 * static_cast<double>(mem));
  if (killed_for_wall) {
    r.status = WorkerStatus::timed_out;
    r.message = fmt::format("wall limit {} s exceeded: its process group was killed ({})", limits.wall_seconds, sig);
  } else if (r.signal == SIGXCPU || (r.signal == SIGKILL && cpu_limit > 0 && r.cpu_seconds >= cpu_limit)) {
    r.status = WorkerStatus::timed_out;
    r.message = fmt::format("CPU limit {} s exceeded ({})", cpu_limit, sig);
  } else if (r.signal == SIGKILL) {
    r.status = WorkerStatus::out_of_memory;
    r.message = fmt::format("killed by {}, which driftgate did not send (the kernel's OOM killer?)", sig);
  } else {
    r.status = WorkerStatus::crashed;
    r.message = fmt::format("killed by {}", sig);
    if (r.memory_limit_hit) r.message += fmt::format("; memory limit {} exceeded?", bytes_text(mem));
  }
}

// RLIMIT_CPU of a worker: as given, or wall_seconds on every core when 0; 0 means none.
static double cpu_limit_of(const WorkerLimits& lim) {
  double cpu_limit = lim.cpu_seconds;
  if (cpu_limit == 0)
    cpu_limit = lim.wall_seconds > 0 ? lim.wall_seconds * std::max(1u, std::thread::hardware_concurrency()) : 0;
  return std::max(0.0, cpu_limit);
}

// Spawns argv, waits under the wall limit, and fills r's times, memory, stderr tail and exit status.
static void run_and_classify(const std::vector<std::string>& argv, const std::string& log_path, const WorkerLimits& lim,
                      double cpu_limit, WorkerResult& r, const WorkerChannels& channels = {}) {
  const pid_t pid = spawn_worker(argv, log_path, channels.fds);
  if (channels.on_start) channels.on_start(pid);
  bool killed_for_wall = false;
  rusage ru{};
  const int st = wait_worker(pid, lim.wall_seconds, killed_for_wall, ru, r.wall_seconds);
  r.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  r.max_rss_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;
  r.stderr_tail = read_tail(log_path, kTailBytes);
  classify_exit(r, st, killed_for_wall, lim, cpu_limit);
}

void exit_with_parent() {
  const pid_t parent = ::getppid();
  std::thread([parent] {
    while (::getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::_Exit(137);
  }).detach();
}

std::string worker_temp_root(int64_t bytes) {
  const char* env = std::getenv("TMPDIR");
  if (env && *env) return env;
  struct statvfs st {};
  constexpr int64_t kSlack = int64_t{64} << 20;
  if (::statvfs("/dev/shm", &st) == 0 && ::access("/dev/shm", W_OK | X_OK) == 0) {
    const auto free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
    if (free_bytes >= 2 * bytes + kSlack) return "/dev/shm";
  }
  return "/tmp";
}

WorkerInputs::WorkerInputs(const TensorMap& inputs, const std::string& case_str, const std::string& temp_root)
    : dir_(make_temp_dir(temp_root, 2 * tensor_bytes(inputs))), path_(dir_ + "/in.safetensors") {
  try {
    write_safetensors(path_, inputs, {{"case", case_str}});
  } catch (...) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    throw;
  }
}

WorkerInputs::~WorkerInputs() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

WorkerResult run_in_worker(const WorkerRequest& req) {
  WorkerResult r;
  std::error_code ec;
  const int64_t bytes = req.inputs_path.empty() ? 2 * tensor_bytes(req.inputs)
                                                : static_cast<int64_t>(fs::file_size(req.inputs_path, ec));
  TempDir dir{make_temp_dir(req.temp_root, bytes), req.keep_temp};
  r.temp_dir = dir.path;
  const std::string out_path = dir.path + "/out.safetensors", report_path = dir.path + "/report.json",
                    log_path = dir.path + "/log.txt";
  const std::string in_path = req.inputs_path.empty() ? dir.path + "/in.safetensors" : req.inputs_path;
  if (req.inputs_path.empty()) write_safetensors(in_path, req.inputs, {{"case", req.case_str}});

  const WorkerLimits& lim = req.limits;
  const double cpu_limit = cpu_limit_of(lim);
  std::vector<std::string> argv = {req.exe.empty() ? self_exe() : req.exe,
                                   "worker",
                                   "--candidate", req.candidate,
                                   "--in", in_path,
                                   "--out", out_path,
                                   "--report", report_path,
                                   "--mem-limit", std::to_string(std::max<int64_t>(0, lim.memory_bytes)),
                                   "--cpu-limit", fmt::format("{}", cpu_limit),
                                   "--runs", std::to_string(req.runs)};
  argv.insert(argv.end(), req.extra_args.begin(), req.extra_args.end());

  run_and_classify(argv, log_path, lim, cpu_limit, r);
  if (r.status == WorkerStatus::ok) read_report(r, report_path, out_path);
  return r;
}

WorkerResult run_worker_args(const std::vector<std::string>& args, const WorkerLimits& lim,
                             const std::vector<std::string>& extra_args, std::string* report,
                             const WorkerChannels& channels) {
  WorkerResult r;
  TempDir dir{make_temp_dir(""), false};
  r.temp_dir = dir.path;
  const std::string report_path = dir.path + "/report.json", log_path = dir.path + "/log.txt";
  const double cpu_limit = cpu_limit_of(lim);
  std::vector<std::string> argv = {self_exe()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--report", report_path});
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  run_and_classify(argv, log_path, lim, cpu_limit, r, channels);
  if (r.status == WorkerStatus::ok) {
    std::ifstream f(report_path);
    if (!f) {
      r.status = WorkerStatus::bad_exit;
      r.message = "exited 0 without a report";
    } else if (report) {
      std::stringstream ss;
      ss << f.rdbuf();
      *report = ss.str();
    }
  }
  return r;
}

std::optional<Disposition> worker_disposition(const WorkerResult& r, std::string* reason) {
  if (r.status == WorkerStatus::not_supported) {
    if (reason) *reason = r.message;
    return Disposition::NOT_SUPPORTED;
  }
  if (r.status != WorkerStatus::ok) {
    if (reason) {
      *reason = fmt::format("{}: {}", worker_status_name(r.status), r.message);
      const std::string tail = last_lines(r.stderr_tail);
      if (!tail.empty()) *reason += "; stderr: " + tail;
    }
    return Disposition::ERRORED;
  }
  const std::vector<std::string_view> v = r.checks.violated();
  if (v.empty()) return std::nullopt;
  if (reason) {
    reason->clear();
    for (const auto& [name, c] : r.checks.all())
      if (c->state == CheckState::violated)
        *reason += fmt::format("{}rule {}: {}", reason->empty() ? "" : "; ", name, c->detail);
  }
  return Disposition::INVALID;
}

}  // namespace dg
