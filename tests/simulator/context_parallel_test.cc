// Context parallelism in the cost model: each GPU works on s / cp tokens; the core attention's
// FLOPs divide by cp with its exchange over the CP group (ring, all-to-all or all-gather); the
// activations divide by cp; gradients are reduced, and the optimizer sharded, over dp x cp; the
// groups sit in Megatron's order tp-cp-dp-pp.
#include <gtest/gtest.h>

#include <string>

#include "core/presets.h"
#include "megatron/rules.h"
#include "simulator/collectives.h"
#include "simulator/cost_model.h"
#include "simulator/layer_work.h"
#include "simulator/memory_model.h"
#include "simulator/simulate.h"

namespace ptdp {
namespace {

const Work* Find(const PassWork& pass, const std::string& name) {
  for (int i = 0; i < pass.num_work; ++i) {
    if (pass.work[i].name == name) return &pass.work[i];
  }
  return nullptr;
}

const CommWork* FindComm(const PassWork& pass, const std::string& name) {
  for (int i = 0; i < pass.num_comm; ++i) {
    if (pass.comm[i].name == name) return &pass.comm[i];
  }
  return nullptr;
}

double AttentionFlops(const PassWork& pass) {
  double sum = 0;
  for (int i = 0; i < pass.num_work; ++i) {
    const Work& w = pass.work[i];
    if (w.kind == WorkKind::kAttentionForward || w.kind == WorkKind::kAttentionBackward) {
      sum += w.flops;
    }
  }
  return sum;
}

Plan Llama(int seq, int gpus, ParallelConfig p, int64_t gbs = 64) {
  Plan plan;
  plan.model = ModelPreset("llama3-8b");  // 32 heads, 8 query groups, d 128
  plan.model.seq_length = plan.model.max_position_embeddings = seq;
  plan.cluster = ClusterPreset("dgx-h100");
  plan.num_gpus = gpus;
  plan.training.global_batch_size = gbs;
  plan.parallel = p;
  return plan;
}

TEST(ContextParallel, TheRingDividesTheAttentionAndTheTokens) {
  const ModelSpec m = ModelPreset("llama3-8b");  // s 8192
  const ParallelConfig one{.tp = 2, .micro_batch_size = 1};
  ParallelConfig ring = one;
  ring.cp = 4;
  const LayerWork a = TransformerLayerWork(m, one, Precision::kBf16, {});
  const LayerWork r = TransformerLayerWork(m, ring, Precision::kBf16, {});
  // The causal total over cp, forward and backward.
  EXPECT_DOUBLE_EQ(AttentionFlops(r.forward), AttentionFlops(a.forward) / 4);
  EXPECT_DOUBLE_EQ(AttentionFlops(r.backward_input), AttentionFlops(a.backward_input) / 4);
  // cp steps: cp - 1 overlapped with the exchanges, the last alone.
  const Work* steps = Find(r.forward, "ring attention steps");
  const Work* last = Find(r.forward, "ring attention last step");
  ASSERT_NE(steps, nullptr);
  ASSERT_NE(last, nullptr);
  EXPECT_DOUBLE_EQ(steps->flops, 3 * last->flops);
  EXPECT_EQ(last->gemm.m, 8192 / 4);  // the local queries
  const CommWork* kv = FindComm(r.forward, "cp ring k v");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->group, CommGroup::kCp);
  EXPECT_EQ(kv->repeat, 3);
  EXPECT_DOUBLE_EQ(kv->bytes, 2.0 * 2048 * (8 / 2) * 128 * 2);  // local K and V, 4 groups per GPU
  const CommWork* kv_b = FindComm(r.backward_input, "cp ring k v and their grads");
  ASSERT_NE(kv_b, nullptr);
  EXPECT_DOUBLE_EQ(kv_b->bytes, 2 * kv->bytes);
  // The rest of the layer on s / cp tokens: the QKV GEMM's rows, the TP reductions' bytes.
  EXPECT_EQ(Find(r.forward, "qkv")->gemm.m, 8192 / 4);
  EXPECT_DOUBLE_EQ(FindComm(r.forward, "tp reduce after fc2")->bytes,
                   FindComm(a.forward, "tp reduce after fc2")->bytes / 4);
}

TEST(ContextParallel, AllToAllTradesTokensForHeads) {
  const ModelSpec m = ModelPreset("llama3-8b");
  ParallelConfig p{.tp = 2, .cp = 2, .cp_comm = CpComm::kA2a, .micro_batch_size = 1};
  const LayerWork w = TransformerLayerWork(m, p, Precision::kBf16, {});
  const Work* f = Find(w.forward, "flash attention");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->gemm.m, 8192);        // every token
  EXPECT_EQ(f->gemm.batch, 16 / 2);  // of half the heads of the TP rank
  const CommWork* in = FindComm(w.forward, "cp all-to-all q k v");
  const CommWork* out = FindComm(w.forward, "cp all-to-all output");
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(in->collective, Collective::kAllToAll);
  EXPECT_DOUBLE_EQ(in->bytes, 4096.0 * 128 * (16 + 2 * 4) * 2);  // local Q, K, V
  EXPECT_DOUBLE_EQ(out->bytes, 4096.0 * 128 * 16 * 2);
  EXPECT_NE(FindComm(w.backward_input, "cp all-to-all q k v grads"), nullptr);
  // All-gather: K and V of every rank before, their gradients reduce-scattered after.
  p.cp_comm = CpComm::kAllGather;
  const LayerWork g = TransformerLayerWork(m, p, Precision::kBf16, {});
  EXPECT_NE(FindComm(g.forward, "cp all-gather k v"), nullptr);
  EXPECT_NE(FindComm(g.backward_input, "cp reduce-scatter k v grads"), nullptr);
  EXPECT_DOUBLE_EQ(AttentionFlops(g.forward), AttentionFlops(w.forward));
}

