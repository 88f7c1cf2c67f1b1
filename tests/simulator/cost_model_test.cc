// EstimateStep's StepCosts: which chunk carries what, sends, the per-stage reductions and the
// optimizer, and the closed form against the event simulator.
#include "simulator/cost_model.h"

#include <gtest/gtest.h>

#include "core/presets.h"
#include "core/schedule.h"
#include "simulator/collectives.h"
#include "simulator/event_sim.h"
#include "simulator/layer_work.h"
#include "simulator/memory_model.h"

namespace ptdp {
namespace {

struct Config {
  ModelSpec model = ModelPreset("gpt3-175b");
  ClusterSpec cluster = ClusterPreset("dgx-a100-80gb");
  TrainingSpec training;
  ParallelConfig parallel{.tp = 8,
                          .pp = 8,
                          .dp = 4,
                          .micro_batch_size = 1,
                          .virtual_stages = 3,
                          .schedule = Schedule::kInterleaved,
                          .recompute = Recompute::kSelective};
  Config() { training.global_batch_size = 256; }
};

TEST(EstimateStep, ChunksCarryTheEmbeddingFirstAndTheOutputLast) {
  const Config s;
  const StepEstimate est = EstimateStep(s.model, s.cluster, s.training, s.parallel);
  ASSERT_EQ(est.costs.chunks.size(), 24u);
  ASSERT_EQ(est.costs.stages.size(), 8u);
  EXPECT_EQ(est.microbatches, 256 / 4);
  // With the sends outside the operations, only the embedding and the output part differ.
  CostOptions overlap;
  overlap.overlap_p2p_communication = true;
  const StepEstimate split = EstimateStep(s.model, s.cluster, s.training, s.parallel, overlap);
  const ChunkCosts& first = split.costs.chunks[0];
  const ChunkCosts& middle = split.costs.chunks[9];
  const ChunkCosts& last = split.costs.chunks[23];
  EXPECT_GT(first.forward_s, middle.forward_s);
  EXPECT_GT(last.forward_s, first.forward_s);  // the LM head and the cross entropy
  EXPECT_GT(last.activation_bytes, middle.activation_bytes);
  for (int vs = 1; vs < 23; ++vs) {
    EXPECT_EQ(split.costs.chunks[vs].forward_s, middle.forward_s);
    EXPECT_EQ(split.costs.chunks[vs].backward_weight_s, middle.backward_weight_s);
  }
  for (int vs = 1; vs < 22; ++vs) {
    // Blocking p2p (Megatron's default): the sends are inside the operations.
    EXPECT_EQ(est.costs.chunks[vs].send_forward_s, 0);
    EXPECT_EQ(est.costs.chunks[vs].send_backward_s, 0);
  }
  // 4 layers per chunk of the selective-recompute layer activations.
  EXPECT_DOUBLE_EQ(middle.activation_bytes,
                   4 * KorthikantiTable2Bytes(2048, 1, 12288, 96, 8, false, Recompute::kSelective));
  EXPECT_GT(est.stages[0].recompute_s, 0);
  EXPECT_GT(est.model_flops, 0);
  EXPECT_GT(est.hardware_flops, est.model_flops);
}

TEST(EstimateStep, OverlappedSendsAppearAsTransfers) {
  const Config s;
  CostOptions overlap;
  overlap.overlap_p2p_communication = true;
  const StepEstimate blocking = EstimateStep(s.model, s.cluster, s.training, s.parallel);
  const StepEstimate async = EstimateStep(s.model, s.cluster, s.training, s.parallel, overlap);
  const ChunkCosts& b = blocking.costs.chunks[9];
  const ChunkCosts& a = async.costs.chunks[9];
  EXPECT_GT(a.send_forward_s, 0);
  EXPECT_GT(a.send_backward_s, 0);
  EXPECT_DOUBLE_EQ(b.forward_s, a.forward_s + a.send_forward_s);
  EXPECT_DOUBLE_EQ(b.backward_input_s, a.backward_input_s + a.send_backward_s);
  EXPECT_EQ(async.costs.chunks[0].send_backward_s, 0);  // nothing before the embedding
  EXPECT_EQ(async.costs.chunks[23].send_forward_s, 0);  // nothing after the loss
  // s b h bf16 activation, every GPU of the TP group sends all of it over its NIC (the stages
  // are 32 ranks = 4 nodes apart).
  const double act = 2048.0 * 12288 * 2;
  EXPECT_NEAR(a.send_forward_s,
              CollectiveTime(s.cluster, Collective::kSendRecv, act, PlaceGroup(0, 32, 2, 8)),
              1e-15);
  EXPECT_NEAR(a.send_forward_s, 8.4e-6 + 9.6e-6 + act / 24e9, 1e-12);
}

TEST(EstimateStep, DataParallelReductionEmbeddingSyncAndOptimizer) {
  Config s;
  const StepEstimate plain = EstimateStep(s.model, s.cluster, s.training, s.parallel);
  s.parallel.distributed_optimizer = true;
  const StepEstimate dist = EstimateStep(s.model, s.cluster, s.training, s.parallel);
  const GroupPlacement dp = DataParallelGroup(s.parallel, 8);
  const double params = 12 * LayerParameters(s.model, 8);  // a middle stage: 96 / 8 layers
  const StageCosts& mid = plain.costs.stages[3];
  EXPECT_NEAR(mid.dp_grad_sync_s, CollectiveTime(s.cluster, Collective::kAllReduce, params * 4, dp),
              1e-12);
  EXPECT_EQ(mid.dp_param_gather_s, 0);
  EXPECT_EQ(mid.embedding_sync_s, 0);
  EXPECT_FALSE(mid.overlap_grad_sync);
  const StageCosts& dmid = dist.costs.stages[3];
  EXPECT_NEAR(dmid.dp_grad_sync_s,
              CollectiveTime(s.cluster, Collective::kReduceScatter, params * 4, dp), 1e-12);
  EXPECT_NEAR(dmid.dp_param_gather_s,
              CollectiveTime(s.cluster, Collective::kAllGather, params * 2, dp), 1e-12);
  EXPECT_NEAR(dmid.optimizer_s * 4, mid.optimizer_s, mid.optimizer_s * 1e-12);  // 1/dp shard
  // bf16 Adam: 2 + 4 + 12 bytes per parameter, plus the reserved bytes.
  EXPECT_DOUBLE_EQ(mid.static_bytes, 18 * params + s.cluster.gpu.reserved_bytes);
  // Tied embeddings with pp > 1: first and last stage all-reduce the embedding's gradient.
  EXPECT_GT(plain.costs.stages[0].embedding_sync_s, 0);
  EXPECT_EQ(plain.costs.stages[0].embedding_sync_s, plain.costs.stages[7].embedding_sync_s);
  s.model.tied_embeddings = false;
  EXPECT_EQ(
      EstimateStep(s.model, s.cluster, s.training, s.parallel).costs.stages[0].embedding_sync_s, 0);
  CostOptions overlap;
  overlap.overlap_grad_reduce = true;
  EXPECT_TRUE(EstimateStep(s.model, s.cluster, s.training, s.parallel, overlap)
                  .costs.stages[2]
                  .overlap_grad_sync);
}

TEST(ClosedForm, MatchesTheBubbleFormulasOnUniformCosts) {
  const double tf = 1.0, tb = 2.0, tw = 0.5;
  for (int p : {1, 2, 4, 8}) {
    for (int m : {8, 16, 32}) {
      const PipelineSchedule s = MakeSchedule(Schedule::k1F1B, p, m, 1);
      EXPECT_DOUBLE_EQ(ClosedFormStepTime(UniformCosts(s, tf, tb, 0), Schedule::k1F1B, p, m, 1),
                       (m + p - 1) * (tf + tb));
      const PipelineSchedule z = MakeSchedule(Schedule::kZbH1, p, m, 1);
      EXPECT_DOUBLE_EQ(
          ClosedFormStepTime(UniformCosts(z, tf, tb - tw, tw), Schedule::kZbH1, p, m, 1),
          m * (tf + tb) + (p - 1) * (tf + tb - 2 * tw));
      if (p > 2) {
        for (int v : {2, 3}) {
          // Interleaved: v chunks of tf, tb each per stage; bubble (p - 1)(tf + tb) per chunk.
          const PipelineSchedule i = MakeSchedule(Schedule::kInterleaved, p, m, v);
          const double closed =
              ClosedFormStepTime(UniformCosts(i, tf, tb, 0), Schedule::kInterleaved, p, m, v);
          EXPECT_DOUBLE_EQ(closed, (m * v + p - 1) * (tf + tb));
          EXPECT_NEAR(SimulateStep(i, UniformCosts(i, tf, tb, 0)).step_time_s, closed, 1e-9)
              << "p " << p << " m " << m << " v " << v;
        }
      }
    }
  }
}

TEST(ClosedForm, AgreesWithTheEventSimulationOnRealCosts) {
  for (Schedule kind : {Schedule::k1F1B, Schedule::kInterleaved}) {
    Config s;
    s.parallel.schedule = kind;
    s.parallel.virtual_stages = kind == Schedule::kInterleaved ? 3 : 1;
    const StepEstimate est = EstimateStep(s.model, s.cluster, s.training, s.parallel);
    const PipelineSchedule schedule =
        MakeSchedule(kind, 8, static_cast<int>(est.microbatches), s.parallel.virtual_stages);
    const double simulated = SimulateStep(schedule, est.costs).step_time_s;
    const double closed =
        ClosedFormStepTime(est.costs, kind, 8, est.microbatches, s.parallel.virtual_stages);
    EXPECT_NEAR(closed / simulated, 1.0, 0.01) << Name(kind);
  }
}

}  // namespace
}  // namespace ptdp
