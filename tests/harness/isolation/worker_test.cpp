// Candidate isolation end to end (harness/isolation/worker.h): every cheating or crashing candidate in
// candidates/cheats/ is caught with the expected status or rule, and an honest one passes every
// check with the same bits as in process.
#include <cstring>
#include <filesystem>

#include <signal.h>
#include <sys/wait.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/judge/verify.h"
#include "harness/isolation/worker.h"
#include "harness/isolation/worker_main.h"

namespace dg {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// f32 inputs, so the alias cheat's o and v share dtype and shape: o is [1,16,1,8] = 128 elements.
const char* const kCase = "kda(T=16,H=1,K=8,V=8,regime=long_memory,dtype=f32,seed=0)";

WorkerRequest request(const std::string& candidate) {
  WorkerRequest r;
  r.exe = DRIFTGATE_EXE;
  r.candidate = candidate;
  r.case_str = kCase;
  r.inputs = generate_inputs(parse_case(kCase));
  r.limits.wall_seconds = 60;
  return r;
}

std::string describe(const WorkerResult& r) {
  std::string s = std::string(worker_status_name(r.status)) + ": " + r.message + "\n";
  for (const auto& [name, c] : r.checks.all())
    s += std::string(name) + " " + std::string(check_state_name(c->state)) + " " + c->detail + "\n";
  return s + "stderr: " + r.stderr_tail;
}

// A clean run whose only violated rules are `rules`, each detail containing `detail`.
void expect_rules(const WorkerResult& r, std::vector<std::string_view> rules, const std::string& detail) {
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_EQ(r.checks.violated(), rules) << describe(r);
  for (const auto& [name, c] : r.checks.all())
    if (c->state == CheckState::violated) {
      EXPECT_THAT(c->detail, HasSubstr(detail)) << name;
    }
  std::string reason;
  EXPECT_EQ(worker_disposition(r, &reason), Disposition::INVALID);
  EXPECT_THAT(reason, HasSubstr("rule " + std::string(rules.front()) + ": "));
}

void expect_errored(const WorkerResult& r, const std::string& reason_part) {
  std::string reason;
  EXPECT_EQ(worker_disposition(r, &reason), Disposition::ERRORED);
  EXPECT_THAT(reason, HasSubstr(reason_part));
}

TEST(Worker, HonestCandidatePassesEveryCheckWithTheSameBitsAsInProcess) {
  WorkerRequest req = request("kda_cpu_recurrent_f32");
  WorkerResult r = run_in_worker(req);
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  for (const auto& [name, c] : r.checks.all()) EXPECT_EQ(c->state, CheckState::ok) << name << ": " << c->detail;
  ASSERT_EQ(r.run_seconds.size(), 2u);
  EXPECT_GT(r.seconds, 0);
  EXPECT_EQ(worker_disposition(r, nullptr), std::nullopt);
  EXPECT_FALSE(std::filesystem::exists(r.temp_dir));

  const TensorMap here = run_candidate(*find_candidate("kda_cpu_recurrent_f32"), parse_case(kCase), req.inputs);
  ASSERT_EQ(r.outputs.size(), here.size());
  for (const auto& [name, t] : here) {
    const Tensor& w = r.outputs.at(name);
    ASSERT_EQ(w.dtype(), t.dtype()) << name;
    ASSERT_EQ(w.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(w.bytes(), t.bytes(), t.nbytes()), 0) << name;
  }
}

TEST(Worker, OpsWithADriverRunThroughIt) {
  // kda_decode drives its candidate token by token against a state pool (harness/ops/kda.cpp).
  const std::string c = "kda_decode(T=8,B=2,H=1,K=16,V=16,regime=kimi_linear,dtype=f32,seed=0)";
  WorkerRequest req = request("kda_decode_cpu_f32");
  req.case_str = c;
  req.inputs = generate_inputs(parse_case(c));
  WorkerResult r = run_in_worker(req);
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_TRUE(r.checks.violated().empty()) << describe(r);
  const TensorMap here = run_candidate(*find_candidate("kda_decode_cpu_f32"), parse_case(c), req.inputs);
  for (const auto& [name, t] : here)
    EXPECT_EQ(std::memcmp(r.outputs.at(name).bytes(), t.bytes(), t.nbytes()), 0) << name;
}

// A decode case's outputs (the whole state pool) outweigh its inputs (a few tokens) many times:
// kda-decode-gpu's B = 8, H = 32, K = V = 128 case wrote 17.8 MB against 2.1 MB of inputs, and an
// outputs-file limit of twice the inputs made the honest kernel INVALID there.
TEST(Worker, ADecodeCaseWhoseStateOutweighsItsInputsIsRead) {
  const std::string c = "kda_decode(T=2,B=8,H=8,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)";
  WorkerRequest req = request("kda_decode_cpu_f32");
  req.case_str = c;
  req.inputs = generate_inputs(parse_case(c));
  WorkerResult r = run_in_worker(req);
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_TRUE(r.checks.violated().empty()) << describe(r);
  EXPECT_EQ(r.outputs.at("ht").numel(), 8 * 8 * 128 * 128);
}

TEST(Worker, OneRunSkipsTheDeterminismRule) {
  WorkerRequest req = request("kda_cheat_uninit");
  req.runs = 1;
  WorkerResult r = run_in_worker(req);
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  EXPECT_EQ(r.checks.nondeterministic.state, CheckState::not_run);
  EXPECT_EQ(r.checks.guard.state, CheckState::ok);
  EXPECT_EQ(r.run_seconds.size(), 1u);
}

TEST(Worker, SegfaultIsACrashWithItsSignalAndStderr) {
  WorkerResult r = run_in_worker(request("kda_cheat_segfault"));
  EXPECT_EQ(r.status, WorkerStatus::crashed) << describe(r);
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(r.signal_name, "SIGSEGV");
  EXPECT_FALSE(r.signal_description.empty());
  EXPECT_FALSE(r.memory_limit_hit);
  EXPECT_THAT(r.stderr_tail, HasSubstr("writing through a null pointer"));
  expect_errored(r, "crashed: killed by SIGSEGV");
  expect_errored(r, "stderr: kda_cheat_segfault: writing through a null pointer");
}

TEST(Worker, AbortIsACrash) {
  WorkerResult r = run_in_worker(request("kda_cheat_abort"));
  EXPECT_EQ(r.status, WorkerStatus::crashed) << describe(r);
  EXPECT_EQ(r.signal_name, "SIGABRT");
  EXPECT_THAT(r.stderr_tail, HasSubstr("kda_cheat_abort: giving up"));
  expect_errored(r, "SIGABRT");
}

TEST(Worker, HangIsKilledAtTheWallLimit) {
  WorkerRequest req = request("kda_cheat_hang");
  req.limits.wall_seconds = 2;
  WorkerResult r = run_in_worker(req);
  EXPECT_EQ(r.status, WorkerStatus::timed_out) << describe(r);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_GE(r.wall_seconds, 2.0);
  EXPECT_LT(r.wall_seconds, 10.0);
  expect_errored(r, "timed_out: wall limit 2 s exceeded");
}

TEST(Worker, MemoryLimitStopsTheOomCandidate) {
  WorkerRequest req = request("kda_cheat_oom");
  req.limits.memory_bytes = int64_t{512} << 20;
  WorkerResult r = run_in_worker(req);
  EXPECT_EQ(r.status, WorkerStatus::out_of_memory) << describe(r);
  EXPECT_THAT(r.message, HasSubstr("bad_alloc"));
  EXPECT_THAT(r.message, HasSubstr("memory limit 536870912 bytes"));
  EXPECT_THAT(r.stderr_tail, HasSubstr(std::string(kAllocationFailedMarker)));
  EXPECT_LE(r.max_rss_bytes, int64_t{600} << 20);
  expect_errored(r, "out_of_memory");
}

TEST(Worker, ExceptionIsReportedWithItsMessage) {
  WorkerResult r = run_in_worker(request("kda_cheat_throw"));
  EXPECT_EQ(r.status, WorkerStatus::threw) << describe(r);
  EXPECT_THAT(r.message, HasSubstr("run 1, running the candidate: kda_cheat_throw: this kernel does not support"));
  EXPECT_TRUE(r.outputs.empty());
  expect_errored(r, "threw: ");
}

TEST(Worker, InputMutationIsCaught) {
  expect_rules(run_in_worker(request("kda_cheat_mutate_input")), {"input_mutation"}, "run 1: k: contents changed");
}

TEST(Worker, WriteIntoTheGuardIsCaught) {
  expect_rules(run_in_worker(request("kda_cheat_guard_write")), {"guard"}, "run 1: o: 4 bytes overwritten after the end");
}

TEST(Worker, UnwrittenElementsAreCaughtByTheSecondPoison) {
  // The last token of o: HV*V = 8 of 128 elements, quiet NaN in run 1, -FLT_MAX in run 2.
  expect_rules(run_in_worker(request("kda_cheat_uninit")), {"nondeterministic"},
               "run 2: o: 8 of 128 elements differ from run 1 (first at flat index 120: 0x7fc00000 vs 0xff7fffff)");
}

TEST(Worker, ReplayedOutputsAreCaught) {
  WorkerResult r = run_in_worker(request("kda_cheat_stale"));
  expect_rules(r, {"alias", "nondeterministic"}, "run 2: ");
  EXPECT_THAT(r.checks.alias.detail, HasSubstr("replaced by a tensor in storage the harness did not allocate"));
}

TEST(Worker, OutputAliasingAnInputIsCaught) {
  expect_rules(run_in_worker(request("kda_cheat_alias")), {"alias"}, "run 1: o: replaced by a tensor in input v");
}

TEST(Worker, UnknownCandidateIsABadExitWithItsMessage) {
  WorkerResult r = run_in_worker(request("kda_nope"));
  EXPECT_EQ(r.status, WorkerStatus::bad_exit) << describe(r);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.stderr_tail, HasSubstr("unknown candidate 'kda_nope'"));
  expect_errored(r, "bad_exit: exited with code 2 (bad input); stderr: ");
}

