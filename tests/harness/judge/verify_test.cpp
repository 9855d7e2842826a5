// verify: the dispositions a broken candidate earns, save-failures, certification.
#include "harness/judge/verify.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/core/json_limits.h"
#include "harness/report/report.h"
#include "harness/core/safetensors.h"

namespace dg {
namespace {

using ::testing::HasSubstr;

// Candidates that break the rules, registered for this test binary only.
void zeros(const Case&, const TensorMap&, TensorMap& out) {
  for (auto& [_, t] : out) std::fill(t.bytes(), t.bytes() + t.nbytes(), std::byte{0});
}
void one_nan(const Case& c, const TensorMap& in, TensorMap& out) {
  find_candidate("kda_cpu_recurrent_f32")->run(c, in, out);
  out.at("o").set(out.at("o").numel() / 2, std::nan(""));
}
void throws(const Case&, const TensorMap&, TensorMap&) { throw std::runtime_error("kernel launch failed"); }
void unsupported(const Case&, const TensorMap&, TensorMap&) { throw NotSupported("no CUDA device"); }

DG_REGISTER_CANDIDATE(test_zeros, {"kda_test_zeros_f32", "kda", "cpu", "zeros", DType::f32, DType::f32, DType::f32, "zeros"}, zeros);
DG_REGISTER_CANDIDATE(test_nan, {"kda_test_nan_f32", "kda", "cpu", "nan", DType::f32, DType::f32, DType::f32, "one NaN"}, one_nan);
DG_REGISTER_CANDIDATE(test_throws, {"kda_test_throws_f32", "kda", "cpu", "throws", DType::f32, DType::f32, DType::f32, "throws"}, throws);
DG_REGISTER_CANDIDATE(test_unsupported, {"kda_test_unsupported_f32", "kda", "cpu", "unsupported", DType::f32, DType::f32,
                                         DType::f32, "not supported here"}, unsupported);

// (A function, not a global: ops register during static initialisation.)
Case small_case() { return parse_case("kda(T=70,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)"); }

Record verify_one(const std::string& cand, VerifyOptions opt = {}) {
  opt.tier = Tier::f64;
  std::vector<Record> r = verify_case(small_case(), {find_candidate(cand)}, opt);
  EXPECT_EQ(r.size(), 1u);
  return r.at(0);
}

TEST(Verify, SoundCandidatePasses) {
  for (const char* name : {"kda_cpu_recurrent_f32", "kda_cpu_chunk_f32", "kda_cpu_chunk_bf16"}) {
    Record r = verify_one(name);
    EXPECT_EQ(r.disposition, Disposition::PASSED) << name << ": " << r.reason;
    ASSERT_EQ(r.outputs.size(), 2u);
    EXPECT_GT(r.outputs[1].metrics.bits, r.min_bits);   // "o" (sorted: ht, o)
    EXPECT_THAT(r.reproduce, HasSubstr("--case 'kda(T=70"));
  }
}

TEST(Verify, ZerosAreIncorrect) {
  Record r = verify_one("kda_test_zeros_f32");
  EXPECT_EQ(r.disposition, Disposition::INCORRECT);
  EXPECT_THAT(r.reason, HasSubstr("bits < floor"));
}

TEST(Verify, OneNanIsIncorrectAndNamed) {
  Record r = verify_one("kda_test_nan_f32");
  EXPECT_EQ(r.disposition, Disposition::INCORRECT);
  EXPECT_THAT(r.reason, HasSubstr("o: 1 NaN/Inf positions differ"));
}

TEST(Verify, ThrowingCandidateIsErroredAndSaved) {
  std::string dir = ::testing::TempDir() + "/dg_failures";
  std::filesystem::remove_all(dir);
  VerifyOptions opt;
  opt.save_failures_dir = dir;
  Record r = verify_one("kda_test_throws_f32", opt);
  EXPECT_EQ(r.disposition, Disposition::ERRORED);
  EXPECT_THAT(r.reason, HasSubstr("kernel launch failed"));
  ASSERT_TRUE(std::filesystem::exists(dir));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    SafetensorsFile f = read_safetensors(e.path().string());
    EXPECT_EQ(f.metadata.at("case"), small_case().str());
    EXPECT_EQ(f.metadata.at("disposition"), "ERRORED");
    EXPECT_TRUE(f.tensors.count("q") && f.tensors.count("ref.o"));
    ++files;
  }
  EXPECT_EQ(files, 1);
}

// NotSupported is a row of its own: not ERRORED, not a failure, the candidate's reason kept.
TEST(Verify, NotSupportedIsARowNotAnError) {
  Record r = verify_one("kda_test_unsupported_f32");
  EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED);
  EXPECT_EQ(r.reason, "no CUDA device");
  EXPECT_TRUE(r.outputs.empty());
}

TEST(Verify, SkipsCandidatesOfAnotherOp) {
  std::vector<Record> r = verify_case(small_case(), {find_candidate("kda_decode_cpu_f32")}, {});
  EXPECT_EQ(r.at(0).disposition, Disposition::SKIPPED);
}

