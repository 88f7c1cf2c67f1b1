// One evaluation of a configuration by the cost model: the durations and sizes for the event
// simulator (EstimateStep) plus the per-stage memory (EstimateMemory), without the event
// simulation; and what the planner pays per candidate layout instead (the largest stage's memory
// and the step time's lower bound). The schedule's in-flight counts are computed once per
// (schedule, p, m, v) outside the timed loop, as the planner does.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <utility>

#include "core/presets.h"
#include "core/schedule.h"
#include "simulator/cost_model.h"
#include "simulator/memory_model.h"

namespace ptdp {
namespace {

struct Case {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;
  ParallelConfig parallel;
  std::vector<int> in_flight;
  CostOptions options;
};

Case MakeCase(const char* model, const char* cluster, int64_t batch, ParallelConfig p,
              Precision precision = Precision::kBf16, CostOptions options = {}) {
  Case c{ModelPreset(model), ClusterPreset(cluster), {}, p, {}, options};
  c.training.precision = precision;
  c.training.global_batch_size = batch;
  c.in_flight = InFlightPerStage(MakeSchedule(
      p.schedule, p.pp, static_cast<int>(NumMicrobatches(c.training, p)), p.virtual_stages));
  return c;
}

// What is timed: a cold evaluation (no cache: the efficiency tables prepared and every layer
// kind's kernels worked out, as `ptdp simulate` pays once), its two halves, the same with the
// layer costs, placements and tables from a search's LayerCostCache (warmed by the first
// iteration, as the first candidate of a search warms it), and the planner's per-candidate
// evaluation: EstimatePeakMemory and EstimateStepLowerBound with the cache (planner.cc).
enum class Mode { kCold, kStepCold, kMemory, kCached, kPlanner };

// Not inlined: a profiler (valgrind --toggle-collect) can count one evaluation's instructions.
[[gnu::noinline]] void Evaluate(benchmark::State& state, const Case& c, Mode mode) {
  LayerCostCache cache;
  for (auto _ : state) {
    if (mode == Mode::kPlanner) {
      MemoryPeak peak =
          EstimatePeakMemory(c.model, c.cluster, c.training, c.parallel, c.in_flight, c.options);
      benchmark::DoNotOptimize(peak);
      double bound =
          EstimateStepLowerBound(c.model, c.cluster, c.training, c.parallel, c.options, cache);
      benchmark::DoNotOptimize(bound);
      continue;
    }
    if (mode != Mode::kMemory) {
      StepEstimate est = EstimateStep(c.model, c.cluster, c.training, c.parallel, c.options,
                                      mode == Mode::kCached ? &cache : nullptr);
      benchmark::DoNotOptimize(est);
    }
    if (mode != Mode::kStepCold) {
      MemoryEstimate mem =
          EstimateMemory(c.model, c.cluster, c.training, c.parallel, c.in_flight, c.options);
      benchmark::DoNotOptimize(mem);
    }
  }
}

const Case& CaseGpt3175bInterleaved() {
  static const Case c = MakeCase("gpt3-175b", "dgx-a100-80gb", 1536,
                                 {.tp = 8,
                                  .pp = 8,
                                  .dp = 16,
                                  .micro_batch_size = 1,
                                  .virtual_stages = 3,
                                  .schedule = Schedule::kInterleaved,
                                  .sequence_parallel = true,
                                  .recompute = Recompute::kSelective,
                                  .distributed_optimizer = true});
  return c;
}

const Case& CaseLlama370b1F1B() {
  static const Case c =
      MakeCase("llama3-70b", "hgx-h200", 512, {.tp = 4, .pp = 4, .dp = 4, .micro_batch_size = 1});
  return c;
}

const Case& CaseMegatron1t64Stages() {
  static const Case c =
      MakeCase("megatron-1t", "dgx-a100-80gb", 3072,
               {.tp = 8, .pp = 64, .dp = 6, .micro_batch_size = 1, .recompute = Recompute::kFull});
  return c;
}

// Today's settings: FP8 with Megatron-Bridge's recipe, an uneven split, TP and DP overlap.
const Case& CaseLlama3405bFp8Uneven() {
  static const Case c = MakeCase(
      "llama3-405b", "dgx-h100", 2048,
      {.tp = 8,
       .pp = 16,
       .dp = 128,
       .micro_batch_size = 1,
       .sequence_parallel = true,
       .distributed_optimizer = true,
       .first_stage_layers = 7,
       .last_stage_layers = 7},
      Precision::kFp8,
      {.overlap_grad_reduce = true, .overlap_param_gather = true, .tp_comm_overlap = true});
  return c;
}

// Megatron-FSDP with the per-layer gathers, 8B on 8 GPUs.
const Case& CaseLlama38bFsdp() {
  static const Case c = MakeCase("llama3-8b", "dgx-h100", 128,
                                 {.tp = 1,
                                  .pp = 1,
                                  .dp = 8,
                                  .micro_batch_size = 1,
                                  .distributed_optimizer = true,
                                  .fsdp = Fsdp::kOptimGradsParams},
                                 Precision::kFp8);
  return c;
}

// A hybrid model: Mamba-2, attention and MoE layers, each pipeline stage its share of the
// pattern (per-stage layer kinds), FP8 with Megatron-Bridge's recipe.
const Case& CaseNemotron3NanoHybrid() {
  static const Case c = MakeCase("nemotron-3-nano", "dgx-h100", 1024,
                                 {.tp = 2,
                                  .pp = 4,
                                  .dp = 8,
                                  .ep = 8,
                                  .etp = 1,
                                  .micro_batch_size = 1,
                                  .sequence_parallel = true,
                                  .distributed_optimizer = true},
                                 Precision::kFp8);
  return c;
}

void Register() {
  const std::pair<const char*, const Case& (*)()> cases[] = {
      {"Gpt3_175b_Interleaved", CaseGpt3175bInterleaved},
      {"Llama3_70b_1F1B", CaseLlama370b1F1B},
      {"Megatron_1t_64Stages", CaseMegatron1t64Stages},
      {"Llama3_405b_Fp8Uneven", CaseLlama3405bFp8Uneven},
      {"Llama3_8b_Fsdp", CaseLlama38bFsdp},
      {"Nemotron3Nano_Hybrid", CaseNemotron3NanoHybrid}};
  const std::pair<const char*, Mode> modes[] = {{"Cold", Mode::kCold},
                                                {"StepCold", Mode::kStepCold},
                                                {"Memory", Mode::kMemory},
                                                {"Cached", Mode::kCached},
                                                {"Planner", Mode::kPlanner}};
  for (const auto& [mode_name, mode] : modes) {
    for (const auto& [name, make] : cases) {
      benchmark::RegisterBenchmark(
          fmt::format("{}/{}", mode_name, name).c_str(),
          [make, mode](benchmark::State& s) { Evaluate(s, make(), mode); });
    }
  }
}

}  // namespace
}  // namespace ptdp

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ptdp::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