TEST(Worker, ExtraArgumentsReachTheWorker) {
  WorkerRequest req = request("kda_cpu_recurrent_f32");
  req.extra_args = {"--no-such-option"};
  WorkerResult r = run_in_worker(req);
  EXPECT_EQ(r.status, WorkerStatus::bad_exit) << describe(r);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.stderr_tail, HasSubstr("--no-such-option"));
}

TEST(Worker, KeepTempLeavesTheFilesForDebugging) {
  WorkerRequest req = request("kda_cpu_recurrent_f32");
  req.keep_temp = true;
  WorkerResult r = run_in_worker(req);
  ASSERT_EQ(r.status, WorkerStatus::ok) << describe(r);
  for (const char* f : {"out.safetensors", "report.json"})
    EXPECT_TRUE(std::filesystem::exists(r.temp_dir + "/" + f)) << f;
  EXPECT_FALSE(std::filesystem::exists(r.temp_dir + "/.lock"));   // not a live run's dir any more
  std::filesystem::remove_all(r.temp_dir);
}

// --- classification of an ended worker, without spawning one --------------------------------------
int signalled(int sig) { return sig; }              // Linux: a wait status of "killed by sig" is sig
int exited(int code) { return (code & 0xff) << 8; }

TEST(ClassifyExit, SignalsLimitsAndExitCodes) {
  ASSERT_TRUE(WIFSIGNALED(signalled(SIGSEGV)) && WTERMSIG(signalled(SIGSEGV)) == SIGSEGV);
  ASSERT_TRUE(WIFEXITED(exited(3)) && WEXITSTATUS(exited(3)) == 3);
  WorkerLimits lim;
  lim.memory_bytes = int64_t{512} << 20;
  lim.wall_seconds = 10;

  WorkerResult segv_after_failed_alloc;
  segv_after_failed_alloc.stderr_tail = std::string(kAllocationFailedMarker) + "\n";
  classify_exit(segv_after_failed_alloc, signalled(SIGSEGV), false, lim, 20);
  EXPECT_EQ(segv_after_failed_alloc.status, WorkerStatus::crashed);
  EXPECT_TRUE(segv_after_failed_alloc.memory_limit_hit);
  EXPECT_THAT(segv_after_failed_alloc.message, HasSubstr("SIGSEGV"));
  EXPECT_THAT(segv_after_failed_alloc.message, HasSubstr("memory limit 512 MiB exceeded?"));

  WorkerResult abort_at_high_rss;
  abort_at_high_rss.max_rss_bytes = int64_t{500} << 20;
  classify_exit(abort_at_high_rss, signalled(SIGABRT), false, lim, 20);
  EXPECT_EQ(abort_at_high_rss.status, WorkerStatus::crashed);
  EXPECT_TRUE(abort_at_high_rss.memory_limit_hit);

  WorkerResult plain_segv;
  classify_exit(plain_segv, signalled(SIGSEGV), false, lim, 20);
  EXPECT_FALSE(plain_segv.memory_limit_hit);
  EXPECT_THAT(plain_segv.message, Not(HasSubstr("memory limit")));

  WorkerResult oom_killer;
  oom_killer.cpu_seconds = 1;
  classify_exit(oom_killer, signalled(SIGKILL), false, lim, 20);
  EXPECT_EQ(oom_killer.status, WorkerStatus::out_of_memory);
  EXPECT_THAT(oom_killer.message, HasSubstr("OOM killer?"));

  WorkerResult cpu_hard_limit;
  cpu_hard_limit.cpu_seconds = 25;
  classify_exit(cpu_hard_limit, signalled(SIGKILL), false, lim, 20);
  EXPECT_EQ(cpu_hard_limit.status, WorkerStatus::timed_out);

  WorkerResult xcpu;
  classify_exit(xcpu, signalled(SIGXCPU), false, lim, 20);
  EXPECT_EQ(xcpu.status, WorkerStatus::timed_out);
  EXPECT_THAT(xcpu.message, HasSubstr("CPU limit 20 s exceeded (SIGXCPU"));

  WorkerResult wall;
  classify_exit(wall, signalled(SIGKILL), true, lim, 20);
  EXPECT_EQ(wall.status, WorkerStatus::timed_out);
  EXPECT_THAT(wall.message, HasSubstr("wall limit 10 s exceeded"));

  WorkerResult internal;
  classify_exit(internal, exited(3), false, lim, 20);
  EXPECT_EQ(internal.status, WorkerStatus::bad_exit);
  EXPECT_EQ(internal.exit_code, 3);
  EXPECT_EQ(internal.signal, 0);

  WorkerResult clean;
  classify_exit(clean, exited(0), false, lim, 20);
  EXPECT_EQ(clean.status, WorkerStatus::ok);
}

TEST(LastLines, KeepsTheEndOnOneLine) {
  EXPECT_EQ(last_lines("a\nb\n\n"), "a | b");
  EXPECT_EQ(last_lines(""), "");
  std::string long_log = std::string(500, 'x') + "\nthe cause\n";
  EXPECT_EQ(last_lines(long_log, 40), "...the cause");
}

}  // namespace
}  // namespace dg
