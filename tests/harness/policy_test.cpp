#include "harness/policy.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/case.h"

namespace dg {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& toml) {
  try {
    parse_policy(toml, "p.toml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Policy, DefaultIsTheDocumentedFile) {
  Policy p = default_policy();
  EXPECT_EQ(p.source, "default");
  EXPECT_DOUBLE_EQ(p.slack, 0.5);
  EXPECT_DOUBLE_EQ(p.naive_factor, 2.0);
  EXPECT_DOUBLE_EQ(p.min_bits_for(DType::f32), 12);
  EXPECT_DOUBLE_EQ(p.min_bits_for(DType::bf16), 5);
  EXPECT_EQ(p.naive_for("kda", DType::f32), "kda_cpu_recurrent_f32");
  EXPECT_EQ(p.naive_for("kda", DType::bf16), "");
  EXPECT_EQ(p.metrics, (std::vector<std::string>{"rms", "max_abs"}));
}

TEST(Policy, AFileOverridesOnlyWhatItSets) {
  Policy p = parse_policy("[precision]\nslack = 0.1\n[throughput]\nmin_effect = 0.05\n", "p.toml");
  EXPECT_DOUBLE_EQ(p.slack, 0.1);
  EXPECT_DOUBLE_EQ(p.min_effect, 0.05);
  EXPECT_DOUBLE_EQ(p.naive_factor, 2.0);   // from the default
  EXPECT_EQ(p.source, "p.toml");
}

TEST(Policy, BadFilesNameTheProblem) {
  EXPECT_THAT(error_of("[precision\n"), HasSubstr("not valid TOML"));
  EXPECT_THAT(error_of("[precision]\nslak = 1\n"), HasSubstr("unknown key 'precision.slak'"));
  EXPECT_THAT(error_of("[precision]\nslack = -1\n"), HasSubstr("'precision.slack' must be >= 0"));
  EXPECT_THAT(error_of("[precision]\nslack = \"x\"\n"), HasSubstr("must be a number"));
  EXPECT_THAT(error_of("[precision]\nmetrics = [\"cosine\"]\n"), HasSubstr("\"rms\" or \"max_abs\""));
  EXPECT_THAT(error_of("[precision.min_bits]\nf8 = 1\n"), HasSubstr("unknown format 'f8'"));
  EXPECT_THAT(error_of("[throughput]\nconfidence = 2\n"), HasSubstr("(0.5, 1)"));
  EXPECT_THAT(error_of("[gate]\n"), HasSubstr("unknown table or key 'gate'"));
  EXPECT_THAT(error_of("[throughput]\nmax_time_s = 0\n"), HasSubstr("must be > 0"));
  try {
    read_policy("/nonexistent/policy.toml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("cannot read"));
  }
}

}  // namespace
}  // namespace dg
