// Plugins: the example plugin's candidate registers and verifies like a built-in one; fake plugins
// written in C99 (plugin_test_fakes.c) show what the loader passes (params_json, descriptors,
// writable outputs) and what it refuses (no file, not a library, missing entry points, another ABI
// version, an unknown op, a name already taken); an unsupported parameter is a NOT_SUPPORTED row with
// the plugin's message; and the CLI's --plugin option works for list, verify and run.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/run_driftgate.h"
#include <nlohmann/json.hpp>

#include "harness/isolation/plugin.h"
#include "harness/core/safetensors.h"
#include "harness/core/threads.h"
#include "harness/judge/verify.h"

namespace dg {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr const char* kExample = "kda_plugin_recurrent_f32";

// The message of the InputError that loading `path` throws ("" when it loads).
std::string load_error(const std::string& path) {
  try {
    load_plugin(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

Record verify_one(const std::string& case_str, const std::string& candidate) {
  const Candidate* c = find_candidate(candidate);
  EXPECT_NE(c, nullptr) << candidate;
  if (!c) return {};
  std::vector<Record> rows = verify_case(parse_case(case_str), {c}, VerifyOptions{});
  EXPECT_EQ(rows.size(), 1u);
  return rows.at(0);
}

TEST(Plugin, ExampleCandidateIsRegistered) {
  ASSERT_EQ(load_error(DG_EXAMPLE_PLUGIN), "");
  EXPECT_EQ(load_error(DG_EXAMPLE_PLUGIN), "") << "loading the same file again is a no-op";
  const Candidate* c = find_candidate(kExample);
  ASSERT_NE(c, nullptr);
  const CandidateInfo& i = c->info();
  EXPECT_EQ(i.op, "kda");
  EXPECT_EQ(i.backend, "plugin");
  EXPECT_EQ(i.algorithm, "recurrent");
  EXPECT_EQ(i.input_dtype, DType::f32);
  EXPECT_EQ(i.state_dtype, DType::f32);
  EXPECT_EQ(i.output_dtype, DType::f32);
  EXPECT_THAT(i.doc, HasSubstr("kda_example_plugin"));   // the file it came from
  std::vector<std::string> loaded = loaded_plugins();
  EXPECT_EQ(std::count(loaded.begin(), loaded.end(), fs::canonical(DG_EXAMPLE_PLUGIN).string()), 1);
}

// Pregated and softplus gates, sigmoid and given beta, h0, GVA, l2norm off, bf16/f32/f16 inputs:
// the f32 token loop keeps well over 18 bits on o and ht against the dd reference.
TEST(Plugin, ExampleCandidatePasses) {
  ASSERT_EQ(load_error(DG_EXAMPLE_PLUGIN), "");
  for (const char* cs : {"kda(T=64,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)",        // softplus, sigmoid
                         "kda(T=65,H=2,HV=4,K=32,V=16,regime=long_memory,dtype=f32,seed=1)",    // pregated, h0, GVA
                         "kda(T=33,B=2,H=1,K=16,V=24,regime=unnormalized_keys,dtype=f16,seed=2)"}) {   // l2norm=0
    Record r = verify_one(cs, kExample);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cs << ": " << r.reason;
    ASSERT_EQ(r.outputs.size(), 2u) << cs;
    for (const OutputResult& o : r.outputs) EXPECT_GT(o.metrics.bits, 18) << cs << " " << o.name;
  }
}

TEST(Plugin, UnsupportedParameterIsANotSupportedRowWithThePluginsMessage) {
  ASSERT_EQ(load_error(DG_EXAMPLE_PLUGIN), "");
  Record r = verify_one("kda(T=16,H=1,K=16,V=16,regime=glm_safe_gate,dtype=bf16,seed=0)", kExample);
  EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED);
  EXPECT_THAT(r.reason, HasSubstr("kda_plugin_recurrent_f32: gate=lower_bound is not supported"));
  r = verify_one("kda(T=16,H=1,K=16,V=16,layout=vfirst,h0=1,regime=zero_gate,dtype=bf16,seed=0)", kExample);
  EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED);
  EXPECT_THAT(r.reason, HasSubstr("layout=vfirst is not supported"));
  r = verify_one("kda(T=16,seqlens=5/11,H=1,K=16,V=16,regime=zero_gate,dtype=bf16,seed=0)", kExample);
  EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED);
  EXPECT_THAT(r.reason, HasSubstr("varlen (seqlens) is not supported"));
}

// What crosses the ABI: the params_json object and one descriptor per tensor (name, dtype, rank,
// shape/stride pairs), inputs and outputs each in name order, contiguous row-major strides.
TEST(Plugin, PassesParamsJsonAndDescriptors) {
  ASSERT_EQ(load_error(DG_FAKE_PLUGIN_1), "");
  const Candidate* echo = find_candidate("kda_plugin_echo_f32");
  ASSERT_NE(echo, nullptr);
  Case c = parse_case("kda(T=2,H=1,K=32,V=16,regime=kimi_linear,dtype=bf16,seed=0)");
  std::string msg;
  try {
    run_candidate(*echo, c, generate_inputs(c));
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  nlohmann::ordered_json want = case_json(c);
  EXPECT_EQ(want["params"]["T"], 2);
  EXPECT_EQ(want["params"]["gate"], "softplus");
  EXPECT_EQ(want["params"]["l2norm"], true);
  EXPECT_EQ(want["params"]["seqlens"], nlohmann::json::array());
  // The thread budget (candidate_abi.h) follows the case.
  want["threads"] = num_threads();
  EXPECT_THAT(msg, HasSubstr("echo " + want.dump() + " |"));
  EXPECT_THAT(msg, HasSubstr(R"j("case":"kda(T=2,H=1,K=32,V=16,regime=kimi_linear,dtype=bf16,seed=0)","op":"kda")j"));
  // dtype codes: DG_F32 1, DG_BF16 3; A_log and dt_bias are f32.
  EXPECT_THAT(msg, HasSubstr(" A_log:1:1:[1/1] beta:3:3:[1/2,2/1,1/1] dt_bias:1:1:[32/1] g:3:4:[1/64,2/32,1/32,32/1] "
                             "k:3:4:[1/64,2/32,1/32,32/1] q:3:4:[1/64,2/32,1/32,32/1] v:3:4:[1/32,2/16,1/16,16/1] |"));
  EXPECT_THAT(msg, HasSubstr(" out ht:1:4:[1/512,1/512,32/16,16/1] o:1:4:[1/32,2/16,1/16,16/1]"));
  EXPECT_THAT(msg, HasSubstr("(driftgate_run returned 7)"));

  // Outputs are the harness's own buffers: what the plugin writes is what the harness reads.
  Case c4 = c.with("T", "4");
  TensorMap out = run_candidate(*echo, c4, generate_inputs(c4));
  for (const char* name : {"o", "ht"})
    for (int64_t i = 0; i < out.at(name).numel(); ++i) ASSERT_EQ(out.at(name).get(i), 1.0) << name << " " << i;
}

TEST(Plugin, RefusesWhatIsNotAPlugin) {
  const size_t loaded = loaded_plugins().size();
  EXPECT_THAT(load_error("/nonexistent/libnothing.so"), HasSubstr("plugin '/nonexistent/libnothing.so': no such file"));
  EXPECT_THAT(load_error(::testing::TempDir()), HasSubstr("is a directory"));

  std::string text = ::testing::TempDir() + "/dg_plugin_not_elf.so";
  std::ofstream(text) << "not a shared library\n";
  EXPECT_THAT(load_error(text), HasSubstr("cannot load it"));

  Dl_info libc{};   // a real shared library without the entry points: the C library itself
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&std::strlen), &libc), 0);
  EXPECT_THAT(load_error(libc.dli_fname), HasSubstr("missing entry point driftgate_abi_version()"));

  EXPECT_THAT(load_error(DG_FAKE_PLUGIN_2),
              HasSubstr("built for candidate ABI version 99, but this driftgate speaks version 1"));
  EXPECT_THAT(load_error(DG_FAKE_PLUGIN_3), HasSubstr("candidate 'nosuchop_plugin_fake_f32' implements unknown op 'nosuchop'"));
  EXPECT_THAT(load_error(DG_FAKE_PLUGIN_4), HasSubstr("candidate 'kda_cpu_recurrent_f32' is already registered (backend cpu)"));
  EXPECT_EQ(find_candidate("kda_cpu_recurrent_f32")->info().backend, "cpu");
  EXPECT_EQ(loaded_plugins().size(), loaded) << "a refused plugin is not kept";
}

TEST(Plugin, DuplicateNamesAcrossPluginsAreRefused) {
  ASSERT_EQ(load_error(DG_EXAMPLE_PLUGIN), "");
  const size_t loaded = loaded_plugins().size();
  std::string copy = ::testing::TempDir() + "/dg_plugin_copy.so";
  fs::copy_file(DG_EXAMPLE_PLUGIN, copy, fs::copy_options::overwrite_existing);
  EXPECT_THAT(load_error(copy), HasSubstr("candidate 'kda_plugin_recurrent_f32' is already registered (backend plugin)"));
  EXPECT_EQ(loaded_plugins().size(), loaded);
}

// --- the command line ---------------------------------------------------------------------------
using Result = testing::CliResult;
Result run(const std::string& args) { return testing::run_driftgate(args); }

const std::string kPlugin = std::string("'") + DG_EXAMPLE_PLUGIN + "'";

TEST(PluginCli, VerifyPasses) {
  Result r = run("verify --plugin " + kPlugin + " --candidate kda_plugin_recurrent_f32 --case "
                 "'kda(T=64,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)'");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("PASSED"));
}

TEST(PluginCli, ListBeforeOrAfterTheVerb) {
  for (const std::string& args : {"--plugin " + kPlugin + " list candidates --json",
                                  "list candidates --plugin " + kPlugin + " --json",
                                  "list --plugin " + kPlugin + " candidates --json"}) {
    Result r = run(args);
    ASSERT_EQ(r.rc, 0) << args << "\n" << r.err;
    bool found = false;
    for (const auto& c : nlohmann::json::parse(r.out))
      if (c["name"] == kExample) found = c["backend"] == "plugin";
    EXPECT_TRUE(found) << args << "\n" << r.out;
  }
}

