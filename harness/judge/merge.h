// driftgate merge: the results files of the shards of one run (harness/cases/shard.h) combined
// into the file one unsharded run of the same command writes.
//
// What a shard's file carries, beside its own rows:
//   "shard"        {"index", "count", "cases" (how many are this shard's), "machine"}: which shard,
//                  and the machine it ran on ({"cpu", "cores", "hostname"}: this_machine_record)
//   resume key     the run's key (options, policy, tier, binary and plugin digests, and "cases":
//                  the WHOLE run's planned case list, in the run's order) plus "shard": "i/n"
// A gate's key is verdict.json's "resume_key"; a verify's is its --json "resume_key"; a bench's is
// "driftgate_run_key" in its --json.
//
// merge refuses (InputError, exit 2), naming the file and the problem: a file that is not a
// driftgate results file or was edited after it was written (its rows digest), a file of an
// unsharded run, files of different kinds (verify and gate), of different runs (the first field of
// the key that differs: suite cases, options, policy, binary or plugin digests), of different
// shard counts, the same shard twice, and a row whose case is not in its shard.
//
// The merged file: the rows of every shard in the run's planned order (the order of the key's case
// list), the key without "shard", and the rows digest, verdict and summary computed over them, so it
// equals the unsharded run's file but for the fields that differ between any two runs (timings,
// run ids, timestamps, the machine and command in "context") and "shards": {"count", "merged": one
// entry per shard given (index, path, SHA-256, run id, machine, rows), "missing": the indices of the
// shards not given, "machines": each distinct machine with the cases it timed}. A shard missing
// makes the merge INCOMPLETE: a gate's verdict is INCOMPLETE (exit 5) until every shard is merged,
// with the missing shards listed in verdict_text; a verify or bench merge with a missing shard exits 5
// too and is not a pass. A merged gate verdict.json can be completed by `gate --resume --out DIR`
// (its key is the unsharded run's).
//
// Timing is never mixed across machines: a row's speed verdict compares base and patch timed
// together, interleaved, in one shard (the row carries speed.machine), and merging only places rows
// side by side; when the shards ran on more than one machine, verdict.md says so and "shards"
// names the machine of every timed case.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cases/shard.h"

namespace dg {

// This machine, for the record of a shard and of a timed row: {"cpu": this_cpu_model(), "cores":
// this_machine_cores(), "hostname": gethostname()}.
nlohmann::json this_machine_record();

// The "shard" object of a sharded run's results file.
nlohmann::json shard_record(const Shard& s, size_t cases_in_shard);

// The key of one shard of a run: the run's key plus "shard": "i/n".
nlohmann::json shard_key(const nlohmann::json& run_key, const Shard& s);

// The digest a bench --json carries over its rows ("driftgate_rows_digest"): SHA-256 of the run
// key, "driftgate_rows" and "benchmarks" of `bench` (a file edited by hand no longer matches).
std::string bench_rows_digest(const nlohmann::json& bench, const nlohmann::json& key);

struct MergeOutcome {
  std::string kind;                  // "gate", "verify" or "bench"
  int exit_code = 0;                 // gate: verdict_exit_code; verify and bench: 0 pass, 1 fail, 5 shard missing
  std::vector<int> missing;          // indices of the shards not given
  std::string text;                  // what the command prints
};

// Reads and checks every shard file, then writes the merged run to `out` (atomically). A gate's
// merge also writes its Markdown and JUnit beside `out`: verdict.md and junit.xml when `out` is
// named verdict.json (the layout of gate --out DIR), else <stem>.md and <stem>.junit.xml.
MergeOutcome merge_shard_files(const std::vector<std::string>& files, const std::string& out, const std::string& command);

}  // namespace dg
