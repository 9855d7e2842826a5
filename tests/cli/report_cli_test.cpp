// `driftgate report`: the HTML and Markdown report from gate, verify and bench JSON; rendered in
// headless Chromium (where installed) and checked for what a person would see; bad input is exit 2
// and writes nothing.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/run_driftgate.h"

namespace dg {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::slurp;

testing::CliResult run(const std::string& args) { return testing::run_driftgate(args); }

// Per process: ctest runs the tests of this file in parallel processes, each setting up the suite.
std::string tmp(const std::string& name) {
  std::string p = ::testing::TempDir() + "/dg_report_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(p);
  return p;
}

const std::string kCase = "kda(T=1024,H=2,K=64,V=64,regime=long_memory,dtype=bf16,seed=0)";

// One timed gate (two cases) and one verify run, made once for every test here. A failure there
// fails every test (a fatal failure in SetUpTestSuite alone reads as a skip).
class Report : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }
  static void SetUpTestSuite() {
    gate_dir_ = tmp("gate");
    verify_json_ = tmp("verify.json");
    policy_ = tmp("fast.toml");
    const std::string& policy = policy_;
    std::ofstream(policy) << "[throughput]\nmax_time_s = 1\n";
    testing::CliResult g = run("gate --threads 1 --policy " + policy + " --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --case '" +
                               kCase + "' --case 'kda(T=256,H=1,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)' --claim 1.01 --out " +
                               gate_dir_);
    if (g.rc != 0 && g.rc != 1) setup_error_ = "the gate failed: " + g.out + g.err;
    testing::CliResult v = run("verify --candidate kda_cpu_chunk_f32,kda_null_zeros_f32 --case '" + kCase + "' --json " + verify_json_);
    if (v.rc != 1) setup_error_ += "verify did not fail on the null candidate: " + v.out + v.err;
  }
  static std::string gate_dir_, verify_json_, policy_, setup_error_;
};
std::string Report::gate_dir_, Report::verify_json_, Report::policy_, Report::setup_error_;

TEST_F(Report, WritesHtmlAndMarkdownWithEverySection) {
  const std::string out = tmp("out");
  testing::CliResult r = run("report " + gate_dir_ + "/verdict.json " + verify_json_ + " --out " + out);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string html = slurp(out + "/report.html"), md = slurp(out + "/report.md");
  for (const char* id : {"summary", "speed", "drift", "precision", "provenance"})
    EXPECT_THAT(html, HasSubstr(std::string("<section id=\"") + id + "\">"));
  EXPECT_THAT(html, HasSubstr("class=\"plot line\""));
  EXPECT_THAT(html, HasSubstr("class=\"plot forest\""));
  EXPECT_THAT(html, HasSubstr("claim 1.01"));
  // Self-contained: nothing fetched, nothing run.
  for (const char* fetch : {"src=", "href=", "@import", "url(", "<script", "<link"}) EXPECT_THAT(html, ::testing::Not(HasSubstr(fetch)));
  // The summary: the gate's verdict and its speed; the verify run's failure with its reason.
  const nlohmann::json v = nlohmann::json::parse(slurp(gate_dir_ + "/verdict.json"));
  EXPECT_THAT(md, HasSubstr("**" + v["verdict_text"].get<std::string>() + "**"));
  EXPECT_THAT(md, HasSubstr("geometric mean speedup"));
  EXPECT_THAT(md, HasSubstr("INCORRECT: `kda_null_zeros_f32`"));
  // Drift curves of base, patch and naive, with their growth exponents.
  EXPECT_THAT(md, ::testing::ContainsRegex("base kda_cpu_recurrent_f32 \\(growth -?[0-9.]+\\)"));
  EXPECT_THAT(md, ::testing::ContainsRegex("patch kda_cpu_chunk_f32 \\(growth -?[0-9.]+\\)"));
  // Provenance and the reproduce commands.
  EXPECT_THAT(md, HasSubstr("| git_commit |"));
  EXPECT_THAT(md, HasSubstr("| digest policy |"));
  EXPECT_THAT(md, HasSubstr("driftgate gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --case '" + kCase + "'"));
  EXPECT_THAT(r.out, HasSubstr("wrote " + out + "/report.html"));
}

// An op judged by its own measures (moe_router: a set and its weights) gets them in the report: one
// row per measure, the value over its limit in bold, where the precision table has only dashes.
TEST(ReportMeasures, AnOpsMeasuresAreTabledWithTheirLimits) {
  const std::string json = tmp("router_verify.json"), out = tmp("router_report");
  testing::CliResult v = run("verify --candidate moe_router_cpu_naive_f32,moe_router_mutant_bias_ignored --case "
                             "'moe_router(T=16,E=64,k=4,regime=bias_dominant,dtype=f32,seed=0)' --json " + json);
  ASSERT_EQ(v.rc, 1) << v.out << v.err;   // the mutant picks other experts at wide margins
  testing::CliResult r = run("report " + json + " --out " + out);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string md = slurp(out + "/report.md"), html = slurp(out + "/report.html");
  EXPECT_THAT(md, HasSubstr("The op's own measures:"));
  EXPECT_THAT(md, ::testing::ContainsRegex("\\| moe_router_cpu_naive_f32 \\| flips_wide \\| 0 \\| 0 \\| absolute \\| PASSED \\|"));
  EXPECT_THAT(md, ::testing::ContainsRegex("\\| moe_router_mutant_bias_ignored \\| flips_wide \\| \\*\\*[0-9.e+]+\\*\\* \\| 0 \\| absolute \\| INCORRECT \\|"));
  EXPECT_THAT(md, HasSubstr("| set_agreement |"));
  EXPECT_THAT(html, HasSubstr("the op's own measures"));
}

TEST_F(Report, RendersInHeadlessChromium) {
  const std::string out = tmp("render");
  ASSERT_EQ(run("report " + gate_dir_ + "/verdict.json --out " + out).rc, 0);
  const std::string log = out + "/render.txt";
  const int status = std::system(("/usr/bin/python3 " DG_SOURCE_DIR "/tests/cli/render_report.py " + out + "/report.html " + out +
                                  "/shot.png > " + log + " 2>&1")
                                     .c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 77) GTEST_SKIP() << slurp(log);
  EXPECT_EQ(rc, 0) << slurp(log);
}

