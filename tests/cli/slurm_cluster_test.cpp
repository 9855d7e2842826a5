// A sharded sweep on a real Slurm cluster (scripts/slurm/, README "Sweeps on Slurm"): a one-node
// cluster on this machine (scripts/slurm/test-cluster.sh: its own munged, slurmctld and slurmd,
// started here and stopped after), a job array of 3 shards and the merge job submitted with
// scripts/slurm/submit.sh, whose merged verdict equals the unsharded run's; a sweep whose shards
// fail never runs its merge. Skipped, with the reason, where the machine cannot run the daemons
// (Slurm or munge not installed, not root, a daemon that does not start).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/run_driftgate.h"

namespace dg {
namespace {

using ::testing::HasSubstr;
using testing::slurp;
namespace fs = std::filesystem;

const std::string kScripts = DG_SOURCE_DIR "/scripts/slurm/";
// As tests/cli/shard_cli_test.cpp: rmsnorm-smoke's 5 cases fall in shards 2, 0, 0, 2, 0 of 3, so
// shard 1 has none (its gate says CANNOT_JUDGE, exit 4, and its task still succeeds).
const std::string kGateArgs = "--threads 1 --no-time --base rmsnorm_cpu_naive_f32 --patch rmsnorm_cpu_blocked_f32 --suite rmsnorm-smoke";

std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "/dg_slurm_" + std::to_string(::getpid()) + "_" + name;
}

// A shell command with this test's cluster in SLURM_CONF and this build's driftgate in DRIFTGATE.
testing::CliResult sh(const std::string& cmd) {
  const std::string err_path = tmp("stderr.txt");
  const std::string full = "SLURM_CONF=" + tmp("cluster") + "/slurm.conf DRIFTGATE=" DRIFTGATE_EXE " " + cmd + " 2>" + err_path;
  FILE* p = popen(full.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, slurp(err_path)};
}

// `scontrol show job -o ID`, one line per job (an array: one per task), as field maps.
std::vector<std::map<std::string, std::string>> jobs(const std::string& id) {
  std::vector<std::map<std::string, std::string>> out;
  std::istringstream lines(sh("scontrol show job -o " + id).out);
  for (std::string line; std::getline(lines, line);) {
    std::map<std::string, std::string> fields;
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (size_t eq = w.find('='); eq != std::string::npos) fields[w.substr(0, eq)] = w.substr(eq + 1);
    if (!fields.empty()) out.push_back(fields);
  }
  return out;
}

bool finished(const std::map<std::string, std::string>& job) {
  const std::string s = job.count("JobState") ? job.at("JobState") : "";
  return s != "PENDING" && s != "RUNNING" && s != "CONFIGURING" && s != "COMPLETING" && s != "SUSPENDED";
}

// Waits (at most `seconds`) until every job of `id` has finished; returns them.
std::vector<std::map<std::string, std::string>> wait_for(const std::string& id, int seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    auto js = jobs(id);
    bool done = !js.empty();
    for (const auto& j : js) done = done && finished(j);
    if (done || std::chrono::steady_clock::now() > end) return js;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// The job ids submit.sh prints: "sweep job 41 (array 0-2): ..." and "merge job 42 (afterok:41): ...".
std::pair<std::string, std::string> job_ids(const std::string& submitted) {
  std::smatch sweep, merge;
  std::regex_search(submitted, sweep, std::regex("sweep job ([0-9]+) "));
  std::regex_search(submitted, merge, std::regex("merge job ([0-9]+) "));
  return {sweep.empty() ? "" : sweep[1].str(), merge.empty() ? "" : merge[1].str()};
}

// The fields that differ between any two runs of one command (as in shard_cli_test.cpp).
nlohmann::json scrubbed(nlohmann::json j) {
  if (j.is_object()) {
    for (const char* k : {"seconds", "ref_seconds", "run_id", "started_at", "finished_at", "context", "rows_digest", "shards", "speed"})
      j.erase(k);
    for (auto& [k, v] : j.items()) v = scrubbed(v);
  } else if (j.is_array()) {
    for (auto& v : j) v = scrubbed(v);
  }
  return j;
}

class SlurmCluster : public ::testing::Test {
 protected:
  // The cluster, for this test process; a watcher stops it if this process dies before TearDown.
  static void SetUpTestSuite() {
    testing::CliResult r = sh(kScripts + "test-cluster.sh start " + tmp("cluster") + " " + std::to_string(::getpid()));
    if (r.rc == 77) skip_ = r.err;
    else if (r.rc != 0) setup_error_ = "test-cluster.sh start: exit " + std::to_string(r.rc) + "\n" + r.out + r.err;
  }
  // Stops the cluster, then removes every file of this process's (tmp()).
  static void TearDownTestSuite() {
    testing::CliResult r = sh(kScripts + "test-cluster.sh stop " + tmp("cluster"));
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_FALSE(fs::exists(tmp("cluster")));
    remove_own_files();
  }
  static void remove_own_files() {
    const std::string prefix = fs::path(tmp("")).filename().string();
    for (const auto& e : fs::directory_iterator(fs::path(tmp("")).parent_path()))
      if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(e.path());
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }
  static std::string skip_, setup_error_;
};
std::string SlurmCluster::skip_, SlurmCluster::setup_error_;

TEST_F(SlurmCluster, ArraySweepOfThreeShardsMergesIntoTheUnshardedVerdict) {
  testing::CliResult whole = testing::run_driftgate("gate " + kGateArgs + " --out " + tmp("whole"));
  ASSERT_EQ(whole.rc, 0) << whole.out << whole.err;
  const std::string results = tmp("results");
  testing::CliResult r = sh(kScripts + "submit.sh --shards 3 " + results + " gate " + kGateArgs);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto [sweep, merge] = job_ids(r.out);
  ASSERT_FALSE(sweep.empty() || merge.empty()) << r.out;
  EXPECT_THAT(r.out, HasSubstr("(afterok:" + sweep + ")"));
  const auto merge_job = wait_for(merge, 90);
  const auto tasks = jobs(sweep);
  ASSERT_EQ(tasks.size(), 3u) << sh("scontrol show job " + sweep).out;
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("JobState"), "COMPLETED") << "task " << t.at("ArrayTaskId");
    EXPECT_EQ(t.at("ExitCode"), "0:0") << "task " << t.at("ArrayTaskId");
  }
  ASSERT_EQ(merge_job.size(), 1u);
  ASSERT_EQ(merge_job[0].at("JobState"), "COMPLETED") << slurp(results + "/logs/merge-" + merge + ".out");
  EXPECT_EQ(merge_job[0].at("Dependency"), "(null)");   // met: afterok on every task
  EXPECT_THAT(slurp(results + "/logs/merge-" + merge + ".out"), HasSubstr("verdict: MERGE (precision only)"));
  for (int i = 0; i < 3; ++i) {
    const nlohmann::json s = nlohmann::json::parse(slurp(results + "/shard" + std::to_string(i) + "/verdict.json"));
    EXPECT_EQ(s["shard"]["index"], i);   // from SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT
    EXPECT_EQ(s["shard"]["count"], 3);
    EXPECT_EQ(s["planned"], i == 0 ? 3 : i == 1 ? 0 : 2);
  }
  const nlohmann::json merged = nlohmann::json::parse(slurp(results + "/merged/verdict.json")),
                       unsharded = nlohmann::json::parse(slurp(tmp("whole") + "/verdict.json"));
  EXPECT_EQ(merged["verdict"], "MERGE");
  EXPECT_EQ(merged["shards"]["merged"].size(), 3u);
  EXPECT_EQ(merged["shards"]["missing"].size(), 0u);
  EXPECT_EQ(scrubbed(merged), scrubbed(unsharded));
  EXPECT_TRUE(fs::exists(results + "/merged/verdict.md"));
  EXPECT_TRUE(fs::exists(results + "/merged/junit.xml"));
}

