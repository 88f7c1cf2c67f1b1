// Megatron-LM's functional tests as memory ground truth: the golden-values file's reader (strict,
// errors naming the line and column), a case read and simulated from its launch script, and the
// report's split into the fit and the test half.
#include "validation/functional_tests.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/presets.h"

namespace ptdp {
namespace {

const std::string kDir = std::string(PTDP_SOURCE_DIR);
const std::string kHeader =
    "case\tmodel_dir\tgpu\tgpus\tallocated_bytes\tmax_allocated_bytes\titeration_time_s\tsteps\t"
    "gpus_from\thalf\n";

std::string Error(const std::string& text) {
  try {
    ParseFunctionalTestsTsv(text, "g.tsv");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(FunctionalTestsTsv, ReadsRowsAndRefusesWhatItCannotRead) {
  const std::vector<FunctionalTestRow> rows =
      ParseFunctionalTestsTsv(kHeader +
                                  "a\tgpt\th100\t8\t100\t200\t0.5\t50\th100-recipe\ttest\n"
                                  "b\tmoe\ta100\t4\t1e9\t2e9\t\t6\tdefault\tfit\n",
                              "g.tsv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].line, 2);
  EXPECT_EQ(rows[0].case_name, "a");
  EXPECT_TRUE(rows[0].test_half);
  EXPECT_DOUBLE_EQ(rows[0].iteration_time_s, 0.5);
  EXPECT_EQ(rows[1].gpus, 4);
  EXPECT_DOUBLE_EQ(rows[1].max_allocated_bytes, 2e9);
  EXPECT_EQ(rows[1].iteration_time_s, 0);  // none logged
  EXPECT_FALSE(rows[1].test_half);
  EXPECT_EQ(FunctionalTestCluster(rows[0]), "dgx-h100");
  EXPECT_EQ(FunctionalTestCluster(rows[1]), "dgx-a100-80gb");

  EXPECT_NE(Error("case\tgpu\n").find("g.tsv:1: not a functional-tests"), std::string::npos);
  EXPECT_NE(Error(kHeader + "a\tgpt\th100\t8\n").find("g.tsv:2: expected 10 tab-separated"),
            std::string::npos);
  EXPECT_NE(Error(kHeader + "a\tgpt\tb200\t8\t1\t2\t\t1\tx\tfit\n").find("g.tsv:2: gpu: expected"),
            std::string::npos);
  EXPECT_NE(Error(kHeader + "a\tgpt\th100\tx8\t1\t2\t\t1\tx\tfit\n").find("g.tsv:2: gpus:"),
            std::string::npos);
  EXPECT_EQ(Error(kHeader + "a\tgpt\th100\t8\t0\t2\t\t1\tx\tfit\n"),
            "g.tsv:2: allocated_bytes: expected a number from 1 to 1e+18, got \"0\"");
  // Infinite, subnormal or out-of-range figures once made an error infinite (or a GPU count
  // undefined when cast): refused naming the line and the column.
  EXPECT_EQ(Error(kHeader + "a\tgpt\th100\t8\t1\t2\t1e-320\t1\tx\tfit\n"),
            "g.tsv:2: iteration_time_s: expected 0 (not measured) or a number from 1e-06 to "
            "31536000, got \"1e-320\"");
  EXPECT_EQ(Error(kHeader + "a\tgpt\th100\t8\t1\t2\tinf\t1\tx\tfit\n"),
            "g.tsv:2: iteration_time_s: expected a non-negative number, got \"inf\"");
  EXPECT_EQ(Error(kHeader + "a\tgpt\th100\t1e300\t1\t2\t\t1\tx\tfit\n"),
            "g.tsv:2: gpus: expected a number from 1 to 1048576, got \"1e300\"");
  EXPECT_EQ(Error(kHeader + "a\tgpt\th100\t8\t1\t2\t\t1e12\tx\tfit\n"),
            "g.tsv:2: steps: expected a number from 0 to 1000000000, got \"1e12\"");
  EXPECT_NE(Error(kHeader + "a\tgpt\th100\t8\t1\t2\t\t1\tx\tboth\n").find("g.tsv:2: half:"),
            std::string::npos);
}

TEST(FunctionalTestsTsv, TheShippedFileReadsAndSplitsByCase) {
  const std::string path = kDir + "/results/validation/megatron-functional-tests/golden.tsv";
  const std::vector<FunctionalTestRow> rows = ParseFunctionalTestsTsv(ReadAll(path), path);
  EXPECT_GT(rows.size(), 150u);
  // A case is in the same half on every GPU (the split is by case name).
  std::map<std::string, bool> half;
  int test = 0;
  for (const FunctionalTestRow& r : rows) {
    auto [it, fresh] = half.emplace(r.case_name, r.test_half);
    EXPECT_EQ(it->second, r.test_half) << r.case_name;
    test += r.test_half;
  }
  EXPECT_GT(test, static_cast<int>(rows.size()) / 3);
  EXPECT_LT(test, 2 * static_cast<int>(rows.size()) / 3);
}

TEST(FunctionalTestsReplay, SimulatesTheLastStageOfACaseFromItsScript) {
  FunctionalTestRow row;
  row.case_name = "gpt3_7b_tp1_pp4_memory_speed";
  row.gpu = "h100";
  row.gpus = 8;
  row.allocated_bytes = 24808996864;
  row.max_allocated_bytes = 60720852992;
  row.iteration_time_s = 1.15;
  const std::string path =
      kDir + "/tests/fixtures/megatron_corpus/functional-tests/" + row.case_name + ".sh";
  const FunctionalTestCase test = ReadFunctionalTest(row, ReadAll(path), path);
  ASSERT_EQ(test.not_simulated, "");
  const FunctionalTestResult r = ReplayFunctionalTest(test, ClusterPreset("dgx-h100"));
  ASSERT_EQ(r.not_simulated, "");
  EXPECT_NE(r.layout.find("PP 4"), std::string::npos) << r.layout;
  EXPECT_GT(r.predicted_allocated_bytes, 0);
  EXPECT_GT(r.predicted_peak_bytes, r.predicted_allocated_bytes);
  EXPECT_GT(r.predicted_total_bytes, r.predicted_peak_bytes);
  EXPECT_TRUE(r.fits);
  EXPECT_GT(r.predicted_step_s, 0);
  // A 7B model on four stages: tens of GiB, within a factor of two of what was measured.
  EXPECT_LT(std::abs(r.peak_error()), 0.5);

  const FunctionalTestResult broken = ReplayFunctionalTest(
      ReadFunctionalTest(row, "echo no training here\n", "x.sh"), ClusterPreset("dgx-h100"));
  EXPECT_NE(broken.not_simulated.find("cannot read the command"), std::string::npos)
      << broken.not_simulated;
  const std::string md = FunctionalTestsMarkdown(std::vector{r, broken});
  EXPECT_NE(md.find("| h100 | fit (in-sample) | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("Not simulated:\n\n- gpt3_7b_tp1_pp4_memory_speed (h100): cannot read"),
            std::string::npos)
      << md;

  // The host fit, on a small model whose step the host paces (the 7B model's kernels hide any
  // host cost near the search's start): the iteration time moves toward the measured one, from
  // the fixed start, and the fitted constants are on the search's grid.
  FunctionalTestRow small_row;
  small_row.case_name = "gpt3_mcore_te_tp2_pp2";
  small_row.gpu = "a100";
  small_row.gpus = 8;
  small_row.iteration_time_s = 0.21549;
  const std::string small_path =
      kDir + "/tests/fixtures/megatron_corpus/functional-tests/" + small_row.case_name + ".sh";
  const FunctionalTestCase small = ReadFunctionalTest(small_row, ReadAll(small_path), small_path);
  ClusterSpec no_host = ClusterPreset("dgx-a100-80gb");
  no_host.host = HostSpec{};
  const double error_without_host = ReplayFunctionalTest(small, no_host).time_error();
  EXPECT_LT(error_without_host, -0.5);  // the GPU alone would be more than twice as fast
  const HostFit fit = FitFunctionalTestsHost(no_host, std::vector{small});
  EXPECT_EQ(fit.cases, 1);
  EXPECT_LT(fit.mape, 0.1 * std::abs(error_without_host));
  EXPECT_GT(fit.host.kernel_launch_s + fit.host.optimizer_step_s, 0);
  EXPECT_NEAR(std::remainder(fit.host.kernel_launch_s * 1e6, 0.25), 0, 1e-6);
  // A case without a measured time is not fitted on.
  FunctionalTestCase untimed = test;
  untimed.row.iteration_time_s = 0;
  EXPECT_EQ(FitFunctionalTestsHost(ClusterPreset("dgx-h100"), std::vector{untimed}).cases, 0);
}

}  // namespace
}  // namespace ptdp
