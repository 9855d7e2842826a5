// The CUDA build links and answers at run time: with a GPU it names the device; without one it says
// why, and nothing crashes.
#include "candidates/cuda/device.h"

#include <gtest/gtest.h>

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
