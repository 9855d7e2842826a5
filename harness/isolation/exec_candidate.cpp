// Exec candidates: write the inputs as .safetensors, run the program through /bin/sh, read the
// outputs back (exec_candidate.h documents the file contract).
#include "harness/isolation/exec_candidate.h"
#include "harness/core/threads.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "harness/isolation/plugin.h"
#include "harness/core/safetensors.h"

extern char** environ;

namespace dg {
namespace {

namespace fs = std::filesystem;

std::vector<std::string>& specs() {
  static std::vector<std::string> v;
  return v;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  size_t e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

// A fresh directory under $TMPDIR (in a worker: the worker's own directory, the only place it may
// write), removed with everything in it when the run ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "driftgate-exec-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw std::runtime_error(fmt::format("exec: cannot create a temporary directory {}: {}", tmpl, std::strerror(errno)));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The end of a program's stdout or stderr: at most kKeep bytes are kept, however much it writes
// (a candidate that floods its output costs neither disk nor memory).
struct OutputTail {
  static constexpr size_t kKeep = 4096;
  std::string buf;
  int64_t dropped = 0;
  void add(const char* p, size_t n) {
    buf.append(p, n);
    if (buf.size() > 2 * kKeep) {
      dropped += static_cast<int64_t>(buf.size() - kKeep);
      buf.erase(0, buf.size() - kKeep);
    }
  }
  // The last lines, at most about `max_chars` characters, with what was dropped before them.
  std::string text(size_t max_chars = 2000) const {
    std::string s = trim(buf);
    bool cut = dropped > 0;
    if (s.size() > max_chars) {
      s = s.substr(s.size() - max_chars);
      size_t nl = s.find('\n');
      if (nl != std::string::npos) s = s.substr(nl + 1);
      cut = true;
    }
    for (char& ch : s) {
      const auto u = static_cast<unsigned char>(ch);
      if (!(u == '\n' || u == '\t' || (u >= 0x20 && u < 0x7f))) ch = '?';
    }
    return cut && !s.empty() ? "..." + s : s;
  }
};

// Reads what is there now from a non-blocking pipe; false at end of file.
bool drain_into(int fd, OutputTail& t) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      t.add(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

// Runs `cmd` with /bin/sh -c, stdin from /dev/null, stdout and stderr into pipes this process
// drains (keeping their tails), no other descriptor; returns the wait status. Processes it leaves
// behind die with the worker's sandbox (harness/isolation/sandbox.h).
int run_shell(const std::string& cmd, OutputTail& out, OutputTail& err) {
  int po[2], pe[2];
  if (::pipe2(po, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("exec: pipe: {}", std::strerror(errno)));
  if (::pipe2(pe, O_CLOEXEC) != 0) {
    ::close(po[0]);
    ::close(po[1]);
    throw std::runtime_error(fmt::format("exec: pipe: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, po[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);   // not the worker's inputs or report
#endif
  std::string sh = "sh", dash_c = "-c", command = cmd;
  char* argv[] = {sh.data(), dash_c.data(), command.data(), nullptr};
  // The environment, with the thread budget (harness/core/threads.h) in place of any inherited value.
  std::vector<std::string> env = budget_environment(num_threads());
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    bool budget = false;
    for (const std::string& b : env) budget = budget || var.compare(0, b.find('=') + 1, b, 0, b.find('=') + 1) == 0;
    if (!budget) env.push_back(var);
  }
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  // The program starts with no signal blocked and every disposition at its default, whatever the
  // process that runs it blocks (the timing worker blocks every signal, harness/timing/timing_worker.h).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  ::close(po[1]);
  ::close(pe[1]);
  if (rc != 0) {
    ::close(po[0]);
    ::close(pe[0]);
    throw std::runtime_error(fmt::format("exec: cannot start /bin/sh: {}", std::strerror(rc)));
  }
  ::fcntl(po[0], F_SETFL, O_NONBLOCK);
  ::fcntl(pe[0], F_SETFL, O_NONBLOCK);
  bool o_open = true, e_open = true;
  int status = 0;
  for (;;) {
    pollfd pfd[2] = {{o_open ? po[0] : -1, POLLIN, 0}, {e_open ? pe[0] : -1, POLLIN, 0}};
    ::poll(pfd, 2, 50);
    if (o_open) o_open = drain_into(po[0], out);
    if (e_open) e_open = drain_into(pe[0], err);
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      ::close(po[0]);
      ::close(pe[0]);
      throw std::runtime_error(fmt::format("exec: waitpid failed: {}", std::strerror(errno)));
    }
  }
  // What is left now; a process it left behind may hold the pipes open, so no waiting for the end.
  if (o_open) drain_into(po[0], out);
  if (e_open) drain_into(pe[0], err);
  ::close(po[0]);
  ::close(pe[0]);
  return status;
}

// An output the harness passes back in with its current value (kda_decode's "state"): one the op
// marks in-out, or one that is not among the case's outputs.
bool is_inout(const OpSpec& op, const Case& c, const std::string& name) {
  for (const TensorSpec& t : op.tensors)
    if (t.name == name) return t.role == TensorRole::inout;
  return op.output_shapes(c).count(name) == 0;
}

std::string shape_json(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? "," : "", shape[i]);
  return s + "]";
}

void run_exec(const std::string& name, const std::string& cmd, const Case& c, const TensorMap& in, TensorMap& out) {
  const OpSpec* op = find_op(c.op());
  TempDir dir;
  const fs::path in_path = dir.path() / "in.safetensors", out_path = dir.path() / "out.safetensors";
  TensorMap file_in = in;
  std::map<std::string, std::string> meta = {{"case", c.str()}, {"op", c.op()}, {"candidate", name},
                                             {"params", case_json(c)["params"].dump()}};
  std::string outputs;
  for (const auto& [oname, t] : out) {
    outputs += (outputs.empty() ? "" : ",") + oname;
    meta["out." + oname + ".dtype"] = std::string(info(t.dtype()).st_name);
    meta["out." + oname + ".shape"] = shape_json(t.shape());
    if (is_inout(*op, c, oname)) {
      if (file_in.count(oname)) throw std::logic_error(fmt::format("exec: in-out tensor '{}' is also an input", oname));
      file_in[oname] = t;
    }
  }
  meta["outputs"] = outputs;
  write_safetensors(in_path.string(), file_in, meta);

  std::string command = replace_all(replace_all(cmd, "{in}", shell_quote(in_path.string())), "{out}",
                                    shell_quote(out_path.string()));
  OutputTail out_tail, err_tail;
  int status = run_shell(command, out_tail, err_tail);
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExecNotSupported) {   // "not this case": a NOT_SUPPORTED row
    std::string tail = err_tail.text();
    throw NotSupported(fmt::format("{}: does not support this case{}", name, tail.empty() ? "" : ": " + tail));
  }
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    std::string how = WIFEXITED(status)
                          ? fmt::format("exited with code {}", WEXITSTATUS(status))
                          : fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    std::string tail = err_tail.text();
    if (tail.empty()) tail = out_tail.text();
    throw std::runtime_error(fmt::format("{}: command {}{}", name, how, tail.empty() ? "" : ": " + tail));
  }
  read_exec_outputs(out_path.string(), name, out);
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string q(1, '\'');
  for (char ch : s) {
    if (ch == '\'') q += "'\\''";
    else q += ch;
  }
  q += '\'';
  return q;
}

void read_exec_outputs(const std::string& path, const std::string& candidate, TensorMap& out) {
  std::string wanted;
  for (const auto& [name, t] : out) wanted += (wanted.empty() ? "" : ", ") + name;
  if (!fs::exists(path))
    throw std::runtime_error(fmt::format("{}: the command exited 0 but wrote no output file (expected {} in {{out}})",
                                         candidate, wanted));
  SafetensorsFile f;
  try {
    f = read_safetensors(path);
  } catch (const SafetensorsError& e) {
    // A candidate's broken output is its failure, not bad input to driftgate.
    throw std::runtime_error(fmt::format("{}: unreadable output file: {}", candidate, e.what()));
  }
  for (auto& [name, dst] : out) {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end()) {
      std::string held;
      for (const auto& [n, t] : f.tensors) held += (held.empty() ? "" : ", ") + n;
      throw std::runtime_error(fmt::format("{}: output tensor '{}' is missing from its output file (it holds: {})",
                                           candidate, name, held.empty() ? "nothing" : held));
    }
    const Tensor& src = it->second;
    if (src.shape() != dst.shape())
      throw std::runtime_error(fmt::format("{}: output tensor '{}' has shape {}, expected {}", candidate, name,
                                           src.shape_str(), dst.shape_str()));
    if (info(src.dtype()).is_float != info(dst.dtype()).is_float)
      throw std::runtime_error(fmt::format("{}: output tensor '{}' has dtype {}, expected {}", candidate, name,
                                           info(src.dtype()).st_name, info(dst.dtype()).st_name));
    if (src.dtype() == dst.dtype()) {
      std::memcpy(dst.bytes(), src.bytes(), dst.nbytes());
      continue;
    }
    // Exact decode into doubles, then one rounding into the harness's dtype.
    std::vector<double> buf(static_cast<size_t>(std::min<int64_t>(src.numel(), 1 << 16)));
    for (int64_t off = 0; off < src.numel(); off += static_cast<int64_t>(buf.size())) {
      size_t n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(buf.size()), src.numel() - off));
      std::span<double> chunk(buf.data(), n);
      src.read(off, chunk);
      dst.write(off, chunk);
    }
  }
}

