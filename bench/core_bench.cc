// Costs of the core operations the planner and the CLI repeat: reading a plan file, counting
// parameters, checking Megatron's rules for one configuration.
#include <benchmark/benchmark.h>

#include "core/presets.h"
#include "core/spec_yaml.h"
#include "megatron/plan_file.h"
#include "megatron/rules.h"

namespace ptdp {
namespace {

Plan ExamplePlan() {
  Plan p;
  p.model = ModelPreset("gpt3-175b");
  p.cluster = ClusterPreset("dgx-a100-80gb");
  p.num_gpus = 1024;
  p.training.global_batch_size = 1536;
  p.parallel = {.tp = 8,
                .pp = 8,
                .dp = 16,
                .micro_batch_size = 1,
                .virtual_stages = 3,
                .schedule = Schedule::kInterleaved,
                .sequence_parallel = true};
  return p;
}

void BM_ParsePlanYaml(benchmark::State& state) {
  const std::string text = WritePlanYaml(ExamplePlan());
  for (auto _ : state) benchmark::DoNotOptimize(ParsePlanYaml(text));
}
BENCHMARK(BM_ParsePlanYaml);

void BM_CountParameters(benchmark::State& state) {
  const ModelSpec m = ModelPreset("llama3-405b");
  for (auto _ : state) benchmark::DoNotOptimize(CountParameters(m, 8));
}
BENCHMARK(BM_CountParameters);

void BM_CheckParallelConfig(benchmark::State& state) {
  const Plan p = ExamplePlan();
  for (auto _ : state) {
    benchmark::DoNotOptimize(CheckParallelConfig(p.model, p.training, p.parallel, p.num_gpus));
  }
}
BENCHMARK(BM_CheckParallelConfig);

}  // namespace
}  // namespace ptdp
