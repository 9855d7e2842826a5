// The sandbox (harness/isolation/sandbox.h) against candidates that attack the harness around them: each
// attack as a built-in cheat (candidates/cheats/kda_sandbox_escapes.cpp), a plugin
// (tests/attacks/attack_plugin.c) and an exec program (tests/attacks/attack_exec.py). Every test
// checks the effect (the target unchanged, no process left, the honest rows after it unharmed),
// not only the verdict.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/core/safetensors.h"
#include "harness/isolation/sandbox.h"
#include "harness/judge/verify.h"
#include "harness/isolation/worker.h"
#include "tests/run_driftgate.h"

extern char** environ;

namespace dg {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

const char* const kCase = "kda(T=16,H=1,K=8,V=8,regime=long_memory,dtype=f32,seed=0)";
const std::string kPlugin = DG_ATTACK_PLUGIN;
const std::string kScript = std::string(DG_SOURCE_DIR) + "/tests/attacks/attack_exec.py";

// The checkout's virtual environment (scripts/setup.sh makes .venv: Debian's numpy, and the driftgate
// Python package that kda_numpy.py reads and writes its files with); "" when it is missing.
std::string example_python() {
  const std::string py = std::string(DG_SOURCE_DIR) + "/.venv/bin/python3";
  if (std::system(("'" + py + "' -c 'import numpy, driftgate' >/dev/null 2>&1").c_str()) == 0) return py;
  return "";
}
#define REQUIRE_EXAMPLE_PYTHON(py)             \
  const std::string py = example_python(); \
  if (py.empty()) GTEST_SKIP() << "the venv with the driftgate Python package not found (scripts/setup.sh creates .venv)"

std::string exec_spec(const std::string& py, const std::string& name, const std::string& mode) {
  return name + "=" + py + " " + kScript + " " + mode + " {in} {out}";
}

WorkerRequest request(const std::string& candidate, std::vector<std::string> extra = {}) {
  WorkerRequest r;
  r.exe = DRIFTGATE_EXE;
  r.candidate = candidate;
  r.case_str = kCase;
  r.inputs = generate_inputs(parse_case(kCase));
  r.limits.wall_seconds = 60;
  r.extra_args = std::move(extra);
  return r;
}

std::string describe(const WorkerResult& r) {
  std::string s = std::string(worker_status_name(r.status)) + ": " + r.message + "\n";
  for (const auto& [name, c] : r.checks.all())
    s += std::string(name) + " " + std::string(check_state_name(c->state)) + " " + c->detail + "\n";
  return s + "confinement: " + r.confinement + "\nstderr: " + r.stderr_tail;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Processes (other than this test) whose comm is dg_escapee or whose environment holds
// DG_ATTACK_MARKER=marker.
std::vector<pid_t> survivors(const std::string& marker) {
  std::vector<pid_t> v;
  const std::string needle = "DG_ATTACK_MARKER=" + marker;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    std::string comm = slurp(e.path().string() + "/comm");
    std::string env = slurp(e.path().string() + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (comm == "dg_escapee\n" || (!marker.empty() && (env + "\n").find(needle + "\n") != std::string::npos))
      v.push_back(pid);
  }
  return v;
}

// Waits up to `seconds` for no survivor (a SIGKILLed namespace takes a moment to go).
bool none_survive(const std::string& marker, double seconds = 5) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!survivors(marker).empty()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// A unique marker, set in this process's environment (so workers inherit it) for one test.
struct Marker {
  std::string value;
  explicit Marker(const std::string& name) : value(name + "-" + std::to_string(::getpid())) {
    ::setenv("DG_ATTACK_MARKER", value.c_str(), 1);
  }
  ~Marker() {
    for (pid_t p : survivors(value)) ::kill(p, SIGKILL);   // never leave one behind, pass or fail
    ::unsetenv("DG_ATTACK_MARKER");
  }
};

struct EnvVar {
  std::string name;
  EnvVar(const std::string& n, const std::string& v) : name(n) { ::setenv(n.c_str(), v.c_str(), 1); }
  ~EnvVar() { ::unsetenv(name.c_str()); }
};

// --- 1. inputs nobody can change ------------------------------------------------------------------

TEST(SealedInputs, NeitherThisProcessNorAWorkerCanWriteThem) {
  WorkerInputs in(generate_inputs(parse_case(kCase)), kCase);
  EXPECT_EQ(::fcntl(in.fd(), F_GET_SEALS) & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  const int fd = ::open(("/proc/self/fd/" + std::to_string(in.fd())).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_LT(::pwrite(fd, "x", 1, 100), 0);
  EXPECT_NE(::ftruncate(fd, 10), 0);
  ::close(fd);
}

// A cheat that rewrites its inputs, run first; the honest candidates after it on the same inputs
// must get their usual answer (on b18d484 they turned INCORRECT).
TEST(SealedInputs, ACheatRunFirstCannotChangeWhatTheOthersRead) {
  const std::string json = ::testing::TempDir() + "/dg_sandbox_order.json";
  testing::CliResult r = testing::run_driftgate(
      "verify --candidate kda_cheat_rewrite_inputs,kda_cpu_recurrent_f32,kda_cpu_chunk_f32 --runs 2 --json " + json +
      " --case '" + kCase + "'");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(j.at("records").size(), 3u);
  for (const auto& rec : j.at("records")) {
    EXPECT_EQ(rec.at("disposition"), "PASSED") << rec.dump();
    EXPECT_THAT(rec.at("confinement").get<std::string>(), HasSubstr("namespace"));
  }
  std::filesystem::remove(json);
}

TEST(SealedInputs, TheRewriteAttemptFails) {
  WorkerResult r = run_in_worker(request("kda_cheat_rewrite_inputs"));
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_THAT(r.stderr_tail, HasSubstr("kda_cheat_rewrite_inputs: /proc/self/fd/3: "));
  EXPECT_THAT(r.stderr_tail, Not(HasSubstr("WRITTEN"))) << describe(r);
}

TEST(SealedInputs, PluginAndExecRewritersRunFirstHarmNobody) {
  const std::string plugin_run = "verify --plugin " + kPlugin +
                                 " --candidate kda_plugin_rewrite_f32,kda_cpu_recurrent_f32,kda_cpu_chunk_f32 --runs 2 "
                                 "--case '" + kCase + "'";
  testing::CliResult p = testing::run_driftgate(plugin_run);
  EXPECT_THAT(p.out, HasSubstr("kda_cpu_chunk_f32")) << p.err;
  EXPECT_EQ(p.out.find("INCORRECT", p.out.find("kda_cpu_recurrent_f32")), std::string::npos) << p.out;
  REQUIRE_EXAMPLE_PYTHON(py);
  testing::CliResult e = testing::run_driftgate(
      "verify --exec '" + exec_spec(py, "kda_exec_rewrite_f32", "rewrite") +
      "' --candidate kda_exec_rewrite_f32,kda_cpu_recurrent_f32,kda_cpu_chunk_f32 --runs 2 --case '" + kCase + "'");
  EXPECT_EQ(e.rc, 0) << e.out << e.err;   // the rewriter keeps 11 bits: verify's f32 floor is 12... or passes
}

TEST(SealedInputs, TheGateRejectsAWorsePatchThatRewritesTheInputs) {
  testing::CliResult r = testing::run_driftgate("gate --base kda_cpu_recurrent_f32 --patch kda_cheat_rewrite_inputs --no-time --case '" +
                                                std::string(kCase) + "'");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("REJECT"));
  REQUIRE_EXAMPLE_PYTHON(py);
  testing::CliResult e = testing::run_driftgate("gate --exec '" + exec_spec(py, "kda_exec_rewrite_f32", "rewrite") +
                                                "' --base kda_cpu_recurrent_f32 --patch kda_exec_rewrite_f32 --no-time --case '" +
                                                kCase + "'");
  EXPECT_EQ(e.rc, 1) << e.out << e.err;
  EXPECT_THAT(e.out, HasSubstr("REJECT"));
}

// Where the kernel cannot seal a memfd (forced here with DRIFTGATE_NO_MEMFD), the inputs are a
// private read-only copy whose digest is checked after every run.
TEST(SealedInputs, WithoutMemfdTheCopyIsCheckedAndAnEditIsNamed) {
  EnvVar no_memfd("DRIFTGATE_NO_MEMFD", "1");
  WorkerInputs in(generate_inputs(parse_case(kCase)), kCase);
  EXPECT_FALSE(in.sealed());
  EXPECT_EQ(in.check_unchanged(), "");
  // What an unconfined worker running as root could do: write through its descriptor's path.
  const std::string path = "/proc/self/fd/" + std::to_string(in.fd());
  ::chmod(path.c_str(), 0600);
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "xxxx", 4, in.bytes() - 4), 4);
  ::close(fd);
  const std::string what = in.check_unchanged();
  EXPECT_THAT(what, HasSubstr("inputs file changed during the run"));
  EXPECT_THAT(what, HasSubstr("a fresh copy was written"));
  EXPECT_EQ(in.check_unchanged(), "");   // the fresh copy holds the case's inputs again
  const TensorMap back = read_safetensors("/proc/self/fd/" + std::to_string(in.fd())).tensors;
  const TensorMap want = generate_inputs(parse_case(kCase));
  ASSERT_EQ(back.size(), want.size());
  for (const auto& [name, t] : want) EXPECT_EQ(std::memcmp(back.at(name).bytes(), t.bytes(), t.nbytes()), 0) << name;
}

// With neither a sealed memfd nor Landlock, a rewriting cheat is caught by the digest (rule
// input_mutation), and the honest candidates after it still read the case's inputs.
TEST(SealedInputs, WithoutMemfdOrLandlockARewriterIsInvalidAndHarmsNobody) {
  EnvVar no_memfd("DRIFTGATE_NO_MEMFD", "1");
  EnvVar off("DRIFTGATE_SANDBOX_DISABLE", "landlock");
  const std::string json = ::testing::TempDir() + "/dg_sandbox_nomemfd.json";
  testing::CliResult r = testing::run_driftgate(
      "verify --candidate kda_cheat_rewrite_inputs,kda_cpu_recurrent_f32,kda_cpu_chunk_f32 --runs 2 --json " + json +
      " --case '" + kCase + "'");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(j.at("records").size(), 3u);
  const auto& cheat = j.at("records")[0];
  EXPECT_EQ(cheat.at("candidate"), "kda_cheat_rewrite_inputs");
  if (::geteuid() == 0 || cheat.at("disposition") == "INVALID") {
    EXPECT_THAT(cheat.at("reason").get<std::string>(), HasSubstr("inputs file changed during the run"));
  } else {
    // Only where the write itself was refused (no root, no write permission): then nothing changed.
    EXPECT_THAT(r.err + r.out, Not(HasSubstr("WRITTEN")));
  }
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(j.at("records")[i].at("disposition"), "PASSED") << j.at("records")[i].dump();
    EXPECT_THAT(j.at("records")[i].at("confinement").get<std::string>(), HasSubstr("private copy checked by SHA-256"));
  }
  std::filesystem::remove(json);
  // The same attack as a plugin and as an exec program: the rewriter is INVALID (or its write was
  // refused) and the honest candidates after it read the case's inputs.
  // (An exec program reaches the inputs only through its worker's /proc entry, which it does not
  // find from inside the sandbox's PID namespace, so its attempt need not land; the plugin writes
  // from inside the worker, which as root succeeds and must be caught.)
  auto rewriter_first = [&](const std::string& args, const std::string& rewriter, bool in_worker) {
    testing::CliResult v = testing::run_driftgate("verify " + args + " --candidate " + rewriter +
                                                  ",kda_cpu_recurrent_f32,kda_cpu_chunk_f32 --runs 2 --json " + json +
                                                  " --case '" + kCase + "'");
    const nlohmann::json k = nlohmann::json::parse(slurp(json));
    ASSERT_EQ(k.at("records").size(), 3u) << v.err;
    const auto& first = k.at("records")[0];
    // As root, with Landlock off, nothing refuses the write: the digest must catch it.
    if ((in_worker && ::geteuid() == 0) || first.at("disposition") == "INVALID") {
      EXPECT_THAT(first.at("reason").get<std::string>(), HasSubstr("inputs file changed during the run")) << first.dump();
    }
    for (size_t i = 1; i < 3; ++i) EXPECT_EQ(k.at("records")[i].at("disposition"), "PASSED") << k.at("records")[i].dump();
    std::filesystem::remove(json);
  };
  rewriter_first("--plugin " + kPlugin, "kda_plugin_rewrite_f32", true);
  REQUIRE_EXAMPLE_PYTHON(py);
  rewriter_first("--exec '" + exec_spec(py, "kda_exec_rewrite_f32", "rewrite") + "'", "kda_exec_rewrite_f32", false);
}

