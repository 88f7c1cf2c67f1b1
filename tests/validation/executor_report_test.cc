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
#include "executor/backend/cpu.h"
#include "executor/backend/device.h"
#include "executor/backend/measure.h"
#include "executor/comm/standin.h"
#include "simulator/kernel_classes.h"
#include "simulator/layer_work.h"
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

// The data-parallel time a stage waited for, from the trace events of the measured steps (the
// first, step 1, is left out): the reductions' tail past the last backward, plus the blocking
// parameter gathers, or, overlapped, the waits for them.
TEST(Validate, DataParallelExposedFromTheTraceEvents) {
  auto event = [](int track, std::string name, std::string category, double start, double end) {
    return TraceEvent{track, std::move(name), std::move(category), start, end - start, -1, -1};
  };
  ExecuteResult run = GivenRun();
  run.steps.resize(3);
  for (int track : {0, 1}) {
    run.events.push_back(event(track, "step 1", "other", 0, 10));
    run.events.push_back(event(track, "step 2", "other", 10, 20));
    run.events.push_back(event(track, "step 3", "other", 20, 30));
    run.events.push_back(event(track, "B0", "backward", 13, 15));
    run.events.push_back(event(track, "B0", "backward", 23, 25));
  }
  // Step 1's would count 9 if it were measured.
  run.events.push_back(event(0, "dp reduce-scatter", "dp-comm", 1, 10));
  run.events.push_back(event(0, "dp reduce-scatter", "dp-comm", 14, 17));  // 2 past the B
  run.events.push_back(event(0, "dp param all-gather", "dp-comm", 18, 19));
  run.events.push_back(event(0, "dp reduce-scatter", "dp-comm", 22, 24));  // hidden
  run.events.push_back(event(0, "dp param all-gather", "dp-comm", 26, 27));
  run.events.push_back(event(0, kParamGatherWait, "dp-comm", 21, 21.5));
  run.events.push_back(event(1, "embedding all-reduce", "dp-comm", 25, 25.5));

  Plan plan = TinyPlan(TinyLayout{.pp = 2, .distributed_optimizer = true});
  plan.options = ExecutorCostOptions();
  const SimulationReport sim = SimulatePlan(plan);
  ValidationReport v = CompareRun(plan, run, sim);
  EXPECT_DOUBLE_EQ(v.stages[0].dp_exposed_s.measured, (3 + 1) / 2.0);
  EXPECT_DOUBLE_EQ(v.stages[1].dp_exposed_s.measured, 0.5 / 2);
  EXPECT_DOUBLE_EQ(v.stages[1].dp_exposed_s.simulated, sim.sim.stages[1].dp_exposed_s);
  EXPECT_NE(ValidationText(v).find("\nstage 1 dp comm exposed per step "), std::string::npos);

  plan.options.overlap_grad_reduce = plan.options.overlap_param_gather = true;
  v = CompareRun(plan, run, SimulatePlan(plan));
  EXPECT_DOUBLE_EQ(v.stages[0].dp_exposed_s.measured, (2 + 0.5) / 2);  // the wait, not gathers
}

TEST(Validate, KernelClassRowsOnlyWhenTheRunTimedItsKernels) {
  Plan plan = TinyPlan(TinyLayout{.pp = 2});
  plan.options = ExecutorCostOptions();
  const SimulationReport sim = SimulatePlan(plan);
  ExecuteResult run = GivenRun();
  EXPECT_FALSE(CompareRun(plan, run, sim).stages[0].has_kernels);
  EXPECT_EQ(ValidationText(CompareRun(plan, run, sim)).find("kernels per step"), std::string::npos);

  run.stage_kernel_s = {KernelSeconds{0.04, 0.01, 0.02, 0.005}, KernelSeconds{0.05, 0.01, 0.03, 0}};
  const ValidationReport v = CompareRun(plan, run, sim);
  const std::vector<KernelClassTimes> simulated = StageKernelClassTimes(plan, sim.estimate);
  ASSERT_TRUE(v.stages[1].has_kernels);
  EXPECT_DOUBLE_EQ(v.stages[1].kernels_s[0].measured, 0.05);
  EXPECT_DOUBLE_EQ(v.stages[1].kernels_s[0].simulated, simulated[1].gemm_s);
  EXPECT_DOUBLE_EQ(v.stages[0].kernels_s[1].simulated, simulated[0].attention_s);
  EXPECT_DOUBLE_EQ(v.stages[0].kernels_s[2].measured, 0.02);
  EXPECT_DOUBLE_EQ(v.stages[0].kernels_s[3].simulated, simulated[0].optimizer_s);
  const std::string text = ValidationText(v);
  for (const char* row :
       {"stage 0 gemm kernels per step ", "stage 1 attention kernels per step ",
        "stage 1 memory-bound kernels per step ", "stage 0 optimizer kernels per step "}) {
    EXPECT_NE(text.find(std::string("\n") + row), std::string::npos) << row << "\n" << text;
  }
  EXPECT_NE(ValidationJson(v, sim).find("\"kernels_s\": {\"gemm\": {\"measured\": 0.04,"),
            std::string::npos);
}

