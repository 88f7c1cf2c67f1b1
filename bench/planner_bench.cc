// The planner's full search (every knob: layouts, micro-batches, schedules with every v, SP,
// recompute, distributed optimizer), single-threaded, on the three spaces; and
// DeepSeek-V3 on 1,024 H100s (issue 34's space: experts, context parallelism, FSDP) on 1, 2, 4,
// 8 and 16 threads (BM_SearchThreads/N; wall time, the threads' CPU time is beside it). Counters:
// configurations examined (all candidates), valid (pass Megatron-LM's rules, each evaluated by
// the cost model) and simulated (event simulations of the branch and bound), per second.
#include <benchmark/benchmark.h>

#include "core/presets.h"
#include "planner/planner.h"

namespace ptdp {
namespace {

void BM_SearchPlans(benchmark::State& state, const char* model, int64_t gpus, int64_t batch) {
  PlanRequest req;
  req.model = ModelPreset(model);
  req.cluster = ClusterPreset("dgx-a100-80gb");
  req.gpus = gpus;
  req.training.global_batch_size = batch;
  PlanSearchResult last;
  for (auto _ : state) {
    last = SearchPlans(req);
    benchmark::DoNotOptimize(last);
  }
  using C = benchmark::Counter;
  state.counters["examined"] = static_cast<double>(last.examined);
  state.counters["valid"] = static_cast<double>(last.valid);
  state.counters["simulated"] = static_cast<double>(last.simulated);
  state.counters["examined_per_s"] =
      C(static_cast<double>(last.examined), C::kIsIterationInvariantRate);
  state.counters["valid_per_s"] = C(static_cast<double>(last.valid), C::kIsIterationInvariantRate);
}
void BM_SearchThreads(benchmark::State& state) {
  PlanRequest req;
  req.model = ModelPreset("deepseek-v3");
  req.cluster = ClusterPreset("dgx-h100");
  req.gpus = 1024;
  req.training.global_batch_size = 4096;
  req.threads = static_cast<int>(state.range(0));
  PlanSearchResult last;
  for (auto _ : state) {
    last = SearchPlans(req);
    benchmark::DoNotOptimize(last);
  }
  state.counters["threads"] = req.threads;
  state.counters["valid"] = static_cast<double>(last.valid);
  state.counters["simulated"] = static_cast<double>(last.simulated);
}
BENCHMARK(BM_SearchThreads)
    ->RangeMultiplier(2)
    ->Range(1, 16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

BENCHMARK_CAPTURE(BM_SearchPlans, megatron_1t_3072, "megatron-1t", 3072, 3072)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SearchPlans, gpt3_175b_1024, "gpt3-175b", 1024, 1536)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SearchPlans, gpt3_175b_64, "gpt3-175b", 64, 1536)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptdp
