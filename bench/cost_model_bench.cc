// One evaluation of a configuration by the cost model, as the planner repeats it for every
// candidate layout: the durations and sizes for the event simulator (EstimateStep) plus the
// per-stage memory (EstimateMemory), without the event simulation. The schedule's in-flight
// counts are computed once per (schedule, p, m, v) outside the timed loop, as the planner does.
#include <benchmark/benchmark.h>

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
};

Case MakeCase(const char* model, const char* cluster, int64_t batch, ParallelConfig p) {
  Case c{ModelPreset(model), ClusterPreset(cluster), {}, p, {}};
  c.training.global_batch_size = batch;
  c.in_flight = InFlightPerStage(MakeSchedule(
      p.schedule, p.pp, static_cast<int>(NumMicrobatches(c.training, p)), p.virtual_stages));
  return c;
}

void Evaluate(benchmark::State& state, const Case& c) {
  for (auto _ : state) {
    StepEstimate est = EstimateStep(c.model, c.cluster, c.training, c.parallel);
    MemoryEstimate mem = EstimateMemory(c.model, c.cluster, c.training, c.parallel, c.in_flight);
    benchmark::DoNotOptimize(est);
    benchmark::DoNotOptimize(mem);
  }
}

void BM_Gpt3_175b_Interleaved(benchmark::State& state) {
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
  Evaluate(state, c);
}
BENCHMARK(BM_Gpt3_175b_Interleaved);

void BM_Llama3_70b_1F1B(benchmark::State& state) {
  static const Case c =
      MakeCase("llama3-70b", "hgx-h200", 512, {.tp = 4, .pp = 4, .dp = 4, .micro_batch_size = 1});
  Evaluate(state, c);
}
BENCHMARK(BM_Llama3_70b_1F1B);

void BM_Megatron_1t_64Stages(benchmark::State& state) {
  static const Case c =
      MakeCase("megatron-1t", "dgx-a100-80gb", 3072,
               {.tp = 8, .pp = 64, .dp = 6, .micro_batch_size = 1, .recompute = Recompute::kFull});
  Evaluate(state, c);
}
BENCHMARK(BM_Megatron_1t_64Stages);

}  // namespace
}  // namespace ptdp
