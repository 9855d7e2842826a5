// The CUDA build links and answers at run time: with a GPU it names the device; without one it says
// why, and nothing crashes.
#include "candidates/cuda/device.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

TEST(CudaDevice, ReportsAvailabilityOrAReason) {
  dg::CudaStatus s = dg::cuda_status();
  if (!s.available) {
    EXPECT_FALSE(s.reason.empty());
    // scripts/gpu-check.sh sets DRIFTGATE_REQUIRE_GPU: there, no device is a failure.
    if (std::getenv("DRIFTGATE_REQUIRE_GPU")) FAIL() << "DRIFTGATE_REQUIRE_GPU is set and there is no GPU: " << s.reason;
    GTEST_SKIP() << "no GPU here: " << s.reason;
  }
  EXPECT_FALSE(s.device.empty());
}

// The practical ceiling of a memory-bound kernel: what a copy of a decode state's size moves. It
// prints the figures (scripts/gpu-check.sh records them) and checks them against the peak the bench
// rows use: a copy faster than the memory's clock allows means the peak (and every row's "% of
// peak") is wrong.
TEST(CudaDevice, ACopyIsNoFasterThanThePeakBandwidth) {
  dg::CudaStatus s = dg::cuda_status();
  if (!s.available) {
    if (std::getenv("DRIFTGATE_REQUIRE_GPU")) FAIL() << "DRIFTGATE_REQUIRE_GPU is set and there is no GPU: " << s.reason;
    GTEST_SKIP() << "no GPU here: " << s.reason;
  }
  const size_t bytes = size_t{512} << 20;   // the f32 state of B=256, H=32, K=V=128: 537 MB
  const dg::CopyBandwidth b = dg::cuda_copy_bandwidth(bytes, 5);
  std::printf("copy of 512 MiB on %s: cudaMemcpy %.0f GB/s (%.1f%% of %.0f GB/s peak), streaming kernel %.0f GB/s (%.1f%%)\n",
              s.device.c_str(), b.memcpy_gbs, 100 * b.memcpy_gbs / b.peak_gbs, b.peak_gbs, b.kernel_gbs,
              100 * b.kernel_gbs / b.peak_gbs);
  EXPECT_GT(b.peak_gbs, 100.0);
  EXPECT_GT(b.memcpy_gbs, 0.0);
  EXPECT_GT(b.kernel_gbs, 0.0);
  EXPECT_LE(b.memcpy_gbs, 1.02 * b.peak_gbs);
  EXPECT_LE(b.kernel_gbs, 1.02 * b.peak_gbs);
}
