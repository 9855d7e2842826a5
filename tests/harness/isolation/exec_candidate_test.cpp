// Exec candidates: the numpy example verifies like a built-in candidate (f32 and bf16 outputs);
// a failing command, a signal, a command that writes nothing or the wrong tensors are ERRORED rows
// naming the problem; the input file carries the documented metadata; paths are shell-quoted; the
// output conversion rounds once; bad specs are InputErrors; and the CLI's --exec option works.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/run_driftgate.h"
#include <nlohmann/json.hpp>

#include "harness/isolation/exec_candidate.h"
#include "harness/core/safetensors.h"
#include "harness/judge/verify.h"

namespace dg {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kScript = std::string(DG_SOURCE_DIR) + "/candidates/examples/exec/kda_numpy.py";
constexpr const char* kSmall = "kda(T=64,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)";

// The checkout's virtual environment (scripts/setup.sh makes .venv: Debian's numpy, and the driftgate
// Python package that kda_numpy.py reads and writes its files with); "" when it is missing.
std::string example_python() {
  const std::string py = std::string(DG_SOURCE_DIR) + "/.venv/bin/python3";
  if (std::system(("'" + py + "' -c 'import numpy, driftgate' >/dev/null 2>&1").c_str()) == 0) return py;
  return "";
}

#define REQUIRE_EXAMPLE_PYTHON(py)                                                                     \
  const std::string py = example_python();                                                             \
  if (py.empty()) GTEST_SKIP() << "the venv with the driftgate Python package not found (scripts/setup.sh creates .venv)"

// The message of the InputError that registering `spec` throws ("" when it registers).
std::string register_error(const std::string& spec) {
  try {
    register_exec(spec);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Registers the numpy example as `name` unless this process already has it.
void register_numpy(const std::string& py, const std::string& name) {
  if (find_candidate(name)) return;
  ASSERT_EQ(register_error(name + "=" + py + " " + shell_quote(kScript) + " {in} {out}"), "");
}

Record verify_one(const std::string& case_str, const std::string& candidate) {
  const Candidate* c = find_candidate(candidate);
  EXPECT_NE(c, nullptr) << candidate;
  if (!c) return {};
  std::vector<Record> rows = verify_case(parse_case(case_str), {c}, VerifyOptions{});
  EXPECT_EQ(rows.size(), 1u);
  return rows.at(0);
}

TEST(Exec, NumpyExamplePasses) {
  REQUIRE_EXAMPLE_PYTHON(py);
  register_numpy(py, "kda_exec_numpy_f32");
  const CandidateInfo& i = find_candidate("kda_exec_numpy_f32")->info();
  EXPECT_EQ(i.op, "kda");
  EXPECT_EQ(i.backend, "exec");
  EXPECT_EQ(i.algorithm, "numpy");
  EXPECT_EQ(i.output_dtype, DType::f32);
  for (const char* cs : {kSmall,                                                                   // softplus, sigmoid
                         "kda(T=65,H=2,HV=4,K=32,V=16,regime=long_memory,dtype=f32,seed=1)",       // pregated, h0, GVA
                         "kda(T=33,B=2,H=1,K=16,V=24,regime=unnormalized_keys,dtype=f16,seed=2)"}) {   // l2norm=0
    Record r = verify_one(cs, "kda_exec_numpy_f32");
    EXPECT_EQ(r.disposition, Disposition::PASSED) << cs << ": " << r.reason;
    ASSERT_EQ(r.outputs.size(), 2u);
    for (const OutputResult& o : r.outputs) EXPECT_GT(o.metrics.bits, 18) << cs << " " << o.name;
  }
}

// A bf16 suffix: bf16 inputs and outputs, f32 state; the program writes o as BF16 as asked.
TEST(Exec, DtypeSuffixSetsTheFormats) {
  REQUIRE_EXAMPLE_PYTHON(py);
  register_numpy(py, "kda_exec_numpy_bf16");
  const CandidateInfo& i = find_candidate("kda_exec_numpy_bf16")->info();
  EXPECT_EQ(i.input_dtype, DType::bf16);
  EXPECT_EQ(i.state_dtype, DType::f32);
  EXPECT_EQ(i.output_dtype, DType::bf16);
  Record r = verify_one(kSmall, "kda_exec_numpy_bf16");
  EXPECT_EQ(r.disposition, Disposition::PASSED) << r.reason;
  ASSERT_EQ(r.outputs.size(), 2u);
  for (const OutputResult& o : r.outputs) {
    EXPECT_EQ(o.dtype, o.name == "o" ? DType::bf16 : DType::f32) << o.name;
    EXPECT_GT(o.metrics.bits, o.name == "o" ? 7 : 18) << o.name;
  }
}

// Exit code 95 (kExecNotSupported) is the program's "not this case": a NOT_SUPPORTED row.
TEST(Exec, UnsupportedParameterIsANotSupportedRowWithTheProgramsMessage) {
  REQUIRE_EXAMPLE_PYTHON(py);
  register_numpy(py, "kda_exec_numpy_f32");
  Record r = verify_one("kda(T=16,H=1,K=16,V=16,regime=glm_safe_gate,dtype=bf16,seed=0)", "kda_exec_numpy_f32");
  EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED);
  EXPECT_THAT(r.reason, HasSubstr("does not support this case: kda_exec_numpy_f32: gate=lower_bound is not supported"));
}

TEST(Exec, FailuresAreErroredRowsNamingTheProblem) {
  ASSERT_EQ(register_error("kda_exec_false_f32=false {in} {out}"), "");
  ASSERT_EQ(register_error("kda_exec_stderr_f32=echo working; echo boom >&2; exit 3 # {in} {out}"), "");
  ASSERT_EQ(register_error("kda_exec_segv_f32=kill -SEGV $$ # {in} {out}"), "");
  ASSERT_EQ(register_error("kda_exec_nothing_f32=true {in} {out}"), "");
  ASSERT_EQ(register_error("kda_exec_copy_f32=cp {in} {out}"), "");
  const std::string cs = "kda(T=8,H=1,K=16,V=16,regime=zero_gate,dtype=bf16,seed=0)";
  struct Want { const char* candidate; const char* reason; };
  for (const Want& w : {Want{"kda_exec_false_f32", "kda_exec_false_f32: command exited with code 1"},
                        Want{"kda_exec_stderr_f32", "command exited with code 3: boom"},
                        Want{"kda_exec_segv_f32", "command was killed by signal 11"},
                        Want{"kda_exec_nothing_f32", "the command exited 0 but wrote no output file (expected ht, o in {out})"},
                        Want{"kda_exec_copy_f32", "output tensor 'ht' is missing from its output file (it holds: beta, g, k, q, v)"}}) {
    Record r = verify_one(cs, w.candidate);
    EXPECT_EQ(r.disposition, Disposition::ERRORED) << w.candidate;
    EXPECT_THAT(r.reason, HasSubstr(w.reason)) << w.candidate;
  }
}

// The input file: every input, and the documented __metadata__.
TEST(Exec, InputFileCarriesTheCaseAndTheOutputsToWrite) {
  std::string seen = ::testing::TempDir() + "/dg_exec_seen.safetensors";
  fs::remove(seen);
  ASSERT_EQ(register_error("kda_exec_spy_f32=cp {in} " + shell_quote(seen) + " && false {out}"), "");
  Record r = verify_one(kSmall, "kda_exec_spy_f32");
  EXPECT_EQ(r.disposition, Disposition::ERRORED);
  SafetensorsFile f = read_safetensors(seen);
  for (const char* name : {"q", "k", "v", "g", "beta", "A_log", "dt_bias"}) EXPECT_TRUE(f.tensors.count(name)) << name;
  EXPECT_EQ(f.tensors.at("q").dtype(), DType::bf16);
  EXPECT_EQ(f.metadata.at("case"), parse_case(kSmall).str());
  EXPECT_EQ(f.metadata.at("op"), "kda");
  EXPECT_EQ(f.metadata.at("candidate"), "kda_exec_spy_f32");
  EXPECT_EQ(f.metadata.at("outputs"), "ht,o");
  EXPECT_EQ(f.metadata.at("out.o.dtype"), "F32");
  EXPECT_EQ(f.metadata.at("out.o.shape"), "[1,64,1,16]");
  EXPECT_EQ(f.metadata.at("out.ht.shape"), "[1,1,16,16]");
  nlohmann::json params = nlohmann::json::parse(f.metadata.at("params"));
  EXPECT_EQ(params["T"], 64);
  EXPECT_EQ(params["gate"], "softplus");
  EXPECT_EQ(params["h0"], false);
}

// Paths with a space and a quote reach the command as one word each; the temp dir is removed.
TEST(Exec, PathsAreShellQuotedAndTheTempDirRemoved) {
  std::string tmp = ::testing::TempDir() + "/dg exec 'quoted' dir";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const char* old = std::getenv("TMPDIR");
  std::string saved = old ? old : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  ASSERT_EQ(register_error("kda_exec_quoted_f32='test -f {in} && cp {in} {out}'"), "");
  Record r = verify_one("kda(T=4,H=1,K=16,V=16,regime=zero_gate,dtype=bf16,seed=0)", "kda_exec_quoted_f32");
  if (old) setenv("TMPDIR", saved.c_str(), 1);
  else unsetenv("TMPDIR");
  EXPECT_EQ(r.disposition, Disposition::ERRORED);
  EXPECT_THAT(r.reason, HasSubstr("output tensor 'ht' is missing")) << "the copy ran, so both paths arrived whole";
  EXPECT_TRUE(fs::is_empty(tmp)) << "the exec temp dir is left behind";
  EXPECT_EQ(shell_quote("a'b c"), "'a'\\''b c'");
}

// Each expected output is copied into the harness's tensor: same dtype bit for bit, a wider one
// rounded once, a narrower one exactly; a wrong shape or an integer tensor names the tensor.
TEST(Exec, ReadsOutputsConvertingTheirDtype) {
  std::string path = ::testing::TempDir() + "/dg_exec_outputs.safetensors";
  Tensor o64(DType::f64, {2, 3});
  const double x = 1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -40);   // rounds up to 1 + 2^-23 in f32, once
  for (int64_t i = 0; i < 6; ++i) o64.set(i, x * static_cast<double>(i + 1));
  Tensor ht16(DType::bf16, {4});
  for (int64_t i = 0; i < 4; ++i) ht16.set(i, 0.5 + 0.25 * static_cast<double>(i));
  write_safetensors(path, {{"o", o64}, {"ht", ht16}});

  TensorMap out = {{"o", Tensor(DType::f32, {2, 3})}, {"ht", Tensor(DType::f32, {4})}};
  read_exec_outputs(path, "kda_exec_test_f32", out);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out["o"].get(i), static_cast<double>(static_cast<float>(x * (i + 1))));
  EXPECT_EQ(out["o"].get(0), 1.0 + std::ldexp(1.0, -23));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(out["ht"].get(i), 0.5 + 0.25 * static_cast<double>(i));

