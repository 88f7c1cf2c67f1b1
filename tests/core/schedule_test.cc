// Schedule generation: exact orders (Megatron's, pinned by hand) and properties over many
// random (p, m, v). Timing properties (bubbles) are the simulator's tests.
#include "core/schedule.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "core/limits.h"

namespace ptdp {
namespace {

// "F0.1" = forward of micro-batch 0 on chunk 1 (chunk shown only when v > 1).
std::string Order(const PipelineSchedule& s, int stage) {
  std::string text;
  for (const PipelineOp& op : s.ops[stage]) {
    if (!text.empty()) text += ' ';
    text += Letter(op.kind) + std::to_string(op.microbatch);
    if (s.chunks > 1) text += "." + std::to_string(op.chunk);
  }
  return text;
}

TEST(Schedule, OneFOneBWarmsUpWithPMinusRMinusOneForwards) {
  const PipelineSchedule s = MakeSchedule(Schedule::k1F1B, 4, 6, 1);
  EXPECT_EQ(Order(s, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(Order(s, 1), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(Order(s, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: warm-up is capped at m.
  EXPECT_EQ(Order(MakeSchedule(Schedule::k1F1B, 4, 2, 1), 0), "F0 F1 B0 B1");
}

TEST(Schedule, GpipeRunsAllForwardsFirst) {
  EXPECT_EQ(Order(MakeSchedule(Schedule::kGpipe, 2, 3, 1), 1), "F0 F1 F2 B0 B1 B2");
}

TEST(Schedule, InterleavedFollowsMegatronsScheduleTable) {
  // p = 2, m = 4, v = 2, N = p = 2. Table: (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1).
  // Stage 0 warm-up (2-0-1)*2 + (2-1)*2 = 4; stage 1 warm-up 0*2 + 2 = 2.
  const PipelineSchedule s = MakeSchedule(Schedule::kInterleaved, 2, 4, 2);
  EXPECT_EQ(Order(s, 0),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(Order(s, 1),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
}

TEST(Schedule, InterleavedWithMEqualToPRunsEveryForwardFirstOnEarlyStages) {
  // p = 4, m = 4, v = 2: stage 0 warm-up 3*2 + 4 = 10 >= 8 = m v, so all forwards come first.
  const PipelineSchedule s = MakeSchedule(Schedule::kInterleaved, 4, 4, 2);
  EXPECT_EQ(Order(s, 0),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0");
  // Stage 3: warm-up 0*2 + 4 = 4.
  EXPECT_EQ(Order(s, 3),
            "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 B0.0 B1.0 B2.0 B3.0");
}

TEST(Schedule, ZeroBubbleH1DefersRWeightGradientsOnStageR) {
  const PipelineSchedule s = MakeSchedule(Schedule::kZbH1, 3, 4, 1);
  EXPECT_TRUE(s.split_backward);
  EXPECT_EQ(Order(s, 0), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3");
  EXPECT_EQ(Order(s, 1), "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3");
  EXPECT_EQ(Order(s, 2), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
}

TEST(Schedule, PeersAreTheNeighbouringVirtualStages) {
  const PipelineSchedule s = MakeSchedule(Schedule::kInterleaved, 3, 3, 2);
  for (const PipelineOp& op : s.ops[0]) {
    if (op.kind == OpKind::kForward && op.chunk == 0) {
      EXPECT_EQ(op.recv_from, kNoStage);  // virtual stage 0 reads the data
      EXPECT_EQ(op.send_to, 1);
    }
    if (op.kind == OpKind::kForward && op.chunk == 1) {
      EXPECT_EQ(op.recv_from, 2);  // from virtual stage 2 on stage 2
      EXPECT_EQ(op.send_to, 1);
    }
  }
  for (const PipelineOp& op : s.ops[2]) {
    if (op.kind == OpKind::kBackward && op.chunk == 1) {
      EXPECT_EQ(op.recv_from, kNoStage);  // the last virtual stage starts the backward
      EXPECT_EQ(op.send_to, 1);
    }
  }
}

TEST(Schedule, InFlightMicroBatches) {
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(MaxInFlight(MakeSchedule(Schedule::k1F1B, 4, 8, 1), r), 4 - r);
    EXPECT_EQ(MaxInFlight(MakeSchedule(Schedule::kGpipe, 4, 8, 1), r), 8);
    EXPECT_EQ(MaxInFlight(MakeSchedule(Schedule::kZbH1, 4, 8, 1), r), 4);
  }
  EXPECT_EQ(MaxInFlight(MakeSchedule(Schedule::k1F1B, 4, 2, 1), 0), 2);
}

// The closed form the planner uses agrees with the generated schedules, everywhere small.
TEST(Schedule, InFlightClosedFormMatchesTheSchedules) {
  int checked = 0;
  for (Schedule kind :
       {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1, Schedule::kInterleaved}) {
    for (int p = 1; p <= 12; ++p) {
      for (int m = 1; m <= 40; ++m) {
        for (int v = 1; v <= 5; ++v) {
          if (!ScheduleProblem(kind, p, m, v).empty()) continue;
          const PipelineSchedule s = MakeSchedule(kind, p, m, v);
          for (int r = 0; r < p; ++r) {
            ASSERT_EQ(MaxInFlight(kind, p, m, v, r), MaxInFlight(s, r))
                << Name(kind) << " p " << p << " m " << m << " v " << v << " stage " << r;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 5000);
}

TEST(Schedule, ProblemsAreExplained) {
  EXPECT_EQ(ScheduleProblem(Schedule::k1F1B, 4, 8, 1), "");
  EXPECT_EQ(ScheduleProblem(Schedule::k1F1B, 4, 8, 2),
            "1f1b runs one model chunk per stage, got 2");
  EXPECT_EQ(ScheduleProblem(Schedule::kInterleaved, 4, 6, 2),
            "interleaved needs the micro-batches (6) to be a multiple of the pipeline stages (4)");
  EXPECT_EQ(ScheduleProblem(Schedule::kInterleaved, 4, 8, 1),
            "interleaved needs at least 2 model chunks per stage, got 1");
  EXPECT_EQ(ScheduleProblem(Schedule::kGpipe, 2, 0, 1),
            "the step needs at least one micro-batch, got 0");
}

// A schedule is built operation by operation: stages x micro-batches x chunks at most
// kMaxPipelineOps (pp 256 x 100,000 micro-batches once ended in bad_alloc after 4.6 GB).
TEST(Schedule, SizeIsBounded) {
  EXPECT_EQ(kMaxPipelineOps, 524288);
  EXPECT_EQ(ScheduleSizeProblem(512, 1024, 1), "");
  EXPECT_EQ(ScheduleSizeProblem(256, 100000, 1),
            "256 pipeline stages x 100000 micro-batches = 25600000 forward passes per step; ptdp "
            "builds schedules of at most 524288");
  EXPECT_EQ(ScheduleSizeProblem(4, 65536, 4),
            "4 pipeline stages x 65536 micro-batches x 4 model chunks = 1048576 forward passes per "
            "step; ptdp builds schedules of at most 524288");
  // No overflow at the largest sizes the readers let through.
  EXPECT_NE(ScheduleSizeProblem(int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31), "");
  // MakeSchedule's callers check first: beyond the bound is a bug, not a 4 GB allocation.
  EXPECT_THROW(MakeSchedule(Schedule::k1F1B, 256, 100000, 1), InternalError);
}

// Every (micro-batch, chunk) runs F, B (and W) exactly once on the stage that holds the chunk,
// each stage's order respects its own dependencies (F before B before W of the same work), and
// playing the lists with unbounded buffers never blocks: the stages can always make progress.
void CheckComplete(const PipelineSchedule& s) {
  const int p = s.stages, m = s.microbatches, v = s.chunks;
  const int kinds = s.split_backward ? 3 : 2;
  ASSERT_EQ(static_cast<int>(s.ops.size()), p);
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(static_cast<int>(s.ops[r].size()), kinds * m * v) << "stage " << r;
    std::set<std::tuple<int, int, int>> seen;
    for (const PipelineOp& op : s.ops[r]) {
      ASSERT_TRUE(op.microbatch >= 0 && op.microbatch < m && op.chunk >= 0 && op.chunk < v);
      ASSERT_TRUE(seen.emplace(static_cast<int>(op.kind), op.microbatch, op.chunk).second);
      if (op.kind != OpKind::kForward) {
        ASSERT_TRUE(seen.count({static_cast<int>(OpKind::kForward), op.microbatch, op.chunk}));
      }
      if (op.kind == OpKind::kWeightGrad) {
        ASSERT_TRUE(seen.count({static_cast<int>(OpKind::kBackward), op.microbatch, op.chunk}));
      }
    }
  }
  // Dependency play: F of (mb, vs) needs F of (mb, vs - 1); B of (mb, vs) needs B of
  // (mb, vs + 1), or its own F on the last virtual stage.
  const int last = s.virtual_stages() - 1;
  std::vector<std::vector<char>> forward_done(m, std::vector<char>(last + 1, 0));
  auto backward_done = forward_done;
  std::vector<size_t> next(p, 0);
  size_t remaining = 0;
  for (const auto& ops : s.ops) remaining += ops.size();
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < s.ops[r].size()) {
        const PipelineOp& op = s.ops[r][next[r]];
        const int vs = s.VirtualStage(r, op.chunk);
        bool ready = true;
        if (op.kind == OpKind::kForward) ready = vs == 0 || forward_done[op.microbatch][vs - 1];
        if (op.kind == OpKind::kBackward) {
          ready =
              vs == last ? forward_done[op.microbatch][vs] : backward_done[op.microbatch][vs + 1];
        }
        if (!ready) break;
        if (op.kind == OpKind::kForward) forward_done[op.microbatch][vs] = 1;
        if (op.kind == OpKind::kBackward) backward_done[op.microbatch][vs] = 1;
        ++next[r];
        --remaining;
        progress = true;
      }
    }
    ASSERT_TRUE(progress) << Name(s.kind) << " p=" << p << " m=" << m << " v=" << v << " deadlocks";
  }
}

TEST(Schedule, NoScheduleDeadlocksOrDropsAnOperation) {
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> stages(1, 64), micro(1, 512), chunks(2, 8);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int p = stages(rng);
    const int m = micro(rng);
    for (Schedule kind : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1}) {
      ASSERT_NO_FATAL_FAILURE(CheckComplete(MakeSchedule(kind, p, m, 1)));
      ++checked;
    }
    if (p >= 2) {
      const int multiple = std::max(1, m / p);
      const int v = chunks(rng);
      ASSERT_NO_FATAL_FAILURE(
          CheckComplete(MakeSchedule(Schedule::kInterleaved, p, p * multiple, v)));
      ++checked;
    }
  }
  // The corners: the largest sizes of the issue and the smallest.
  ASSERT_NO_FATAL_FAILURE(CheckComplete(MakeSchedule(Schedule::kInterleaved, 64, 512, 8)));
  ASSERT_NO_FATAL_FAILURE(CheckComplete(MakeSchedule(Schedule::kInterleaved, 2, 2, 2)));
  ASSERT_NO_FATAL_FAILURE(CheckComplete(MakeSchedule(Schedule::k1F1B, 1, 1, 1)));
  EXPECT_GT(checked, 1000);
}

// The weighted peak (chunks of different sizes in flight) against a walk over the generated
// schedule, for every stage of a range of interleaved pipelines and uneven chunk weights.
TEST(Schedule, PeakInFlightWeightAgreesWithTheSchedule) {
  int checked = 0;
  for (int p : {2, 3, 4, 8}) {
    for (int v : {2, 3, 4}) {
      for (int m : {p, 2 * p, 4 * p, 16 * p}) {
        const PipelineSchedule s = MakeSchedule(Schedule::kInterleaved, p, m, v);
        std::vector<double> weight(static_cast<size_t>(v));
        for (int c = 0; c < v; ++c) weight[static_cast<size_t>(c)] = 1 + (c * 7 + 3) % 5;
        for (int r = 0; r < p; ++r) {
          double held = 0, peak = 0;
          for (const PipelineOp& op : s.ops[static_cast<size_t>(r)]) {
            const double w = weight[static_cast<size_t>(op.chunk)];
            if (op.kind == OpKind::kForward) peak = std::max(peak, held += w);
            if (op.kind == OpKind::kBackward) held -= w;
          }
          EXPECT_DOUBLE_EQ(PeakInFlightWeight(Schedule::kInterleaved, p, m, v, r, weight), peak)
              << "p " << p << " v " << v << " m " << m << " r " << r;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 4 * (2 + 3 + 4 + 8));  // v x m x stages
  const std::vector<double> one = {2.5};
  EXPECT_DOUBLE_EQ(PeakInFlightWeight(Schedule::k1F1B, 4, 8, 1, 1, one), 3 * 2.5);
}

}  // namespace
}  // namespace ptdp
