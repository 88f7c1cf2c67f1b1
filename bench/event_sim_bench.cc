// The event simulator on the largest case (p = 64, m = 512, v = 4: 262,144 operations)
// and on smaller ones; reports operations simulated per second. Schedule generation is timed
// separately (it is done once per configuration, as is the simulation).
#include <benchmark/benchmark.h>

#include "simulator/event_sim.h"

namespace ptdp {
namespace {

void BM_SimulateStep(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  const int v = static_cast<int>(state.range(2));
  const Schedule kind = v > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  const PipelineSchedule s = MakeSchedule(kind, p, m, v);
  StepCosts costs = UniformCosts(s, 1.0, 2.0, 0.0);
  for (ChunkCosts& c : costs.chunks) c.send_forward_s = c.send_backward_s = 0.01;
  size_t ops = 0;
  for (const auto& stage : s.ops) ops += stage.size();
  for (auto _ : state) benchmark::DoNotOptimize(SimulateStep(s, costs));
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["ops_per_s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SimulateStep)
    ->Args({64, 512, 4})
    ->Args({8, 32, 1})
    ->Args({4, 32, 1})
    ->Unit(benchmark::kMillisecond);

void BM_MakeSchedule(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(MakeSchedule(Schedule::kInterleaved, 64, 512, 4));
}
BENCHMARK(BM_MakeSchedule)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptdp
