#include "harness/cases/shard.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "harness/core/digest.h"

namespace dg {
namespace {

// A decimal number without sign, spaces or leading '+' ("007" is 7), below 10^9; nullopt otherwise.
std::optional<int> plain_number(const std::string& s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = 10 * v + (ch - '0');
  }
  return v;
}

// The number in variable `name`, or InputError naming it.
int env_number(const std::map<std::string, std::string>& env, const std::string& name, const std::string& verb) {
  const std::string& v = env.at(name);
  std::optional<int> n = plain_number(v);
  if (!n) throw InputError(fmt::format("{}: {}='{}' is not a shard number (a whole number >= 0)", verb, name, v));
  return *n;
}

// A pair of variables, index and count: both or neither.
std::optional<Shard> env_pair(const std::map<std::string, std::string>& env, const std::string& index_var,
                              const std::string& count_var, const std::string& verb) {
  const bool has_i = env.count(index_var), has_n = env.count(count_var);
  if (!has_i && !has_n) return std::nullopt;
  if (has_i != has_n)
    throw InputError(fmt::format("{}: {} is set but {} is not; a shard needs both its index and the number of shards "
                                 "(or pass --shard i/n)",
                                 verb, has_i ? index_var : count_var, has_i ? count_var : index_var));
  const int i = env_number(env, index_var, verb), n = env_number(env, count_var, verb);
  return parse_shard(fmt::format("{}/{}", i, n), fmt::format("{} ({}={}, {}={})", verb, index_var, i, count_var, n));
}

}  // namespace

std::string Shard::text() const { return fmt::format("{}/{}", index, count); }

Shard parse_shard(const std::string& text, const std::string& what) {
  const size_t slash = text.find('/');
  const std::optional<int> i = slash == std::string::npos ? std::nullopt : plain_number(text.substr(0, slash));
  const std::optional<int> n = slash == std::string::npos ? std::nullopt : plain_number(text.substr(slash + 1));
  if (!i || !n)
    throw InputError(fmt::format("{}: '{}' is not a shard: expected i/n, shard i of n numbered from 0 (0/3, 1/3, 2/3)",
                                 what, text));
  if (*n < 1 || *n > kMaxShards)
    throw InputError(fmt::format("{}: '{}': the number of shards must be 1 to {}", what, text, kMaxShards));
  if (*i >= *n)
    throw InputError(fmt::format("{}: '{}': shards are numbered from 0, so the index must be below {} (0 to {}; a Slurm "
                                 "array is submitted as --array=0-{})",
                                 what, text, *n, *n - 1, *n - 1));
  return {*i, *n};
}

std::optional<Shard> resolve_shard(const std::string& flag, const std::map<std::string, std::string>& env,
                                   const std::string& verb) {
  if (!flag.empty()) return parse_shard(flag, verb + " --shard");
  std::optional<Shard> slurm = env_pair(env, "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", verb);
  if (slurm && env.count("SLURM_ARRAY_TASK_MIN") && env.at("SLURM_ARRAY_TASK_MIN") != "0")
    throw InputError(fmt::format("{}: SLURM_ARRAY_TASK_MIN={}: driftgate numbers shards from 0; submit the array as "
                                 "--array=0-{} (or pass --shard i/n)",
                                 verb, env.at("SLURM_ARRAY_TASK_MIN"), slurm->count - 1));
  std::optional<Shard> k8s = env_pair(env, "JOB_COMPLETION_INDEX", "DRIFTGATE_SHARD_COUNT", verb);
  if (slurm && k8s && !(*slurm == *k8s))
    throw InputError(fmt::format("{}: the environment names two shards: {} from SLURM_ARRAY_TASK_ID/COUNT and {} from "
                                 "JOB_COMPLETION_INDEX/DRIFTGATE_SHARD_COUNT (pass --shard i/n)",
                                 verb, slurm->text(), k8s->text()));
  return slurm ? slurm : k8s;
}

std::optional<Shard> resolve_shard(const std::string& flag, const std::string& verb) {
  std::map<std::string, std::string> env;
  for (const char* var : {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "JOB_COMPLETION_INDEX",
                          "DRIFTGATE_SHARD_COUNT"})
    if (const char* v = std::getenv(var)) env[var] = v;
  return resolve_shard(flag, env, verb);
}

int shard_of(const std::string& case_str, int count) {
  if (count < 1) throw std::invalid_argument("shard_of: count must be >= 1");
  const uint64_t h = std::stoull(sha256_hex(case_str).substr(0, 16), nullptr, 16);
  return static_cast<int>(h % static_cast<uint64_t>(count));
}

std::vector<size_t> shard_positions(const std::vector<std::string>& cases, const Shard& s) {
  std::vector<size_t> mine;
  for (size_t i = 0; i < cases.size(); ++i)
    if (shard_of(cases[i], s.count) == s.index) mine.push_back(i);
  return mine;
}

std::vector<Case> shard_cases(const std::vector<Case>& cases, const Shard& s) {
  std::vector<Case> mine;
  for (const Case& c : cases)
    if (shard_of(c.str(), s.count) == s.index) mine.push_back(c);
  return mine;
}

}  // namespace dg