  TensorMap wrong = {{"o", Tensor(DType::f32, {3, 2})}};
  try {
    read_exec_outputs(path, "kda_exec_test_f32", wrong);
    FAIL() << "a wrong shape was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("kda_exec_test_f32: output tensor 'o' has shape [2,3], expected [3,2]"));
  }
  write_safetensors(path, {{"o", Tensor(DType::i64, {2, 3})}});
  TensorMap want_float = {{"o", Tensor(DType::f32, {2, 3})}};
  try {
    read_exec_outputs(path, "kda_exec_test_f32", want_float);
    FAIL() << "an integer output was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("output tensor 'o' has dtype I64, expected F32"));
  }
  std::ofstream(path) << "garbage";
  try {
    read_exec_outputs(path, "kda_exec_test_f32", want_float);
    FAIL() << "a corrupt output file was accepted";
  } catch (const SafetensorsError&) {
    FAIL() << "a candidate's corrupt output must not read as bad input to driftgate";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("kda_exec_test_f32: unreadable output file"));
  }
}

TEST(Exec, SpecsAreChecked) {
  EXPECT_THAT(register_error("kda_exec_x_f32"), HasSubstr("expected NAME='CMD {in} {out}'"));
  EXPECT_THAT(register_error("=cmd {in} {out}"), HasSubstr("the candidate name before '=' is empty"));
  EXPECT_THAT(register_error("kda exec=cmd {in} {out}"), HasSubstr("names are letters, digits"));
  EXPECT_THAT(register_error("attn_exec_x_f32=cmd {in} {out}"),
              HasSubstr("the name must start with its op and '_', as in kda_exec_numpy_f32 (ops: add_rmsnorm, attention_decode, causal_conv1d, decode_layer, dsa_indexer, gemm, gemm_fp8_block, kda, kda_decode, kda_decode_fused, kpool_indexer, mhc, mla_decode, moe_combine, moe_router, rmsnorm, rmsnorm_gated, rope, sampler, swiglu)"));
  EXPECT_THAT(register_error("kda_exec_x_f32=cmd {in}"), HasSubstr("the command must contain {in} and {out}"));
  EXPECT_THAT(register_error("kda_cpu_recurrent_f32=cmd {in} {out}"),
              HasSubstr("a candidate of that name is already registered (backend cpu)"));

  ASSERT_EQ(register_error("kda_decode_exec_step=cmd {in} {out}"), "");
  const CandidateInfo& d = find_candidate("kda_decode_exec_step")->info();
  EXPECT_EQ(d.op, "kda_decode");   // the longest op prefix
  EXPECT_EQ(d.algorithm, "step");
  EXPECT_EQ(d.output_dtype, DType::f32);   // no dtype suffix: f32
  EXPECT_EQ(exec_specs().back(), "kda_decode_exec_step=cmd {in} {out}");
  std::vector<std::string> args = outside_candidate_args();   // what a worker process is given
  ASSERT_GE(args.size(), 2u);
  EXPECT_EQ(args[args.size() - 2], "--exec");
  EXPECT_EQ(args.back(), "kda_decode_exec_step=cmd {in} {out}");
}

// --- the command line ---------------------------------------------------------------------------
using Result = testing::CliResult;
Result run(const std::string& args) { return testing::run_driftgate(args); }

TEST(ExecCli, VerifyPassesAndListShowsIt) {
  REQUIRE_EXAMPLE_PYTHON(py);
  const std::string exec = "--exec " + shell_quote("kda_exec_numpy_f32=" + py + " " + shell_quote(kScript) + " {in} {out}");
  Result r = run("verify " + exec + " --candidate kda_exec_numpy_f32 --case '" + std::string(kSmall) + "'");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("PASSED"));
  r = run(exec + " list candidates");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kda_exec_numpy_f32"));
}

TEST(ExecCli, BadSpecExitsTwo) {
  Result r = run("list candidates --exec 'nosuchop_x=cmd {in} {out}'");
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--exec nosuchop_x: the name must start with its op"));
}

}  // namespace
}  // namespace dg
