// Mixture of experts and multi-latent attention in the cost model: the router, the token
// dispatch over the expert-parallel group, the experts' grouped GEMMs on the tokens a rank
// takes, shared experts, the expert grid's groups, expert parameters reduced and sharded over
// the expert data-parallel group, MLA's projections.
#include <gtest/gtest.h>

#include <string>

#include "core/presets.h"
#include "megatron/rules.h"
#include "simulator/collectives.h"
#include "simulator/cost_model.h"
#include "simulator/flops.h"
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

double Flops(const PassWork& pass, WorkKind kind) {
  double sum = 0;
  for (int i = 0; i < pass.num_work; ++i) {
    if (pass.work[i].kind == kind) sum += pass.work[i].flops;
  }
  return sum;
}

CostOptions AllToAll() {
  CostOptions o;
  o.moe_token_dispatcher = MoeDispatcher::kAllToAll;
  return o;
}

TEST(Moe, TheRoutedTokensGoToTheirExpertsAndBack) {
  const ModelSpec m = ModelPreset("qwen3-30b-a3b");  // 128 experts of 768, top 8, h 2048
  const ParallelConfig p{.tp = 1, .ep = 8};
  const LayerWork w = TransformerLayerWork(m, p, Precision::kBf16, AllToAll(), false,
                                           Fp8Recipe::kDelayed, /*moe_layer=*/true);
  const double T = 4096, k = 8, h = 2048, e = 2;
  const Work* router = Find(w.forward, "router");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->gemm.n, 128);
  const CommWork* dispatch = FindComm(w.forward, "ep all-to-all dispatch");
  ASSERT_NE(dispatch, nullptr);
  EXPECT_EQ(dispatch->group, CommGroup::kEp);
  EXPECT_DOUBLE_EQ(dispatch->bytes, T * k * h * e);
  EXPECT_NE(FindComm(w.forward, "ep all-to-all combine"), nullptr);
  EXPECT_NE(FindComm(w.backward_input, "ep all-to-all dispatch backward"), nullptr);
  // 16 experts here, each on T k / 16 tokens: the grouped GEMMs do the k experts' work of every
  // token, whatever ep is.
  const Work* fc1 = Find(w.forward, "experts fc1");
  ASSERT_NE(fc1, nullptr);
  EXPECT_EQ(fc1->kind, WorkKind::kGroupedGemm);
  EXPECT_EQ(fc1->gemm.batch, 16);
  EXPECT_EQ(fc1->gemm.m, 4096 * 8 / 16);
  const double expert_flops = 2 * T * k * h * (2 * 768 + 768);  // fc1 (SwiGLU) and fc2
  EXPECT_DOUBLE_EQ(Flops(w.forward, WorkKind::kGroupedGemm), expert_flops);
  const ParallelConfig wide{.tp = 1, .ep = 32};
  const LayerWork w32 =
      TransformerLayerWork(m, wide, Precision::kBf16, AllToAll(), false, Fp8Recipe::kDelayed, true);
  EXPECT_DOUBLE_EQ(Flops(w32.forward, WorkKind::kGroupedGemm), expert_flops);
  // No expert tensor parallelism here: no gather over it.
  EXPECT_EQ(FindComm(w.forward, "etp all-gather dispatched tokens"), nullptr);
  // A dense layer of the same model has no router.
  const LayerWork dense = TransformerLayerWork(m, p, Precision::kBf16, AllToAll());
  EXPECT_EQ(Find(dense.forward, "router"), nullptr);
  EXPECT_NE(Find(dense.forward, "fc1"), nullptr);
}

