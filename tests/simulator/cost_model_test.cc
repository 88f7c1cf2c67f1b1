// EstimateStep's StepCosts: which chunk carries what, sends, the per-stage reductions and the
// optimizer, and the closed form against the event simulator.
#include "simulator/cost_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/presets.h"
#include "core/schedule.h"
#include "megatron/rules.h"
#include "simulator/collectives.h"
#include "simulator/event_sim.h"
#include "simulator/flops.h"
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
  s.cluster.host = HostSpec{};  // the optimizer's kernels alone (the host's share: below)
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
  // The host's step time runs beside those kernels: only where it is longer does it count.
  Config h = s;
  h.parallel.distributed_optimizer = true;
  h.cluster.host.optimizer_step_s = 0.5 * (dmid.optimizer_s + mid.optimizer_s);
  const StepEstimate hosted = EstimateStep(h.model, h.cluster, h.training, h.parallel);
  EXPECT_DOUBLE_EQ(hosted.costs.stages[3].optimizer_s, h.cluster.host.optimizer_step_s);
  h.parallel.distributed_optimizer = false;
  EXPECT_DOUBLE_EQ(
      EstimateStep(h.model, h.cluster, h.training, h.parallel).costs.stages[3].optimizer_s,
      mid.optimizer_s);
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

// The planner's path (a LayerCostCache shared across layouts, virtual stages of the same kind
// copied) and a cold evaluation agree to the bit on every field, over layouts that exercise the
// copies: uniform and uneven splits, interleaving, sends within a node (not copied), FSDP,
// MoE with multi-token prediction, a hybrid model and FP8's bf16 layers.
TEST(EstimateStep, ThePlannersCacheAndTheColdPathAgreeOnEveryField) {
  struct Case {
    const char* model;
    int64_t gpus, batch;
    ParallelConfig p;
    Precision precision = Precision::kBf16;
    const char* cluster = "dgx-h100";
  };
  const Case cases[] = {
      {"gpt3-175b", 256, 256, {.tp = 8, .pp = 8, .dp = 4, .micro_batch_size = 1}},
      {"gpt3-175b",
       192,
       192,
       {.tp = 8,
        .pp = 8,
        .dp = 3,
        .micro_batch_size = 1,
        .virtual_stages = 3,
        .schedule = Schedule::kInterleaved,
        .sequence_parallel = true,
        .recompute = Recompute::kSelective,
        .distributed_optimizer = true},
       Precision::kBf16,
       "vtrain-a100"},  // its host.microbatch_overhead_us tells each stage's first chunk apart
      {"megatron-1t",
       512,
       512,
       {.tp = 8,
        .pp = 8,
        .dp = 8,
        .micro_batch_size = 1,
        .virtual_stages = 2,
        .schedule = Schedule::kInterleaved,
        .recompute = Recompute::kFull,
        .first_stage_layers = 4,
        .last_stage_layers = 4}},
      // tp x dp = 3 ranks per stage on 8-GPU nodes: the pipeline pairs differ, nothing copied.
      {"llama3-8b", 12, 24, {.tp = 1, .pp = 4, .dp = 3, .micro_batch_size = 1}},
      {"llama3-8b",
       16,
       64,
       {.tp = 2,
        .pp = 2,
        .dp = 4,
        .micro_batch_size = 2,
        .distributed_optimizer = true,
        .fsdp = Fsdp::kOptimGradsParams}},
      {"llama3-405b",
       2048,
       2048,
       {.tp = 8,
        .pp = 16,
        .dp = 16,
        .micro_batch_size = 1,
        .sequence_parallel = true,
        .distributed_optimizer = true,
        .first_stage_layers = 7,
        .last_stage_layers = 7},
       Precision::kFp8},
      // 61 layers and the embedding and loss as two more: 9 per stage.
      {"deepseek-v3",
       896,
       896,
       {.tp = 2,
        .pp = 7,
        .dp = 64,
        .ep = 64,
        .etp = 1,
        .micro_batch_size = 1,
        .sequence_parallel = true,
        .distributed_optimizer = true,
        .account_for_embedding = true,
        .account_for_loss = true}},
      {"nemotron-3-nano",
       64,
       1024,
       {.tp = 2,
        .pp = 4,
        .dp = 8,
        .ep = 8,
        .etp = 1,
        .micro_batch_size = 1,
        .sequence_parallel = true,
        .distributed_optimizer = true},
       Precision::kFp8},
  };
  const auto same_bits = [](const auto& a, const auto& b) {
    return std::memcmp(&a, &b, sizeof(a)) == 0;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    ModelSpec model = ModelPreset(c.model);
    if (std::string(c.model) == "deepseek-v3") model.mtp_num_layers = 1;
    const ClusterSpec cluster = ClusterPreset(c.cluster);
    TrainingSpec training;
    training.global_batch_size = c.batch;
    training.precision = c.precision;
    ASSERT_TRUE(CheckParallelConfig(model, training, c.p, c.gpus).empty());
    CostOptions options;
    options.overlap_grad_reduce = options.overlap_param_gather = true;
    LayerCostCache cache;
    // Twice through the cache: the second time every layer cost is found there.
    for (int pass = 0; pass < 2; ++pass) {
      const StepEstimate cold = EstimateStep(model, cluster, training, c.p, options);
      const StepEstimate warm = EstimateStep(model, cluster, training, c.p, options, &cache);
      ASSERT_EQ(cold.costs.chunks.size(), static_cast<size_t>(c.p.pp * c.p.virtual_stages));
      ASSERT_EQ(warm.costs.chunks.size(), cold.costs.chunks.size());
      for (size_t i = 0; i < cold.costs.chunks.size(); ++i) {
        EXPECT_TRUE(same_bits(cold.costs.chunks[i], warm.costs.chunks[i])) << "chunk " << i;
      }
      ASSERT_EQ(warm.stages.size(), cold.stages.size());
      for (size_t r = 0; r < cold.stages.size(); ++r) {
        EXPECT_TRUE(same_bits(cold.stages[r], warm.stages[r])) << "breakdown " << r;
        const StageCosts &a = cold.costs.stages[r], &b = warm.costs.stages[r];
        EXPECT_EQ(a.dp_grad_sync_s, b.dp_grad_sync_s);
        EXPECT_EQ(a.dp_param_gather_s, b.dp_param_gather_s);
        EXPECT_EQ(a.dp_param_gather_hidden_s, b.dp_param_gather_hidden_s);
        EXPECT_EQ(a.embedding_sync_s, b.embedding_sync_s);
        EXPECT_EQ(a.optimizer_s, b.optimizer_s);
        EXPECT_EQ(a.dp_buckets, b.dp_buckets);
        EXPECT_EQ(a.static_bytes, b.static_bytes);
        EXPECT_EQ(a.expert_dp_comm_s, b.expert_dp_comm_s);
      }
      EXPECT_EQ(cold.model_flops, warm.model_flops);
      EXPECT_EQ(cold.hardware_flops, warm.hardware_flops);
      EXPECT_EQ(cold.hardware_flops, HardwareFlopsPerStep(model, training, c.p, options));
    }
  }
}

