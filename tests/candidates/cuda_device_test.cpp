// The CUDA build links and answers at run time: with a GPU it names the device; without one it says
// why, and nothing crashes.
#include "candidates/cuda/device.h"

#include <gtest/gtest.h>

TEST(CudaDevice, ReportsAvailabilityOrAReason) {
  dg::CudaStatus s = dg::cuda_status();
  if (!s.available) {
    EXPECT_FALSE(s.reason.empty());
    GTEST_SKIP() << "no GPU here: " << s.reason;
  }
  EXPECT_FALSE(s.device.empty());
}
