// The planner's fast figures against the event simulator: the step-time bound never exceeds the
// simulation and equals it for uniform stages; peak activations from the operation order equal
// the simulated peak.
#include "simulator/bounds.h"

#include <gtest/gtest.h>

#include <random>

#include "simulator/event_sim.h"

namespace ptdp {
namespace {

StepCosts RandomCosts(const PipelineSchedule& s, std::mt19937& rng, bool communication) {
  std::uniform_real_distribution<double> t(0.5, 2.0), c(0.0, 0.3), bytes(1.0, 10.0);
  std::bernoulli_distribution coin(0.5);
  StepCosts costs = UniformCosts(s, 1, 1, 1);
  for (ChunkCosts& ch : costs.chunks) {
    ch.forward_s = t(rng);
    ch.backward_input_s = t(rng);
    ch.backward_weight_s = t(rng) / 2;
    ch.send_forward_s = communication ? c(rng) : 0;
    ch.send_backward_s = communication ? c(rng) : 0;
    ch.activation_bytes = bytes(rng);
    ch.weight_grad_activation_bytes = ch.activation_bytes * 0.3;
  }
  for (StageCosts& st : costs.stages) {
    st.dp_grad_sync_s = communication ? c(rng) * 10 : 0;
    st.embedding_sync_s = communication && coin(rng) ? c(rng) : 0;
    st.optimizer_s = c(rng);
    st.dp_param_gather_s = coin(rng) ? c(rng) : 0;
    st.overlap_grad_sync = coin(rng);
  }
  return costs;
}

PipelineSchedule RandomSchedule(std::mt19937& rng) {
  std::uniform_int_distribution<int> stages(1, 8), mult(1, 4), chunks(2, 4), kind(0, 3);
  const int p = stages(rng);
  switch (kind(rng)) {
    case 0:
      return MakeSchedule(Schedule::kGpipe, p, p * mult(rng), 1);
    case 1:
      return MakeSchedule(Schedule::k1F1B, p, p * mult(rng) + mult(rng) - 1, 1);
    case 2:
      return MakeSchedule(Schedule::kZbH1, p, p * mult(rng), 1);
    default:
      return MakeSchedule(Schedule::kInterleaved, std::max(p, 2), std::max(p, 2) * mult(rng),
                          chunks(rng));
  }
}

TEST(Bounds, StepTimeBoundNeverExceedsTheSimulation) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const PipelineSchedule s = RandomSchedule(rng);
    const StepCosts costs = RandomCosts(s, rng, trial % 2 == 0);
    const double bound = StepTimeLowerBound(s, costs);
    const double simulated = SimulateStep(s, costs).step_time_s;
    ASSERT_LE(bound, simulated * (1 + 1e-12))
        << Name(s.kind) << " p=" << s.stages << " m=" << s.microbatches << " v=" << s.chunks;
    ASSERT_GT(bound, 0.5 * simulated);  // and is not vacuous
  }
}

TEST(Bounds, StepTimeBoundIsExactForUniformStages) {
  for (int p = 1; p <= 8; ++p) {
    for (int mult = 1; mult <= 3; ++mult) {
      const int m = p * mult;
      for (Schedule kind : {Schedule::k1F1B, Schedule::kGpipe, Schedule::kInterleaved}) {
        if (kind == Schedule::kInterleaved && p < 2) continue;
        const int v = kind == Schedule::kInterleaved ? 2 : 1;
        const PipelineSchedule s = MakeSchedule(kind, p, m, v);
        const StepCosts costs = UniformCosts(s, 0.5, 1.0, 0.25);
        EXPECT_NEAR(StepTimeLowerBound(s, costs), SimulateStep(s, costs).step_time_s, 1e-9)
            << Name(kind) << " p=" << p << " m=" << m;
      }
    }
  }
}

TEST(Bounds, PeakActivationsFromTheOrderEqualTheSimulatedPeak) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    const PipelineSchedule s = RandomSchedule(rng);
    const StepCosts costs = RandomCosts(s, rng, true);
    const SimResult sim = SimulateStep(s, costs);
    const std::vector<double> peak = PeakActivationBytes(s, HeldActivationsOf(s), costs);
    for (int r = 0; r < s.stages; ++r) {
      ASSERT_NEAR(peak[r], sim.stages[r].peak_activation_bytes, 1e-9)
          << Name(s.kind) << " p=" << s.stages << " m=" << s.microbatches << " v=" << s.chunks
          << " stage " << r;
    }
  }
}

}  // namespace
}  // namespace ptdp
