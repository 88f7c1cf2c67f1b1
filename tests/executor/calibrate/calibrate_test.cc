// `ptdp calibrate`'s library (executor/calibrate/calibrate.h): a tiny real measurement has the
// profile's shape; a profile built from given figures reads back exactly, rounds, keeps what is not
// measured, and says on every key how it was obtained; the MPI job's hand-back text round-trips.
#include "executor/calibrate/calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/presets.h"
#include "core/spec_yaml.h"
#include "executor/backend/cpu.h"
#include "executor/calibrate/cuda.h"

namespace ptdp {
namespace {

CalibrateOptions Tiny() {
  CalibrateOptions o;
  o.gemm_axis = {8, 32};
  o.peak_size = 64;
  o.repeats = 1;
  o.min_timing_s = 0;
  o.stream_bytes = int64_t{1} << 20;
  o.kernel_bytes = int64_t{64} << 10;
  return o;
}

TEST(Calibrate, MeasuresAFullSortedGridAndRates) {
  const auto backend = MakeCpuBackend(1);
  // The progress callback: once per shape, in order (`ptdp calibrate`'s progress line).
  std::vector<size_t> shapes_done;
  const CpuComputeFigures f =
      MeasureCpuCompute(*backend, Tiny(), nullptr, [&](size_t done, size_t total) {
        EXPECT_EQ(total, 8u);
        shapes_done.push_back(done);
      });
  EXPECT_EQ(shapes_done, (std::vector<size_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_GT(f.peak_fp32_flops, 0);
  EXPECT_EQ(f.peak_size, 64);
  ASSERT_EQ(f.gemm_efficiency.size(), 8u);
  EXPECT_TRUE(std::is_sorted(f.gemm_efficiency.begin(), f.gemm_efficiency.end(),
                             [](const GemmEfficiencyPoint& a, const GemmEfficiencyPoint& b) {
                               return std::tie(a.m, a.n, a.k) < std::tie(b.m, b.n, b.k);
                             }));
  for (const GemmEfficiencyPoint& p : f.gemm_efficiency) {
    EXPECT_GT(p.efficiency, 0);
    EXPECT_LE(p.efficiency, 1);
  }
  EXPECT_EQ(f.stream_bytes, int64_t{1} << 20);
  EXPECT_GT(f.copy_bytes_per_s, 0);
  EXPECT_GT(f.add_bytes_per_s, 0);
  ASSERT_EQ(f.kernels.size(), 5u);
  EXPECT_EQ(f.kernels[3].name, "gelu");
}

CpuComputeFigures GivenCompute() {
  CpuComputeFigures f;
  f.peak_fp32_flops = 167.89e9;  // written as 0.168 TFLOP/s
  f.peak_size = 2048;
  for (int64_t m : {32, 512}) {
    for (int64_t n : {32, 512}) {
      for (int64_t k : {32, 512}) f.gemm_efficiency.push_back({m, n, k, 0.123456 + m / 1e4});
    }
  }
  f.stream_bytes = int64_t{256} << 20;
  f.copy_bytes_per_s = 21.34e9;
  f.add_bytes_per_s = 25e9;  // faster than the copy: memory_efficiency stops at 1
  f.kernels = {{"gelu", 1 << 20, 1.04e9}};
  return f;
}

CommFigures GivenComm() {
  CommFigures c;
  c.ranks = 2;
  c.hosts = 1;
  c.allreduce_busbw = {{1 << 20, 5.4e9}, {16 << 20, 6.97e9}};
  c.allreduce_busbw_bytes_per_s = 6.97e9;
  c.allreduce_small_s = 0.9e-6;
  c.p2p_latency_s = 0.263e-6;
  c.p2p_bytes_per_s = 10.28e9;
  c.p2p_bytes = 4 << 20;
  c.process_rss_bytes = 21000192;
  return c;
}

CalibrationRecord GivenRecord() {
  CalibrationRecord r;
  r.name = "cpu-test";
  r.command = "ptdp calibrate --backend cpu --out cpu-test.yaml";
  r.date = "2026-01-02T03:04:05Z";
  r.machine = {"host1", "Test CPU", 2, 25000000000, "OpenBLAS test", 0.1};
  r.ranks_per_node = 2;
  r.base = "the cpu-local preset";
  r.elapsed_s = 9.5;
  return r;
}

TEST(Calibrate, ProfileReadsBackExactlyWithEveryKeyExplained) {
  const ClusterSpec base = ClusterPreset("cpu-local");
  const ClusterSpec c = CalibratedCluster(base, GivenCompute(), GivenComm(), GivenRecord());
  EXPECT_EQ(c.name, "cpu-test");
  EXPECT_DOUBLE_EQ(c.gpu.peak_fp32_flops, 0.168e12);
  EXPECT_DOUBLE_EQ(c.gpu.peak_bf16_flops, c.gpu.peak_fp32_flops);
  EXPECT_DOUBLE_EQ(c.gpu.peak_fp16_flops, c.gpu.peak_fp32_flops);
  EXPECT_DOUBLE_EQ(c.gpu.gemm_efficiency.front().efficiency, 0.127);  // 0.126656, 3 digits
  EXPECT_EQ(c.gpu.hbm_bytes, 12500000000);
  EXPECT_DOUBLE_EQ(c.gpu.hbm_bandwidth_bytes_per_s, 21.3e9);
  EXPECT_DOUBLE_EQ(c.gpu.memory_efficiency, 1.0);
  EXPECT_EQ(c.gpu.reserved_bytes, 21000192);
  EXPECT_EQ(c.gpus_per_node, 2);
  EXPECT_DOUBLE_EQ(c.nvlink_busbw_bytes_per_s, 6.97e9);
  EXPECT_DOUBLE_EQ(c.nvlink_bytes_per_s, 10.3e9);
  EXPECT_DOUBLE_EQ(c.nvlink_step_latency_s, 0.263e-6);
  // 0.9 us for the all-reduce's 2 steps of 0.263 us: 0.374 us of base latency.
  EXPECT_NEAR(c.collective_base_latency_s, 0.374e-6, 1e-15);
  // Not measured: the base's.
  EXPECT_EQ(c.nics_per_node, base.nics_per_node);
  EXPECT_EQ(c.nic_busbw_bytes_per_s, base.nic_busbw_bytes_per_s);
  EXPECT_EQ(c.nic_step_latency_s, base.nic_step_latency_s);
  EXPECT_EQ(c.gpu.fragmentation, base.gpu.fragmentation);

  const std::string text = CalibratedProfileYaml(c, GivenCompute(), GivenComm(), GivenRecord());
  EXPECT_EQ(ParseClusterYaml(text, "t"), c);
  EXPECT_EQ(ParseClusterYaml(WriteClusterYaml(ParseClusterYaml(text, "t")), "t"), c);
  EXPECT_NE(text.find("# cpu-test: a hardware profile MEASURED on host1 (Test CPU, 2 cores"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("`ptdp calibrate --backend cpu --out cpu-test.yaml`"), std::string::npos);
  EXPECT_NE(text.find("Load average when the measurement started: 0.10"), std::string::npos);
  // Every key line is preceded by its comment, and no line is wider than 100 columns but the
  // description's.
  std::istringstream lines(text);
  std::string comment;  // the comment lines above the current line
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("description:", 0) != 0) {
      EXPECT_LE(line.size(), 100u) << line;
    }
    const size_t at = line.find_first_not_of(' ');
    if (at != std::string::npos && line[at] == '#') {
      comment += line.substr(at + 2) + " ";
      continue;
    }
    const bool key = at != std::string::npos && line[at] != '-' && line.back() != ':' &&
                     line.rfind("description:", 0) != 0;
    if (key) {
      EXPECT_FALSE(comment.empty()) << line;
    }
    if (line.find("nic_busbw_gb_per_s:") != std::string::npos) {
      EXPECT_EQ(comment.rfind("NOT MEASURED: kept from the cpu-local preset.", 0), 0u) << comment;
    }
    if (line.find("nvlink_busbw_gb_per_s:") != std::string::npos) {
      EXPECT_EQ(comment.rfind("MEASURED: MPI_Allreduce", 0), 0u) << comment;
      EXPECT_NE(comment.find("by size (GB/s): 1024 KiB 5.4, 16384 KiB 6.97."), std::string::npos)
          << comment;
    }
    if (line.find("gemm_efficiency:") != std::string::npos) {
      EXPECT_NE(comment.find("Grid: m, n, k in 32, 512;"), std::string::npos) << comment;
    }
    comment.clear();
  }
}

TEST(Calibrate, WithoutCommunicationTheNodeFiguresStayTheBases) {
  const ClusterSpec base = ClusterPreset("cpu-local");
  CalibrationRecord one = GivenRecord();
  one.ranks_per_node = 1;
  const ClusterSpec c = CalibratedCluster(base, GivenCompute(), std::nullopt, one);
  EXPECT_EQ(c.gpus_per_node, 1);
  EXPECT_EQ(c.gpu.hbm_bytes, 25000000000);
  EXPECT_EQ(c.nvlink_busbw_bytes_per_s, base.nvlink_busbw_bytes_per_s);
  EXPECT_EQ(c.nvlink_step_latency_s, base.nvlink_step_latency_s);
  EXPECT_EQ(c.collective_base_latency_s, base.collective_base_latency_s);
  EXPECT_EQ(c.gpu.reserved_bytes, base.gpu.reserved_bytes);
  const std::string text = CalibratedProfileYaml(c, GivenCompute(), std::nullopt, one);
  EXPECT_NE(text.find("# Communication is NOT measured (one rank)"), std::string::npos);
  EXPECT_EQ(ParseClusterYaml(text, "t"), c);
}

TEST(Calibrate, CommFiguresRoundTripAndRefuseBadText) {
  const CommFigures c = GivenComm();
  EXPECT_EQ(ParseCommFigures(CommFiguresText(c), "f"), c);
  try {
    ParseCommFigures("ranks 2\nbogus 1\n", "figures.txt");
    FAIL() << "accepted an unknown key";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "figures.txt:2: bogus: unknown key");
  }
  EXPECT_THROW(ParseCommFigures("ranks 2\nranks 3\n", "f"), InputError);
  EXPECT_THROW(ParseCommFigures("ranks 2\n", "f"), InputError);  // incomplete
  EXPECT_THROW(ParseCommFigures("ranks two\n", "f"), InputError);
  // Fuzz finding: a byte count beyond int64 was converted anyway (undefined behaviour).
  for (const char* text :
       {"allreduce_busbw 6.7e152 1e9\n", "p2p_bytes 1e19\n", "ranks 2.5\n", "hosts 1e300\n"}) {
    try {
      (void)ParseCommFigures(text, "f");
      ADD_FAILURE() << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("expected a whole number of at most"), std::string::npos)
          << e.what();
    }
  }
}

// The CUDA profile from figures as MeasureCudaCompute returns them (made up here: no GPU in CI):
// efficiencies over the base's datasheet peaks, rounded and capped at 1, the measured memory,
// attention and launch figures, the base's links kept, and a file that reads back.
TEST(CalibrateCuda, ProfileFromFiguresReadsBackWithTheBaseKept) {
  const ClusterSpec base = ClusterPreset("hgx-h200");
  CudaComputeFigures f;
  f.device_name = "NVIDIA H200";
  f.compute_capability = 90;
  f.multiprocessors = 132;
  f.driver = "13.0";
  f.memory_bytes = int64_t{150754820096};
  f.used_at_start_bytes = int64_t{600} << 20;
  f.bf16_flops_per_s = 780e12;
  f.fp16_flops_per_s = 770e12;
  f.fp32_flops_per_s = 51e12;
  f.fp8_flops_per_s = 1400e12;
  for (const int64_t m : {1024, 4096}) {
    for (const int64_t n : {1024, 4096}) {
      for (const int64_t k : {1024, 4096}) {
        const double scale = static_cast<double>(m * n * k) / (4096.0 * 4096 * 4096);
        f.gemm_bf16.push_back({m, n, k, 700e12 * (0.5 + 0.5 * scale)});
        f.gemm_fp16.push_back({m, n, k, 690e12 * (0.5 + 0.5 * scale)});
        f.gemm_fp32.push_back({m, n, k, 50e12});
        f.gemm_fp8.push_back({m, n, k, 1300e12 * (0.5 + 0.5 * scale)});
      }
    }
  }
  f.gemm_bf16.back().flops_per_s = 1200e12;  // faster than the datasheet: capped at 1
  f.copy_bytes = int64_t{1} << 30;
  f.copy_bytes_per_s = 4.31e12;
  f.launch_s = 2.345e-6;
  f.attention = {{4096, 20e12, 15e12}, {1024, 10e12, 8e12}};
  f.attention_heads = 16;
  f.attention_head_dim = 128;
  CudaCalibrationRecord r{"h200-measured",        "ptdp calibrate --backend cuda --out h200.yaml",
                          "2026-12-02T00:00:00Z", "gpu-host",
                          "the hgx-h200 profile", 42};

  const ClusterSpec c = CalibratedCudaCluster(base, f, r);
  EXPECT_EQ(c.name, "h200-measured");
  EXPECT_EQ(c.gpu.name, "NVIDIA H200");
  EXPECT_EQ(c.gpu.peak_bf16_flops, base.gpu.peak_bf16_flops);  // the datasheet's
  ASSERT_EQ(c.gpu.gemm_efficiency.size(), 8u);
  EXPECT_EQ(c.gpu.gemm_efficiency.front().m, 1024);
  EXPECT_NEAR(c.gpu.gemm_efficiency.front().efficiency, 0.5078125 * 700 / 989, 1e-3);
  EXPECT_EQ(c.gpu.gemm_efficiency.back().efficiency, 1.0);
  ASSERT_EQ(c.gpu.gemm_efficiency_fp8.size(), 8u);  // over the datasheet's FP8 peak
  EXPECT_NEAR(c.gpu.gemm_efficiency_fp8.front().efficiency,
              0.5078125 * 1300e12 / base.gpu.peak_fp8_flops, 1e-3);
  EXPECT_NEAR(c.gpu.gemm_efficiency_fp8.back().efficiency, 1300e12 / base.gpu.peak_fp8_flops, 1e-3);
  EXPECT_NEAR(c.gpu.memory_efficiency, 4.31 / 4.8, 1e-3);
  EXPECT_EQ(c.gpu.hbm_bytes, f.memory_bytes);
  EXPECT_EQ(c.gpu.reserved_bytes, f.used_at_start_bytes);
  ASSERT_EQ(c.gpu.flash_attention.size(), 2u);
  EXPECT_EQ(c.gpu.flash_attention[0].seq_length, 1024);  // sorted
  EXPECT_NEAR(c.gpu.flash_attention[1].forward, 20.0 / 989, 1e-4);
  EXPECT_NEAR(c.host.kernel_launch_s, 2.35e-6, 1e-12);
  EXPECT_EQ(c.host.microbatch_overhead_s, 0);
  EXPECT_EQ(c.nvlink_busbw_bytes_per_s, base.nvlink_busbw_bytes_per_s);
  EXPECT_EQ(c.nic_bytes_per_s, base.nic_bytes_per_s);

  const std::string yaml = CalibratedCudaProfileYaml(c, f, r);
  EXPECT_EQ(ParseClusterYaml(yaml, "h200-measured.yaml"), c);
  for (const char* says :
       {"MEASURED on NVIDIA H200", "cudaMemGetInfo", "cuBLASLt", "flash_attention: MEASURED",
        "fp32 grid (TFLOP/s): 1024x1024x1024 50.0", "gemm_efficiency_fp8: MEASURED",
        "fp8 (E4M3 x E4M3 -> bf16", "NOT MEASURED: kept from the hgx-h200 profile"}) {
    EXPECT_NE(yaml.find(says), std::string::npos) << says << " missing from\n" << yaml;
  }

  // A GPU without FP8 units: the base's FP8 table stays, and the file says why.
  f.gemm_fp8.clear();
  f.fp8_flops_per_s = 0;
  f.fp8_skipped = "compute capability below 8.9: no FP8 units";
  const ClusterSpec no_fp8 = CalibratedCudaCluster(base, f, r);
  EXPECT_EQ(no_fp8.gpu.gemm_efficiency_fp8, base.gpu.gemm_efficiency_fp8);
  const std::string no_fp8_yaml = CalibratedCudaProfileYaml(no_fp8, f, r);
  EXPECT_NE(no_fp8_yaml.find("fp8: not measured (compute capability below 8.9"), std::string::npos);
  EXPECT_EQ(no_fp8_yaml.find("gemm_efficiency_fp8: MEASURED"), std::string::npos);
}

}  // namespace
}  // namespace ptdp