TEST(PluginCli, RunOnStoredInputs) {
  std::string dir = ::testing::TempDir() + "/dg_plugin_cli_run";
  fs::remove_all(dir);
  fs::create_directories(dir);
  Result r = run("export --case 'kda(T=16,H=1,K=16,V=16,regime=zero_gate,dtype=bf16,seed=0)' --out " + dir + "/in.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run("run --plugin " + kPlugin + " --candidate kda_plugin_recurrent_f32 --in " + dir + "/in.safetensors --out " + dir +
          "/out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  SafetensorsFile f = read_safetensors(dir + "/out.safetensors");
  EXPECT_EQ(f.tensors.at("o").shape(), (std::vector<int64_t>{1, 16, 1, 16}));
  EXPECT_EQ(f.metadata.at("candidate"), kExample);
}

TEST(PluginCli, BadPluginExitsTwoAndAnUnsupportedCaseIsNotSupported) {
  Result r = run("verify --plugin /nonexistent/lib.so --candidate kda_plugin_recurrent_f32 --case 'kda(T=4,K=16,V=16)'");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("plugin '/nonexistent/lib.so': no such file"));
  r = run("verify --plugin " + kPlugin + " --candidate kda_plugin_recurrent_f32 --case "
          "'kda(T=16,H=1,K=16,V=16,regime=glm_safe_gate,dtype=bf16,seed=0)'");
  EXPECT_EQ(r.rc, 0) << r.err;   // DG_NOT_SUPPORTED: a NOT_SUPPORTED row, not a failure
  EXPECT_THAT(r.out, HasSubstr("NOT_SUPPORTED"));
}

}  // namespace
}  // namespace dg

// --- loading untrusted plugins --------------------------------------------------------------------
namespace dg {
namespace {

// A plugin whose load attacks driftgate is refused with exit 2 naming it; the listing worker takes
// the crash, never the judging process.
TEST(PluginLoad, CrashingConstructorIsExitTwoNamingThePlugin) {
  Result r = run(std::string("list candidates --plugin ") + DG_BAD_PLUGIN_crash);
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr(std::string("plugin '") + DG_BAD_PLUGIN_crash + "': listing its candidates failed (crashed"));
  EXPECT_THAT(r.err, HasSubstr("SIGSEGV"));
}

TEST(PluginLoad, GarbageListIsExitTwo) {
  Result r = run(std::string("list candidates --plugin ") + DG_BAD_PLUGIN_garbage);
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("driftgate_list returned 2147483647 candidates (at most 4096)"));
  r = run(std::string("list candidates --plugin ") + DG_BAD_PLUGIN_badptr);
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("candidate 0's name points to unreadable memory"));
}

TEST(PluginLoad, NonFloatOutputDtypeIsRefused) {
  Result r = run(std::string("list candidates --plugin ") + DG_BAD_PLUGIN_intout);
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("candidate 'kda_plugin_intout_f32' declares output dtype i32, which is not a floating-point type"));
  // The same check in a candidate process (the worker that loads it directly).
  EXPECT_THAT(load_error(DG_BAD_PLUGIN_intout), HasSubstr("declares output dtype i32"));
}

TEST(PluginLoad, BadPointersAreRefusedInProcessToo) {
  EXPECT_THAT(load_error(DG_BAD_PLUGIN_garbage), HasSubstr("at most 4096"));
  EXPECT_THAT(load_error(DG_BAD_PLUGIN_badptr), HasSubstr("unreadable memory"));
}

// The judging process holds proxies only: running one there is refused before any work.
TEST(PluginLoad, InProcessVerifyOfAPluginCandidateIsRefused) {
  Result r = run("verify --in-process --plugin " + kPlugin + " --candidate kda_plugin_recurrent_f32 --case "
                 "'kda(T=16,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)'");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("plugin candidate, and plugin code runs only in worker processes"));
}

// The proxies the judging process registers carry what the listing worker read from the library.
TEST(PluginLoad, ListedCandidatesMatchTheLibrary) {
  Result r = run("list candidates --json --plugin " + kPlugin);
  ASSERT_EQ(r.rc, 0) << r.err;
  int n = 0;
  for (const auto& c : nlohmann::json::parse(r.out))
    if (c["backend"] == "plugin") {
      ++n;
      EXPECT_EQ(c["output_dtype"], "f32") << c.dump();
      EXPECT_THAT(c["doc"].get<std::string>(), HasSubstr(fs::path(DG_EXAMPLE_PLUGIN).filename().string()));
    }
  EXPECT_GE(n, 1);
}

}  // namespace
}  // namespace dg