// Found when `ptdp plan --model deepseek-v3 --gpus 1024` stopped on an internal error: at tp 8 x
// cp 64 a GPU routes 8 tokens, 64 copies for 256 experts, a quarter of a token each, once
// rounded to GEMMs of no rows. Only 64 experts run, on one token each: the same FLOPs.
TEST(Moe, FewerTokenCopiesThanExpertsRunThatManyExpertsOnOneTokenEach) {
  const ModelSpec m = ModelPreset("deepseek-v3");  // 256 experts of 2048, top 8, h 7168
  const ParallelConfig p{.tp = 8, .cp = 64, .etp = 1, .sequence_parallel = true};
  const LayerWork w =
      TransformerLayerWork(m, p, Precision::kBf16, AllToAll(), false, Fp8Recipe::kDelayed, true);
  const double copies = 4096.0 / (8 * 64) * 8;
  for (const char* name : {"experts fc1", "experts fc2"}) {
    const Work* gemm = Find(w.forward, name);
    ASSERT_NE(gemm, nullptr) << name;
    EXPECT_EQ(gemm->gemm.m, 1) << name;
    EXPECT_EQ(gemm->gemm.batch, copies) << name;
  }
  EXPECT_DOUBLE_EQ(Flops(w.forward, WorkKind::kGroupedGemm), 2 * copies * 7168 * (2 * 2048 + 2048));
  const Work* wgrad = Find(w.backward_weight, "experts fc1 wgrad");
  ASSERT_NE(wgrad, nullptr);
  EXPECT_EQ(wgrad->gemm.k, 1);
  EXPECT_EQ(wgrad->gemm.batch, copies);
}

TEST(Moe, ExpertTensorParallelismAndTheAllGatherDispatcher) {
  const ModelSpec m = ModelPreset("mixtral-8x7b");  // 8 experts of 14336, top 2
  // tp 2 with sequence parallelism, etp 2: each GPU routes its s / 2 tokens, the pair gathers
  // them, each GPU computes half of each expert's width.
  const ParallelConfig p{.tp = 2, .ep = 4, .etp = 2, .sequence_parallel = true};
  const LayerWork w =
      TransformerLayerWork(m, p, Precision::kBf16, AllToAll(), false, Fp8Recipe::kDelayed, true);
  const CommWork* gather = FindComm(w.forward, "etp all-gather dispatched tokens");
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->group, CommGroup::kEtp);
  EXPECT_NE(FindComm(w.forward, "etp reduce-scatter expert outputs"), nullptr);
  const Work* fc1 = Find(w.forward, "experts fc1");
  EXPECT_EQ(fc1->gemm.n, 2 * 14336 / 2);
  // The all-gather dispatcher: every token of the ep x etp group to every rank.
  CostOptions ag;
  ag.moe_token_dispatcher = MoeDispatcher::kAllGather;
  const LayerWork g =
      TransformerLayerWork(m, p, Precision::kBf16, ag, false, Fp8Recipe::kDelayed, true);
  const CommWork* all = FindComm(g.forward, "moe all-gather tokens");
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(all->group, CommGroup::kEpEtp);
  EXPECT_DOUBLE_EQ(all->bytes, 4096.0 / 2 * 4096 * 2 * 4 * 2);  // T_n h e x ep etp
  EXPECT_EQ(FindComm(g.forward, "ep all-to-all dispatch"), nullptr);
}

TEST(Moe, SharedExpertsAndDenseFirstLayers) {
  const ModelSpec m = ModelPreset("deepseek-v3");  // 3 dense layers, 1 shared expert of 2048
  const ParallelConfig p{.tp = 2, .ep = 64, .etp = 1, .sequence_parallel = true};
  const LayerWork w =
      TransformerLayerWork(m, p, Precision::kBf16, AllToAll(), false, Fp8Recipe::kDelayed, true);
  const Work* shared = Find(w.forward, "shared fc1");
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->gemm.n, 2 * 2048 / 2);  // SwiGLU, TP-split
  EXPECT_NE(FindComm(w.forward, "tp reduce after shared fc2"), nullptr);
  // The layer kinds of a pipeline stage: the first 3 layers dense.
  TrainingSpec t;
  const ParallelConfig pp{.pp = 61};
  const std::vector<ChunkLayers> kinds = ChunkLayerKinds(m, t, pp);
  EXPECT_EQ(kinds[0].moe(), 0);
  EXPECT_EQ(kinds[2].moe(), 0);
  EXPECT_EQ(kinds[3].moe(), 1);
  EXPECT_EQ(kinds[60].moe(), 1);
  // Every other layer MoE (Megatron's --moe-layer-freq 2): layers 0, 2, 4, ...
  ModelSpec alt = ModelPreset("mixtral-8x7b");
  alt.moe_layer_freq = 2;
  const std::vector<ChunkLayers> halves = ChunkLayerKinds(alt, t, {.pp = 4});
  for (const ChunkLayers& k : halves) EXPECT_EQ(k.moe(), 4);
  EXPECT_EQ(alt.NumMoeLayers(), 16);
}

