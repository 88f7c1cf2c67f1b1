// The event simulator against the closed forms of formulas.md (uniform stage times, free
// communication), plus communication, overlap and memory-over-time behaviour.
#include "simulator/event_sim.h"

#include <gtest/gtest.h>

#include <random>

namespace ptdp {
namespace {

constexpr double kEps = 1e-9;

TEST(EventSim, OneFOneBAndGpipeTakeMPlusPMinusOneSlots) {
  for (int p = 1; p <= 12; ++p) {
    for (int m = 1; m <= 24; ++m) {
      for (auto [tf, tb] : {std::pair{1.0, 2.0}, {0.7, 1.9}, {1.0, 1.0}}) {
        for (Schedule kind : {Schedule::k1F1B, Schedule::kGpipe}) {
          const PipelineSchedule s = MakeSchedule(kind, p, m, 1);
          const SimResult r = SimulateStep(s, UniformCosts(s, tf, tb, 0.0));
          ASSERT_NEAR(r.step_time_s, (m + p - 1) * (tf + tb), kEps)
              << Name(kind) << " p=" << p << " m=" << m;
          ASSERT_NEAR(r.bubble_fraction, (p - 1.0) / (m + p - 1.0), kEps);
        }
      }
    }
  }
}

TEST(EventSim, GpipeHoldsEveryMicroBatchAndOneFOneBAtMostPMinusR) {
  const int p = 6, m = 10;
  const PipelineSchedule gpipe = MakeSchedule(Schedule::kGpipe, p, m, 1);
  const PipelineSchedule ofob = MakeSchedule(Schedule::k1F1B, p, m, 1);
  const SimResult g = SimulateStep(gpipe, UniformCosts(gpipe, 1, 2, 0));
  const SimResult o = SimulateStep(ofob, UniformCosts(ofob, 1, 2, 0));
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(g.stages[r].peak_in_flight, m);
    EXPECT_DOUBLE_EQ(g.stages[r].peak_activation_bytes, m);  // 1 byte per micro-batch
    EXPECT_EQ(o.stages[r].peak_in_flight, p - r);
    EXPECT_DOUBLE_EQ(o.stages[r].peak_activation_bytes, p - r);
  }
}

TEST(EventSim, InterleavedBubbleShrinksByV) {
  for (int p = 2; p <= 8; ++p) {
    for (int v = 2; v <= 4; ++v) {
      for (int mult = 1; mult <= 4; ++mult) {
        const int m = p * mult;
        const double tf = 1.0, tb = 2.0;  // per micro-batch per stage, split over v chunks
        const PipelineSchedule s = MakeSchedule(Schedule::kInterleaved, p, m, v);
        const SimResult r = SimulateStep(s, UniformCosts(s, tf / v, tb / v, 0.0));
        ASSERT_NEAR(r.pipeline_end_s - m * (tf + tb), (p - 1) * (tf + tb) / v, kEps)
            << "p=" << p << " m=" << m << " v=" << v;
      }
    }
  }
}

TEST(EventSim, ZeroBubbleH1Bubble) {
  // tb is the whole backward (input gradient + weight gradient tw): bubble (p-1)(tf+tb-2tw).
  for (int p = 1; p <= 10; ++p) {
    for (int m = p; m <= 3 * p + 2; ++m) {
      for (auto [tf, tb, tw] : {std::tuple{1.0, 2.0, 1.0}, {1.0, 2.0, 0.8}, {0.9, 1.5, 0.5}}) {
        const PipelineSchedule s = MakeSchedule(Schedule::kZbH1, p, m, 1);
        const SimResult r = SimulateStep(s, UniformCosts(s, tf, tb - tw, tw));
        ASSERT_NEAR(r.step_time_s - m * (tf + tb), (p - 1) * (tf + tb - 2 * tw), kEps)
            << "p=" << p << " m=" << m;
      }
    }
  }
  // A third of 1F1B's bubble when F, B and W take the same time.
  const PipelineSchedule zb = MakeSchedule(Schedule::kZbH1, 4, 8, 1);
  const PipelineSchedule ofob = MakeSchedule(Schedule::k1F1B, 4, 8, 1);
  const double zb_bubble = SimulateStep(zb, UniformCosts(zb, 1, 1, 1)).bubble_s;
  const double ofob_bubble = SimulateStep(ofob, UniformCosts(ofob, 1, 1, 1)).bubble_s;
  EXPECT_NEAR(zb_bubble * 3, ofob_bubble, kEps);
}

TEST(EventSim, ZeroBubbleH1KeepsOneFOneBsPeakActivations) {
  const PipelineSchedule zb = MakeSchedule(Schedule::kZbH1, 5, 12, 1);
  const SimResult r = SimulateStep(zb, UniformCosts(zb, 1, 1, 1));
  for (const StageResult& st : r.stages) EXPECT_LE(st.peak_in_flight, 5);
  EXPECT_EQ(r.stages[0].peak_in_flight, 5);
}

TEST(EventSim, TransfersDelayTheReceiverNotTheSender) {
  // p = 2, m = 1: F0 on stage 0, send c, F0 + B0 on stage 1, send c, B0 on stage 0.
  const PipelineSchedule s = MakeSchedule(Schedule::k1F1B, 2, 1, 1);
  StepCosts costs = UniformCosts(s, 1.0, 2.0, 0.0);
  for (ChunkCosts& c : costs.chunks) c.send_forward_s = c.send_backward_s = 0.25;
  const SimResult r = SimulateStep(s, costs);
  EXPECT_NEAR(r.step_time_s, 1 + 0.25 + 1 + 2 + 0.25 + 2, kEps);
  ASSERT_EQ(r.transfers.size(), 2u);
  EXPECT_NEAR(r.transfers[0].start_s, 1.0, kEps);
  EXPECT_NEAR(r.transfers[0].end_s, 1.25, kEps);
  // Sends on one link queue behind each other: stage 0 forwards 3 micro-batches back to back.
  const PipelineSchedule g = MakeSchedule(Schedule::kGpipe, 2, 3, 1);
  StepCosts slow = UniformCosts(g, 1.0, 1.0, 0.0);
  slow.chunks[0].send_forward_s = 2.0;  // slower than the forward itself
  const SimResult rg = SimulateStep(g, slow);
  EXPECT_NEAR(rg.transfers[2].end_s, 1 + 2 + 2 + 2, kEps);  // queued: arrives at 7, not 5
}

TEST(EventSim, DataParallelSyncOverlapsOnlyWhenAllowed) {
  const PipelineSchedule s = MakeSchedule(Schedule::k1F1B, 1, 4, 1);
  StepCosts costs = UniformCosts(s, 1.0, 2.0, 0.0);
  costs.stages[0].dp_grad_sync_s = 5.0;
  costs.stages[0].optimizer_s = 0.5;
  EXPECT_NEAR(SimulateStep(s, costs).step_time_s, 12 + 5 + 0.5, kEps);
  costs.stages[0].overlap_grad_sync = true;  // one chunk: its bucket starts after its last B
  EXPECT_NEAR(SimulateStep(s, costs).step_time_s, 12 + 5 + 0.5, kEps);

  // Two chunks on each of 2 stages (interleaved): chunk 1's backwards finish first, so its
  // bucket overlaps chunk 0's remaining backwards.
  const PipelineSchedule i = MakeSchedule(Schedule::kInterleaved, 2, 2, 2);
  StepCosts ic = UniformCosts(i, 1.0, 1.0, 0.0);
  for (StageCosts& st : ic.stages) st.dp_grad_sync_s = 4.0;
  const double serial = SimulateStep(i, ic).step_time_s;
  for (StageCosts& st : ic.stages) st.overlap_grad_sync = true;
  EXPECT_LT(SimulateStep(i, ic).step_time_s, serial);
}

TEST(EventSim, OptimizerWaitsForEveryStage) {
  const PipelineSchedule s = MakeSchedule(Schedule::k1F1B, 2, 2, 1);
  StepCosts costs = UniformCosts(s, 1.0, 2.0, 0.0);
  costs.stages[1].dp_grad_sync_s = 10.0;  // stage 1 finishes early but syncs long
  costs.stages[0].optimizer_s = 1.0;
  const SimResult r = SimulateStep(s, costs);
  // Stage 1 runs F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]; stage 0 ends with B1 [7,9]. Stage 1's
  // sync ends at 17, and stage 0's optimizer cannot start before it.
  EXPECT_NEAR(r.pipeline_end_s, 9.0, kEps);
  EXPECT_NEAR(r.optimizer_start_s, 17.0, kEps);
  EXPECT_NEAR(r.step_time_s, 18.0, kEps);
}

TEST(EventSim, ActivationMemoryFollowsTheSchedule) {
  const PipelineSchedule s = MakeSchedule(Schedule::kZbH1, 2, 3, 1);
  StepCosts costs = UniformCosts(s, 1, 1, 1);
  for (ChunkCosts& c : costs.chunks) {
    c.activation_bytes = 100;
    c.weight_grad_activation_bytes = 40;
  }
  const SimResult r = SimulateStep(s, costs);
  // Stage 1 (last) runs F0 B0 F1 B1 W0 F2 B2 W1 W2. Held bytes after each: 100, 40 (W0's
  // share stays), 140, 80, 40, 140, 80, 40, 0; an op that ends when the next starts shares its
  // time point, so B0/F1 and W0/F2 each make one step of the function.
  std::vector<double> held;
  for (const auto& [t, bytes] : r.stages[1].activation_bytes_over_time) held.push_back(bytes);
  EXPECT_EQ(held, (std::vector<double>{100, 140, 80, 140, 80, 40, 0}));
  EXPECT_DOUBLE_EQ(r.stages[1].peak_activation_bytes, 140);
}

}  // namespace
}  // namespace ptdp
