// compare_py_json: timing samples in the JSON format of Google Benchmark's JSONReporter, so that
// its tools/compare.py (and anything else that reads that format) can compare two bench runs.
#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <numeric>

#include <benchmark/benchmark.h>

#include "harness/timing/bench_runner.h"

namespace dg {

std::string compare_py_json(const std::vector<BenchSamples>& samples, const Case& c, const nlohmann::json& context) {
  using ojson = nlohmann::ordered_json;
  ojson ctx;
  {
    std::time_t now = std::time(nullptr);
    char buf[64];
    std::tm local{};
    localtime_r(&now, &local);
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", &local);
    std::string date = buf;
    if (date.size() > 2) date.insert(date.size() - 2, ":");   // +0100 -> +01:00, as the library writes it
    const benchmark::CPUInfo& cpu = benchmark::CPUInfo::Get();
    ctx["date"] = date;
    ctx["host_name"] = benchmark::SystemInfo::Get().name;
    ctx["executable"] = "driftgate";
    ctx["num_cpus"] = cpu.num_cpus;
    ctx["mhz_per_cpu"] = static_cast<int64_t>(std::llround(cpu.cycles_per_second / 1e6));
    if (cpu.scaling != benchmark::CPUInfo::UNKNOWN) ctx["cpu_scaling_enabled"] = cpu.scaling == benchmark::CPUInfo::ENABLED;
    ctx["caches"] = ojson::array();
    for (const auto& ci : cpu.caches)
      ctx["caches"].push_back({{"type", ci.type}, {"level", ci.level}, {"size", ci.size}, {"num_sharing", ci.num_sharing}});
    ctx["load_avg"] = cpu.load_avg;
    ctx["driftgate_case"] = c.str();
    ojson extra = ojson::parse(context.is_null() ? std::string("{}") : context.dump());
    if (extra.is_object())
      for (auto& [k, v] : extra.items()) ctx[k] = v;
  }

  ojson benchmarks = ojson::array();
  for (size_t fi = 0; fi < samples.size(); ++fi) {
    const BenchSamples& s = samples[fi];
    const std::string name = s.candidate + "/" + c.str();
    const int64_t n = static_cast<int64_t>(s.seconds.size());
    auto cpu_at = [&](size_t i) { return i < s.cpu_seconds.size() ? s.cpu_seconds[i] : s.seconds[i]; };
    auto row = [&](const std::string& row_name, bool aggregate) {
      ojson r;
      r["name"] = row_name;
      r["family_index"] = fi;
      r["per_family_instance_index"] = 0;
      r["run_name"] = name;
      r["run_type"] = aggregate ? "aggregate" : "iteration";
      r["repetitions"] = n;
      return r;
    };
    auto finish = [&](ojson& r) {
      r["time_unit"] = "ns";
      if (!s.outputs_consistent) r["label"] = "outputs inconsistent: " + s.inconsistency;
      if (!s.invalid.empty()) r["label"] = "INVALID: " + s.invalid;
      benchmarks.push_back(std::move(r));
    };
    for (int64_t i = 0; i < n; ++i) {
      ojson r = row(name, false);
      r["repetition_index"] = i;
      r["threads"] = 1;
      r["iterations"] = 1;
      r["real_time"] = s.seconds[static_cast<size_t>(i)] * 1e9;
      r["cpu_time"] = cpu_at(static_cast<size_t>(i)) * 1e9;
      finish(r);
    }
    if (n < 2) continue;
    // The library's default aggregates: mean, median, sample standard deviation, cv = stddev / mean.
    auto stats = [&](bool cpu) {
      std::vector<double> x(static_cast<size_t>(n));
      for (size_t i = 0; i < x.size(); ++i) x[i] = cpu ? cpu_at(i) : s.seconds[i];
      double mean = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(n);
      double ss = 0;
      for (double v : x) ss += (v - mean) * (v - mean);
      double sd = std::sqrt(ss / static_cast<double>(n - 1));
      std::sort(x.begin(), x.end());
      size_t h = x.size() / 2;
      double med = x.size() % 2 ? x[h] : (x[h - 1] + x[h]) / 2;
      return std::array<double, 4>{mean, med, sd, mean != 0 ? sd / mean : 0.0};
    };
    std::array<double, 4> real = stats(false), cpu = stats(true);
    const char* names[4] = {"mean", "median", "stddev", "cv"};
    for (int k = 0; k < 4; ++k) {
      ojson r = row(name + "_" + names[k], true);
      r["threads"] = 1;
      r["aggregate_name"] = names[k];
      r["aggregate_unit"] = k == 3 ? "percentage" : "time";
      r["iterations"] = n;
      double scale = k == 3 ? 1.0 : 1e9;   // cv is a fraction, as the library writes it
      r["real_time"] = real[static_cast<size_t>(k)] * scale;
      r["cpu_time"] = cpu[static_cast<size_t>(k)] * scale;
      finish(r);
    }
  }
  ojson out;
  out["context"] = std::move(ctx);
  out["benchmarks"] = std::move(benchmarks);
  return out.dump(2);
}

}  // namespace dg
