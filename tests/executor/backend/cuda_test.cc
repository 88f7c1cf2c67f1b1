// GPU checks. Every test here skips, saying why, where no CUDA device is usable (CI has none).
#include "executor/calibrate/cuda.h"

#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "core/presets.h"
#include "executor/backend/device.h"

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

// The quick calibration on the GPU: every figure present and plausible for a data-centre GPU
// (the bounds are loose: this checks the measurement runs and its units, not the GPU).
TEST_F(CudaTest, QuickCalibrationMeasuresEveryFigure) {
  std::ostringstream progress;
  const CudaComputeFigures f = MeasureCudaCompute(CudaCalibrateOptions::Quick(), &progress);
  EXPECT_FALSE(f.device_name.empty());
  EXPECT_GT(f.memory_bytes, int64_t{1} << 30);
  EXPECT_GT(f.used_at_start_bytes, 0);
  EXPECT_EQ(f.gemm_bf16.size(), 8u);
  EXPECT_EQ(f.gemm_fp32.size(), 8u);
  EXPECT_GT(f.bf16_flops_per_s, 10e12);
  EXPECT_GT(f.bf16_flops_per_s, f.fp32_flops_per_s);
  EXPECT_GT(f.copy_bytes_per_s, 100e9);
  EXPECT_GT(f.launch_s, 0);
  EXPECT_LT(f.launch_s, 1e-3);
  ASSERT_EQ(f.attention.size(), 2u);
  EXPECT_GT(f.attention[0].forward_flops_per_s, 0);
  EXPECT_GT(f.attention[0].backward_flops_per_s, 0);
  std::cout << progress.str();
}

}  // namespace
}  // namespace ptdp
