// Tests for harness/machine: the JSON round trip and its error messages, the cache file's hit and
// miss behaviour on a temporary path, and the sanity of a quick measurement (no timing targets:
// this machine is shared, so only orderings that hold with a wide margin are checked).
#include "harness/timing/machine.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/cases/case.h"

namespace dg {
namespace {

namespace fs = std::filesystem;

constexpr double kQuickBudget = 0.1;   // seconds: enough for sane figures, not for good ones

MachineLimits fake_limits() {
  MachineLimits m;
  m.cpu = this_cpu_model();
  m.cores = this_machine_cores();
  m.f32_fma_gflops_core = 123.5;
  m.f32_fma_gflops_all = 246.5;
  m.f64_fma_gflops_core = 61.75;
  m.f64_fma_gflops_all = 123.25;
  m.stream_triad_gbs_core = 17.25;
  m.stream_triad_gbs_all = 31.5;
  m.l1d_bytes = 48 << 10;
  m.l2_bytes = 2 << 20;
  m.l3_bytes = int64_t{480} << 20;
  m.measured_at = "2026-01-02T03:04:05Z";
  return m;
}

void expect_same(const MachineLimits& a, const MachineLimits& b) {
  EXPECT_EQ(a.cpu, b.cpu);
  EXPECT_EQ(a.cores, b.cores);
  EXPECT_EQ(a.f32_fma_gflops_core, b.f32_fma_gflops_core);
  EXPECT_EQ(a.f32_fma_gflops_all, b.f32_fma_gflops_all);
  EXPECT_EQ(a.f64_fma_gflops_core, b.f64_fma_gflops_core);
  EXPECT_EQ(a.f64_fma_gflops_all, b.f64_fma_gflops_all);
  EXPECT_EQ(a.stream_triad_gbs_core, b.stream_triad_gbs_core);
  EXPECT_EQ(a.stream_triad_gbs_all, b.stream_triad_gbs_all);
  EXPECT_EQ(a.l1d_bytes, b.l1d_bytes);
  EXPECT_EQ(a.l2_bytes, b.l2_bytes);
  EXPECT_EQ(a.l3_bytes, b.l3_bytes);
  EXPECT_EQ(a.measured_at, b.measured_at);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::trunc);
  f << text;
}

// A fresh folder per test, removed afterwards.
class MachineCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("driftgate_machine_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// The compute floor of the physical-bound rule follows what the CPU can do on the inputs' format:
// bf16 dot products at twice the f32 FMA rate where avx512_bf16 (or avx512_fp16) is listed, no
// compute floor with AMX tiles, and the f32 peak for f32 and f64 inputs whatever the flags. (An
// honest oneDNN bf16 matmul read as faster than the f32 peak allows on an AVX512_BF16 machine.)
TEST(MachineLimits, NarrowInputsMayBeatTheF32FmaPeakWhereTheCpuHasTheInstructions) {
  const std::string avx512 = "fpu sse2 avx2 fma avx512f avx512bw";
  EXPECT_EQ(compute_peak_factor(DType::bf16, avx512), 1.0);
  EXPECT_EQ(compute_peak_factor(DType::bf16, avx512 + " avx512_bf16 avx512_vnni"), 2.0);
  EXPECT_EQ(compute_peak_factor(DType::f16, avx512 + " avx512_fp16"), 2.0);
  EXPECT_EQ(compute_peak_factor(DType::e4m3, avx512 + " avx512_bf16"), 2.0);
  EXPECT_TRUE(std::isinf(compute_peak_factor(DType::bf16, avx512 + " amx_bf16 amx_tile amx_int8")));
  for (DType wide : {DType::f32, DType::f64}) {
    EXPECT_EQ(compute_peak_factor(wide, avx512 + " avx512_bf16"), 1.0);
    EXPECT_EQ(compute_peak_factor(wide, avx512 + " amx_bf16"), 1.0);
  }
  EXPECT_EQ(compute_peak_factor(DType::bf16, ""), 1.0);
}

TEST(MachineJson, RoundTrip) {
  const MachineLimits m = fake_limits();
  const nlohmann::json j = to_json(m);
  EXPECT_EQ(j.at("schema_version"), 1);
  expect_same(machine_from_json(j), m);
  expect_same(machine_from_json(nlohmann::json::parse(j.dump(2))), m);
}

TEST(MachineJson, MissingOrMistypedFieldIsNamed) {
  nlohmann::json j = to_json(fake_limits());
  j.erase("l2_bytes");
  try {
    machine_from_json(j);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("l2_bytes"), std::string::npos) << e.what();
  }
  nlohmann::json k = to_json(fake_limits());
  k["stream_triad_gbs_all"] = "fast";
  try {
    machine_from_json(k);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("stream_triad_gbs_all"), std::string::npos) << e.what();
  }
  EXPECT_THROW(machine_from_json(nlohmann::json::array()), std::runtime_error);
}