// --- forged outputs ---------------------------------------------------------------------------------

TEST(OutputCheck, AForgedOutputsFileIsAnInvalidRowNamingEachTensor) {
  WorkerResult r = run_in_worker(request("kda_cheat_forged_outputs"));
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_EQ(r.checks.outputs.state, CheckState::violated);
  EXPECT_THAT(r.checks.outputs.detail, HasSubstr("o: shape [1], expected [1,16,1,8]"));
  EXPECT_THAT(r.checks.outputs.detail, HasSubstr("extra: not an output of kda"));
  EXPECT_TRUE(r.outputs.empty());
  std::string why;
  EXPECT_EQ(worker_disposition(r, &why), Disposition::INVALID);
  EXPECT_THAT(why, HasSubstr("rule outputs: "));

  WorkerResult p = run_in_worker(request("kda_plugin_forge_f32", {"--plugin", kPlugin}));
  ASSERT_EQ(p.status, WorkerStatus::ok) << describe(p);
  EXPECT_THAT(p.checks.outputs.detail, HasSubstr("ht: shape [1]")) << describe(p);
}

TEST(OutputCheck, NamesShapesAndDtypesAgainstTheOpAndCandidate) {
  const Case c = parse_case(kCase);
  TensorMap good = run_candidate(*find_candidate("kda_cpu_recurrent_f32"), c, generate_inputs(c));
  EXPECT_EQ(check_outputs(good, kCase, "kda_cpu_recurrent_f32"), "");
  TensorMap wrong_dtype = good;
  wrong_dtype["o"] = Tensor(DType::i32, good.at("o").shape());
  EXPECT_THAT(check_outputs(wrong_dtype, kCase, "kda_cpu_recurrent_f32"), HasSubstr("o: dtype I32, expected F32"));
  TensorMap missing = good;
  missing.erase("ht");
  EXPECT_THAT(check_outputs(missing, kCase, "kda_cpu_recurrent_f32"), HasSubstr("ht: missing"));
  EXPECT_THAT(check_outputs(wrong_dtype, kCase, "kda_not_registered"), HasSubstr("expected a float type"));
}