TEST_F(Report, BadInputIsExitTwoAndWritesNothing) {
  const std::string out = tmp("bad");
  const std::string junk = tmp("junk.json"), other = tmp("other.json");
  std::ofstream(junk) << "{ not json";
  std::ofstream(other) << "{\"hello\": 1}";
  testing::CliResult r = run("report " + junk + " --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr(junk + " is not JSON"));
  r = run("report " + gate_dir_ + "/verdict.json " + other + " --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr(other + " is not the JSON of a driftgate verify"));
  r = run("report " + tmp("missing.json") + " --out " + out);
  EXPECT_EQ(r.rc, 2);
  EXPECT_FALSE(fs::exists(out)) << "a refused report left files behind";
  r = run("report " + gate_dir_ + "/verdict.json");
  EXPECT_EQ(r.rc, 2);   // --out is required
  const std::string afile = tmp("afile");
  std::ofstream(afile) << "x";
  r = run("report " + gate_dir_ + "/verdict.json --out " + afile);
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
}

// bench --json stays Google Benchmark's format: the real tools/compare.py (Debian's
// libbenchmark-tools) reads two driftgate runs and compares them per benchmark, with its U test.
TEST(Tools, GoogleBenchmarksCompareReadsBenchJson) {
  const char* compare = "/usr/share/benchmark/compare.py";
  if (!fs::exists(compare)) GTEST_SKIP() << compare << " is missing (scripts/setup.sh installs libbenchmark-tools)";
  if (std::system("/usr/bin/python3 -c 'import scipy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "compare.py needs scipy (scripts/setup.sh installs python3-scipy)";
  const std::string a = tmp("bench_a.json"), b = tmp("bench_b.json");
  for (const std::string& json : {a, b}) {
    testing::CliResult r = run("bench --candidate kda_cpu_chunk_f32,kda_cpu_recurrent_f32 --case '" + kCase + "' --max-time 0.3 --json " + json);
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
  }
  const std::string log = tmp("compare.txt");
  const int status = std::system(fmt::format("/usr/bin/python3 {} --no-color benchmarks {} {} > {} 2>&1", compare, a, b, log).c_str());
  const std::string out = slurp(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_THAT(out, HasSubstr("kda_cpu_chunk_f32/" + kCase));
  EXPECT_THAT(out, HasSubstr("kda_cpu_recurrent_f32/" + kCase));
  EXPECT_THAT(out, HasSubstr("_pvalue"));
  EXPECT_THAT(out, HasSubstr("OVERALL_GEOMEAN"));
}

// compare: the same gate twice is SAME everywhere (exit 0); a verify run whose row lost three bits
// and turned INCORRECT is LOST PRECISION and BROKE (exit 1), with the change per output in JSON.
TEST_F(Report, CompareTwoRunsRowByRow) {
  const std::string out = tmp("compare");
  testing::CliResult r = run("compare " + gate_dir_ + "/verdict.json " + gate_dir_ + "/verdict.json --out " + out);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(slurp(out + "/compare.json"));
  ASSERT_EQ(j["rows"].size(), 2u) << j.dump(1);
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["regressed"], false);
    for (const auto& [name, o] : row["outputs"].items()) EXPECT_EQ(o["change"], 0.0) << name;
    ASSERT_TRUE(row["speed"].is_object()) << row.dump();
    EXPECT_NEAR(row["speed"]["change"].get<double>(), 1.0, 1e-12);
    EXPECT_LT(row["speed"]["lo"].get<double>(), 1.0);
    EXPECT_GT(row["speed"]["hi"].get<double>(), 1.0);
  }
  EXPECT_THAT(slurp(out + "/report.html"), HasSubstr("class=\"plot forest\""));
  EXPECT_THAT(slurp(out + "/compare.md"), HasSubstr("| row | bits A | bits B |"));

  nlohmann::json worse = nlohmann::json::parse(slurp(verify_json_));
  for (auto& rec : worse["records"]) {
    if (rec["candidate"] != "kda_cpu_chunk_f32") continue;
    rec["disposition"] = "INCORRECT";
    for (auto& [name, o] : rec["outputs"].items()) o["bits"] = o["bits"].get<double>() - 3;
  }
  const std::string b = tmp("worse.json");
  std::ofstream(b) << worse.dump();
  const std::string json = tmp("compare.json");
  r = run("compare " + verify_json_ + " " + b + " --json " + json);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("**BROKE, LOST PRECISION**"));
  j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["regressions"], 1);
  for (const auto& row : j["rows"]) {
    if (row["candidate"] != "kda_cpu_chunk_f32") continue;
    for (const auto& [name, o] : row["outputs"].items()) EXPECT_NEAR(o["change"].get<double>(), -3.0, 1e-9) << name;
  }
}

TEST_F(Report, CompareRefusesRunsItCannotCompare) {
  testing::CliResult r = run("compare " + gate_dir_ + "/verdict.json " + verify_json_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("compare two runs of the same kind"));
  nlohmann::json other = nlohmann::json::parse(slurp(verify_json_));
  for (auto& rec : other["records"]) rec["case"] = "kda(T=2,H=1,K=8,V=8,regime=kimi_linear,dtype=bf16,seed=0)";
  const std::string b = tmp("other_cases.json");
  std::ofstream(b) << other.dump();
  r = run("compare " + verify_json_ + " " + b);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("have no row in common"));
  EXPECT_EQ(run("compare " + verify_json_).rc, 2);
}

