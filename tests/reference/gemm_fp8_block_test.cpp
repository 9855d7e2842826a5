// The gemm_fp8_block reference (reference/gemm_fp8_block.h): hand-derived values (scales as
// multipliers, a partial weight-scale block), every tier against MPFR at 256 bits computed here on
// the whole e4m3 range with wide block scales, results independent of the thread count, bad input.
#include "reference/gemm_fp8_block.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include <mpfr.h>

#include "harness/cases/case.h"
#include "harness/core/dtype.h"
#include "harness/core/threads.h"
#include "tests/reference/tensor_values.h"

namespace dg {
namespace {

const Tier kTiers[] = {Tier::f64, Tier::dd, Tier::mpfr127, Tier::mpfr256};

Tensor e4m3(std::vector<int64_t> shape, const std::vector<double>& v) { return tensor(DType::e4m3, std::move(shape), v); }
Tensor f32(std::vector<int64_t> shape, const std::vector<double>& v) { return tensor(DType::f32, std::move(shape), v); }

// K = 256 (two blocks), N = 129 (w_scale has a second row for the 129th output alone), M = 1:
// x = 2 everywhere, x_scale = [1, 3]; w = 1 everywhere except row 1 = [-1, 448, 0, ...], w_scale =
// [[0.5, 0.125], [10, 10]]. Block partials 256 (row 1: 447 and 0), so
//   y[0] = 256 * 1 * 0.5 + 256 * 3 * 0.125 = 224,  y[1] = 2 * 447 * 1 * 0.5 = 447,
//   y[128] = 256 * 1 * 10 + 256 * 3 * 10 = 10240. Exact in every tier.
TEST(GemmFp8BlockReference, HandDerivedValues) {
  const int64_t M = 1, N = 129, K = 256;
  std::vector<double> wv(static_cast<size_t>(N * K), 1.0);
  for (int64_t k = 0; k < K; ++k) wv[static_cast<size_t>(K + k)] = 0.0;
  wv[static_cast<size_t>(K)] = -1.0;
  wv[static_cast<size_t>(K + 1)] = 448.0;
  const Tensor x = e4m3({M, K}, std::vector<double>(static_cast<size_t>(K), 2.0)), xs = f32({M, 2}, {1, 3});
  const Tensor w = e4m3({N, K}, wv), ws = f32({2, 2}, {0.5, 0.125, 10, 10});
  for (Tier tier : kTiers) {
    const GemmFp8BlockReferenceResult r = gemm_fp8_block_reference(tier, {M, N, K}, x, xs, w, ws);
    ASSERT_EQ(r.y.size(), static_cast<size_t>(N));
    EXPECT_EQ(r.y[0], 224.0) << tier_name(tier);
    EXPECT_EQ(r.y[1], 447.0) << tier_name(tier);
    EXPECT_EQ(r.y[127], 224.0) << tier_name(tier);
    EXPECT_EQ(r.y[128], 10240.0) << tier_name(tier);
  }
}

// Random e4m3 codes over the whole range and block scales spanning 2^-20 .. 2^20, against the sum
// computed here by MPFR at 256 bits (every product and sum exact at these sizes): dd and MPFR within
// one ulp (rounded to odd), f64 (exact partials, Dot2 across blocks) within 2.
TEST(GemmFp8BlockReference, TiersAgreeWithAnIndependentMpfrComputation) {
  const int64_t M = 3, N = 131, K = 384, KB = 3, NB = 2;
  std::mt19937_64 gen(7);
  std::uniform_int_distribution<int> code(0, 253);
  std::uniform_real_distribution<double> ex(-20, 20);
  const auto e4m3_value = [&] { const int c = code(gen); return decode(DType::e4m3, static_cast<uint64_t>(c < 127 ? c : c + 1)); };
  std::vector<double> xv(static_cast<size_t>(M * K)), wv(static_cast<size_t>(N * K)), xsv(static_cast<size_t>(M * KB)),
      wsv(static_cast<size_t>(NB * KB));
  for (double& v : xv) v = e4m3_value();
  for (double& v : wv) v = e4m3_value();
  for (double& v : xsv) v = static_cast<float>(std::exp2(ex(gen)));
  for (double& v : wsv) v = -static_cast<float>(std::exp2(ex(gen)));   // a negative scale is still a multiplier
  const Tensor x = e4m3({M, K}, xv), w = e4m3({N, K}, wv), xs = f32({M, KB}, xsv), ws = f32({NB, KB}, wsv);
  std::vector<double> exact(static_cast<size_t>(M * N));
  mpfr_t acc, p, t;
  mpfr_inits2(256, acc, p, t, static_cast<mpfr_ptr>(nullptr));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      mpfr_set_zero(acc, 1);
      for (int64_t b = 0; b < KB; ++b) {
        mpfr_set_zero(p, 1);
        for (int64_t k = b * 128; k < (b + 1) * 128; ++k) {
          mpfr_set_d(t, xv[static_cast<size_t>(m * K + k)], MPFR_RNDN);
          mpfr_mul_d(t, t, wv[static_cast<size_t>(n * K + k)], MPFR_RNDN);
          mpfr_add(p, p, t, MPFR_RNDN);
        }
        mpfr_mul_d(p, p, xsv[static_cast<size_t>(m * KB + b)], MPFR_RNDN);
        mpfr_mul_d(p, p, wsv[static_cast<size_t>((n / 128) * KB + b)], MPFR_RNDN);
        mpfr_add(acc, acc, p, MPFR_RNDN);
      }
      exact[static_cast<size_t>(m * N + n)] = mpfr_get_d(acc, MPFR_RNDN);
    }
  mpfr_clears(acc, p, t, static_cast<mpfr_ptr>(nullptr));
  for (Tier tier : kTiers) {
    const GemmFp8BlockReferenceResult r = gemm_fp8_block_reference(tier, {M, N, K}, x, xs, w, ws);
    const double tol = tier == Tier::f64 ? 2.0 : 1.0;
    for (size_t i = 0; i < exact.size(); ++i)
      ASSERT_LE(std::fabs(r.y[i] - exact[i]), tol * ulp(DType::f64, exact[i]))
          << tier_name(tier) << " element " << i << ": " << r.y[i] << " vs " << exact[i];
  }
}

// Each output's sums run in one thread in the stated order: one thread and two give the same bits.
TEST(GemmFp8BlockReference, ResultsDoNotDependOnTheThreadCount) {
  const int64_t M = 2, N = 45, K = 256;
  std::mt19937_64 gen(5);
  std::normal_distribution<double> nd;
  std::vector<double> xv(static_cast<size_t>(M * K)), wv(static_cast<size_t>(N * K));
  for (double& v : xv) v = 30 * nd(gen);
  for (double& v : wv) v = 30 * nd(gen);
  const Tensor x = e4m3({M, K}, xv), w = e4m3({N, K}, wv), xs = f32({M, 2}, {0.1, 3, 1e-3, 7}), ws = f32({1, 2}, {0.3, 1e5});
  for (Tier tier : {Tier::f64, Tier::dd}) {
    set_num_threads(1);
    const GemmFp8BlockReferenceResult one = gemm_fp8_block_reference(tier, {M, N, K}, x, xs, w, ws, true);
    set_num_threads(2);
    const GemmFp8BlockReferenceResult two = gemm_fp8_block_reference(tier, {M, N, K}, x, xs, w, ws, true);
    set_num_threads(0);
    EXPECT_EQ(one.y, two.y) << tier_name(tier);
    EXPECT_EQ(one.y_tail, two.y_tail) << tier_name(tier);
  }
}

TEST(GemmFp8BlockReference, BadInputIsRefused) {
  const int64_t K = 128;
  const Tensor x = e4m3({1, K}, {1}), w = e4m3({1, K}, {1}), xs = f32({1, 1}, {1}), ws = f32({1, 1}, {1});
  EXPECT_THROW(gemm_fp8_block_reference(Tier::f64, {1, 1, 100}, x, xs, w, ws), InputError);    // K % 128
  EXPECT_THROW(gemm_fp8_block_reference(Tier::f64, {1, 0, K}, x, xs, w, ws), InputError);      // N = 0
  EXPECT_THROW(gemm_fp8_block_reference(Tier::f64, {1, 2, K}, x, xs, w, ws), InputError);      // w [1,K]
  EXPECT_THROW(gemm_fp8_block_reference(Tier::f64, {1, 1, K}, x, f32({1, 2}, {1, 1}), w, ws), InputError);
  const Tensor x_bf16 = tensor(DType::bf16, {1, K}, {1});
  EXPECT_THROW(gemm_fp8_block_reference(Tier::f64, {1, 1, K}, x_bf16, xs, w, ws), InputError);   // not e4m3
  EXPECT_THROW(gemm_fp8_block_reference(Tier::dd, {1, 1, K}, x, f32({1, 1}, {INFINITY}), w, ws), InputError);
  const Tensor nan_w = e4m3({1, K}, {1, 1, std::nan("")});
  try {
    gemm_fp8_block_reference(Tier::f64, {1, 1, K}, x, xs, nan_w, ws);
    FAIL() << "a NaN weight was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'w' has a non-finite value at element 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dg
