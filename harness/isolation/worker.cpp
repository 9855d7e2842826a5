// run_in_worker: sealed inputs, temp dir, the sandbox, classification, report, output check (worker.h).
#include "harness/isolation/worker.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
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

#include "harness/core/digest.h"
#include "harness/cases/registry.h"
#include "harness/core/json_limits.h"
#include "harness/core/safetensors.h"
#include "harness/isolation/sandbox.h"
#include "harness/judge/verify.h"
#include "harness/isolation/worker_main.h"

extern char** environ;

namespace dg {
namespace {

namespace fs = std::filesystem;

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

std::string temp_dir_for(const std::string& root, int64_t bytes) {
  return make_temp_dir(root.empty() ? worker_temp_root(bytes) : root);
}

struct TempDir {
  std::string path;
  bool keep;
  ~TempDir() {
    if (keep)
      keep_temp_dir(path);
    else
      remove_temp_dir(path);
  }
};

std::string bytes_text(int64_t b) {
  if (b >= (int64_t{1} << 30) && b % (int64_t{1} << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (int64_t{1} << 20) && b % (int64_t{1} << 20) == 0) return fmt::format("{} MiB", b >> 20);
  return fmt::format("{} bytes", b);
}

constexpr int64_t kMaxReportBytes = int64_t{1} << 20;

// Why `path` is not a plain file of at most max_bytes ("" when it is); never follows a link or
// opens a FIFO.
std::string regular_file_problem(const std::string& path, int64_t max_bytes) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fmt::format("missing ({})", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_size > max_bytes) return fmt::format("{} bytes, more than the {} expected", st.st_size, max_bytes);
  return {};
}

CheckResult parse_check(const nlohmann::json& j) {
  CheckResult c;
  const std::string s = j.at("state").get<std::string>();
  c.state = s == "ok" ? CheckState::ok : s == "violated" ? CheckState::violated : CheckState::not_run;
  c.detail = j.at("detail").get<std::string>();
  return c;
}

// Reads the report (and, when the candidate ran cleanly, the outputs) of a worker that exited 0.
void read_report(WorkerResult& r, const std::string& report_path, const std::string& out_path, int64_t max_out_bytes) {
  if (const std::string bad = regular_file_problem(report_path, kMaxReportBytes); !bad.empty()) {
    r.status = WorkerStatus::bad_exit;
    r.message = "exited 0 without a readable report (did the candidate call exit()?): " + bad;
    return;
  }
  try {
    std::ifstream f(report_path);
    std::stringstream text;
    text << f.rdbuf();
    const nlohmann::json j = parse_json_bounded(text.str());   // the candidate's process wrote it
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
    r.checks.outputs = CheckResult{};
    if (r.status == WorkerStatus::ok) {
      // The worker's dir is the candidate's: the file may be anything (a FIFO, a link, huge).
      if (const std::string bad = regular_file_problem(out_path, max_out_bytes); !bad.empty()) {
        r.checks.outputs = {CheckState::violated, "out.safetensors: " + bad};
        return;
      }
      r.outputs = read_safetensors(out_path).tensors;
    }
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
          {"nondeterministic", &nondeterministic}, {"outputs", &outputs}};
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
    r.message = fmt::format("wall limit {} s exceeded: its sandbox was killed ({})", limits.wall_seconds, sig);
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

// Runs argv in the sandbox under the wall limit and fills r's times, memory, output tail,
// confinement and exit status.
static void run_and_classify(const std::vector<std::string>& argv, const std::string& dir, const WorkerLimits& lim,
                             double cpu_limit, const WorkerChannels& channels, WorkerResult& r) {
  SandboxSpec spec;
  spec.argv = argv;
  spec.dir = dir;
  spec.fds = channels.fds;
  spec.wall_seconds = lim.wall_seconds;
  spec.on_start = channels.on_start;
  spec.device = lim.device;
  const SandboxResult s = run_sandboxed(spec);
  const rusage& ru = s.usage;
  r.wall_seconds = s.wall_seconds;
  r.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  r.max_rss_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;
  r.stderr_tail = s.output_tail;
  r.output_dropped = s.output_dropped;
  r.confinement = s.confinement;
  classify_exit(r, s.wait_status, s.killed_for_wall, lim, cpu_limit);
  if (r.status != WorkerStatus::ok && r.output_dropped > 0)
    r.message += fmt::format(" ({} bytes of output before the last {} dropped)", r.output_dropped, r.stderr_tail.size());
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

namespace {

// Whether the kernel refused memfd sealing as such (not a failure of this machine's resources).
bool sealing_unsupported(int e) { return e == ENOSYS || e == EINVAL || e == EPERM || e == EACCES; }

// Seals a memfd against writes and resizing. The kernel answers EBUSY while pages of the file are
// still pinned (it waits a little for them itself); the pages sendfile() just filled can be, briefly
// (one gate resumed in a full test run read "sealing the inputs: Device or resource busy"), so
// EBUSY is retried for up to about 200 ms.
bool add_seals(int fd) {
  for (int attempt = 0;; ++attempt) {
    if (::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) return true;
    if (errno != EBUSY || attempt == 20) return false;
    ::usleep(10000);
  }
}

}  // namespace

WorkerInputs::WorkerInputs(const TensorMap& inputs, const std::string& case_str) : case_str_(case_str) {
  const char* force = std::getenv("DRIFTGATE_NO_MEMFD");
  if (force && *force && std::string(force) != "0") {
    sealed_ = false;
    inputs_ = inputs;
    write_copy();
    return;
  }
  // Written to a private file first (write_safetensors takes a path), copied into the memfd, sealed.
  const std::string dir = temp_dir_for("", 2 * tensor_bytes(inputs));
  const std::string path = dir + "/in.safetensors";
  int refused = 0;   // errno of a memfd_create or F_ADD_SEALS the kernel refused: use the fallback
  try {
    write_safetensors(path, inputs, {{"case", case_str}});
    fd_ = ::memfd_create("driftgate-inputs", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd_ < 0 && !sealing_unsupported(errno)) fail_errno("memfd_create", errno);
    if (fd_ < 0) refused = errno;
    if (!refused) {
      const int src = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (src < 0) fail_errno("open " + path, errno);
      struct stat st {};
      ::fstat(src, &st);
      bytes_ = st.st_size;
      off_t off = 0;
      while (off < st.st_size) {
        const ssize_t n = ::sendfile(fd_, src, &off, static_cast<size_t>(st.st_size - off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          const int e = n < 0 ? errno : EIO;
          ::close(src);
          fail_errno("copying the inputs into a memfd", e);
        }
      }
      ::close(src);
      if (!add_seals(fd_)) {
        if (!sealing_unsupported(errno)) fail_errno("sealing the inputs", errno);
        refused = errno;
        ::close(fd_);
        fd_ = -1;
      }
    }
  } catch (...) {
    if (fd_ >= 0) ::close(fd_);
    remove_temp_dir(dir);
    throw;
  }
  remove_temp_dir(dir);
  if (refused) {
    sealed_ = false;
    inputs_ = inputs;
    write_copy();
  }
}

void WorkerInputs::write_copy() const {
  const std::string dir = temp_dir_for("", 2 * tensor_bytes(inputs_));
  const std::string path = dir + "/in.safetensors";
  int fd = -1;
  try {
    write_safetensors(path, inputs_, {{"case", case_str_}});
    if (::chmod(path.c_str(), 0400) != 0) fail_errno("chmod " + path, errno);
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_errno("open " + path, errno);
    struct stat st {};
    ::fstat(fd, &st);
    const std::string digest = file_sha256(fmt::format("/proc/self/fd/{}", fd));
    if (digest.empty()) throw std::runtime_error("cannot read back the private copy of the inputs " + path);
    if (fd_ >= 0) ::close(fd_);
    if (!dir_.empty()) remove_temp_dir(dir_);
    fd_ = fd;
    bytes_ = st.st_size;
    dir_ = dir;
    digest_ = digest;
  } catch (...) {
    if (fd >= 0) ::close(fd);
    remove_temp_dir(dir);
    throw;
  }
}

std::string WorkerInputs::check_unchanged() const {
  if (sealed_) return "";
  struct stat st {};
  const std::string now = ::fstat(fd_, &st) == 0 ? file_sha256(fmt::format("/proc/self/fd/{}", fd_)) : "";
  if (now == digest_ && st.st_size == bytes_) return "";
  const std::string what = fmt::format(
      "the case's inputs file changed during the run ({} bytes, SHA-256 {} -> {} bytes, {}; no sealed memfd on this "
      "machine, so a private copy is checked after every run); a fresh copy was written for the next candidate",
      bytes_, digest_.substr(0, 16), static_cast<int64_t>(st.st_size), now.empty() ? "unreadable" : now.substr(0, 16));
  write_copy();
  return what;
}

WorkerInputs::~WorkerInputs() {
  if (fd_ >= 0) ::close(fd_);
  if (!dir_.empty()) remove_temp_dir(dir_);
}

std::string check_outputs(const TensorMap& outputs, const std::string& case_str, const std::string& candidate) {
  const Case c = parse_case(case_str);
  const OpSpec* op = find_op(c.op());
  if (!op) return fmt::format("unknown op {}", c.op());
  const Candidate* cand = find_candidate(candidate);
  const std::map<std::string, std::vector<int64_t>> want = op->output_shapes(c);
  std::vector<std::string> problems;
  for (const auto& [name, shape] : want) {
    auto it = outputs.find(name);
    if (it == outputs.end()) {
      problems.push_back(fmt::format("{}: missing", name));
      continue;
    }
    const Tensor& t = it->second;
    const DType dt = cand ? output_dtype(name, cand->info()) : t.dtype();
    if (t.shape() != shape)
      problems.push_back(fmt::format("{}: shape {}, expected {}", name, t.shape_str(), Tensor(DType::f32, shape).shape_str()));
    else if (cand ? t.dtype() != dt : !info(t.dtype()).is_float)
      problems.push_back(fmt::format("{}: dtype {}, expected {}", name, info(t.dtype()).st_name,
                                     cand ? std::string(info(dt).st_name) : std::string("a float type")));
  }
  for (const auto& [name, t] : outputs)
    if (!want.count(name)) problems.push_back(fmt::format("{}: not an output of {}", name, c.op()));
  std::string msg;
  for (const std::string& p : problems) msg += (msg.empty() ? "" : "; ") + p;
  return msg;
}

namespace {

// The most an honest outputs file of the case can hold: the op's outputs in the widest dtype (8
// bytes), at least twice the inputs, plus 1 MiB of header. (Twice the inputs alone was too little
// for a decode case, whose state output outweighs its few tokens of input: 17.8 MB of outputs
// against 2.1 MB of inputs at B = 8, H = 32, K = V = 128.)
int64_t max_output_bytes(const std::string& case_str, int64_t input_bytes) {
  int64_t bytes = 2 * input_bytes;
  const Case c = parse_case(case_str);
  if (const OpSpec* op = find_op(c.op())) {
    int64_t outputs = 0;
    for (const auto& [name, shape] : op->output_shapes(c)) {
      int64_t n = 8;
      for (int64_t d : shape) n *= std::max<int64_t>(d, 1);
      outputs += n;
    }
    bytes = std::max(bytes, outputs);
  }
  return bytes + (int64_t{1} << 20);
}

}  // namespace

bool is_device_candidate(const std::string& name) {
  const Candidate* c = find_candidate(name);
  return c && c->info().backend == "cuda";
}

WorkerResult run_in_worker(const WorkerRequest& req) {
  WorkerResult r;
  std::optional<WorkerInputs> own_inputs;
  if (!req.shared_inputs) own_inputs.emplace(req.inputs, req.case_str);
  const WorkerInputs& inputs = req.shared_inputs ? *req.shared_inputs : *own_inputs;
  TempDir dir{temp_dir_for(req.temp_root, inputs.bytes()), req.keep_temp};
  r.temp_dir = dir.path;
  const std::string out_path = dir.path + "/out.safetensors", report_path = dir.path + "/report.json";

  WorkerLimits lim = req.limits;
  lim.device = lim.device || is_device_candidate(req.candidate);
  const double cpu_limit = cpu_limit_of(lim);
  std::vector<std::string> argv = {req.exe.empty() ? self_exe() : req.exe,
                                   "worker",
                                   "--candidate", req.candidate,
                                   "--in-fd", "3",
                                   "--out", out_path,
                                   "--report", report_path,
                                   "--mem-limit", std::to_string(std::max<int64_t>(0, lim.memory_bytes)),
                                   "--cpu-limit", fmt::format("{}", cpu_limit),
                                   "--runs", std::to_string(req.runs)};
  argv.insert(argv.end(), req.extra_args.begin(), req.extra_args.end());

  WorkerChannels ch;
  ch.fds = {inputs.fd()};
  run_and_classify(argv, dir.path, lim, cpu_limit, ch, r);
  // Without a sealed memfd, the private copy is checked once the worker (and all it started) is gone.
  const std::string changed = inputs.check_unchanged();
  if (!inputs.sealed())
    r.confinement += std::string(r.confinement.empty() ? "" : ", ") + "inputs: a private copy checked by SHA-256 (no sealed memfd)";
  if (r.status == WorkerStatus::ok) read_report(r, report_path, out_path, max_output_bytes(req.case_str, inputs.bytes()));
  if (!changed.empty()) {
    if (r.status == WorkerStatus::ok) {
      r.checks.input_mutation = {CheckState::violated, changed};
      r.outputs.clear();
    } else {
      r.message += "; " + changed;
    }
    return r;
  }
  if (r.status == WorkerStatus::ok && r.checks.outputs.state != CheckState::violated) {
    const std::string problem = check_outputs(r.outputs, req.case_str, req.candidate);
    if (problem.empty()) {
      r.checks.outputs.state = CheckState::ok;
    } else {
      r.checks.outputs = {CheckState::violated, problem};
      r.outputs.clear();
    }
  }
  return r;
}

WorkerResult run_worker_args(const std::vector<std::string>& args, const WorkerLimits& lim,
                             const std::vector<std::string>& extra_args, std::string* report,
                             const WorkerChannels& channels) {
  WorkerResult r;
  TempDir dir{temp_dir_for("", 0), false};
  r.temp_dir = dir.path;
  const std::string report_path = dir.path + "/report.json";
  const double cpu_limit = cpu_limit_of(lim);
  std::vector<std::string> argv = {self_exe()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--report", report_path});
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  run_and_classify(argv, dir.path, lim, cpu_limit, channels, r);
  if (r.status == WorkerStatus::ok) {
    std::string text;
    if (const std::string bad = regular_file_problem(report_path, kMaxReportBytes); !bad.empty()) {
      r.status = WorkerStatus::bad_exit;
      r.message = "exited 0 without a readable report: " + bad;
    } else if (report) {
      std::ifstream f(report_path);
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