TEST(Moe, ExpertGridGroupsSitInMegatronsOrder) {
  // 16 GPUs on two nodes, tp 1: ep 8 fills a node, ep 16 spans both.
  ParallelConfig p{.tp = 1, .pp = 1, .dp = 16, .ep = 8, .etp = 1};
  EXPECT_EQ(ExpertParallelGroup(p, 8), (GroupPlacement{8, 1, 8}));
  EXPECT_EQ(ExpertDataParallelGroup(p, 8), (GroupPlacement{2, 2, 1}));  // stride 8
  p.ep = 16;
  EXPECT_EQ(ExpertParallelGroup(p, 8), (GroupPlacement{16, 2, 8}));
  EXPECT_EQ(p.expert_dp(), 1);
  // etp 2 x ep 4: EP members two apart, the ETP pair adjacent.
  const ParallelConfig q{.tp = 2, .pp = 1, .dp = 8, .ep = 4, .etp = 2};
  EXPECT_EQ(ExpertTensorParallelGroup(q, 8), (GroupPlacement{2, 1, 2}));
  EXPECT_EQ(ExpertParallelGroup(q, 8), (GroupPlacement{4, 1, 4}));
  EXPECT_EQ(ExpertGroup(q, 8), (GroupPlacement{8, 1, 8}));
  EXPECT_EQ(q.expert_dp(), 2);
  // An all-to-all across the two nodes pays for the half of the bytes that leaves each node at
  // one NIC per GPU, far slower than within a node.
  const ClusterSpec h100 = ClusterPreset("dgx-h100");
  const double bytes = 64e6;
  const double inside = CollectiveTime(h100, Collective::kAllToAll, bytes, GroupPlacement{8, 1, 8});
  const double across =
      CollectiveTime(h100, Collective::kAllToAll, bytes, GroupPlacement{16, 2, 8});
  // (plus NCCL's latency model of 15 steps, about 70 us)
  EXPECT_NEAR(across, bytes * 8 / 16 / h100.nic_busbw_bytes_per_s, 100e-6);
  EXPECT_GT(across, 3 * inside);
}

TEST(Moe, ExpertParametersShardOverTheExpertDataParallelGroup) {
  const ModelSpec m = ModelPreset("qwen3-30b-a3b");
  const ParallelConfig p{.tp = 1, .pp = 1, .dp = 16, .ep = 8, .etp = 1};
  const MoeLayerParams layer = MoeLayerParameters(m, p);
  EXPECT_DOUBLE_EQ(layer.experts, 16.0 * 3 * 2048 * 768);  // 16 experts of 3 h f each
  // Every GPU's experts over the EP group make all the experts.
  EXPECT_DOUBLE_EQ(layer.experts * 8, 128.0 * MlpParameters(m, 768));
  // The distributed optimizer shards them over edp = 2, the rest over dp 16.
  TrainingSpec t;
  EXPECT_DOUBLE_EQ(BytesPerParam(t, {.dp = 16, .distributed_optimizer = true}, {}, 2).optimizer,
                   12.0 / 2);
  // Simulated: the stage's memory counts the experts with their own sharding; more expert
  // parallelism, less memory per GPU.
  Plan plan;
  plan.model = m;
  plan.cluster = ClusterPreset("dgx-h100");
  plan.num_gpus = 16;
  plan.training.global_batch_size = 64;
  plan.parallel = p;
  plan.parallel.distributed_optimizer = true;
  plan.options = AllToAll();
  ASSERT_TRUE(CheckParallelConfig(plan.model, plan.training, plan.parallel, 16).empty());
  const SimulationReport r8 = SimulatePlan(plan);
  plan.parallel.ep = 16;
  const SimulationReport r16 = SimulatePlan(plan);
  EXPECT_LT(r16.memory.stages[0].weights_bytes, r8.memory.stages[0].weights_bytes);
  EXPECT_GT(r8.breakdown.ep_comm_s, 0);
  // Across two nodes the dispatch costs more than within one.
  EXPECT_GT(r16.breakdown.ep_comm_s, 2 * r8.breakdown.ep_comm_s);
  // Model FLOPs follow the active parameters: about 6 per active parameter per token.
  const double tokens = 64.0 * m.seq_length;
  const double active = static_cast<double>(CountParameters(m).active);
  EXPECT_NEAR(r8.estimate.model_flops / (6 * active * tokens), 1.0, 0.15);
}

