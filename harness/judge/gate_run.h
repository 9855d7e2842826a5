// Running a gate: verify base, patch and the policy's naive candidate on every case, time base and
// patch when the patch passed precision, and write verdict.json / verdict.md / junit.xml after every
// case, so a killed gate keeps every row it measured and its files say INCOMPLETE until every
// planned case has a row.
//
// The three files never disagree for a reader: each is written to a temporary file and renamed into
// place, in the order verdict.md, junit.xml, verdict.json; all three carry the same run id and rows
// digest. verdict.json, the file programs read, is renamed last, so when it names a rows digest the
// other two with that digest are already in place (a reader checks the digests to be sure).
//
// Faults while timing are rows, not aborts: a timing worker that crashes, hangs past its wall limit
// or fails is retried with the base alone; if the base alone fails the case is CANNOT_JUDGE (check
// "base"), otherwise the patch failed while timed (check "timing", outcome errored, REJECT).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/judge/gate.h"

namespace dg {

// A fresh run id: 32 hexadecimal digits from std::random_device.
std::string new_run_id();
// The folder a gate without --out writes to: results/gate-<UTC yyyymmddThhmmss>-<first 8 digits of
// the run id> (results/README.md).
std::string default_gate_dir(const std::string& run_id);

struct GateOptions {
  Tier tier = Tier::dd;
  std::optional<double> claim;
  std::string out_dir;               // empty: no files
  std::string run_id;                // empty: a fresh one (new_run_id)
  std::string save_failures_dir;     // inputs, reference and outputs of every rejected case
  bool time = true;                  // measure throughput (false: precision only)
  std::string command;               // for the JSON context and reproduce lines
  std::string suite;                 // the --suite name (verdict.json), empty for --case lists
  bool isolate = true;               // candidates' precision runs in worker processes, two poisons each
  double wall_seconds = 600;         // worker limits: wall seconds per candidate worker run (gate --timeout)
  int64_t memory_bytes = int64_t{8} << 30;
  std::vector<std::string> worker_args;   // forwarded to workers (--plugin, --exec, --threads)
  // Rows of an interrupted gate of the same base and patch (--resume): their cases are not run again.
  std::vector<GateRow> prior_rows;
  // gate --baseline FILE: the base's record of each case comes from a stored verdict (its patch's
  // rows: a previous release whose kernel cannot be loaded any more) instead of a run; the base
  // candidate passed to run_gate is a stand-in that never runs, and nothing is timed.
  std::map<std::string, Record> baseline;
  std::string baseline_path;
  nlohmann::json baseline_provenance;   // GateReport::baseline
  bool timeout_given = false;        // --timeout was on the command line (reproduce commands carry it)
  int threads = 0;                   // --threads (0: all cores)
  bool progress = false;             // a line per case on stderr: case i/n, elapsed, ETA (harness/core/progress.h)
  // The resume key of this run (options, policy, tier, cases, binary and plugin digests), written
  // into verdict.json; a resumed gate checks it before reading the rows.
  nlohmann::json resume_key = nlohmann::json::object();
  // A sharded gate (harness/cases/shard.h): the shard's record (GateReport::shard), and the whole
  // run's cases, whose coverage of the op's values is the one reported (every shard reports the
  // run's gaps, not its own). Null and empty for an unsharded gate.
  nlohmann::json shard;
  std::vector<Case> run_cases;
  // Times base and patch on a case within `wall_seconds` and fills a SpeedRow; set by the CLI
  // (Google Benchmark timing in a worker). Throws when the timing worker fails.
  std::function<SpeedRow(const Candidate& base, const Candidate& patch, const Case& c, const Policy& p,
                         double wall_seconds)>
      time_case;
  // Times one candidate alone, briefly, within `wall_seconds`; throws when it fails. Used after a
  // failed timing to tell a base that fails while timed from a patch that does.
  std::function<void(const Candidate& cand, const Case& c, double wall_seconds)> time_alone;
};

// The wall limit of a timing worker on a case: twice the policy's time budget, plus 10 s, plus ten
// times the seconds base and patch took in their check runs (20 calls of each at that speed).
double timing_wall_seconds(const Policy& policy, const Record& base, const Record& patch);

// The command that reproduces one case of a gate: every flag that changes its verdict (--ref-tier,
// --policy as an absolute path, --claim, --no-time, --timeout, --threads, --plugin, --exec).
std::string gate_reproduce(const std::string& base, const std::string& patch, const Case& c, const Policy& policy,
                           const GateOptions& opt);

GateReport run_gate(const Candidate& base, const Candidate& patch, const std::vector<Case>& cases,
                    const Policy& policy, const GateOptions& opt);

// Writes verdict.json, verdict.md and junit.xml into dir (created if needed), each atomically.
void write_gate_files(const std::string& dir, const GateReport& r);

}  // namespace dg