// gate --baseline: the stored gate's patch rows are the base. The same kernel against them MERGEs;
// a null kernel is rejected; a baseline of another policy, tier or case list, an edited one, or
// one given with --base or --claim is exit 2.
TEST_F(Report, GateAgainstAStoredBaseline) {
  const std::string cases = " --case '" + kCase + "' --case 'kda(T=256,H=1,K=32,V=32,regime=kimi_linear,dtype=bf16,seed=0)'";
  const std::string baseline = " --baseline " + gate_dir_ + "/verdict.json";
  const std::string out = tmp("baseline_gate");
  testing::CliResult r = run("gate" + baseline + " --patch kda_cpu_chunk_f32 --policy " + policy_ + cases + " --out " + out);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const nlohmann::json v = nlohmann::json::parse(slurp(out + "/verdict.json"));
  EXPECT_EQ(v["base"], "baseline/kda_cpu_chunk_f32");
  EXPECT_EQ(v["verdict"], "MERGE");
  // The stored rows' provenance: the file's digest, its run and the machine and commit it ran on.
  const nlohmann::json stored = nlohmann::json::parse(slurp(gate_dir_ + "/verdict.json"));
  EXPECT_EQ(v["baseline"]["run_id"], stored["run_id"]);
  EXPECT_EQ(v["baseline"]["rows_digest"], stored["rows_digest"]);
  EXPECT_EQ(v["baseline"]["context"], stored["context"]);
  EXPECT_EQ(v["baseline"]["sha256"].get<std::string>().size(), 64u);
  EXPECT_TRUE(stored["baseline"].is_null());   // a gate that ran its base
  EXPECT_THAT(slurp(out + "/verdict.md"), HasSubstr("The base's rows are stored: `"));
  const int valid = std::system(("/usr/bin/python3 " DG_SOURCE_DIR "/scripts/validate_json.py verdict " + out +
                                 "/verdict.json > /dev/null 2>&1").c_str());
  EXPECT_EQ(valid, 0) << "verdict.json of a baseline gate does not match harness/schemas/verdict.schema.json";
  for (const auto& row : v["rows"]) {
    EXPECT_TRUE(row["speed"].is_null());
    bool said = false;
    for (const auto& c : row["checks"]) said = said || c["detail"].get<std::string>().find("stored baseline") != std::string::npos;
    EXPECT_TRUE(said) << row.dump();
    EXPECT_THAT(row["reproduce"].get<std::string>(), HasSubstr("--baseline '"));
  }
  r = run("gate" + baseline + " --patch kda_null_noise_f32 --policy " + policy_ + cases + " --out " + tmp("baseline_null"));
  EXPECT_EQ(r.rc, 1) << r.out << r.err;

  r = run("gate" + baseline + " --patch kda_cpu_chunk_f32" + cases);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("was measured under another policy"));
  r = run("gate" + baseline + " --patch kda_cpu_chunk_f32 --policy " + policy_ + " --case '" + kCase + "'");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("another case list"));
  r = run("gate" + baseline + " --patch kda_cpu_chunk_f32 --policy " + policy_ + cases + " --ref-tier f64");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("another reference tier (it was \"dd\", this run \"f64\")"));
  r = run("gate" + baseline + " --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --policy " + policy_ + cases);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("one of them"));
  r = run("gate" + baseline + " --patch kda_cpu_chunk_f32 --claim 1.1 --policy " + policy_ + cases);
  EXPECT_EQ(r.rc, 2);
  nlohmann::json edited = nlohmann::json::parse(slurp(gate_dir_ + "/verdict.json"));
  edited["rows"][0]["patch"]["outputs"]["o"]["bits"] = 30.0;   // a better release than it was
  const std::string forged = tmp("forged.json");
  std::ofstream(forged) << edited.dump();
  r = run("gate --baseline " + forged + " --patch kda_cpu_chunk_f32 --policy " + policy_ + cases);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("rows_digest"));
}

}  // namespace
}  // namespace dg