TEST(OutputCheck, ForgedOutputsNeverEndTheSweep) {
  // On b18d484: "compare: reference has 256 elements, candidate 1", exit 3.
  testing::CliResult r = testing::run_driftgate("verify --plugin " + kPlugin +
                                                " --candidate kda_plugin_forge_f32,kda_cheat_forged_outputs,kda_cpu_recurrent_f32 "
                                                "--case '" + kCase + "'");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("INVALID"));
  EXPECT_THAT(r.out, HasSubstr("3 rows"));
  REQUIRE_EXAMPLE_PYTHON(py);
  testing::CliResult e = testing::run_driftgate("verify --exec '" + exec_spec(py, "kda_exec_forge_f32", "forge") +
                                                "' --candidate kda_exec_forge_f32,kda_cpu_recurrent_f32 --case '" + kCase + "'");
  EXPECT_NE(e.rc, 3) << e.out << e.err;
  EXPECT_THAT(e.out, HasSubstr("2 rows")) << e.err;
}

// --- 2. containment -------------------------------------------------------------------------------

TEST(Containment, ASetsidGrandchildDiesWithItsRow) {
  Marker m("daemon");
  WorkerResult r = run_in_worker(request("kda_cheat_setsid_daemon"));
  EXPECT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_TRUE(none_survive(m.value));
  WorkerResult e = run_in_worker(request("kda_cheat_escape_group"));
  EXPECT_EQ(e.status, WorkerStatus::ok) << describe(e);
  EXPECT_TRUE(none_survive(m.value));
  WorkerResult p = run_in_worker(request("kda_plugin_daemon_f32", {"--plugin", kPlugin}));
  EXPECT_EQ(p.status, WorkerStatus::ok) << describe(p);
  EXPECT_TRUE(none_survive(m.value));
  REQUIRE_EXAMPLE_PYTHON(py);
  WorkerResult x = run_in_worker(
      request("kda_exec_daemon_f32", {"--exec", exec_spec(py, "kda_exec_daemon_f32", "daemon")}));
  EXPECT_EQ(x.status, WorkerStatus::ok) << describe(x);
  EXPECT_TRUE(none_survive(m.value));
}

// The wall limit holds whatever the candidate does with its process group (on b18d484 driftgate
// waited forever), in the namespace and in the degraded subreaper mode.
void expect_group_escape_killed(const std::string& marker) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--plugin", kPlugin}, std::vector<std::string>{}}) {
    WorkerRequest req = request(extra.empty() ? "kda_exec_hang_f32" : "kda_plugin_hang_f32", extra);
    if (extra.empty()) {
      const std::string py = example_python();
      if (py.empty()) continue;
      req.extra_args = {"--exec", exec_spec(py, "kda_exec_hang_f32", "hang")};
    }
    req.limits.wall_seconds = 3;
    WorkerResult r = run_in_worker(req);
    EXPECT_EQ(r.status, WorkerStatus::timed_out) << describe(r);
    EXPECT_LT(r.wall_seconds, 15) << describe(r);
    EXPECT_TRUE(none_survive(marker)) << req.candidate;
  }
}

TEST(Containment, TheWallLimitKillsAGroupEscapeAndItsGrandchildren) {
  Marker m("hang");
  expect_group_escape_killed(m.value);
}

TEST(Containment, DegradedToASubreaperTheWallLimitStillHolds) {
  Marker m("hang-degraded");
  EnvVar off("DRIFTGATE_SANDBOX_DISABLE", "namespaces");
  WorkerResult r = run_in_worker(request("kda_cpu_recurrent_f32"));
  EXPECT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_THAT(r.confinement, HasSubstr("subreaper (no namespaces: disabled)"));
  expect_group_escape_killed(m.value);
  WorkerResult d = run_in_worker(request("kda_cheat_setsid_daemon"));
  EXPECT_EQ(d.status, WorkerStatus::ok) << describe(d);
  EXPECT_TRUE(none_survive(m.value));
}

// --- confinement -----------------------------------------------------------------------------------

TEST(Confinement, WritesOutsideTheWorkerDirFailAndTheTargetIsUnchanged) {
  const std::string target = ::testing::TempDir() + "/dg_sandbox_results.json";
  { std::ofstream(target) << "{\"records\": []}\n"; }
  EnvVar t("DG_CANARY_TARGET", target);
  WorkerResult r = run_in_worker(request("kda_cheat_write_outside"));
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_THAT(r.confinement, HasSubstr("landlock abi"));
  EXPECT_THAT(r.stderr_tail, HasSubstr(target + ": ")) << describe(r);
  EXPECT_THAT(r.stderr_tail, Not(HasSubstr("WRITTEN"))) << describe(r);
  WorkerResult p = run_in_worker(request("kda_plugin_outside_f32", {"--plugin", kPlugin}));
  EXPECT_THAT(p.stderr_tail, HasSubstr("attack: " + target + ": Permission denied")) << describe(p);
  const std::string py = example_python();
  if (!py.empty()) {
    WorkerResult x = run_in_worker(
        request("kda_exec_outside_f32", {"--exec", exec_spec(py, "kda_exec_outside_f32", "outside")}));
    EXPECT_THAT(x.message, HasSubstr("attack: " + target + ": Permission denied")) << describe(x);
    EXPECT_THAT(x.message, Not(HasSubstr("WRITTEN"))) << describe(x);
  }
  EXPECT_EQ(slurp(target), "{\"records\": []}\n");
}

