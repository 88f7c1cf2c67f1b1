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

void Evaluate(benchmark::State& state, const Case& c) {
  for (auto _ : state) {
    StepEstimate est = EstimateStep(c.model, c.cluster, c.training, c.parallel, c.options);
    MemoryEstimate mem =
        EstimateMemory(c.model, c.cluster, c.training, c.parallel, c.in_flight, c.options);
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

// Today's settings: FP8 with Megatron-Bridge's recipe, an uneven split, TP and DP overlap.
void BM_Llama3_405b_Fp8Uneven(benchmark::State& state) {
  CostOptions o;
  o.overlap_grad_reduce = o.overlap_param_gather = o.tp_comm_overlap = true;
  static const Case c = MakeCase("llama3-405b", "dgx-h100", 2048,
                                 {.tp = 8,
                                  .pp = 16,
                                  .dp = 128,
                                  .micro_batch_size = 1,
                                  .sequence_parallel = true,
                                  .distributed_optimizer = true,
                                  .first_stage_layers = 7,
                                  .last_stage_layers = 7},
                                 Precision::kFp8, o);
  Evaluate(state, c);
}
BENCHMARK(BM_Llama3_405b_Fp8Uneven);

// Megatron-FSDP with the per-layer gathers, 8B on 8 GPUs.
void BM_Llama3_8b_Fsdp(benchmark::State& state) {
  static const Case c = MakeCase("llama3-8b", "dgx-h100", 128,
                                 {.tp = 1,
                                  .pp = 1,
                                  .dp = 8,
                                  .micro_batch_size = 1,
                                  .distributed_optimizer = true,
                                  .fsdp = Fsdp::kOptimGradsParams},
                                 Precision::kFp8);
  Evaluate(state, c);
}
BENCHMARK(BM_Llama3_8b_Fsdp);

// A hybrid model: Mamba-2, attention and MoE layers, each pipeline stage its share of the
// pattern (per-stage layer kinds), FP8 with Megatron-Bridge's recipe.
void BM_Nemotron3Nano_Hybrid(benchmark::State& state) {
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
  Evaluate(state, c);
}
BENCHMARK(BM_Nemotron3Nano_Hybrid);

}  // namespace
}  // namespace ptdp