// A stand-in measurement that counts its calls and returns distinct figures each time.
struct CountingMeasure {
  int calls = 0;
  MachineLimits operator()() {
    ++calls;
    MachineLimits m = fake_limits();
    m.f32_fma_gflops_core = 100.0 + calls;
    m.measured_at = "2026-02-0" + std::to_string(calls) + "T00:00:00Z";
    return m;
  }
};

TEST_F(MachineCache, HitReturnsTheFileWithoutMeasuring) {
  const fs::path path = dir_ / "machine.json";
  const MachineLimits fake = fake_limits();
  write(path, to_json(fake).dump(2));
  const std::string before = slurp(path);
  CountingMeasure measure;
  expect_same(load_or_measure_machine(path.string(), false, std::ref(measure)), fake);
  EXPECT_EQ(measure.calls, 0);
  EXPECT_EQ(slurp(path), before);   // untouched
}

TEST_F(MachineCache, OtherCpuOrCoreCountIsMeasuredAgainAndReplaced) {
  const fs::path path = dir_ / "machine.json";
  CountingMeasure measure;
  MachineLimits other = fake_limits();
  other.cpu = "Some Other CPU @ 1.00GHz";
  write(path, to_json(other).dump(2));
  const MachineLimits m = load_or_measure_machine(path.string(), false, std::ref(measure));
  EXPECT_EQ(measure.calls, 1);
  EXPECT_EQ(m.f32_fma_gflops_core, 101.0);
  expect_same(machine_from_json(nlohmann::json::parse(slurp(path))), m);   // the file holds the new figures
  expect_same(load_or_measure_machine(path.string(), false, std::ref(measure)), m);   // ... and is now a hit
  EXPECT_EQ(measure.calls, 1);

  MachineLimits more_cores = fake_limits();
  more_cores.cores += 1;
  write(path, to_json(more_cores).dump(2));
  EXPECT_EQ(load_or_measure_machine(path.string(), false, std::ref(measure)).f32_fma_gflops_core, 102.0);
  EXPECT_EQ(measure.calls, 2);
  for (const auto& entry : fs::directory_iterator(dir_))   // no temporary file left behind
    EXPECT_EQ(entry.path().filename(), "machine.json");
}

TEST_F(MachineCache, RemeasureIgnoresAValidFile) {
  const fs::path path = dir_ / "machine.json";
  write(path, to_json(fake_limits()).dump(2));
  CountingMeasure measure;
  const MachineLimits m = load_or_measure_machine(path.string(), true, std::ref(measure));
  EXPECT_EQ(measure.calls, 1);
  expect_same(machine_from_json(nlohmann::json::parse(slurp(path))), m);
}

TEST_F(MachineCache, MissingFolderAndCorruptFile) {
  const fs::path path = dir_ / "results" / "machine.json";   // the folder does not exist yet
  CountingMeasure measure;
  const MachineLimits m = load_or_measure_machine(path.string(), false, std::ref(measure));
  EXPECT_EQ(measure.calls, 1);
  ASSERT_TRUE(fs::exists(path));
  expect_same(machine_from_json(nlohmann::json::parse(slurp(path))), m);
  for (const char* bad : {"{ not json", "{\"cpu\": \"x\"}", ""}) {
    write(path, bad);
    const MachineLimits again = load_or_measure_machine(path.string(), false, std::ref(measure));
    expect_same(machine_from_json(nlohmann::json::parse(slurp(path))), again);
  }
  EXPECT_EQ(measure.calls, 4);
}

// The real measurement through the cache, once: written, then read back without measuring.
TEST_F(MachineCache, RealMeasurementRoundTripsThroughTheFile) {
  const fs::path path = dir_ / "machine.json";
  const MachineLimits m = load_or_measure_machine(path.string(), false, kQuickBudget);
  EXPECT_EQ(m.cpu, this_cpu_model());
  EXPECT_EQ(m.cores, this_machine_cores());
  // A measurement disturbed by the other tests on this machine three times in a row is, rightly,
  // not cached (SuspectMeasurementsAreRetriedAndNeverCached tests that path).
  if (fs::exists(path)) expect_same(load_or_measure_machine(path.string(), false, kQuickBudget), m);
  else EXPECT_NE(machine_suspect(m), "");
}

