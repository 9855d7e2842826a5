#include "harness/timing_worker.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/report.h"
#include "harness/stats.h"
#include "harness/worker.h"

namespace dg {

std::vector<BenchSamples> time_in_worker(const TimingRequest& req) {
  std::vector<std::string> args = {"bench-worker", "--case", req.case_str, "--max-time", fmt::format("{}", req.max_time_s),
                                   "--min-reps", std::to_string(req.min_repetitions), "--confidence",
                                   fmt::format("{}", req.confidence), "--target-halfwidth",
                                   fmt::format("{}", req.target_halfwidth)};
  for (const std::string& c : req.candidates) args.insert(args.end(), {"--candidate", c});
  WorkerLimits lim;
  lim.wall_seconds = req.wall_seconds > 0 ? req.wall_seconds : req.max_time_s * 4 + 120;
  std::string report;
  WorkerResult w = run_worker_args(args, lim, req.extra_args, &report);
  if (w.status != WorkerStatus::ok)
    throw std::runtime_error(fmt::format("timing worker {}: {}; stderr: {}", worker_status_name(w.status), w.message,
                                         last_lines(w.stderr_tail)));
  std::vector<BenchSamples> out;
  nlohmann::json j = nlohmann::json::parse(report);
  for (const auto& s : j.at("samples")) {
    BenchSamples b;
    b.candidate = s.at("candidate");
    b.seconds = s.at("seconds").get<std::vector<double>>();
    b.cpu_seconds = s.at("cpu_seconds").get<std::vector<double>>();
    b.wall_seconds = s.at("wall_seconds").get<std::vector<double>>();
    b.throttled = s.at("throttled");
    b.low_clock = s.at("low_clock");
    b.device_peak_gbs = s.at("device_peak_gbs");
    b.device = s.at("device");
    b.calls = s.at("calls");
    b.outputs_consistent = s.at("outputs_consistent");
    b.inconsistency = s.at("inconsistency");
    out.push_back(std::move(b));
  }
  return out;
}

int timing_worker_main(const TimingRequest& req, const std::string& report) {
  exit_with_parent();
  std::vector<const Candidate*> cands;
  for (const std::string& n : req.candidates) cands.push_back(&require_candidate(n));
  Case c = parse_case(req.case_str);
  BenchOptions bo;
  bo.max_time_s = req.max_time_s;
  bo.min_repetitions = req.min_repetitions;
  if (req.target_halfwidth > 0 && cands.size() == 2)
    bo.stop = [&](const std::vector<std::vector<double>>& s, double elapsed) {
      if (s[0].size() < 5 || s[1].size() < 5) return false;
      RatioInterval ci = bootstrap_ratio_ci(s[0], s[1], req.confidence, 500, 1);
      return should_stop(ci, req.target_halfwidth, elapsed, req.max_time_s,
                         static_cast<int>(std::min(s[0].size(), s[1].size())), req.min_repetitions);
    };
  std::vector<BenchSamples> samples = time_candidates(cands, c, bo);
  nlohmann::json rows = nlohmann::json::array();
  for (const BenchSamples& s : samples)
    rows.push_back({{"candidate", s.candidate}, {"seconds", s.seconds}, {"cpu_seconds", s.cpu_seconds},
                    {"wall_seconds", s.wall_seconds}, {"throttled", s.throttled}, {"low_clock", s.low_clock},
                    {"device_peak_gbs", s.device_peak_gbs}, {"device", s.device},
                    {"calls", s.calls}, {"outputs_consistent", s.outputs_consistent},
                    {"inconsistency", s.inconsistency}});
  write_file_atomic(report, nlohmann::json{{"samples", rows}}.dump() + "\n");
  return 0;
}

}  // namespace dg