TEST(Confinement, WithoutLandlockTheSameCanaryWrites) {
  // The canary itself works: the test above could fail.
  const std::string target = ::testing::TempDir() + "/dg_sandbox_unconfined.txt";
  fs::remove(target);
  EnvVar t("DG_CANARY_TARGET", target);
  EnvVar off("DRIFTGATE_SANDBOX_DISABLE", "landlock");
  WorkerResult p = run_in_worker(request("kda_plugin_outside_f32", {"--plugin", kPlugin}));
  EXPECT_THAT(p.confinement, HasSubstr("no landlock (disabled)"));
  EXPECT_THAT(p.stderr_tail, HasSubstr("attack: " + target + ": WRITTEN")) << describe(p);
  EXPECT_THAT(slurp(target), HasSubstr("attack_plugin outside"));
  fs::remove(target);
}

TEST(Confinement, TheCandidateHasNoNetwork) {
  // An exec program's view of the network: its namespace's interfaces (only lo), and TCP to this
  // machine's own address fails. It prints them and exits 1, so the row's reason shows them.
  WorkerResult r = run_in_worker(request(
      "kda_exec_net_f32", {"--exec", "kda_exec_net_f32=sh -c 'echo interfaces: $(grep -c : /proc/net/dev); exit 1' {in} {out}"}));
  EXPECT_THAT(r.message, HasSubstr("interfaces: 1")) << describe(r);
  EXPECT_THAT(r.confinement, HasSubstr("net namespace"));
}

TEST(Confinement, ADeviceWorkerMayWriteOnlyItsOwnProcessesProcFiles) {
  // The CUDA driver names its threads through /proc/self/task/TID/comm (sandbox.h). A device worker
  // may write files beneath its own /proc, where everything but its namespace's processes is
  // read-only; elsewhere its writes stay confined, the network stays cut, a setsid daemon still
  // dies with its row, and the row says what held.
  EXPECT_TRUE(is_device_candidate("kda_decode_cuda_f32state"));
  EXPECT_FALSE(is_device_candidate("kda_decode_cpu_f32"));
  EXPECT_FALSE(is_device_candidate("no_such_candidate"));
  const std::string target = ::testing::TempDir() + "/dg_sandbox_device.json";
  { std::ofstream(target) << "{}\n"; }
  EnvVar t("DG_CANARY_TARGET", target);
  const std::string probe =
      "kda_exec_name_f32=sh -c 'echo interfaces: $(grep -c : /proc/net/dev); "
      "for t in /proc/$$/task/*; do echo dg > $t/comm || exit 3; done; echo named: $(cat /proc/$$/comm); "
      "(echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null && echo sysctl: WRITTEN || echo sysctl: refused; "
      "(echo x > \"$DG_CANARY_TARGET\") 2>/dev/null && echo outside: WRITTEN || echo outside: refused; exit 1' {in} {out}";
  WorkerRequest req = request("kda_exec_name_f32", {"--exec", probe});
  req.limits.device = true;
  WorkerResult r = run_in_worker(req);
  EXPECT_THAT(r.message, HasSubstr("interfaces: 1")) << describe(r);
  EXPECT_THAT(r.message, HasSubstr("named: dg")) << describe(r);
  EXPECT_THAT(r.message, HasSubstr("sysctl: refused")) << describe(r);
  EXPECT_THAT(r.message, HasSubstr("outside: refused")) << describe(r);
  EXPECT_EQ(slurp(target), "{}\n");
  EXPECT_THAT(r.confinement, HasSubstr("pid+net namespace, landlock abi"));
  EXPECT_THAT(r.confinement, HasSubstr(" + its processes' /proc files; device worker"));
  WorkerRequest plugin = request("kda_plugin_outside_f32", {"--plugin", kPlugin});
  plugin.limits.device = true;
  WorkerResult p = run_in_worker(plugin);
  EXPECT_THAT(p.stderr_tail, HasSubstr("attack: " + target + ": Permission denied")) << describe(p);
  {
    Marker m("daemon-device");
    WorkerRequest d = request("kda_cheat_setsid_daemon");
    d.limits.device = true;
    WorkerResult dr = run_in_worker(d);
    EXPECT_EQ(dr.status, WorkerStatus::ok) << describe(dr);
    EXPECT_TRUE(none_survive(m.value));
  }
  {
    // A CPU candidate's worker: not even its own /proc files.
    WorkerRequest cpu = req;
    cpu.limits.device = false;
    WorkerResult c = run_in_worker(cpu);
    EXPECT_THAT(c.message, Not(HasSubstr("named:"))) << describe(c);
    EXPECT_THAT(c.confinement, Not(HasSubstr("/proc")));
    EXPECT_THAT(c.confinement, Not(HasSubstr("device worker")));
  }
  {
    // An operator's own list for device workers.
    EnvVar off("DRIFTGATE_DEVICE_SANDBOX_DISABLE", "landlock-fs");
    WorkerResult u = run_in_worker(req);
    EXPECT_THAT(u.message, HasSubstr("outside: WRITTEN")) << describe(u);
    EXPECT_THAT(u.confinement, HasSubstr("(writes not confined); device worker"));
  }
  std::filesystem::remove(target);
}

