// Running a gate: verify base, patch and the policy's naive candidate on every case, time base and
// patch when the patch passed precision, and write verdict.json / verdict.md / junit.xml after every
// case (atomically), so a killed gate keeps every row it measured.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/gate.h"

namespace dg {

struct GateOptions {
  Tier tier = Tier::dd;
  std::optional<double> claim;
  std::string out_dir;               // empty: no files
  std::string save_failures_dir;     // inputs, reference and outputs of every rejected case
  bool time = true;                  // measure throughput (false: precision only)
  std::string command;               // for the JSON context and reproduce lines
  bool isolate = true;               // candidates' precision runs in worker processes, two poisons each
  double wall_seconds = 600;         // worker limits
  int64_t memory_bytes = int64_t{8} << 30;
  std::vector<std::string> worker_args;   // forwarded to workers (--plugin, --exec, --threads)
  // Rows of an interrupted gate of the same base and patch (--resume): their cases are not run again.
  std::vector<GateRow> prior_rows;
  // Times base and patch on a case and fills a SpeedRow; set by the CLI (Google Benchmark timing).
  std::function<SpeedRow(const Candidate& base, const Candidate& patch, const Case& c, const Policy& p)> time_case;
};

GateReport run_gate(const Candidate& base, const Candidate& patch, const std::vector<Case>& cases,
                    const Policy& policy, const GateOptions& opt);

// Writes verdict.json, verdict.md and junit.xml into dir (created if needed), each atomically.
void write_gate_files(const std::string& dir, const GateReport& r);

}  // namespace dg