// The host's share of a MoE layer (HostSpec::moe_layer_s): its forward and its backward each
// carry it, and the forward waits for the GPU once, before the tokens leave for the experts.
TEST(Moe, TheHostWaitsOnceInTheForwardAndPaysItsMoeTimeInForwardAndBackward) {
  const ModelSpec m = ModelPreset("qwen3-30b-a3b");
  const ParallelConfig p{.tp = 1, .pp = 1, .dp = 8, .ep = 8, .etp = 1};
  const LayerWork w =
      TransformerLayerWork(m, p, Precision::kBf16, AllToAll(), false, Fp8Recipe::kDelayed, true);
  EXPECT_TRUE(w.forward.moe_host);
  EXPECT_TRUE(w.backward_input.moe_host);
  EXPECT_FALSE(w.backward_weight.moe_host);
  EXPECT_LT(w.backward_input.host_sync_at, 0);
  ASSERT_GE(w.forward.host_sync_at, 0);
  // The wait comes after the permutation and before the dispatch leaves.
  EXPECT_EQ(std::string(w.forward.work[w.forward.host_sync_at - 1].name), "permute tokens");
  for (int i = 0; i < w.forward.num_comm; ++i) {
    if (std::string(w.forward.comm[i].name) == "ep all-to-all dispatch") {
      EXPECT_EQ(w.forward.comm_position[i], w.forward.host_sync_at);
    }
  }
  const LayerWork dense = TransformerLayerWork(m, p, Precision::kBf16, AllToAll());
  EXPECT_FALSE(dense.forward.moe_host);
  EXPECT_LT(dense.forward.host_sync_at, 0);

  TrainingSpec t;
  t.global_batch_size = 64;
  ClusterSpec c = ClusterPreset("dgx-h100");
  const auto chunk = [&](double launch, double moe) {
    c.host = HostSpec{.kernel_launch_s = launch, .moe_layer_s = moe};
    return EstimateStep(m, c, t, p, AllToAll()).costs.chunks[0];
  };
  const ChunkCosts none = chunk(0, 0);
  // A host far slower than the GPU: every part of every pass waits for it, so each MoE layer's
  // forward and backward take exactly its MoE time more, and the forward one launch more than a
  // pass without the wait.
  const double launch = 0.05, moe = 0.002;
  const ChunkCosts slow = chunk(launch, 0), slow_moe = chunk(launch, moe);
  EXPECT_NEAR(slow_moe.forward_s - slow.forward_s, m.num_layers * moe, 1e-9);
  EXPECT_NEAR(slow_moe.backward_input_s - slow.backward_input_s, m.num_layers * moe, 1e-9);
  EXPECT_GT(slow.forward_s, none.forward_s);
  // A fast host: the MoE time is hidden where the GPU is busy longer, but the wait still costs
  // one launch per forward.
  const ChunkCosts fast = chunk(1e-6, 0);
  EXPECT_GE(fast.forward_s - none.forward_s, m.num_layers * 1e-6 * (1 - 1e-9));
}

TEST(Moe, TheBusiestRankSetsThePace) {
  Plan plan;
  plan.model = ModelPreset("mixtral-8x7b");
  plan.cluster = ClusterPreset("dgx-h100");
  plan.num_gpus = 8;
  plan.training.global_batch_size = 16;
  plan.parallel = {.tp = 1, .pp = 1, .dp = 8, .ep = 8, .etp = 1, .distributed_optimizer = true};
  plan.options = AllToAll();
  const double balanced = SimulatePlan(plan).step_time_s;
  plan.options.moe_load_imbalance = 1.5;
  const double skewed = SimulatePlan(plan).step_time_s;
  EXPECT_GT(skewed, 1.1 * balanced);
  // A capacity factor caps what the busiest expert takes.
  plan.model.moe_expert_capacity_factor = 1.0;
  EXPECT_NEAR(SimulatePlan(plan).step_time_s, balanced, 1e-9 * balanced);
}