TEST(Confinement, TheCandidateSeesOnlyItsOwnNamespacesProcesses) {
  // Its /proc is its PID namespace's: the init, the worker and what they started; nothing of
  // driftgate or the rest of the machine.
  WorkerResult r = run_in_worker(request(
      "kda_exec_ps_f32", {"--exec", "kda_exec_ps_f32=sh -c 'echo processes: $(ls -d /proc/[0-9]* | wc -l) self: $$; exit 1' {in} {out}"}));
  const size_t at = r.message.find("processes: ");
  ASSERT_NE(at, std::string::npos) << describe(r);
  EXPECT_LE(std::stoi(r.message.substr(at + 11)), 8) << describe(r);
  EXPECT_THAT(r.message, Not(HasSubstr(" self: " + std::to_string(::getpid()))));
  EXPECT_THAT(r.confinement, Not(HasSubstr("no /proc of its own")));
}

TEST(Confinement, EachMechanismCanBeLeftOutAlone) {
  // DRIFTGATE_SANDBOX_DISABLE's finer words (the GPU check's diagnosis runs through them), and
  // containment without the PID namespace: the setsid daemon canary is still killed when its
  // worker ends (the init is a subreaper).
  struct Want {
    const char* words;
    const char* confinement;
  };
  for (const Want& w : {Want{"pidns", "net namespace, subreaper, landlock abi"},
                        Want{"netns", "pid namespace, landlock abi"},
                        Want{"landlock-fs", "(writes not confined"},
                        Want{"landlock-fs,landlock-net,landlock-scope", "no landlock (disabled)"}}) {
    EnvVar off("DRIFTGATE_SANDBOX_DISABLE", w.words);
    WorkerResult r = run_in_worker(request("kda_cpu_recurrent_f32"));
    ASSERT_EQ(r.status, WorkerStatus::ok) << w.words << ": " << describe(r);
    EXPECT_THAT(r.confinement, HasSubstr(w.confinement)) << w.words;
  }
  {
    Marker m("daemon-pidns");
    EnvVar off("DRIFTGATE_SANDBOX_DISABLE", "pidns");
    WorkerResult d = run_in_worker(request("kda_cheat_setsid_daemon"));
    EXPECT_EQ(d.status, WorkerStatus::ok) << describe(d);
    EXPECT_TRUE(none_survive(m.value));
  }
  EnvVar bad("DRIFTGATE_SANDBOX_DISABLE", "namespaces,landlok");
  try {
    run_in_worker(request("kda_cpu_recurrent_f32"));
    ADD_FAILURE() << "an unknown mechanism was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("DRIFTGATE_SANDBOX_DISABLE: unknown sandbox mechanism 'landlok'"));
  }
  testing::CliResult v = testing::run_driftgate("list candidates");
  EXPECT_EQ(v.rc, 2) << v.err;
  EXPECT_THAT(v.err, HasSubstr("unknown sandbox mechanism 'landlok'"));
}

// --- output cap ---------------------------------------------------------------------------------------

TEST(OutputCap, GigabytesOfOutputKeepOnlyTheTail) {
  EnvVar bytes("DG_FLOOD_BYTES", std::to_string(int64_t{2} << 30));
  WorkerResult p = run_in_worker(request("kda_plugin_flood_f32", {"--plugin", kPlugin}));
  ASSERT_EQ(p.status, WorkerStatus::ok) << describe(p);
  EXPECT_LE(p.stderr_tail.size(), kTailBytes);
  EXPECT_GE(p.output_dropped, int64_t{2} << 30);
  EXPECT_THAT(p.stderr_tail, HasSubstr("attack: the end of the flood"));
  REQUIRE_EXAMPLE_PYTHON(py);
  EnvVar less("DG_FLOOD_BYTES", std::to_string(int64_t{1} << 30));
  WorkerRequest req = request("kda_exec_flood_f32", {"--exec", exec_spec(py, "kda_exec_flood_f32", "flood")});
  req.keep_temp = true;
  WorkerResult x = run_in_worker(req);
  ASSERT_EQ(x.status, WorkerStatus::ok) << describe(x);
  uintmax_t on_disk = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(x.temp_dir))
    if (e.is_regular_file()) on_disk += e.file_size();
  EXPECT_LT(on_disk, uintmax_t{16} << 20);   // outputs and report only: the flood went nowhere
  remove_temp_dir(x.temp_dir);
  fs::remove_all(x.temp_dir);
}

TEST(OutputCap, TheFloodCanaryIsCaughtWithItsTail) {
  WorkerResult r = run_in_worker(request("kda_cheat_output_flood"));
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_GE(r.output_dropped, int64_t{255} << 20);
  EXPECT_THAT(r.stderr_tail, HasSubstr("kda_cheat_output_flood: the end of a 256 MiB flood"));
}

