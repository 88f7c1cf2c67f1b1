// `ptdp validate`'s comparison (validation/executor_report.h) on a given measurement, and the
// refusals of `validate` and `calibrate` that come before anything runs (in-process CLI).
#include "validation/executor_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli.h"
#include "core/spec_yaml.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp::cli {
namespace {

using testing_executor::TinyLayout;
using testing_executor::TinyPlan;

// A two-stage run as the executor reports it: 4 steps, ranks 0 and 1 on stages 0 and 1.
ExecuteResult GivenRun() {
  ExecuteResult r;
  for (int i = 0; i < 4; ++i) {
    StepLog s;
    s.step = i + 1;
    s.time_s = std::vector<double>{0.5, 0.2, 0.4, 0.3}[static_cast<size_t>(i)];
    r.steps.push_back(s);
  }
  r.bubble_fraction = 0.25;
  r.measured_steps = 3;
  r.stage_busy_s = {0.1, 0.12};
  for (int rank = 0; rank < 2; ++rank) {
    RankReport k;
    k.world_rank = rank;
    k.coords.pp = rank;
    k.memory.peak_bytes[static_cast<size_t>(MemCategory::kWeights)] = 1000 + rank;
    k.memory.peak_bytes[static_cast<size_t>(MemCategory::kActivations)] = 5000;
    k.memory.peak_bytes[static_cast<size_t>(MemCategory::kWorkspace)] = 300;
    k.memory.peak_bytes[static_cast<size_t>(MemCategory::kCommBuffers)] = 200;
    k.memory.peak_total_bytes = 7000;
    r.ranks.push_back(k);
  }
  return r;
}

TEST(Validate, ComparesEveryFigureOfTheRun) {
  Plan plan = TinyPlan(TinyLayout{.pp = 2});
  plan.options = ExecutorCostOptions();
  const SimulationReport sim = SimulatePlan(plan);
  const ValidationReport v = CompareRun(plan, GivenRun(), sim);
  EXPECT_EQ(v.ranks, 2);
  EXPECT_EQ(v.steps_run, 4);
  EXPECT_DOUBLE_EQ(v.step_time_s.measured, 0.3);  // median of 0.2, 0.4, 0.3 (not the first)
  EXPECT_DOUBLE_EQ(v.step_time_s.simulated, sim.step_time_s);
  EXPECT_DOUBLE_EQ(v.step_time_s.error(), sim.step_time_s / 0.3 - 1);
  EXPECT_DOUBLE_EQ(v.bubble_fraction.error(), sim.bubble_fraction - 0.25);  // a difference
  ASSERT_EQ(v.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(v.stages[1].busy_s.measured, 0.12);
  EXPECT_DOUBLE_EQ(v.stages[1].busy_s.simulated, sim.sim.stages[1].busy_s);
  EXPECT_DOUBLE_EQ(v.stages[1].weights_bytes.measured, 1001);
  EXPECT_DOUBLE_EQ(v.stages[0].weights_bytes.simulated, sim.memory.stages[0].weights_bytes);
  EXPECT_DOUBLE_EQ(v.stages[0].measured_other_bytes, 500);
  EXPECT_DOUBLE_EQ(v.stages[0].total_bytes.measured, 7000);
  const StageMemory& m = sim.memory.stages[0];
  EXPECT_DOUBLE_EQ(v.stages[0].total_bytes.simulated,
                   m.weights_bytes + m.gradients_bytes + m.optimizer_bytes + m.activations_bytes);
  EXPECT_DOUBLE_EQ(v.stages[0].simulated_peak_bytes, m.peak_bytes);
  // A measured 0 has no ratio.
  EXPECT_TRUE(std::isnan(v.stages[0].optimizer_bytes.ratio()));

  const std::string text = ValidationText(v);
  for (const char* row : {"step time ", "bubble fraction ", "stage 1 busy per step ",
                          "stage 0 activations ", "stage 1 total (no allowances) "}) {
    EXPECT_NE(text.find(std::string("\n") + row), std::string::npos) << row << "\n" << text;
  }
  const std::string json = ValidationJson(v, sim);
  EXPECT_NE(json.find("\"step_time_s\": {\"measured\": 0.3, \"simulated\": "), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"ratio\": null"), std::string::npos);  // the optimizer's measured 0
  EXPECT_NE(json.find("\"simulation\": {"), std::string::npos);
}

TEST(Validate, ExecutorCostOptionsDescribeTheCpuExecutor) {
  const CostOptions o = ExecutorCostOptions();
  EXPECT_TRUE(o.overlap_p2p_communication);  // Isend
  EXPECT_FALSE(o.overlap_grad_reduce);       // all-reduce after the backward
  EXPECT_TRUE(o.gradient_accumulation_fusion);
  EXPECT_FALSE(o.async_tensor_parallel_allreduce);              // blocking TP collectives
  EXPECT_EQ(o.moe_token_dispatcher, MoeDispatcher::kAllToAll);  // executor/moe.h
}

struct Result {
  int code;
  std::string out, err;
};
Result Cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = Run(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(Validate, BadFlagsAreRefusedNamingTheFlag) {
  const std::string dir = ::testing::TempDir() + "ptdp-validate-test";
  std::filesystem::create_directories(dir);
  const std::string plan = dir + "/plan.yaml";
  std::ofstream(plan) << WritePlanYaml(TinyPlan(TinyLayout{.tp = 2}));
  const struct {
    std::vector<std::string> args;
    int code;
    std::string message;
  } cases[] = {
      {{"validate", "--steps", "3"}, 2, "ptdp: error: --plan: is required"},
      {{"validate", "--plan", plan, "--format", "xml"}, 2, "ptdp: error: --format: unknown value"},
      {{"validate", "--plan", plan, "--cluster", "nope"},
       2,
       "ptdp: error: --cluster: \"nope\" is neither a hardware profile nor a file"},
      {{"validate", "--plan", plan, "--steps", "0"}, 2, "ptdp: error: --steps: must be positive"},
      {{"validate", "--plan", plan, "--dtype", "fp64"},
       2,
       "ptdp: error: --dtype: validate runs fp32, bf16 or fp16, the precisions the simulator "
       "models"},
      {{"validate", "--plan", plan, "--dtype", "bf8"},
       2,
       "ptdp: error: --dtype: unknown value \"bf8\" (expected one of: fp32, bf16, fp16, fp64)"},
      {{"validate", "--plan", dir + "/missing.yaml"}, 2, "ptdp: error: "},
      {{"validate", "--plan", plan, "--backend", "cuda"},
       3,
       "ptdp: error: `ptdp validate --backend cuda` runs plans of one GPU today; this plan has"},
      {{"calibrate", "--backend", "tpu", "--out", "x.yaml"},
       2,
       "ptdp: error: --backend: expected cpu or cuda, got \"tpu\""},
      {{"calibrate"}, 2, "ptdp: error: --out: is required"},
      {{"calibrate", "--out", "x.yaml", "--ranks", "0"},
       2,
       "ptdp: error: --ranks: must be positive"},
      {{"calibrate", "--out", dir + "/no/such/dir/x.yaml"},
       2,
       "ptdp: error: --out: cannot write " + dir + "/no/such/dir/x.yaml: no such folder: " + dir +
           "/no/such/dir"},
      {{"calibrate", "--out", "x.yaml", "--comm-results", "f"},
       2,
       "ptdp: error: --out: cannot be combined with --comm-results"},
      {{"calibrate", "--backend", "cuda", "--out", "x.yaml", "--ranks", "2"},
       2,
       "ptdp: error: --ranks: is for --backend cpu (one GPU is measured)"},
      {{"calibrate", "--out", "x.yaml", "--device", "1"},
       2,
       "ptdp: error: --device: is for --backend cuda"},
  };
  for (const auto& c : cases) {
    const Result r = Cli(c.args);
    EXPECT_EQ(r.code, c.code) << c.args.back() << "\n" << r.err;
    EXPECT_EQ(r.err.rfind(c.message, 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
  }
  EXPECT_FALSE(std::filesystem::exists("x.yaml"));
}

}  // namespace
}  // namespace ptdp::cli