// The simulated classes split exactly the cost model's kernels of the stage's micro-batches:
// every layer of its chunks (recomputation included), the embedding on the first stage and the
// output layer on the last; the unfused attention's batched GEMMs and softmax count as
// attention, as the executor's attention kernels hold them.
TEST(Validate, SimulatedKernelClassesSplitTheCostModelsKernels) {
  for (const AttentionBackend attention : {AttentionBackend::kUnfused, AttentionBackend::kFlash}) {
    Plan plan = TinyPlan(TinyLayout{.pp = 4,
                                    .virtual_stages = 2,
                                    .schedule = Schedule::kInterleaved,
                                    .recompute = Recompute::kSelective});
    plan.options = ExecutorCostOptions();
    plan.options.attention = attention;
    plan.training.precision = Precision::kBf16;  // flash kernels take 16-bit inputs
    const SimulationReport sim = SimulatePlan(plan);
    const std::vector<KernelClassTimes> classes = StageKernelClassTimes(plan, sim.estimate);
    ASSERT_EQ(classes.size(), 4u);

    const KernelTimer timer(plan.cluster, plan.training.precision, plan.options);
    const auto total = [&](const LayerWork& w) {
      return PassComputeTime(timer, w.forward) + PassComputeTime(timer, w.backward_input) +
             PassComputeTime(timer, w.backward_weight) + PassComputeTime(timer, w.recompute);
    };
    const LayerWork layer =
        TransformerLayerWork(plan.model, plan.parallel, plan.training.precision, plan.options);
    double attention_s = 0;
    for (const PassWork* pass : {&layer.forward, &layer.backward_input, &layer.recompute}) {
      for (int i = 0; i < pass->num_work; ++i) {
        if (pass->work[i].core_attention) attention_s += timer(pass->work[i]);
      }
    }
    const double m = static_cast<double>(NumMicrobatches(plan.training, plan.parallel));
    const double layers = plan.model.num_layers / 4.0;  // per pipeline stage
    const double ends[4] = {
        total(EmbeddingWork(plan.model, plan.parallel, plan.training.precision, plan.options)), 0,
        0, total(OutputWork(plan.model, plan.parallel, plan.training.precision, plan.options))};
    for (int s = 0; s < 4; ++s) {
      const KernelClassTimes& k = classes[static_cast<size_t>(s)];
      EXPECT_NEAR(k.gemm_s + k.attention_s + k.memory_s, m * (layers * total(layer) + ends[s]),
                  1e-12)
          << s;
      EXPECT_NEAR(k.attention_s, m * layers * attention_s, 1e-12);
      EXPECT_GT(k.attention_s, 0);
      EXPECT_GT(k.gemm_s, 0);
      EXPECT_GT(k.memory_s, 0);
      EXPECT_DOUBLE_EQ(k.optimizer_s,
                       sim.estimate.costs.stages[static_cast<size_t>(s)].optimizer_s);
    }
  }
}

