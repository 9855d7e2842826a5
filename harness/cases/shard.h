// Sharded runs: one sweep (`verify`, `bench` or `gate` over a suite) split over n processes or
// machines, each running the cases of one shard and writing a results file of its own, which
// `driftgate merge` combines into what one unsharded run writes (harness/judge/merge.h).
//
// The shard of a case: the first 16 hexadecimal digits of the SHA-256 of its canonical string
// (Case::str(), harness/core/digest.h) read as an unsigned 64-bit number, modulo n. The hash is the
// same on every machine, build and compiler (std::hash is not), so every shard of a run agrees on
// the assignment without talking to the others: each case is in exactly one shard, none is run
// twice or skipped. Shards are not balanced by cost: a 1M-token case weighs what it weighs.
//
// Shards are numbered from 0: `--shard i/n` with 0 <= i < n (`0/3`, `1/3`, `2/3`). When no --shard
// is given the shard is read from the environment:
//   Slurm job arrays   SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (submit with --array=0-(n-1);
//                      an array whose SLURM_ARRAY_TASK_MIN is not 0 is refused)
//   Kubernetes         JOB_COMPLETION_INDEX (an Indexed Job) and DRIFTGATE_SHARD_COUNT (the Job's
//                      completions; Kubernetes does not export the count itself)
// --shard wins over the environment. Half a pair, a malformed value, an index out of range, or
// Slurm and Kubernetes variables that name different shards: InputError (exit 2).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dg {

class Case;

// The --shard option's help, one text for verify, bench and gate.
inline constexpr const char* kShardHelp =
    "i/n: run only shard i of n (0 <= i < n) of the cases, assigned by a stable hash of each case string, and write this "
    "shard's results file for driftgate merge (default: from SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, or "
    "JOB_COMPLETION_INDEX with DRIFTGATE_SHARD_COUNT, when set)";

struct Shard {
  int index = 0;   // 0 <= index < count
  int count = 1;
  std::string text() const;   // "1/3"
  bool operator==(const Shard&) const = default;
};

// The most shards a run may have (a bound on typos such as 1/30000000, not on clusters).
inline constexpr int kMaxShards = 100000;

// "i/n" with 0 <= i < n <= kMaxShards; InputError naming `what` (e.g. "gate --shard") otherwise.
Shard parse_shard(const std::string& text, const std::string& what);

// The shard of this process: `flag` when given (non-empty), else from the environment as above
// (`env` maps a variable to its value; nullopt when none of them is set): nullopt for an unsharded
// run. `verb` names the command in messages.
std::optional<Shard> resolve_shard(const std::string& flag, const std::map<std::string, std::string>& env,
                                   const std::string& verb);
// The same with this process's environment.
std::optional<Shard> resolve_shard(const std::string& flag, const std::string& verb);

// The shard (0 <= s < count) a case string belongs to.
int shard_of(const std::string& case_str, int count);

// The items of `cases` (canonical strings, in the run's order) in shard s, in the same order.
std::vector<size_t> shard_positions(const std::vector<std::string>& cases, const Shard& s);
// The cases of shard s, in the run's order.
std::vector<Case> shard_cases(const std::vector<Case>& cases, const Shard& s);

}  // namespace dg
