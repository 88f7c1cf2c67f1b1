// GPU checks. Every test here skips, saying why, where no CUDA device is usable (CI has none).
#include <gtest/gtest.h>

#include "executor/device.h"

namespace ptdp {
namespace {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    status_ = QueryCuda();
    if (!status_.usable) GTEST_SKIP() << "no usable GPU: " << status_.reason;
  }
  CudaStatus status_;
};

TEST(CudaProbe, AnswersWithoutCrashingAndExplainsItself) {
  const CudaStatus s = QueryCuda();
  EXPECT_EQ(s.usable, s.device_count > 0);
  EXPECT_EQ(s.usable, s.reason.empty());
  if (s.built) {
    EXPECT_FALSE(s.nccl_version.empty());
  }
}

TEST_F(CudaTest, DeviceMemoryRoundTrip) {
  std::string error;
  EXPECT_TRUE(CudaRoundTrip(64 << 20, &error)) << error;
  EXPECT_FALSE(status_.device_name.empty());
}

}  // namespace
}  // namespace ptdp