TEST(Verify, CertificationMeasuresTheTier) {
  VerifyOptions opt;
  opt.certify = true;
  opt.tier = Tier::f64;
  Record r = verify_case(small_case(), {find_candidate("kda_cpu_recurrent_f32")}, opt).at(0);
  ASSERT_TRUE(r.cert.has_value());
  EXPECT_EQ(r.cert->cert.against, Tier::dd);
  EXPECT_GT(r.cert->cert.ref_bits, 44);   // f64 is more than 20 bits better than f32
  EXPECT_LT(r.cert->cert.ref_bits, 60);   // ... and it is f64, not exact
  EXPECT_FALSE(r.cert->cert.sample.empty());
  EXPECT_TRUE(r.cert->sufficient);
}

TEST(Verify, AgreementBitsCatchALowPrecisionReference) {
  Case c = parse_case("kda(T=64,H=1,K=16,V=16,regime=long_memory,dtype=f32,seed=0)");
  TensorMap in = generate_inputs(c);
  const OpSpec* op = find_op("kda");
  RefOutputs good = op->reference(c, in, Tier::dd, -1);
  RefOutputs low = good;   // a "reference" that kept only f32 precision
  for (auto& [_, v] : low)
    for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  double bits = std::min(agreement_bits(low.at("o"), good.at("o")), agreement_bits(low.at("ht"), good.at("ht")));
  EXPECT_GT(bits, 20);
  EXPECT_LT(bits, 26);
  // Not 20 bits better than an f32 candidate: certification must refuse to trust it.
  EXPECT_FALSE(certified_for(bits, DType::f32));
  EXPECT_TRUE(certified_for(bits + 30, DType::f32));
}

TEST(Verify, NanInStoredInputsIsAnInputError) {
  TensorMap in = generate_inputs(small_case());
  in.at("k").set(5, std::nan(""));
  try {
    verify_case(small_case(), {find_candidate("kda_cpu_recurrent_f32")}, {}, &in);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("input tensor 'k' holds nan at flat index 5"));
  }
}

}  // namespace
}  // namespace dg

namespace dg {
namespace {

// Reproduce commands of plugin and exec rows carry the options that load those candidates.
TEST(Verify, ReproduceCarriesOutsideCandidateOptions) {
  EXPECT_EQ(outside_args_text({"--threads", "2"}), "");
  EXPECT_EQ(outside_args_text({"--threads", "2", "--plugin", "/a b/lib.so", "--exec", "k=python3 x.py {in} {out}"}),
            " --plugin '/a b/lib.so' --exec 'k=python3 x.py {in} {out}'");
  EXPECT_EQ(outside_args_text({"--exec", "k=sh -c 'x' {in} {out}"}), " --exec 'k=sh -c '\\''x'\\'' {in} {out}'");
}

}  // namespace
}  // namespace dg

namespace dg {
namespace {

// A results file's integer fields are read as integers: a count of 6.5e23 (out of int64's range) or
// 2.5 is refused with std::out_of_range, not converted (a static_cast out of range is undefined).
// The op's measures travel in the JSON row and read back as written, NaN limits included.
TEST(Verify, MeasuresRoundTripThroughJson) {
  Record r = verify_one("kda_cpu_recurrent_f32");
  r.measures.push_back({"format_bound.y", 0.25, 1.0, false, 0.0, "a bound"});
  r.measures.push_back({"weight_err", 3e-7, std::numeric_limits<double>::quiet_NaN(), true, 1e-9, "relative"});
  const Record back = record_from_json(to_json(r));
  ASSERT_EQ(back.measures.size(), 2u);
  EXPECT_EQ(back.measures[0].name, "format_bound.y");
  EXPECT_EQ(back.measures[0].value, 0.25);
  EXPECT_EQ(back.measures[0].limit, 1.0);
  EXPECT_FALSE(back.measures[0].relative);
  EXPECT_EQ(back.measures[1].detail, "relative");
  EXPECT_TRUE(std::isnan(back.measures[1].limit));
  EXPECT_TRUE(back.measures[1].relative);
  EXPECT_EQ(back.measures[1].floor, 1e-9);
  EXPECT_FALSE(to_json(verify_one("kda_cpu_recurrent_f32")).contains("measures"));
}

TEST(Verify, ResultsWithAFractionalOrHugeCountAreRefused) {
  const Record r = verify_one("kda_cpu_recurrent_f32");
  nlohmann::json j = to_json(r);
  EXPECT_EQ(record_from_json(j).outputs.at(0).metrics.count, r.outputs.at(0).metrics.count);
  const std::string out = j.at("outputs").begin().key();
  for (const nlohmann::json& bad : {nlohmann::json(6.46667e+23), nlohmann::json(2.5), nlohmann::json(18446744073709551615ull)}) {
    nlohmann::json k = j;
    k["outputs"][out]["count"] = bad;
    EXPECT_THROW(record_from_json(k), std::out_of_range) << bad.dump();
  }
  EXPECT_EQ(json_integer<int>(nlohmann::json(-7)), -7);
  EXPECT_THROW(json_integer<int>(nlohmann::json(int64_t{1} << 40)), std::out_of_range);
  EXPECT_THROW(json_integer<int>(nlohmann::json("7")), std::out_of_range);
}

}  // namespace
}  // namespace dg