// --- channels (the timing worker's interface, worker.h) -----------------------------------------

TEST(Channels, DescriptorsArriveInOrderAndOnStartSeesTheWorker) {
  WorkerInputs in(generate_inputs(parse_case(kCase)), kCase);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const std::string dir = make_temp_dir(::testing::TempDir());
  SandboxSpec spec;
  // fd 3: a pipe the worker never reads; fd 4: the inputs, which it must find there.
  spec.argv = {DRIFTGATE_EXE, "worker", "--candidate", "kda_cpu_recurrent_f32", "--in-fd", "4",
               "--out", dir + "/out.safetensors", "--report", dir + "/report.json"};
  spec.dir = dir;
  spec.fds = {p[0], in.fd()};
  spec.wall_seconds = 60;
  std::string seen;
  spec.on_start = [&](pid_t pid, pid_t) { seen = slurp("/proc/" + std::to_string(pid) + "/cmdline"); };
  SandboxResult r = run_sandboxed(spec);
  EXPECT_TRUE(WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0) << r.wait_status << r.output_tail;
  EXPECT_TRUE(fs::exists(dir + "/out.safetensors")) << r.output_tail;
  EXPECT_THAT(seen, HasSubstr("worker"));
  EXPECT_THAT(seen, Not(HasSubstr("sandbox-init")));
  ::close(p[0]);
  ::close(p[1]);
  remove_temp_dir(dir);
}

// --- stopping what a candidate left running (the timing worker's hold) ----------------------------

// The CPU time of process `pid` so far, in seconds (every thread).
double cpu_seconds_of(pid_t pid) {
  clockid_t id;
  timespec ts{};
  if (::clock_getcpuclockid(pid, &id) != 0 || ::clock_gettime(id, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

TEST(Hold, EveryDescendantButTheKeptOneStopsAndRunsAgainAfter) {
  // root (the init's place) -> keep (the worker's place, sleeps) -> a child that spins, and a
  // grandchild in a session of its own (reparented to root when its parent exits) that spins.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t root = ::fork();
  ASSERT_GE(root, 0);
  if (root == 0) {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (::fork() == 0) {              // keep
      if (::fork() == 0) for (;;) {}  // a spinning child
      const pid_t mid = ::fork();
      if (mid == 0) {
        ::setsid();
        if (::fork() == 0) for (;;) {}   // a spinning daemon
        ::_exit(0);
      }
      ::waitpid(mid, nullptr, 0);
      const pid_t me = ::getpid();
      (void)!::write(ready[1], &me, sizeof me);
      for (;;) ::pause();
    }
    for (;;) ::pause();
  }
  pid_t keep = 0;
  ASSERT_EQ(::read(ready[0], &keep, sizeof keep), static_cast<ssize_t>(sizeof keep));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));   // the daemon is running by now
  std::string why;
  const std::vector<pid_t> held = stop_sandbox_processes(root, 0, &why);
  EXPECT_EQ(why, "");
  // keep, its spinning child and the daemon (the daemon's first fork has exited).
  EXPECT_EQ(held.size(), 3u);
  EXPECT_EQ(std::count(held.begin(), held.end(), keep), 1);
  std::vector<double> before;
  for (pid_t p : held) before.push_back(cpu_seconds_of(p));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_LT(cpu_seconds_of(held[i]) - before[i], 0.002) << "process " << held[i] << " ran while stopped";
    std::ifstream f(fmt::format("/proc/{}/stat", held[i]));
    std::string line;
    std::getline(f, line);
    EXPECT_EQ(line[line.rfind(')') + 2], 'T') << line;
  }
  continue_processes(held);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double spun = 0;
  for (size_t i = 0; i < held.size(); ++i) spun += cpu_seconds_of(held[i]) - before[i];
  EXPECT_GT(spun, 0.05) << "the spinning processes did not run again";
  // `keep` stays running: stopping the rest again leaves it out.
  const std::vector<pid_t> again = stop_sandbox_processes(root, keep, &why);
  EXPECT_EQ(std::count(again.begin(), again.end(), keep), 0);
  EXPECT_EQ(again.size(), 2u);
  for (pid_t p : held) ::kill(p, SIGKILL);
  ::kill(root, SIGKILL);
  ::waitpid(root, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

// --- temp dirs and signals ------------------------------------------------------------------------

TEST(Sweep, RemovesDeadRunsDirsAndNeverALiveOne) {
  const std::string root = ::testing::TempDir() + "/dg_sweep_root";
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string dead = root + "/driftgate-worker-dead01";
  fs::create_directories(dead);
  { std::ofstream(dead + "/.lock"); }
  { std::ofstream(dead + "/in.safetensors") << "x"; }
  const std::string lockless_new = root + "/driftgate-worker-new001";
  fs::create_directories(lockless_new);
  const std::string live = make_temp_dir(root);
  const std::string other = root + "/not-driftgate";
  fs::create_directories(other);

  EXPECT_EQ(sweep_stale_temp_dirs(root), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(lockless_new));   // could be a dir being made this instant
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  // Another driftgate's live dir: its lock is held by another open file.
  remove_temp_dir(live);
  fs::remove_all(root);
}

// Starts driftgate in the background with TMPDIR=root and the marker; returns its pid.
pid_t start_driftgate(const std::string& args, const std::string& root, const std::string& marker,
                      const std::string& extra_env = "") {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  if (!extra_env.empty()) env.push_back(extra_env);
  env.push_back("TMPDIR=" + root);
  env.push_back("DG_ATTACK_MARKER=" + marker);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string cmd = std::string("exec ") + DRIFTGATE_EXE + " " + args + " >/dev/null 2>&1";
  std::string sh = "sh", c = "-c";
  char* argv[] = {sh.data(), c.data(), cmd.data(), nullptr};
  pid_t pid = 0;
  EXPECT_EQ(::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, envp.data()), 0);
  return pid;
}

int driftgate_worker_dirs(const std::string& root) {
  int n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    if (e.path().filename().string().rfind("driftgate-", 0) == 0) ++n;
  return n;
}

// Kills driftgate with `sig` while a candidate that left its group and forked a setsid grandchild
// hangs; nothing may survive, and (after the next start, for SIGKILL) no dir is left.
void kill_while_hanging(int sig, const std::string& extra_env = "") {
  REQUIRE_EXAMPLE_PYTHON(py);
  // One root per test process: ctest runs the two SIGKILL tests at once, and a shared root was wiped
  // by the other's start (its hanging candidate then never started).
  const std::string root = ::testing::TempDir() + "/dg_kill_root_" + std::to_string(sig) + "_" + std::to_string(::getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string marker = "kill-" + std::to_string(sig) + "-" + std::to_string(::getpid());
  const std::string json = root + "/results.json";
  const pid_t pid = start_driftgate("verify --exec '" + exec_spec(py, "kda_exec_hang_f32", "hang") +
                                        "' --candidate kda_exec_hang_f32 --timeout 120 --json " + json + " --case '" +
                                        kCase + "'",
                                    root, marker, extra_env);
  // Wait for the grandchild `sleep` (a process with the marker that is not driftgate's tree root).
  bool started = false;
  for (int i = 0; i < 1200 && !started; ++i) {   // up to 60 s: the reference comes first, on a loaded machine
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (pid_t p : survivors(marker))
      if (slurp("/proc/" + std::to_string(p) + "/comm") == "sleep\n") started = true;
  }
  ASSERT_TRUE(started) << "the hanging candidate never started";
  EXPECT_EQ(driftgate_worker_dirs(root), 1);
  ::kill(pid, sig);
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == sig) << st;
  EXPECT_TRUE(none_survive(marker)) << "a candidate process outlived driftgate";
  for (pid_t p : survivors(marker)) ::kill(p, SIGKILL);
  if (sig != SIGKILL) {
    EXPECT_EQ(driftgate_worker_dirs(root), 0) << "a signal left a temp dir";
  }
  // The next start sweeps what a SIGKILL left.
  std::vector<std::string> env;
  const pid_t next = start_driftgate("list ops", root, marker + "-next");
  ::waitpid(next, &st, 0);
  EXPECT_EQ(driftgate_worker_dirs(root), 0);
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  fs::remove_all(root);
}

// What selftest checks (each sandbox canary REJECTed), plus what it cannot see: nothing left behind,
// no process and no temp dir.
TEST(Canaries, EachIsRejectedByTheGateAndLeavesNothingBehind) {
  const std::string root = ::testing::TempDir() + "/dg_canary_root";
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string marker = "canaries-" + std::to_string(::getpid());
  for (const char* c : {"kda_cheat_rewrite_inputs", "kda_cheat_escape_group", "kda_cheat_setsid_daemon",
                        "kda_cheat_write_outside", "kda_cheat_output_flood", "kda_cheat_forged_outputs"}) {
    const std::string out = root + "/gate-" + c;
    const pid_t pid = start_driftgate(std::string("gate --base kda_cpu_recurrent_f32 --patch ") + c +
                                          " --no-time --out " + out + " --case '" + kCase + "'",
                                      root, marker);
    int st = 0;
    ::waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << c << ": " << st;
    EXPECT_EQ(nlohmann::json::parse(slurp(out + "/verdict.json")).value("verdict", ""), "REJECT") << c;
    EXPECT_TRUE(none_survive(marker, 2)) << c << " left a process";
    EXPECT_EQ(driftgate_worker_dirs(root), 0) << c << " left a temp dir";
  }
  fs::remove_all(root);
}

TEST(Signals, SigtermKillsTheWorkersAndRemovesTheTempDirs) { kill_while_hanging(SIGTERM); }
TEST(Signals, SigintToo) { kill_while_hanging(SIGINT); }
TEST(Signals, Sigkill_LeavesNoProcessAndTheNextStartSweeps) { kill_while_hanging(SIGKILL); }
TEST(Signals, Sigkill_DegradedToASubreaperLeavesNoProcessEither) {
  kill_while_hanging(SIGKILL, "DRIFTGATE_SANDBOX_DISABLE=namespaces");
}

}  // namespace
}  // namespace dg