// Shards that fail (exit 2: a suite that does not exist) fail their tasks, and Slurm cancels the
// merge (afterok never met, --kill-on-invalid-dep): no merged file.
TEST_F(SlurmCluster, FailedShardsCancelTheMerge) {
  const std::string results = tmp("failed");
  testing::CliResult r = sh(kScripts + "submit.sh --shards 3 " + results + " gate --no-time --base rmsnorm_cpu_naive_f32 "
                            "--patch rmsnorm_cpu_blocked_f32 --suite no-such-suite");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto [sweep, merge] = job_ids(r.out);
  ASSERT_FALSE(sweep.empty() || merge.empty()) << r.out;
  const auto merge_job = wait_for(merge, 90);
  const auto tasks = jobs(sweep);
  ASSERT_EQ(tasks.size(), 3u);
  for (const auto& t : tasks) {
    EXPECT_EQ(t.at("JobState"), "FAILED") << "task " << t.at("ArrayTaskId");
    EXPECT_EQ(t.at("ExitCode"), "2:0") << "task " << t.at("ArrayTaskId");
  }
  ASSERT_EQ(merge_job.size(), 1u);
  EXPECT_EQ(merge_job[0].at("JobState"), "CANCELLED");
  EXPECT_EQ(merge_job[0].at("Reason"), "DependencyNeverSatisfied");
  EXPECT_FALSE(fs::exists(results + "/merged"));
  EXPECT_THAT(slurp(results + "/logs/sweep-" + sweep + "_0.out"), HasSubstr("no-such-suite"));
}

TEST(SlurmScripts, SubmitRefusesBadArgumentsBeforeSubmitting) {
  testing::CliResult r = sh(kScripts + "submit.sh --shards 0 " + tmp("bad") + " gate --suite rmsnorm-smoke");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--shards must be a whole number >= 1"));
  r = sh(kScripts + "submit.sh --shards 2 " + tmp("bad") + " mutants --suite rmsnorm-smoke");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("'mutants' cannot be sharded"));
  fs::create_directories(tmp("used") + "/shard0");
  r = sh(kScripts + "submit.sh --shards 2 " + tmp("used") + " gate --suite rmsnorm-smoke");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("already holds shard results"));
  fs::remove_all(tmp("bad"));
  fs::remove_all(tmp("used"));
  fs::remove(tmp("stderr.txt"));
}

}  // namespace
}  // namespace dg