// A rank of an eight-rank plan run alone: its groups are the plan's sizes, its exchanges carry
// per step exactly the bytes the simulator gives the same groups of its stage (tensor parallel,
// pipeline sends, gradient reduction, tied embedding), and the report keeps its stage only.
TEST(Validate, ProfiledRankExchangesCarryTheSimulatorsBytes) {
  Plan plan = TinyPlan(TinyLayout{.tp = 2, .pp = 2, .dp = 2});
  auto backend = MakeCpuBackend();
  StandInTallies tallies;
  std::vector<StandInTallies> at_end;
  ProcessGroups groups = MakeStandInGroups(5, plan.parallel, *backend, &tallies);
  EXPECT_EQ(groups.tp->size(), 2);
  EXPECT_EQ(groups.dp_cp->size(), 2);
  EXPECT_EQ(groups.world->rank(), 5);
  ExecuteOptions options{.steps = 3, .keep_trace = true};
  options.profile_rank = 5;
  options.on_step_end = [&](int64_t) { at_end.push_back(tallies); };
  const ExecuteResult result = Execute(plan, options, groups, *backend, nullptr);
  ASSERT_EQ(at_end.size(), 3u);
  const StandInTallies per_step = PerMeasuredStep(at_end);

  plan.options = ExecutorCostOptions();
  const SimulationReport sim = SimulatePlan(plan);
  ValidationReport v = CompareRun(plan, result, sim);
  EXPECT_EQ(v.profile_rank, 5);
  ASSERT_EQ(v.stages.size(), 1u);
  EXPECT_EQ(v.stages[0].stage, 1);  // rank 5: tp 1, dp 0, stage 1
  EXPECT_GT(v.stages[0].forward_s.measured, 0);
  AddStandInRows(v, plan, sim, per_step);
  std::vector<std::string> seen;
  for (const StandInComparison& c : v.stand_in) {
    seen.push_back(c.group);
    EXPECT_GT(c.calls, 0) << c.group;
    EXPECT_NEAR(c.bytes.measured, c.bytes.simulated, 1e-9 * c.bytes.simulated) << c.group;
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"tp", "pp", "dp_cp", "embedding"}));
  const std::string text = ValidationText(v);
  EXPECT_EQ(text.find("\nstep time "), std::string::npos) << text;
  EXPECT_NE(text.find("rank 5 of 8 alone"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntp exchanges per step ("), std::string::npos) << text;
  const std::string json = ValidationJson(v, sim);
  EXPECT_NE(json.find("\"profile_rank\": 5,"), std::string::npos);
  EXPECT_NE(json.find("\"stand_in\": [{\"group\": \"tp\", \"bytes\": {\"measured\": "),
            std::string::npos)
      << json.substr(0, 2000);
}

TEST(Validate, ExecutorCostOptionsDescribeTheCpuExecutor) {
  const CostOptions o = ExecutorCostOptions();
  EXPECT_TRUE(o.overlap_p2p_communication);  // Isend
  EXPECT_FALSE(o.overlap_grad_reduce);       // all-reduce after the backward
  EXPECT_TRUE(o.gradient_accumulation_fusion);
  EXPECT_FALSE(o.async_tensor_parallel_allreduce);              // blocking TP collectives
  EXPECT_EQ(o.moe_token_dispatcher, MoeDispatcher::kAllToAll);  // executor/model/moe.h
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
      {{"validate", "--plan", plan, "--profile-rank", "2"},
       2,
       "ptdp: error: --profile-rank: the plan has 2 ranks (0..1)"},
      {{"validate", "--plan", plan, "--profile-rank", "x"},
       2,
       "ptdp: error: --profile-rank: expected a rank, 0 or more, got \"x\""},
      {{"validate", "--plan", plan, "--profile-rank", "1", "--launch"},
       2,
       "ptdp: error: --profile-rank: runs one rank alone without mpirun or checkpoints: drop "
       "--launch"},
      // Built with CUDA, the job's ranks are counted first; without, the build says so.
      {{"validate", "--plan", plan, "--backend", "cuda"},
       QueryCuda().built ? 2 : 1,
       QueryCuda().built
           ? "ptdp: error: this plan needs 2 ranks (tp 2 x pp 1 x dp 1), but 1 started"
           : "ptdp: error: `ptdp validate --backend cuda` needs CUDA and NCCL: ptdp was built "
             "without CUDA"},
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
      {{"calibrate", "--backend", "cuda", "--out", "x.yaml", "--device", "-1"},
       2,
       "ptdp: error: --device: expected a GPU index, 0 to 1023, got \"-1\""},
      {{"calibrate", "--backend", "cuda", "--out", "x.yaml", "--device", "1024"},
       2,
       "ptdp: error: --device: expected a GPU index, 0 to 1023, got \"1024\""},
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