TEST(ContextParallel, GroupsSitInMegatronsOrder) {
  // tp 2 x cp 2 x dp 2 x pp 2 on 8-GPU nodes: rank = tp + 2 (cp + 2 (dp + 2 pp)).
  const ParallelConfig p{.tp = 2, .pp = 2, .dp = 2, .cp = 2};
  EXPECT_EQ(p.world_size(), 16);
  EXPECT_EQ(ContextParallelGroup(p, 8), (GroupPlacement{2, 1, 2}));  // {0, 2}: one node
  EXPECT_EQ(DataParallelGroup(p, 8), (GroupPlacement{4, 1, 4}));     // dp x cp {0, 2, 4, 6}
  EXPECT_EQ(PipelinePair(p, 0, 8), (GroupPlacement{2, 2, 1}));       // stride tp cp dp = 8
  // On 4-GPU nodes the CP partner (stride 2) stays, the dp x cp group spans two nodes.
  EXPECT_EQ(ContextParallelGroup(p, 4), (GroupPlacement{2, 1, 2}));
  EXPECT_EQ(DataParallelGroup(p, 4), (GroupPlacement{4, 2, 2}));
  // tp 8 fills a node: every CP partner is on another node.
  const ParallelConfig wide{.tp = 8, .pp = 1, .dp = 1, .cp = 2};
  EXPECT_EQ(ContextParallelGroup(wide, 8), (GroupPlacement{2, 2, 1}));
  // Without context parallelism the groups are the ones they were.
  const ParallelConfig plain{.tp = 2, .pp = 2, .dp = 4};
  EXPECT_EQ(ContextParallelGroup(plain, 8).ranks, 1);
  EXPECT_EQ(DataParallelGroup(plain, 8), (GroupPlacement{4, 1, 4}));
}

TEST(ContextParallel, ActivationsAndOptimizerStateDivide) {
  const Plan one =
      Llama(32768, 8,
            {.tp = 2, .pp = 1, .dp = 4, .sequence_parallel = true, .distributed_optimizer = true});
  Plan cp = Llama(32768, 8,
                  {.tp = 2,
                   .pp = 1,
                   .dp = 2,
                   .cp = 2,
                   .sequence_parallel = true,
                   .distributed_optimizer = true});
  const ModelSpec& m = one.model;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, cp.parallel, Precision::kBf16, {}),
                   LayerActivationBytes(m, one.parallel, Precision::kBf16, {}) / 2);
  // The distributed optimizer shards over dp x cp: the same 4 ranks.
  EXPECT_DOUBLE_EQ(BytesPerParam(cp.training, cp.parallel, {}).optimizer,
                   BytesPerParam(one.training, one.parallel, {}).optimizer);
  const SimulationReport a = SimulatePlan(one), b = SimulatePlan(cp);
  EXPECT_LT(b.memory.stages[0].activations_bytes, 0.55 * a.memory.stages[0].activations_bytes);
  // Same FLOPs, counted once.
  EXPECT_DOUBLE_EQ(b.estimate.model_flops, a.estimate.model_flops);
}

TEST(ContextParallel, TheRingHidesItsExchangeBehindTheBlocksOnNvlink) {
  // 8k tokens per GPU at cp 4: each block's attention outlasts passing on its K and V.
  Plan plan = Llama(
      32768, 8,
      {.tp = 2, .pp = 1, .dp = 1, .cp = 4, .micro_batch_size = 1, .sequence_parallel = true}, 16);
  const SimulationReport ring = SimulatePlan(plan);
  EXPECT_GT(ring.breakdown.cp_comm_hidden_s, 0);
  EXPECT_DOUBLE_EQ(ring.breakdown.cp_comm_s, 0);
  // The all-to-all and the all-gather cannot hide theirs.
  plan.parallel.cp_comm = CpComm::kA2a;
  const SimulationReport a2a = SimulatePlan(plan);
  EXPECT_GT(a2a.breakdown.cp_comm_s, 0);
  EXPECT_DOUBLE_EQ(a2a.breakdown.cp_comm_hidden_s, 0);
  plan.parallel.cp_comm = CpComm::kAllGather;
  EXPECT_GT(SimulatePlan(plan).breakdown.cp_comm_s, 0);
  // At 32k tokens a GPU without CP holds 4x the activations; with CP the step takes about as
  // long per token as splitting the batch would (the work is the same, the exchange hidden).
  EXPECT_LT(
      ring.step_time_s,
      1.15 *
          SimulatePlan(
              Llama(32768, 8,
                    {.tp = 2, .pp = 1, .dp = 4, .micro_batch_size = 1, .sequence_parallel = true},
                    16))
              .step_time_s);
}