TEST(Moe, MegatronsExpertRules) {
  const ModelSpec m = ModelPreset("qwen3-30b-a3b");
  TrainingSpec t;
  t.global_batch_size = 64;
  const auto first = [&](ParallelConfig p, int64_t gpus) {
    const std::vector<Violation> v = CheckParallelConfig(m, t, p, gpus);
    return v.empty() ? std::string() : v.front().message;
  };
  EXPECT_EQ(first({.dp = 16, .ep = 16}, 16), "");
  EXPECT_EQ(first({.dp = 16, .ep = 6}, 16),
            "Number of experts should be a multiple of expert model parallel_size (128 experts, "
            "ep 6)");
  EXPECT_EQ(first({.dp = 16, .ep = 32}, 16),
            "world_size (16) is not divisible by expert_tensor_model_pipeline_parallel size (32 = "
            "etp 1 x ep 32 x pp 1)");
  const std::vector<Violation> dense =
      CheckParallelConfig(ModelPreset("llama3-8b"), t, {.dp = 8, .ep = 2}, 8);
  ASSERT_FALSE(dense.empty());
  EXPECT_EQ(dense.front().message, "num_experts must be non None to use expert model parallelism");
}

TEST(Mla, LatentProjectionsAndTheirGathers) {
  const ModelSpec m = ModelPreset("deepseek-v3");
  const ParallelConfig p{.tp = 2, .sequence_parallel = true};
  const LayerWork w = TransformerLayerWork(m, p, Precision::kBf16, {});
  // Down projections on the GPU's s / 2 tokens, up projections on all s for its 64 heads.
  const Work* q_down = Find(w.forward, "q down");
  const Work* kv_up = Find(w.forward, "kv up");
  ASSERT_NE(q_down, nullptr);
  ASSERT_NE(kv_up, nullptr);
  EXPECT_EQ(q_down->gemm.m, 2048);
  EXPECT_EQ(q_down->gemm.n, 1536);
  EXPECT_EQ(kv_up->gemm.n, 64 * (128 + 128));
  EXPECT_EQ(Find(w.forward, "qkv"), nullptr);
  // The gathers move the latents, not h.
  const CommWork* gather = FindComm(w.forward, "sp all-gather kv latent");
  ASSERT_NE(gather, nullptr);
  EXPECT_DOUBLE_EQ(gather->bytes, 4096.0 * (512 + 64) * 2);
  // Forward FLOPs: the projections' parameters times the tokens, per GPU, plus attention.
  const double linear = Flops(w.forward, WorkKind::kGemm);
  EXPECT_GT(linear, 0);
  const double per_token_params = LayerLinearWeights(m, 2);  // down replicated, up split
  EXPECT_NEAR(linear / (2 * 4096 * per_token_params), 1.0, 0.3);
}