void register_exec(const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos)
    throw InputError(fmt::format("--exec '{}': expected NAME='CMD {{in}} {{out}}'", spec));
  const std::string name = trim(spec.substr(0, eq));
  std::string cmd = trim(spec.substr(eq + 1));
  if (cmd.size() >= 2 && (cmd.front() == '\'' || cmd.front() == '"') && cmd.back() == cmd.front())
    cmd = cmd.substr(1, cmd.size() - 2);
  auto bad = [&](const std::string& problem) { return InputError(fmt::format("--exec {}: {}", name, problem)); };
  if (name.empty()) throw InputError(fmt::format("--exec '{}': the candidate name before '=' is empty", spec));
  // An optional PREFIX/ (as a prefixed --plugin's: main/kda_exec_numpy_f32 beside
  // branch/kda_exec_numpy_f32); the rest names the op and dtypes.
  const size_t slash = name.find('/');
  const std::string own = slash == std::string::npos ? name : name.substr(slash + 1);
  if (slash != std::string::npos && (slash == 0 || own.empty() || own.find('/') != std::string::npos))
    throw bad("a name holds at most one '/', between a non-empty prefix and the candidate's own name");
  for (char ch : name)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.' || ch == '/'))
      throw bad(fmt::format("names are letters, digits, '_', '-' and '.' (<op>_exec_<algo>_<dtype>, optionally after "
                            "PREFIX/), found '{}'", ch));
  // The op: the longest op name that prefixes the own name followed by '_'.
  const OpSpec* op = nullptr;
  std::string ops;
  for (const OpSpec* o : all_ops()) {
    ops += (ops.empty() ? "" : ", ") + o->name;
    if (own.rfind(o->name + "_", 0) == 0 && (!op || o->name.size() > op->name.size())) op = o;
  }
  if (!op)
    throw bad(fmt::format("the name must start with its op and '_', as in kda_exec_numpy_f32 (ops: {})", ops));
  if (cmd.find("{in}") == std::string::npos || cmd.find("{out}") == std::string::npos)
    throw bad(fmt::format("the command must contain {{in}} and {{out}}, got '{}'", cmd));
  if (const Candidate* other = find_candidate(name))
    throw bad(fmt::format("a candidate of that name is already registered (backend {})", other->info().backend));

  // Dtypes and algorithm from the rest of the name: [exec_]<algo>[_<dtype>].
  std::string rest = own.substr(op->name.size() + 1);
  if (rest.rfind("exec_", 0) == 0) rest = rest.substr(5);
  DType dtype = DType::f32;
  size_t last = rest.rfind('_');
  if (auto d = parse_dtype(last == std::string::npos ? rest : rest.substr(last + 1)); d && info(*d).is_float) {
    dtype = *d;
    rest = last == std::string::npos ? "" : rest.substr(0, last);
  }
  const DType state = (dtype == DType::f64) ? DType::f64 : DType::f32;
  register_candidate(CandidateInfo{name, op->name, "exec", rest.empty() ? "exec" : rest, dtype, state, dtype,
                                   fmt::format("outside program: {}", cmd)},
                     [name, cmd](const Case& c, const TensorMap& in, TensorMap& out) { run_exec(name, cmd, c, in, out); });
  specs().push_back(spec);
}