TEST(ContextParallel, TheCostCacheChangesNothing) {
  // EstimateStep with and without the planner's cache, on layouts that share layer kinds.
  LayerCostCache cache;
  const Plan base =
      Llama(16384, 32,
            {.tp = 2, .pp = 2, .dp = 4, .cp = 2, .micro_batch_size = 1, .sequence_parallel = true});
  for (CpComm comm : {CpComm::kP2p, CpComm::kA2a, CpComm::kAllGather}) {
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      Plan plan = base;
      plan.parallel.cp_comm = comm;
      plan.parallel.recompute = r;
      const StepEstimate plain =
          EstimateStep(plan.model, plan.cluster, plan.training, plan.parallel, plan.options);
      const StepEstimate cached = EstimateStep(plan.model, plan.cluster, plan.training,
                                               plan.parallel, plan.options, &cache);
      ASSERT_EQ(plain.costs.chunks.size(), cached.costs.chunks.size());
      for (size_t i = 0; i < plain.costs.chunks.size(); ++i) {
        EXPECT_EQ(plain.costs.chunks[i].forward_s, cached.costs.chunks[i].forward_s);
        EXPECT_EQ(plain.costs.chunks[i].backward_input_s, cached.costs.chunks[i].backward_input_s);
        EXPECT_EQ(plain.costs.chunks[i].backward_weight_s,
                  cached.costs.chunks[i].backward_weight_s);
        EXPECT_EQ(plain.costs.chunks[i].activation_bytes, cached.costs.chunks[i].activation_bytes);
      }
      EXPECT_EQ(plain.costs.stages[0].dp_grad_sync_s, cached.costs.stages[0].dp_grad_sync_s);
    }
  }
}

TEST(ContextParallel, MegatronsRules) {
  const ModelSpec m = ModelPreset("llama3-8b");  // s 8192, 32 heads, 8 groups
  TrainingSpec t;
  t.global_batch_size = 64;
  const auto first = [&](ParallelConfig p, const CostOptions& o = {}) {
    const std::vector<Violation> v = CheckParallelConfig(m, t, p, p.world_size(), o);
    return v.empty() ? std::string() : v.front().message;
  };
  EXPECT_EQ(first({.tp = 2, .dp = 2, .cp = 4}), "");
  EXPECT_EQ(first({.tp = 2, .dp = 2, .cp = 3}),
            "seq-length should be a multiple of 2 * context-parallel-size if "
            "context-parallel-size > 1 (seq-length 8192, context-parallel-size 3)");
  CostOptions unfused;
  unfused.attention = AttentionBackend::kUnfused;
  EXPECT_EQ(first({.tp = 2, .dp = 2, .cp = 2}, unfused),
            "Context parallelism is only supported by TEDotProductAttention!");
  // a2a splits each TP rank's heads and groups over CP: 8 groups / tp 2 = 4, not divisible by 8.
  EXPECT_EQ(first({.tp = 2, .dp = 1, .cp = 8, .cp_comm = CpComm::kA2a}),
            "The number of attention heads and gqa groups per TP rank (16 and 4) needs to be "
            "divisible by CP size (8) with the a2a exchange");
  EXPECT_EQ(first({.tp = 2, .dp = 1, .cp = 4, .cp_comm = CpComm::kA2a}), "");
  // Sequence parallelism splits each CP rank's tokens over TP.
  ModelSpec odd = m;
  odd.seq_length = 12;
  odd.num_attention_heads = odd.num_query_groups = 4;
  odd.kv_channels = odd.hidden_size / 4;
  const std::vector<Violation> v =
      CheckParallelConfig(odd, t, {.tp = 4, .dp = 1, .cp = 2, .sequence_parallel = true}, 8);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.front().rule, Rule::kSequenceSplitByTp);
  // The world: tp x cp x pp x dp.
  const std::vector<Violation> w = CheckParallelConfig(m, t, {.tp = 2, .dp = 2, .cp = 2}, 10);
  ASSERT_FALSE(w.empty());
  EXPECT_EQ(w.front().message,
            "world size (10) is not divisible by total_model_size (tp 2 x pp 1 x cp 2 = 4)");
  // FirstBrokenRule agrees with the full check.
  EXPECT_EQ(FirstBrokenRule(m, t, {.tp = 2, .dp = 2, .cp = 3}, 12), Rule::kContextParallel);
  EXPECT_EQ(FirstBrokenRule(m, t, {.tp = 2, .dp = 2, .cp = 2}, 8), std::nullopt);
}

}  // namespace
}  // namespace ptdp