// Selective recompute's modules (--recompute-modules): each drops its part of a layer's
// activations, computed by hand here, and re-runs its forward before the backward.
TEST(RecomputeModules, EachDropsItsPartAndRerunsItsForward) {
  const ModelSpec m = ModelPreset("qwen3-30b-a3b");  // h 2048, 128 experts of 768, top 8
  const CostOptions o = AllToAll();
  const ParallelConfig none{.tp = 1, .ep = 8};
  const auto bytes = [&](uint8_t modules, bool moe) {
    ParallelConfig p = none;
    p.recompute = Recompute::kSelective;
    p.recompute_modules = modules;
    return LayerActivationBytes(m, p, Precision::kBf16, o, false,
                                moe ? LayerKind::kMoeTransformer : LayerKind::kTransformer);
  };
  const double kept =
      LayerActivationBytes(m, none, Precision::kBf16, o, false, LayerKind::kMoeTransformer);
  const double s = 4096, h = 2048, e = 2, k = 8, f_e = 768;
  const double R = s * k;  // the routed copies a rank takes, balanced
  // Flash attention keeps only fp32 statistics: core_attn drops 4 a s b.
  EXPECT_DOUBLE_EQ(kept - bytes(kRecomputeCoreAttn, true), 4.0 * 32 * s);
  EXPECT_DOUBLE_EQ(kept - bytes(0, true), 0.0);
  EXPECT_DOUBLE_EQ(kept - bytes(kRecomputeLayernorm, true), 2 * e * s * h);
  EXPECT_DOUBLE_EQ(kept - bytes(kRecomputeMoeAct, true), e * R * f_e);
  // The whole MoE part: router scores, the experts' inputs, fc1 outputs, activations, outputs.
  EXPECT_DOUBLE_EQ(kept - bytes(kRecomputeMoe, true),
                   4 * s * 128 + R * (e * h + e * 2 * f_e + e * f_e));
  // "mlp" is the dense MLP only: nothing in a MoE layer, the hidden tensors in a dense one.
  EXPECT_DOUBLE_EQ(kept - bytes(kRecomputeMlp, true), 0.0);
  const double dense =
      LayerActivationBytes(m, none, Precision::kBf16, o, false, LayerKind::kTransformer);
  EXPECT_DOUBLE_EQ(dense - bytes(kRecomputeMlp, false), e * s * 2 * 6144 + e * s * 6144);

  // What recomputing re-runs.
  const auto work = [&](uint8_t modules) {
    ParallelConfig p = none;
    p.recompute = Recompute::kSelective;
    p.recompute_modules = modules;
    return TransformerLayerWork(m, p, Precision::kBf16, o, false, Fp8Recipe::kDelayed, true);
  };
  EXPECT_NE(Find(work(kRecomputeMoeAct).recompute, "experts activation recompute"), nullptr);
  EXPECT_EQ(Find(work(kRecomputeMoeAct).recompute, "experts fc1"), nullptr);
  const LayerWork moe = work(kRecomputeMoe);
  EXPECT_NE(Find(moe.recompute, "experts fc1"), nullptr);
  EXPECT_NE(FindComm(moe.recompute, "ep all-to-all dispatch"), nullptr);  // the dispatch again
  EXPECT_EQ(work(kRecomputeLayernorm).recompute.num_work, 2);
  EXPECT_EQ(work(0).recompute.num_work, 0);

  // MLA's up projections: DeepSeek-V3 keeps the latents instead of Q, K, V.
  const ModelSpec ds = ModelPreset("deepseek-v3");
  ParallelConfig p{.tp = 2, .ep = 8, .recompute = Recompute::kSelective};
  p.recompute_modules = kRecomputeMlaUpProj;
  const double with =
      LayerActivationBytes(ds, p, Precision::kBf16, o, false, LayerKind::kMoeTransformer);
  p.recompute_modules = 0;
  const double without =
      LayerActivationBytes(ds, p, Precision::kBf16, o, false, LayerKind::kMoeTransformer);
  const double qkv = e * s * 64 * (128 + 64 + 128 + 64 + 128);  // 64 heads per GPU: q, k, v
  const double latents = e * s * (1536 + 512 + 64);
  EXPECT_DOUBLE_EQ(without - with, qkv - latents);
  p.recompute_modules = kRecomputeMlaUpProj;
  const LayerWork up =
      TransformerLayerWork(ds, p, Precision::kBf16, o, false, Fp8Recipe::kDelayed, true);
  EXPECT_NE(Find(up.recompute, "kv up"), nullptr);
  EXPECT_EQ(Find(up.recompute, "kv down"), nullptr);
  // And the recompute transient is the largest module's, recomputed one at a time.
  p.recompute_modules = kRecomputeMlaUpProj | kRecomputeCoreAttn;
  EXPECT_DOUBLE_EQ(
      LayerRecomputeTransientBytes(ds, p, Precision::kBf16, o, false, LayerKind::kMoeTransformer),
      qkv - latents);
}

TEST(RecomputeModules, MegatronsRules) {
  const ModelSpec m = ModelPreset("qwen3-30b-a3b");
  TrainingSpec t;
  t.global_batch_size = 64;
  ParallelConfig p{.tp = 1, .dp = 8, .ep = 8, .recompute = Recompute::kSelective};
  p.recompute_modules = kRecomputeMlaUpProj;
  std::vector<Violation> v = CheckParallelConfig(m, t, p, 8);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, Rule::kRecomputeModules);
  EXPECT_EQ(v[0].message,
            "mla_up_proj in recompute_modules is only supported with multi_latent_attention.");
  p.recompute_modules = kRecomputeMoeAct;
  t.precision = Precision::kFp8;
  t.fp8_recipe = Fp8Recipe::kDelayed;
  v = CheckParallelConfig(m, t, p, 8);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].message,
            "Delayed scaling does not support moe_act and layernorm recompute for fp8.");
  t.fp8_recipe = Fp8Recipe::kTensorwise;
  EXPECT_TRUE(CheckParallelConfig(m, t, p, 8).empty());
}

}  // namespace
}  // namespace ptdp
