#include "harness/judge/policy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <limits>

#include <fmt/format.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/cases/case.h"
#include "harness/cases/registry.h"

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
  EXPECT_EQ(p.naive_for("kda", DType::f32), "kda_cpu_naive_f32");
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

TEST(Policy, EveryBoundIsEnforcedAtBothEnds) {
  // Each documented range of policies/default.toml: its ends are accepted, just outside is refused
  // with the key and the range named, and NaN and infinities are refused.
  ASSERT_FALSE(policy_bounds().empty());
  for (const PolicyBound& b : policy_bounds()) {
    const std::string key = b.key;
    const std::string table = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
    auto text = [&](const std::string& v) { return "[" + table + "]\n" + name + " = " + v + "\n"; };
    auto num = [](double v) { return fmt::format("{:.17g}", v); };
    EXPECT_EQ(error_of(text(num(b.lo))), "(no error)") << key;
    EXPECT_EQ(error_of(text(num(b.hi))), "(no error)") << key;
    const double below = b.lo == 0 ? -1e-3 : b.lo * (1 - 1e-6) - 1e-9;
    const double above = b.hi * (1 + 1e-6) + 1e-9;
    const std::string low_error = error_of(text(num(below)));
    EXPECT_THAT(low_error, HasSubstr(key)) << key << " at " << below;
    EXPECT_THAT(error_of(text(num(above))), HasSubstr(key)) << key << " at " << above;
    for (const char* v : {"nan", "inf", "-inf"}) EXPECT_THAT(error_of(text(v)), HasSubstr("finite")) << key << " = " << v;
  }
  EXPECT_EQ(error_of("[precision]\ndrift_min_positions = 1\n"), "(no error)");
  EXPECT_THAT(error_of("[precision]\ndrift_min_positions = 0\n"), HasSubstr("[1, 1048576]"));
  EXPECT_THAT(error_of("[precision]\ndrift_min_positions = 1048577\n"), HasSubstr("[1, 1048576]"));
  EXPECT_THAT(error_of("[precision]\ndrift_min_positions = 1.5\n"), HasSubstr("must be an integer"));
  EXPECT_THAT(error_of("[precision]\ndrift_min_positions = 1e30\n"), HasSubstr("must be an integer"));
}

TEST(Policy, PoliciesThatWouldMergeANullCandidateAreRefused) {
  // Before: each of these parsed, and kda_null_zeros_f32 could MERGE.
  EXPECT_THAT(error_of("[precision]\nslack = inf\n"), HasSubstr("'precision.slack' must be a finite number, got inf"));
  EXPECT_THAT(error_of("[precision]\nslack = nan\n"), HasSubstr("'precision.slack' must be a finite number"));
  EXPECT_THAT(error_of("[precision]\nnaive_factor = 1e300\n"), HasSubstr("'precision.naive_factor' must be in [0, 4]"));
  EXPECT_THAT(error_of("[precision]\nfloor_ulps = 1e300\n"), HasSubstr("'precision.floor_ulps' must be in [0, 16]"));
  EXPECT_THAT(error_of("[precision]\ntail_factor = 1e300\n"), HasSubstr("'precision.tail_factor' must be in [1, 4]"));
  EXPECT_THAT(error_of("[precision]\ntail_factor = 0.5\n"), HasSubstr("'precision.tail_factor' must be in [1, 4]"));
  EXPECT_EQ(error_of("[precision]\ntail_factor = 1\n"), "(no error)");
  EXPECT_THAT(error_of("[precision.min_bits]\nf32 = -1\n"), HasSubstr("'precision.min_bits.f32' must be in [1, 24]"));
  EXPECT_THAT(error_of("[precision.min_bits]\nbf16 = 0\n"), HasSubstr("'precision.min_bits.bf16' must be in [1, 8]"));
  EXPECT_THAT(error_of("[precision.min_bits]\nf32 = 25\n"), HasSubstr("[1, 24]"));
  EXPECT_EQ(error_of("[precision.min_bits]\nf32 = 24\ne5m2 = 1\n"), "(no error)");
  EXPECT_THAT(error_of("[precision.min_bits]\nf32 = nan\n"), HasSubstr("finite"));
  EXPECT_THAT(error_of("[precision]\nmetrics = []\n"), HasSubstr("at least one metric"));
  // A canary as the naive kernel (registered here as driftgate registers its null candidates).
  if (!find_candidate("kda_null_zeros_f32"))
    register_candidate({"kda_null_zeros_f32", "kda", "null", "zeros", DType::f32, DType::f32, DType::f32, "test canary"},
                       [](const Case&, const TensorMap&, TensorMap&) {});
  EXPECT_THAT(error_of("[naive]\n\"kda.f32\" = \"kda_null_zeros_f32\"\n"), HasSubstr("null or cheating candidate"));
  EXPECT_THAT(error_of("[naive]\n\"kda.f32\" = \"\"\n"), HasSubstr("must name a candidate"));
  EXPECT_THAT(error_of("[throughput]\nmin_effect = 1\n"), HasSubstr("'throughput.min_effect' must be in [0, 0.5]"));
  EXPECT_THAT(error_of("[throughput]\nclaim_tolerance = 5\n"), HasSubstr("'throughput.claim_tolerance'"));
  // The default policy keeps every rule; a Policy built in code is checked the same way.
  EXPECT_EQ(policy_problem(default_policy()), "");
  Policy p = default_policy();
  p.slack = std::numeric_limits<double>::infinity();
  EXPECT_THAT(policy_problem(p), HasSubstr("precision.slack"));
}

TEST(Policy, AFifoIsRefusedWithoutWaiting) {
  const std::string fifo = ::testing::TempDir() + "/dg_policy_fifo_" + std::to_string(::getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    read_policy(fifo);
    ADD_FAILURE() << "a FIFO was read";
  } catch (const InputError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("a FIFO, not a regular file"));
  }
  ::unlink(fifo.c_str());
}

}  // namespace
}  // namespace dg
