// What the CUDA candidates' tests share (tests/candidates/cuda_*_test.cpp, also built against the
// CUDA emulator as the *_emu tests): the GPU skip, one candidate verified on one case, a suite's
// cases, an output's bits, a candidate's outputs on a case's inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cuda/device.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"

// Skips without a GPU, or fails where DRIFTGATE_REQUIRE_GPU is set (scripts/gpu-check.sh sets it,
// so a GPU machine whose driver cannot run the build fails its check instead of skipping it).
// (A macro: GTEST_SKIP returns from the function it is written in.)
#define SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                       \
    const ::dg::CudaStatus status_ = ::dg::cuda_status();                                    \
    if (!status_.available && std::getenv("DRIFTGATE_REQUIRE_GPU"))                          \
      FAIL() << "DRIFTGATE_REQUIRE_GPU is set and there is no GPU: " << status_.reason;      \
    if (!status_.available) GTEST_SKIP() << "no GPU here: " << status_.reason;               \
  } while (0)

namespace dg::cuda_test {

inline Record verify_at(const std::string& cand, const std::string& case_str, Tier tier) {
  VerifyOptions opt;
  opt.tier = tier;
  std::vector<Record> r = verify_case(parse_case(case_str), {&require_candidate(cand)}, opt);
  EXPECT_EQ(r.size(), 1u);
  return r.at(0);
}

inline const std::vector<std::string>& suite_cases(const char* name) {
  const Suite* s = find_suite(name);
  if (!s) throw std::runtime_error(std::string("no suite ") + name);
  return s->cases;
}

inline double output_bits(const Record& r, const std::string& out) {
  for (const OutputResult& o : r.outputs)
    if (o.name == out) return o.metrics.bits;
  ADD_FAILURE() << r.candidate << ": no output " << out;
  return 0;
}

inline TensorMap run_on_case(const std::string& cand, const std::string& cs) {
  const Case c = parse_case(cs);
  return run_candidate(require_candidate(cand), c, generate_inputs(c));
}

inline std::vector<float> f32_values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::f32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// `cuda` is registered on every build as the CUDA twin of `cpu`: the same op, algorithm and dtypes.
inline void expect_cpu_twin(const char* cuda, const char* cpu, const char* op) {
  const Candidate* c = find_candidate(cuda);
  ASSERT_NE(c, nullptr);
  const Candidate* twin = find_candidate(cpu);
  ASSERT_NE(twin, nullptr);
  EXPECT_EQ(c->info().backend, "cuda");
  EXPECT_EQ(c->info().op, op);
  EXPECT_EQ(c->info().algorithm, twin->info().algorithm);
  EXPECT_EQ(c->info().input_dtype, twin->info().input_dtype);
  EXPECT_EQ(c->info().state_dtype, twin->info().state_dtype);
  EXPECT_EQ(c->info().output_dtype, twin->info().output_dtype);
}

}  // namespace dg::cuda_test