// Copied virtual stages are the ones a stage-by-stage walk would work out: with uniform layers
// the chunks of the middle stages are alike, and each stage's breakdown is its chunks' sum.
TEST(EstimateStep, CopiedStagesMatchTheirNeighbours) {
  Config s;
  s.parallel.pp = 8, s.parallel.virtual_stages = 3;
  CostOptions overlap;
  overlap.overlap_p2p_communication = true;
  const StepEstimate est = EstimateStep(s.model, s.cluster, s.training, s.parallel, overlap);
  const int pp = 8;
  for (int c = 0; c < 3; ++c) {
    const ChunkCosts& second = est.costs.chunks[c * pp + 1];
    for (int r = 2; r < pp - 1; ++r) {
      const ChunkCosts& ch = est.costs.chunks[c * pp + r];
      EXPECT_EQ(ch.forward_s, second.forward_s);
      EXPECT_EQ(ch.backward_input_s, second.backward_input_s);
      EXPECT_EQ(ch.send_forward_s, second.send_forward_s);
      EXPECT_EQ(ch.activation_bytes, second.activation_bytes);
    }
  }
  for (int r = 0; r < pp; ++r) {
    double sends = 0;
    for (int c = 0; c < 3; ++c) {
      sends += est.costs.chunks[c * pp + r].send_forward_s +
               est.costs.chunks[c * pp + r].send_backward_s;
    }
    EXPECT_NEAR(est.stages[r].pp_comm_s, sends, 1e-12 * sends);
  }
}

// Each pipeline stage's static bytes are its own parameters' (the memory model counts them
// stage by stage): the first stage's with the embedding, the last's with the output layer, for
// a tied and an untied embedding.
TEST(EstimateStep, EachStagesStaticBytesAreItsOwnParameters) {
  for (const char* name : {"gpt3-175b", "llama3-70b"}) {
    SCOPED_TRACE(name);
    Config s;
    s.model = ModelPreset(name);
    s.parallel.virtual_stages = 1, s.parallel.schedule = Schedule::k1F1B;
    const StepEstimate est = EstimateStep(s.model, s.cluster, s.training, s.parallel);
    const MemoryEstimate mem = EstimateMemory(s.model, s.cluster, s.training, s.parallel,
                                              std::vector<int>(s.parallel.pp, 1));
    ASSERT_NE(mem.stages.front().parameters, mem.stages.back().parameters);
    for (int r = 0; r < s.parallel.pp; ++r) {
      const StageMemory& m = mem.stages[r];
      const double bytes = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes +
                           static_cast<double>(s.cluster.gpu.reserved_bytes);
      EXPECT_NEAR(est.costs.stages[r].static_bytes, bytes, 1e-12 * bytes) << "stage " << r;
    }
  }
}

}  // namespace
}  // namespace ptdp
