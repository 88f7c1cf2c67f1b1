// Fast figures for the planner that need no event simulation, and are exact where they can be:
//  - a lower bound on the simulated step time (SimulateStep(...).step_time_s >= it, always);
//    equal to it for uniform stages without communication (the closed forms of formulas.md);
//  - the peak activation bytes per stage, which depend only on each stage's operation order
//    (activations are taken at F and released at B or W), not on timing.
#pragma once

#include <vector>

#include "core/schedule.h"
#include "simulator/costs.h"

namespace ptdp {

// Lower bound on SimulateStep(schedule, costs).step_time_s. For each stage r: nothing runs there
// before micro-batch 0 has been forwarded through virtual stages 0 .. r-1 (with its sends); then
// the stage is busy m x (F + B + W) over its chunks; when its last operation is a backward, that
// gradient still has to flow back through virtual stages r-1 .. 0. Then the data-parallel sync
// (its last bucket when overlapped), the embedding sync, and the optimizer on every stage.
double StepTimeLowerBound(const PipelineSchedule& schedule, const StepCosts& costs);

// The same bound from the schedule's sizes alone (kind, p, m, v); no operation lists needed.
double StepTimeLowerBound(Schedule kind, int stages, int microbatches, int chunks,
                          const StepCosts& costs);
double StepTimeLowerBound(Schedule kind, int stages, int microbatches, int chunks,
                          const StepCostsView& costs);

// For each stage, the micro-batch counts per chunk held at the moments that can be the peak
// (the Pareto-maximal vectors over the stage's operation order). Peak activation bytes of stage r
// = max over its vectors h of sum_c h[c] x bytes(chunk c); with a split backward a chunk counts
// activation_bytes while F..B and weight_grad_activation_bytes while B..W.
struct HeldActivations {
  // held[r]: list of vectors of 2v counts: [0, v) full activations per chunk, [v, 2v) the W-only
  // part per chunk.
  std::vector<std::vector<std::vector<int>>> held;
};
HeldActivations HeldActivationsOf(const PipelineSchedule& schedule);

// Peak activation bytes of each stage, from the held vectors and the chunks' sizes.
std::vector<double> PeakActivationBytes(const PipelineSchedule& schedule,
                                        const HeldActivations& held, const StepCosts& costs);

}  // namespace ptdp
