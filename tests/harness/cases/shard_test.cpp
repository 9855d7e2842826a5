// harness/cases/shard.h: --shard i/n and the environment's shard, read or refused; the stable
// assignment of a case to its shard.
#include "harness/cases/shard.h"

#include <algorithm>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/cases/case.h"

namespace dg {
namespace {

using ::testing::HasSubstr;
using Env = std::map<std::string, std::string>;

std::string refusal(const std::string& flag, const Env& env = {}) {
  try {
    resolve_shard(flag, env, "gate");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Shard, ParsesIndexOverCountFromZero) {
  EXPECT_EQ(parse_shard("0/3", "x"), (Shard{0, 3}));
  EXPECT_EQ(parse_shard("2/3", "x"), (Shard{2, 3}));
  EXPECT_EQ(parse_shard("0/1", "x"), (Shard{0, 1}));
  EXPECT_EQ(parse_shard("2/3", "x").text(), "2/3");
}

TEST(Shard, MalformedValuesAreInputErrorsNamingTheProblem) {
  for (const char* bad : {"3", "a/b", "-1/2", "1/", "/3", " 1/3", "1/3/4", "+1/3", "1.0/3", "0x1/3"})
    EXPECT_THAT(refusal(bad), HasSubstr("is not a shard: expected i/n")) << bad;
  EXPECT_THROW(parse_shard("", "x"), InputError);   // resolve_shard reads "" as no --shard
  EXPECT_THAT(refusal("3/3"), HasSubstr("numbered from 0, so the index must be below 3 (0 to 2; a Slurm array is submitted as --array=0-2)"));
  EXPECT_THAT(refusal("1/0"), HasSubstr("the number of shards must be 1 to"));
  EXPECT_THAT(refusal("0/100001"), HasSubstr("the number of shards must be 1 to 100000"));
  EXPECT_THAT(refusal("3/3"), HasSubstr("gate --shard: '3/3'"));
}

TEST(Shard, FromTheEnvironmentSlurmOrKubernetes) {
  EXPECT_FALSE(resolve_shard("", Env{}, "gate"));
  EXPECT_EQ(*resolve_shard("", Env{{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}, "gate"), (Shard{1, 4}));
  EXPECT_EQ(*resolve_shard("", Env{{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "0"}}, "gate"),
            (Shard{1, 4}));
  EXPECT_EQ(*resolve_shard("", Env{{"JOB_COMPLETION_INDEX", "2"}, {"DRIFTGATE_SHARD_COUNT", "3"}}, "gate"), (Shard{2, 3}));
  // Both, agreeing.
  EXPECT_EQ(*resolve_shard("", Env{{"JOB_COMPLETION_INDEX", "2"}, {"DRIFTGATE_SHARD_COUNT", "3"}, {"SLURM_ARRAY_TASK_ID", "2"},
                                   {"SLURM_ARRAY_TASK_COUNT", "3"}},
                           "gate"),
            (Shard{2, 3}));
}

TEST(Shard, TheFlagWinsOverTheEnvironment) {
  const Env env = {{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "4"}};
  EXPECT_EQ(*resolve_shard("0/2", env, "gate"), (Shard{0, 2}));
  EXPECT_EQ(*resolve_shard("0/2", Env{{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}, "gate"), (Shard{0, 2}));
}

TEST(Shard, BadEnvironmentsAreInputErrors) {
  EXPECT_THAT(refusal("", {{"SLURM_ARRAY_TASK_ID", "1"}}), HasSubstr("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not"));
  EXPECT_THAT(refusal("", {{"DRIFTGATE_SHARD_COUNT", "3"}}), HasSubstr("DRIFTGATE_SHARD_COUNT is set but JOB_COMPLETION_INDEX is not"));
  EXPECT_THAT(refusal("", {{"JOB_COMPLETION_INDEX", "1"}}), HasSubstr("JOB_COMPLETION_INDEX is set but DRIFTGATE_SHARD_COUNT is not"));
  EXPECT_THAT(refusal("", {{"SLURM_ARRAY_TASK_ID", "one"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}),
              HasSubstr("SLURM_ARRAY_TASK_ID='one' is not a shard number"));
  EXPECT_THAT(refusal("", {{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}),
              HasSubstr("SLURM_ARRAY_TASK_ID=4, SLURM_ARRAY_TASK_COUNT=4"));
  EXPECT_THAT(refusal("", {{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "1"}}),
              HasSubstr("submit the array as --array=0-3"));
  EXPECT_THAT(refusal("", {{"JOB_COMPLETION_INDEX", "1"}, {"DRIFTGATE_SHARD_COUNT", "3"}, {"SLURM_ARRAY_TASK_ID", "2"},
                           {"SLURM_ARRAY_TASK_COUNT", "3"}}),
              HasSubstr("the environment names two shards: 2/3 from SLURM"));
}

// The assignment is SHA-256's first 64 bits modulo n: pinned, so a change of hash (which would
// split a run's shards differently between two driftgate builds) fails here.
TEST(Shard, AssignmentIsTheFirst64BitsOfSha256ModuloN) {
  const std::string c = "kda(T=4096,H=2,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)";   // 0x5535a1a223b2ac43
  EXPECT_EQ(shard_of(c, 3), 1);
  EXPECT_EQ(shard_of(c, 7), 3);
  EXPECT_EQ(shard_of(c, 100000), 25283);
  EXPECT_EQ(shard_of(c, 1), 0);
  EXPECT_EQ(shard_of("", 7), 1);   // 0xe3b0c44298fc1c14
}

// Every case in exactly one shard, in the run's order, and the shards not all one.
TEST(Shard, EveryCaseInExactlyOneShardInOrder) {
  std::vector<std::string> cases;
  for (int t = 1; t <= 60; ++t) cases.push_back("rmsnorm(N=" + std::to_string(t) + ",D=64,regime=hidden,dtype=f32,seed=0)");
  for (int n : {1, 2, 3, 7}) {
    std::vector<int> seen(cases.size(), 0);
    std::set<size_t> nonempty;
    for (int i = 0; i < n; ++i) {
      const std::vector<size_t> pos = shard_positions(cases, {i, n});
      EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
      for (size_t p : pos) ++seen[p];
      if (!pos.empty()) nonempty.insert(i);
    }
    for (size_t k = 0; k < cases.size(); ++k) EXPECT_EQ(seen[k], 1) << cases[k] << " over " << n;
    EXPECT_EQ(nonempty.size(), static_cast<size_t>(n));
  }
}

}  // namespace
}  // namespace dg