std::vector<std::string> exec_specs() { return specs(); }

std::vector<std::string> outside_candidate_args() {
  std::vector<std::string> args;
  for (const std::string& p : loaded_plugins()) args.insert(args.end(), {"--plugin", p});
  for (const std::string& s : specs()) args.insert(args.end(), {"--exec", s});
  return args;
}

std::vector<std::string> outside_args_of(const std::vector<std::string>& args, const std::string& candidate) {
  const std::string plugin = plugin_path_of(candidate);
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i + 1 < args.size() && args[i] == "--plugin") {
      // The spec that registered `candidate`: its file, and the prefix its name carries.
      const PluginSpec spec = parse_plugin_spec(args[i + 1]);
      if (!plugin.empty() && same_plugin_file(spec.path, plugin) &&
          candidate.rfind(prefixed_name(spec.prefix, ""), 0) == 0 && (!spec.prefix.empty() || candidate.find('/') == std::string::npos))
        out.insert(out.end(), {args[i], args[i + 1]});
      ++i;
    } else if (i + 1 < args.size() && args[i] == "--exec") {
      const std::string& spec = args[i + 1];
      const size_t eq = spec.find('=');
      if (eq != std::string::npos && trim(spec.substr(0, eq)) == candidate) out.insert(out.end(), {args[i], spec});
      ++i;
    } else {
      out.push_back(args[i]);
    }
  }
  return out;
}

}  // namespace dg
