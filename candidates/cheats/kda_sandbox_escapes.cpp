// Candidates that attack the harness around them rather than the numbers: rewrite the inputs other
// candidates read, leave processes behind, write outside their own directory, flood their output,
// forge the outputs file. Each computes a worse answer than the base (the low 12 mantissa bits of
// every output cleared: about 11 bits, where the base keeps about 22) or breaks a rule, so it is
// REJECTed; its attack, where the sandbox (harness/isolation/sandbox.h) did not stop it, would make the gate
// judge it against other inputs, or hurt the rows after it. Processes they start are named
// "dg_escapee" (comm), so a test can check none survives.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "candidates/cheats/kda_cheat.h"
#include "harness/core/safetensors.h"

namespace dg::cheats {
namespace {

// About 11 bits: the base's answer with the low 12 mantissa bits of every f32 output cleared.
void degraded(const Case& c, const TensorMap& in, TensorMap& out) {
  honest().run(c, in, out);
  for (auto& [name, t] : out) {
    if (t.dtype() != DType::f32) continue;
    auto* p = reinterpret_cast<uint32_t*>(t.bytes());
    for (size_t i = 0, n = t.nbytes() / 4; i < n; ++i) p[i] &= ~uint32_t{0xfff};
  }
}

std::vector<std::string> cmdline_of(const std::string& pid) {
  std::ifstream f("/proc/" + pid + "/cmdline", std::ios::binary);
  std::vector<std::string> v;
  std::string s;
  while (std::getline(f, s, '\0')) v.push_back(s);
  return v;
}

// The value after `flag` on this worker's command line ("" if none).
std::string worker_arg(const std::string& flag) {
  const std::vector<std::string> v = cmdline_of("self");
  for (size_t i = 0; i + 1 < v.size(); ++i)
    if (v[i] == flag) return v[i + 1];
  return {};
}

void note(const char* who, const std::string& target, bool done) {
  std::fprintf(stderr, "%s: %s: %s\n", who, target.c_str(), done ? "WRITTEN" : std::strerror(errno));
}

// Overwrites the second half of a file with the bits of 1.0f; true when it worked.
bool scribble(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  ::fstat(fd, &st);
  std::vector<uint32_t> ones(static_cast<size_t>(st.st_size / 8) + 1, 0x3f800000u);
  const ssize_t n = ::pwrite(fd, ones.data(), static_cast<size_t>(st.st_size / 2) & ~size_t{3}, st.st_size / 2);
  const int e = errno;
  ::close(fd);
  errno = e;
  return n > 0;
}

// Every driftgate inputs file or memfd this process can name: its own descriptor and path, other
// processes' sealed memfds, and the files of older driftgates under the temp roots.
std::vector<std::string> input_targets() {
  std::vector<std::string> t;
  if (std::string fd = worker_arg("--in-fd"); !fd.empty()) t.push_back("/proc/self/fd/" + fd);
  if (std::string p = worker_arg("--in"); !p.empty()) t.push_back(p);
  for (const char* root : {"/dev/shm", "/tmp"}) {
    if (DIR* d = ::opendir(root)) {
      while (const dirent* e = ::readdir(d))
        if (std::strncmp(e->d_name, "driftgate-worker-", 17) == 0)
          t.push_back(std::string(root) + "/" + e->d_name + "/in.safetensors");
      ::closedir(d);
    }
  }
  return t;
}

// Runs `body` in a grandchild that left this session and process group (named dg_escapee); returns
// once the child in between has exited.
template <class F>
void daemonize(F body) {
  const pid_t c = ::fork();
  if (c == 0) {
    ::setsid();
    if (::fork() == 0) {
      ::prctl(PR_SET_NAME, "dg_escapee", 0, 0, 0);
      body();
      ::_exit(0);
    }
    ::_exit(0);
  }
  if (c > 0) ::waitpid(c, nullptr, 0);
}

// 1. Rewrites the inputs at the end of its last run, so a candidate run after it (the naive one,
//    whose error sets the gate's limit) would compute on other inputs.
void rewrite_inputs(const Case& c, const TensorMap& in, TensorMap& out) {
  static std::atomic<int> calls{0};
  degraded(c, in, out);
  const std::string runs = worker_arg("--runs");
  if (++calls < (runs.empty() ? 1 : std::atoi(runs.c_str()))) return;
  for (const std::string& t : input_targets()) note("kda_cheat_rewrite_inputs", t, scribble(t));
}

// 2. Joins its parent's process group, and leaves a grandchild in a session of its own that sleeps
//    for an hour: neither a group kill nor the end of the worker would reach it.
void escape_group(const Case& c, const TensorMap& in, TensorMap& out) {
  ::setpgid(0, ::getpgid(::getppid()));
  daemonize([] { std::this_thread::sleep_for(std::chrono::hours(1)); });
  degraded(c, in, out);
}

// 3. A daemon (setsid, double fork) that keeps rewriting every inputs file it finds for an hour: the
//    rows after this one would read other inputs.
void setsid_daemon(const Case& c, const TensorMap& in, TensorMap& out) {
  daemonize([] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::hours(1);
    while (std::chrono::steady_clock::now() < end) {
      for (const std::string& t : input_targets()) scribble(t);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  degraded(c, in, out);
}

// 4. Writes outside its directory: the results files of every driftgate it can see (--json, --out,
//    --junit, --md on their command lines, except its own worker's), other workers' directories,
//    and $DG_CANARY_TARGET.
void write_outside(const Case& c, const TensorMap& in, TensorMap& out) {
  degraded(c, in, out);
  std::vector<std::string> targets;
  if (const char* t = std::getenv("DG_CANARY_TARGET")) targets.push_back(t);
  if (DIR* d = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(d)) {
      const std::vector<std::string> v = cmdline_of(e->d_name);
      if (v.empty() || v[0].find("driftgate") == std::string::npos) continue;
      for (size_t i = 0; i + 1 < v.size(); ++i)
        if (v[i] == "--json" || v[i] == "--out" || v[i] == "--junit" || v[i] == "--md") targets.push_back(v[i + 1]);
    }
    ::closedir(d);
  }
  const char* own = std::getenv("TMPDIR");
  for (const char* root : {"/dev/shm", "/tmp"}) {
    if (DIR* d = ::opendir(root)) {
      while (const dirent* e = ::readdir(d)) {
        const std::string dir = std::string(root) + "/" + e->d_name;
        if (std::strncmp(e->d_name, "driftgate-worker-", 17) == 0 && (!own || dir != own))
          targets.push_back(dir + "/canary.txt");
      }
      ::closedir(d);
    }
  }
  for (const std::string& t : targets) {
    if (own && t.rfind(std::string(own) + "/", 0) == 0) continue;   // its own outputs: allowed
    const int fd = ::open(t.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    const bool done = fd >= 0 && ::write(fd, "kda_cheat_write_outside\n", 24) == 24;
    note("kda_cheat_write_outside", t, done);
    if (fd >= 0) ::close(fd);
  }
}

// 5. Floods stdout and stderr with 256 MiB, then ends its output with a line the row's tail keeps.
void output_flood(const Case& c, const TensorMap& in, TensorMap& out) {
  std::string block(size_t{1} << 20, 'x');
  block.back() = '\n';
  for (int i = 0; i < 256; ++i)
    if (::write(i % 2 ? 2 : 1, block.data(), block.size()) < 0) break;
  std::fputs("kda_cheat_output_flood: the end of a 256 MiB flood\n", stderr);
  degraded(c, in, out);
}

// 6. Computes the right answer, then, after the worker has written its outputs (at exit), replaces
//    them with a forged file: o of one element, an integer ht, and a tensor no op has.
void forged_outputs(const Case& c, const TensorMap& in, TensorMap& out) {
  honest().run(c, in, out);
  static std::atomic<bool> once{false};
  if (once.exchange(true)) return;
  std::atexit([] {
    const std::string path = worker_arg("--out");
    if (path.empty()) return;
    TensorMap forged;
    forged["o"] = Tensor(DType::f32, {1});
    forged["ht"] = Tensor(DType::i32, {1});
    forged["extra"] = Tensor(DType::f32, {2});
    try {
      write_safetensors(path, forged);
    } catch (...) {
    }
  });
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_cheat_rewrite_inputs,
                      cheat_info("kda_cheat_rewrite_inputs", "11 bits; rewrites the shared inputs after its last run"),
                      rewrite_inputs);
DG_REGISTER_CANDIDATE(kda_cheat_escape_group,
                      cheat_info("kda_cheat_escape_group", "11 bits; joins its parent's group, leaves a setsid grandchild"),
                      escape_group);
DG_REGISTER_CANDIDATE(kda_cheat_setsid_daemon,
                      cheat_info("kda_cheat_setsid_daemon", "11 bits; a daemon that keeps rewriting inputs files"),
                      setsid_daemon);
DG_REGISTER_CANDIDATE(kda_cheat_write_outside,
                      cheat_info("kda_cheat_write_outside", "11 bits; writes results files and other workers' dirs"),
                      write_outside);
DG_REGISTER_CANDIDATE(kda_cheat_output_flood,
                      cheat_info("kda_cheat_output_flood", "11 bits; 256 MiB on stdout and stderr"), output_flood);
DG_REGISTER_CANDIDATE(kda_cheat_forged_outputs,
                      cheat_info("kda_cheat_forged_outputs", "right answer; a forged outputs file written at exit"),
                      forged_outputs);

}  // namespace dg::cheats