// A cache file anyone could have written: every suspect one is measured again and replaced.
TEST_F(MachineCache, SuspectCacheFilesAreMeasuredAgain) {
  const fs::path path = dir_ / "machine.json";
  std::vector<std::pair<std::string, std::function<void(MachineLimits&)>>> forged = {
      {"zero peak", [](MachineLimits& m) { m.f32_fma_gflops_core = 0; }},
      {"negative bandwidth", [](MachineLimits& m) { m.stream_triad_gbs_all = -5; }},
      {"huge peak", [](MachineLimits& m) { m.f32_fma_gflops_core = 1e9; m.f32_fma_gflops_all = 2e9; }},
      {"huge bandwidth", [](MachineLimits& m) { m.stream_triad_gbs_core = 1e7; m.stream_triad_gbs_all = 1e7; }},
      {"f32 below f64", [](MachineLimits& m) { m.f32_fma_gflops_core = 10; }},
      {"all-core below one core", [](MachineLimits& m) { m.stream_triad_gbs_all = 1; }},
      {"contended", [](MachineLimits& m) { m.stream_triad_gbs_core = 0.01; }},
  };
  CountingMeasure measure;
  int calls = 0;
  for (const auto& [what, forge] : forged) {
    MachineLimits m = fake_limits();
    forge(m);
    EXPECT_NE(machine_suspect(m), "") << what;
    write(path, to_json(m).dump(2));
    const MachineLimits got = load_or_measure_machine(path.string(), false, std::ref(measure));
    EXPECT_EQ(measure.calls, ++calls) << what;
    EXPECT_EQ(machine_suspect(got), "") << what;
    expect_same(machine_from_json(nlohmann::json::parse(slurp(path))), got);   // replaced
  }
  // NaN cannot be written in JSON: a null figure is an unreadable cache, measured again too.
  nlohmann::json j = to_json(fake_limits());
  j["f64_fma_gflops_all"] = std::nan("");
  write(path, j.dump(2));
  load_or_measure_machine(path.string(), false, std::ref(measure));
  EXPECT_EQ(measure.calls, ++calls);
  EXPECT_EQ(machine_suspect(fake_limits()), "");
}

TEST_F(MachineCache, SuspectMeasurementsAreRetriedAndNeverCached) {
  const fs::path path = dir_ / "machine.json";
  // Disturbed (f32 slower than f64) every time: used for this run, retried, never written.
  int calls = 0;
  auto disturbed = [&] {
    ++calls;
    MachineLimits m = fake_limits();
    m.f32_fma_gflops_core = 30;
    m.f32_fma_gflops_all = 60;
    return m;
  };
  const MachineLimits m = load_or_measure_machine(path.string(), false, disturbed);
  EXPECT_EQ(calls, kMachineAttempts);
  EXPECT_EQ(m.f32_fma_gflops_core, 30);
  EXPECT_FALSE(fs::exists(path));
  // Unusable (zero, NaN) every time: an error, nothing written.
  for (double bad : {0.0, std::nan(""), -1.0}) {
    calls = 0;
    auto unusable = [&] {
      ++calls;
      MachineLimits u = fake_limits();
      u.stream_triad_gbs_core = bad;
      return u;
    };
    EXPECT_THROW(load_or_measure_machine(path.string(), false, unusable), std::runtime_error) << bad;
    EXPECT_EQ(calls, kMachineAttempts);
    EXPECT_FALSE(fs::exists(path));
  }
  // Disturbed once, then clean: the clean one is cached.
  calls = 0;
  auto once = [&] {
    ++calls;
    MachineLimits u = fake_limits();
    if (calls == 1) u.f64_fma_gflops_core = 0;
    return u;
  };
  expect_same(load_or_measure_machine(path.string(), false, once), fake_limits());
  EXPECT_EQ(calls, 2);
  expect_same(machine_from_json(nlohmann::json::parse(slurp(path))), fake_limits());
}

TEST_F(MachineCache, ACacheThatIsNotARegularFileIsRefused) {
  const fs::path path = dir_ / "machine.json";
  fs::create_directories(path);
  CountingMeasure measure;
  EXPECT_THROW(load_or_measure_machine(path.string(), false, std::ref(measure)), InputError);
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_THROW(load_or_measure_machine(path.string(), false, std::ref(measure)), InputError);
  EXPECT_EQ(measure.calls, 0);
}

TEST(MachineMeasure, QuickMeasurementIsSane) {
  const MachineLimits m = measure_machine(0.5);
  RecordProperty("machine", describe_machine(m));
  std::printf("%s", describe_machine(m).c_str());
  EXPECT_FALSE(m.cpu.empty());
  EXPECT_GE(m.cores, 1);
  EXPECT_FALSE(m.measured_at.empty());
  for (double v : {m.f32_fma_gflops_core, m.f32_fma_gflops_all, m.f64_fma_gflops_core, m.f64_fma_gflops_all,
                   m.stream_triad_gbs_core, m.stream_triad_gbs_all}) {
    EXPECT_GT(v, 0);
    EXPECT_TRUE(std::isfinite(v));
  }
  // (How the rates compare, all cores against one and f32 against f64, is a speed figure that a
  // loaded machine upsets: bench/candidates_bench's BM_machine reports it.)
  if (fs::exists("/sys/devices/system/cpu/cpu0/cache/index0")) {
    EXPECT_GT(m.l1d_bytes, 0);
    EXPECT_GE(m.l2_bytes, m.l1d_bytes);
  }
}

}  // namespace
}  // namespace dg
