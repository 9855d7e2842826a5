// Sharded runs end to end (harness/cases/shard.h, harness/judge/merge.h): a suite run in 3 shards
// and merged gives the unsharded run's rows and verdict (volatile fields aside); bad --shard values,
// corrupt, foreign and duplicated shards are exit 2; a missing shard makes the merge INCOMPLETE.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/run_driftgate.h"

namespace dg {
namespace {

using ::testing::HasSubstr;
using testing::slurp;
namespace fs = std::filesystem;

// rmsnorm-smoke's 5 cases fall in shards 2, 0, 0, 2, 0 of 3: shard 1 is empty and the merge must
// interleave shards 0 and 2 back into the suite's order.
const std::string kSuite = " --suite rmsnorm-smoke";
const std::string kGate = "gate --threads 1 --no-time --base rmsnorm_cpu_naive_f32 --patch rmsnorm_cpu_blocked_f32" + kSuite;
const std::string kVerify = "verify --threads 1 --candidate rmsnorm_cpu_naive_f32,rmsnorm_cpu_blocked_f32" + kSuite;

std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "/dg_shard_" + std::to_string(::getpid()) + "_" + name;
}

testing::CliResult run(const std::string& args) { return testing::run_driftgate(args); }

// The fields that differ between any two runs of one command: wall times (a row's and a record's
// seconds and ref_seconds, a timed row's speed), run ids, timestamps, the machine and command
// (context), the digest over rows that hold times, and a merge's provenance (shards).
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

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

bool valid(const std::string& schema, const std::string& path) {
  return std::system(("/usr/bin/python3 " DG_SOURCE_DIR "/scripts/validate_json.py " + schema + " " + path + " > /dev/null 2>&1")
                         .c_str()) == 0;
}

class ShardCli : public ::testing::Test {
 protected:
  // The unsharded gate, and the same gate in 3 shards; each shard's verdict.json is in shard<i>/.
  static void SetUpTestSuite() {
    testing::CliResult r = run(kGate + " --out " + tmp("whole"));
    if (r.rc != 0) setup_error_ = "unsharded gate: exit " + std::to_string(r.rc) + "\n" + r.out + r.err;
    for (int i = 0; i < 3 && setup_error_.empty(); ++i) {
      r = run(kGate + " --shard " + std::to_string(i) + "/3 --out " + tmp("shard" + std::to_string(i)));
      // A shard with no case judged nothing: CANNOT_JUDGE (4), as any gate that judged nothing.
      if (r.rc != (i == 1 ? 4 : 0)) setup_error_ = "gate shard " + std::to_string(i) + ": exit " + std::to_string(r.rc) + "\n" + r.out + r.err;
    }
  }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }
  static std::string shard_file(int i) { return tmp("shard" + std::to_string(i)) + "/verdict.json"; }
  static std::string setup_error_;
};
std::string ShardCli::setup_error_;

TEST_F(ShardCli, GateShardsMergeIntoTheUnshardedVerdict) {
  for (int i = 0; i < 3; ++i) {
    const nlohmann::json s = read_json(shard_file(i));
    EXPECT_EQ(s["shard"]["index"], i);
    EXPECT_EQ(s["shard"]["count"], 3);
    EXPECT_EQ(s["resume_key"]["shard"], std::to_string(i) + "/3");
    EXPECT_EQ(s["resume_key"]["cases"].size(), 5u);   // the whole run's plan
    EXPECT_EQ(s["planned"], i == 0 ? 3 : i == 1 ? 0 : 2);
    EXPECT_TRUE(valid("verdict", shard_file(i))) << shard_file(i);
  }
  const std::string out = tmp("merged") + "/verdict.json";
  fs::create_directories(tmp("merged"));
  testing::CliResult r = run("merge " + shard_file(2) + " " + shard_file(0) + " " + shard_file(1) + " --out " + out);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("verdict: MERGE (precision only)"));
  EXPECT_TRUE(fs::exists(tmp("merged") + "/verdict.md"));
  EXPECT_TRUE(fs::exists(tmp("merged") + "/junit.xml"));
  EXPECT_TRUE(valid("verdict", out));
  const nlohmann::json whole = read_json(tmp("whole") + "/verdict.json"), merged = read_json(out);
  // Rows in the suite's order, each equal to the unsharded run's, and every other field too.
  ASSERT_EQ(merged["rows"].size(), whole["rows"].size());
  for (size_t k = 0; k < whole["rows"].size(); ++k)
    EXPECT_EQ(scrubbed(merged["rows"][k]), scrubbed(whole["rows"][k])) << "row " << k;
  const nlohmann::json w = scrubbed(whole), m = scrubbed(merged);
  for (const auto& [key, v] : w.items()) EXPECT_EQ(m[key], v) << key;
  for (const auto& [key, v] : m.items()) EXPECT_TRUE(w.contains(key)) << key;
  EXPECT_EQ(merged["shards"]["count"], 3);
  EXPECT_EQ(merged["shards"]["missing"].size(), 0u);
  EXPECT_EQ(merged["shards"]["merged"].size(), 3u);
  EXPECT_FALSE(merged.contains("shard"));
  EXPECT_FALSE(merged["resume_key"].contains("shard"));
}

// Shards that ran on two machines: the merge names both, with their shards, in verdict.json and
// verdict.md (each row's speed stays its own shard's).
TEST_F(ShardCli, ShardsOfTwoMachinesAreNamedNotMixed) {
  nlohmann::json other = read_json(shard_file(2));
  other["shard"]["machine"]["hostname"] = "other-node";
  const std::string moved = tmp("moved.json");
  std::ofstream(moved) << other.dump();
  testing::CliResult r = run("merge " + moved + " " + shard_file(1) + " " + shard_file(0) + " --out " + tmp("two.json"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const nlohmann::json m = read_json(tmp("two.json"));
  ASSERT_EQ(m["shards"]["machines"].size(), 2u);
  EXPECT_EQ(m["shards"]["machines"][1]["machine"]["hostname"], "other-node");
  EXPECT_EQ(m["shards"]["machines"][1]["shards"], nlohmann::json::array({2}));
  EXPECT_EQ(m["shards"]["machines"][0]["shards"], nlohmann::json::array({0, 1}));
  EXPECT_THAT(slurp(tmp("two.md")), HasSubstr("The shards ran on 2 machines"));
  EXPECT_THAT(slurp(tmp("two.md")), HasSubstr("`other-node`"));
}

TEST_F(ShardCli, AMissingGateShardIsIncompleteAndNamed) {
  const std::string out = tmp("partial.json");
  testing::CliResult r = run("merge " + shard_file(0) + " " + shard_file(2) + " --out " + out);
  EXPECT_EQ(r.rc, 5) << r.out << r.err;   // INCOMPLETE, as a gate stopped before its last case
  EXPECT_THAT(r.out, HasSubstr("shards missing: 1/3"));
  const nlohmann::json v = read_json(out);
  EXPECT_EQ(v["verdict"], "INCOMPLETE");   // although shard 1 has no case: the merge cannot know that without it
  EXPECT_THAT(v["verdict_text"].get<std::string>(), HasSubstr("shards missing: 1 of 3"));
  EXPECT_EQ(v["shards"]["missing"], nlohmann::json::array({1}));
  EXPECT_EQ(v["exit_code"], 5);
  EXPECT_TRUE(fs::exists(tmp("partial.md")));
  EXPECT_TRUE(fs::exists(tmp("partial.junit.xml")));
  // Missing a shard with cases: the rows of the others only.
  r = run("merge " + shard_file(1) + " " + shard_file(2) + " --out " + out);
  EXPECT_EQ(r.rc, 5);
  EXPECT_EQ(read_json(out)["rows"].size(), 2u);
  EXPECT_THAT(r.out, HasSubstr("shards missing: 0/3"));
  // The merged key is the unsharded run's: gate --resume judges the missing cases here.
  fs::create_directories(tmp("resumable"));
  r = run("merge " + shard_file(1) + " " + shard_file(2) + " --out " + tmp("resumable") + "/verdict.json");
  ASSERT_EQ(r.rc, 5);
  r = run(kGate + " --resume --out " + tmp("resumable"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const nlohmann::json resumed = read_json(tmp("resumable") + "/verdict.json"),
                       whole = read_json(tmp("whole") + "/verdict.json");
  EXPECT_EQ(resumed["verdict"], "MERGE");
  EXPECT_EQ(scrubbed(resumed["rows"]), scrubbed(whole["rows"]));
}

TEST_F(ShardCli, MergeRefusesWhatIsNotOneRun) {
  const std::string out = tmp("refused.json");
  // The same shard twice.
  testing::CliResult r = run("merge " + shard_file(0) + " " + shard_file(0) + " " + shard_file(1) + " --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("shard 0/3 is given twice"));
  // An unsharded run's file.
  r = run("merge " + shard_file(0) + " " + tmp("whole") + "/verdict.json --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("a gate run without --shard (not a shard)"));
  // Not JSON; and a shard edited by hand.
  std::ofstream(tmp("corrupt.json")) << "{\"kind\": \"gate\", ";
  r = run("merge " + shard_file(0) + " " + tmp("corrupt.json") + " --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("corrupt.json: not a driftgate results file"));
  nlohmann::json edited = read_json(shard_file(2));
  edited["rows"][0]["verdict"] = "MERGE";
  edited["rows"][0]["reasons"] = "edited";
  std::ofstream(tmp("edited.json")) << edited.dump();
  r = run("merge " + shard_file(0) + " " + tmp("edited.json") + " --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("edited after driftgate wrote them"));
  // A shard of another run (other options: --ref-tier), a shard of another count.
  r = run(kGate + " --ref-tier f64 --shard 1/3 --out " + tmp("other_tier"));
  ASSERT_EQ(r.rc, 4) << r.out << r.err;
  r = run("merge " + shard_file(0) + " " + tmp("other_tier") + "/verdict.json --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("not a shard of the same run as"));
  EXPECT_THAT(r.err, HasSubstr("the reference tier differs"));
  r = run(kGate + " --shard 1/4 --out " + tmp("four"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;   // rmsnorm-smoke's case 5 is shard 1 of 4
  r = run("merge " + shard_file(0) + " " + tmp("four") + "/verdict.json --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("shards of different counts"));
  EXPECT_FALSE(fs::exists(out));
  // A verify shard beside gate shards.
  r = run(kVerify + " --shard 1/3 --json " + tmp("verify1.json"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  r = run("merge " + shard_file(0) + " " + tmp("verify1.json") + " --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("a verify shard, and"));
}

TEST_F(ShardCli, BadShardValuesExitTwoBeforeAnyWork) {
  for (const char* bad : {"3", "a/b", "3/3", "-1/2", "1/0"}) {
    for (const std::string& verb : {kGate + " --out " + tmp("bad"), kVerify + " --json " + tmp("bad.json"),
                                    std::string("bench --candidate rmsnorm_cpu_naive_f32") + kSuite + " --json " + tmp("bad.json")}) {
      testing::CliResult r = run(verb + " --shard=" + bad);
      EXPECT_EQ(r.rc, 2) << verb << " --shard " << bad;
      EXPECT_THAT(r.err, HasSubstr(std::string("'") + bad + "'")) << r.err;
    }
  }
  EXPECT_FALSE(fs::exists(tmp("bad")));
  EXPECT_FALSE(fs::exists(tmp("bad.json")));
  testing::CliResult r = run("verify --shard 0/2" + kSuite);   // a shard without a results file is lost work
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("give --json FILE"));
  // The environment: half a pair, a malformed index, two shards named at once.
  r = testing::run_driftgate_env("SLURM_ARRAY_TASK_ID=1", kVerify + " --json " + tmp("env.json"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("SLURM_ARRAY_TASK_COUNT is not"));
  r = testing::run_driftgate_env("SLURM_ARRAY_TASK_ID=x SLURM_ARRAY_TASK_COUNT=2", kVerify + " --json " + tmp("env.json"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("SLURM_ARRAY_TASK_ID='x'"));
  r = testing::run_driftgate_env("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=2 JOB_COMPLETION_INDEX=1 DRIFTGATE_SHARD_COUNT=2",
                                 kVerify + " --json " + tmp("env.json"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("the environment names two shards"));
  EXPECT_FALSE(fs::exists(tmp("env.json")));
}

// verify: 3 shards from the environment (Slurm's variables, Kubernetes' index) and by flag, merged:
// the unsharded run's records, in its order; a missing shard is exit 5 and not a pass.
TEST_F(ShardCli, VerifyShardsMergeIntoTheUnshardedRecords) {
  testing::CliResult r = run(kVerify + " --json " + tmp("v_whole.json"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  r = testing::run_driftgate_env("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=3", kVerify + " --json " + tmp("v0.json"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  r = testing::run_driftgate_env("JOB_COMPLETION_INDEX=1 DRIFTGATE_SHARD_COUNT=3", kVerify + " --json " + tmp("v1.json"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  r = testing::run_driftgate_env("SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=3", kVerify + " --shard 2/3 --json " + tmp("v2.json"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;   // the flag wins
  EXPECT_EQ(read_json(tmp("v1.json"))["records"].size(), 0u);   // the empty shard writes its file
  EXPECT_EQ(read_json(tmp("v2.json"))["shard"]["index"], 2);
  r = run("merge " + tmp("v0.json") + " " + tmp("v1.json") + " " + tmp("v2.json") + " --out " + tmp("v_merged.json"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("10 passed, 0 failed, 10 rows"));
  const nlohmann::json whole = read_json(tmp("v_whole.json")), merged = read_json(tmp("v_merged.json"));
  EXPECT_EQ(scrubbed(merged["records"]), scrubbed(whole["records"]));
  EXPECT_EQ(merged["resume_key"], whole["resume_key"]);
  EXPECT_TRUE(valid("verify", tmp("v_merged.json")));
  EXPECT_TRUE(valid("verify", tmp("v0.json")));
  r = run("merge " + tmp("v0.json") + " " + tmp("v1.json") + " --out " + tmp("v_partial.json"));
  EXPECT_EQ(r.rc, 5);
  EXPECT_THAT(r.out, HasSubstr("shards missing: 2/3"));
  EXPECT_EQ(read_json(tmp("v_partial.json"))["shards"]["missing"], nlohmann::json::array({2}));
}

// A timed shard records its machine, and each timed row the machine its base and patch were timed
// on together; a merge keeps both. bench shards do the same.
TEST_F(ShardCli, TimedShardsRecordTheirMachine) {
  const std::string policy = tmp("fast.toml");
  std::ofstream(policy) << "[throughput]\nmax_time_s = 1\n";
  const std::string c = " --case 'rmsnorm(N=64,D=4096,regime=hidden,dtype=f32,seed=0)'";
  testing::CliResult r = run("gate --threads 1 --policy " + policy +
                             " --base rmsnorm_cpu_naive_f32 --patch rmsnorm_cpu_blocked_f32" + c + " --shard 0/1 --out " + tmp("timed"));
  ASSERT_NE(r.rc, 2) << r.out << r.err;
  const nlohmann::json s = read_json(tmp("timed") + "/verdict.json");
  const nlohmann::json machine = s["shard"]["machine"];
  EXPECT_FALSE(machine["cpu"].get<std::string>().empty());
  EXPECT_GE(machine["cores"].get<int>(), 1);
  EXPECT_EQ(machine["hostname"].get<std::string>().empty(), false);
  ASSERT_FALSE(s["rows"][0]["speed"].is_null()) << s["rows"][0].dump();
  EXPECT_EQ(s["rows"][0]["speed"]["machine"], machine);
  EXPECT_TRUE(valid("verdict", tmp("timed") + "/verdict.json"));
  r = run("merge " + tmp("timed") + "/verdict.json --out " + tmp("timed_merged.json"));
  EXPECT_EQ(r.rc, s["exit_code"].get<int>()) << r.out << r.err;
  const nlohmann::json m = read_json(tmp("timed_merged.json"));
  EXPECT_EQ(m["rows"][0]["speed"], s["rows"][0]["speed"]);
  EXPECT_EQ(m["shards"]["machines"][0]["machine"], machine);
  // bench in 2 shards of rmsnorm-smoke (cases in shards 0, 0, 0, 0, 1), merged.
  for (int i = 0; i < 2; ++i) {
    r = run("bench --candidate rmsnorm_cpu_naive_f32 --max-time 0.2" + kSuite + " --shard " + std::to_string(i) + "/2 --json " +
            tmp("b" + std::to_string(i) + ".json"));
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
  }
  const nlohmann::json b1 = read_json(tmp("b1.json"));
  EXPECT_EQ(b1["shard"]["machine"], machine);
  EXPECT_TRUE(valid("bench", tmp("b1.json")));
  r = run("merge " + tmp("b1.json") + " " + tmp("b0.json") + " --out " + tmp("b_merged.json"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const nlohmann::json bm = read_json(tmp("b_merged.json"));
  ASSERT_EQ(bm["driftgate_rows"].size(), 5u);
  EXPECT_EQ(bm["driftgate_rows"][4]["case"], "rmsnorm(N=4,D=100,regime=hidden,dtype=f64,seed=0)");
  for (const auto& row : bm["driftgate_rows"])
    if (row.contains("median_s")) {
      EXPECT_EQ(row["machine"], machine);
    }
  EXPECT_TRUE(valid("bench", tmp("b_merged.json")));
}

}  // namespace
}  // namespace dg
