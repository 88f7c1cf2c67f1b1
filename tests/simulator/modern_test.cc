// Today's Megatron-Core in the cost model: flash-style attention (time from the profile's
// table, no s x s scores in memory), FP8 linears, uneven layer splits and block recompute per
// chunk, bucketed data-parallel overlap, tensor-parallel overlap, Megatron-FSDP, dropout 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/presets.h"
#include "simulator/cost_model.h"
#include "simulator/flops.h"
#include "simulator/layer_work.h"
#include "simulator/memory_model.h"
#include "simulator/simulate.h"
#include "simulator/timeline.h"

namespace ptdp {
namespace {

CostOptions Attention(AttentionBackend a) {
  CostOptions o;
  o.attention = a;
  return o;
}

Plan LlamaPlan(int seq, int gpus = 32, int tp = 2, int pp = 2, int64_t gbs = 256) {
  Plan plan;
  plan.model = ModelPreset("llama3-8b");
  plan.model.seq_length = plan.model.max_position_embeddings = seq;
  plan.cluster = ClusterPreset("dgx-h100");
  plan.num_gpus = gpus;
  plan.training.global_batch_size = gbs;
  plan.parallel = {.tp = tp, .pp = pp, .dp = gpus / (tp * pp), .micro_batch_size = 1};
  return plan;
}

const Work* Find(const PassWork& pass, const std::string& name) {
  for (int i = 0; i < pass.num_work; ++i) {
    if (pass.work[i].name == name) return &pass.work[i];
  }
  return nullptr;
}

TEST(FlashAttention, OneKernelEachWayWithTheCausalHalfOfTheFlops) {
  const ModelSpec m = ModelPreset("llama3-8b");  // s 8192, 32 heads, 8 groups, d 128
  const ParallelConfig p{.tp = 2, .micro_batch_size = 2};
  const LayerWork w = TransformerLayerWork(m, p, Precision::kBf16, {});
  const Work* f = Find(w.forward, "flash attention");
  const Work* b = Find(w.backward_input, "flash attention backward");
  ASSERT_NE(f, nullptr);
  ASSERT_NE(b, nullptr);
  const double heads = 2 * 16;                                  // b x a/t
  EXPECT_DOUBLE_EQ(f->flops, 2.0 * 8192 * 8192 * 128 * heads);  // 4 s^2 d per head, halved
  EXPECT_DOUBLE_EQ(b->flops, 2.5 * f->flops);
  EXPECT_EQ(Find(w.forward, "attention scores q k^t"), nullptr);
  EXPECT_EQ(Find(w.forward, "gqa expand k v"), nullptr);  // grouped K, V read as they are
  // The unfused path has the batched GEMMs and the repeat instead.
  const LayerWork u =
      TransformerLayerWork(m, p, Precision::kBf16, Attention(AttentionBackend::kUnfused));
  EXPECT_NE(Find(u.forward, "attention scores q k^t"), nullptr);
  EXPECT_NE(Find(u.forward, "gqa expand k v"), nullptr);
  // fp32 has no flash kernels: unfused whatever is named.
  EXPECT_EQ(Find(TransformerLayerWork(m, p, Precision::kFp32, {}).forward, "flash attention"),
            nullptr);
}

TEST(FlashAttention, ActivationsGrowLinearlyWithTheSequence) {
  ModelSpec m = ModelPreset("llama3-8b");
  const ParallelConfig p{.tp = 2, .micro_batch_size = 1, .sequence_parallel = true};
  m.seq_length = 4096;
  const double at_4k = LayerActivationBytes(m, p, Precision::kBf16, {});
  const double unfused_4k =
      LayerActivationBytes(m, p, Precision::kBf16, Attention(AttentionBackend::kUnfused));
  m.seq_length = 8192;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, p, Precision::kBf16, {}), 2 * at_4k);
  // Unfused keeps the s x s probabilities (2 bytes each without dropout): 16 heads x 4096^2.
  EXPECT_GT(unfused_4k - at_4k, 2.0 * 16 * 4096 * 4096);
}

TEST(FlashAttention, NoCliffPastTheFusedSoftmaxLimit) {
  // The case: Llama-3-8B on 32 H100s at TP 2 PP 2, sequence 4,096 -> 4,097 -> 8,192.
  const SimulationReport a = SimulatePlan(LlamaPlan(4096));
  const SimulationReport b = SimulatePlan(LlamaPlan(4097));
  const SimulationReport c = SimulatePlan(LlamaPlan(8192));
  EXPECT_LT(b.step_time_s / a.step_time_s, 1.001);
  EXPECT_NEAR(a.mfu, b.mfu, 0.002);
  EXPECT_LT(std::abs(c.mfu - a.mfu), 0.05);
  // Megatron's local (unfused) attention falls back to the fp32 softmax past 4,096.
  Plan unfused_a = LlamaPlan(4096), unfused_b = LlamaPlan(4097);
  unfused_a.options.attention = unfused_b.options.attention = AttentionBackend::kUnfused;
  EXPECT_GT(SimulatePlan(unfused_b).step_time_s / SimulatePlan(unfused_a).step_time_s, 1.2);
}

TEST(FlashAttention, TimedFromTheProfileTableOrTheGemmTable) {
  const ClusterSpec h100 = ClusterPreset("dgx-h100");
  ASSERT_FALSE(h100.gpu.flash_attention.empty());
  const AttentionTable table(h100.gpu.flash_attention);
  EXPECT_DOUBLE_EQ(table.Forward(8192), 0.609);                  // the profile's point
  EXPECT_DOUBLE_EQ(table.Backward(100), 0.2);                    // clamped to the first
  EXPECT_DOUBLE_EQ(table.Forward(1 << 20), 0.623);               // and the last
  EXPECT_NEAR(table.Forward(5793), (0.585 + 0.609) / 2, 0.001);  // log2 midpoint of 4k, 8k
  const GemmTable gemm(h100.gpu);
  const double flops = 2.0 * 8192 * 8192 * 128 * 32;
  const double t = AttentionTime(table, gemm, h100.gpu, false, 8192, 32, 128, flops, 0);
  EXPECT_DOUBLE_EQ(t, flops / (989e12 * 0.609));
  // A profile without the table (A100s here) times the score product's GEMM shape instead.
  const ClusterSpec a100 = ClusterPreset("dgx-a100-80gb");
  const AttentionTable none(a100.gpu.flash_attention);
  EXPECT_TRUE(none.empty());
  EXPECT_DOUBLE_EQ(
      AttentionTime(none, GemmTable(a100.gpu), a100.gpu, true, 8192, 32, 128, flops, 0),
      flops / (a100.gpu.peak_bf16_flops * GemmEfficiency(a100.gpu, 8192 * 32, 8192, 128)));
}

TEST(Fp8, TheLinearsRunOnTheFp8UnitsWithTheirCasts) {
  const ModelSpec m = ModelPreset("llama3-8b");
  const ParallelConfig p{.tp = 1};
  const LayerWork w = TransformerLayerWork(m, p, Precision::kFp8, {});
  int fp8 = 0, casts = 0;
  for (const PassWork* pass : {&w.forward, &w.backward_input, &w.backward_weight}) {
    for (int i = 0; i < pass->num_work; ++i) {
      const Work& k = pass->work[i];
      fp8 += k.kind == WorkKind::kGemm && k.fp8;
      casts += std::string(k.name).ends_with("cast fp8");
    }
  }
  EXPECT_EQ(fp8, 12);  // qkv, projection, fc1, fc2: forward, input and weight gradients
  // Delayed scaling: the norms write QKV's and fc1's inputs; the projection's and fc2's inputs
  // and the four output gradients are cast.
  EXPECT_EQ(casts, 6);
  // Operands of an FP8 GEMM are 1 byte: fc1's forward reads T x h + h x 2f and writes T x 2f.
  const double T = 8192, h = 4096, f2 = 2 * 14336;
  EXPECT_DOUBLE_EQ(Find(w.forward, "fc1")->bytes, T * h + h * f2 + 2 * T * f2);
  EXPECT_EQ(w.fp8_parameters, LayerLinearWeights(m, 1));
  // A layer kept in bf16 has none, and current scaling casts QKV's and fc1's inputs too.
  const LayerWork bf16 = TransformerLayerWork(m, p, Precision::kFp8, {}, /*bf16_layer=*/true);
  EXPECT_FALSE(Find(bf16.forward, "fc1")->fp8);
  const LayerWork current =
      TransformerLayerWork(m, p, Precision::kFp8, {}, false, Fp8Recipe::kTensorwise);
  EXPECT_NE(Find(current.forward, "qkv input cast fp8"), nullptr);
}

TEST(Fp8, FasterThanBf16OnH100AndItsWeightsCostMemory) {
  Plan bf16 = LlamaPlan(8192, 8, 1, 1, 64);
  bf16.parallel.distributed_optimizer = true;
  Plan fp8 = bf16;
  fp8.training.precision = Precision::kFp8;
  const SimulationReport a = SimulatePlan(bf16), b = SimulatePlan(fp8);
  EXPECT_LT(b.step_time_s, 0.85 * a.step_time_s);
  // The FP8 copies and transposes of the linear weights: 2 bytes per linear weight.
  const double linear = 32 * LayerLinearWeights(bf16.model, 1);
  EXPECT_NEAR(b.memory.stages[0].weights_bytes - a.memory.stages[0].weights_bytes, 2 * linear, 1);
  // With FP8 primary weights (--fp8-param-gather) they replace the 16-bit linear weights.
  fp8.training.fp8_param_gather = true;
  EXPECT_NEAR(SimulatePlan(fp8).memory.stages[0].weights_bytes, a.memory.stages[0].weights_bytes,
              1);
}

TEST(Fp8, LayersKeptInBf16AreCountedPerChunk) {
  const ModelSpec m = ModelPreset("llama3-8b");  // 32 layers
  TrainingSpec t;
  t.precision = Precision::kFp8;
  t.fp8_recipe = Fp8Recipe::kTensorwise;
  t.fp8_bf16_layers_at_start = 2;
  t.fp8_bf16_layers_at_end = 1;
  const ParallelConfig p{.pp = 4, .virtual_stages = 2, .schedule = Schedule::kInterleaved};
  const std::vector<ChunkLayers> k = ChunkLayerKinds(m, t, p);
  ASSERT_EQ(k.size(), 8u);
  EXPECT_EQ(k[0].count[0][0][0], 2);  // layers 0-3: two in bf16
  EXPECT_EQ(k[0].count[0][1][0], 2);
  EXPECT_EQ(k[7].count[0][0][0], 1);  // layers 28-31: the last in bf16
  EXPECT_EQ(k[7].count[0][1][0], 3);
  EXPECT_EQ(k[3].count[0][1][0], 4);
}

TEST(Fp8, Bf16LayersThatSpillPastTheFirstStageMakeTheSecondDiffer) {
  // 32 layers as 6 + 9 + 9 + 8; the first 7 in bf16: one of them on stage 1.
  Plan plan = LlamaPlan(4096, 16, 1, 4, 64);
  plan.training.precision = Precision::kFp8;
  plan.training.fp8_recipe = Fp8Recipe::kTensorwise;
  plan.training.fp8_bf16_layers_at_start = 7;
  plan.parallel.first_stage_layers = 6;
  plan.parallel.last_stage_layers = 8;
  EXPECT_FALSE(MiddleStagesAlike(plan.model, plan.training, plan.parallel));
  const SimulationReport r = SimulatePlan(plan);
  // Stage 1 has one layer without FP8 weight copies; stage 2 has none in bf16.
  EXPECT_NEAR(r.memory.stages[2].weights_bytes - r.memory.stages[1].weights_bytes,
              2 * LayerLinearWeights(plan.model, 1), 1);
  EXPECT_GT(r.estimate.costs.chunks[1].forward_s, r.estimate.costs.chunks[2].forward_s);
  EXPECT_NE(r.estimate.costs.stages[1].optimizer_s, r.estimate.costs.stages[2].optimizer_s);
  plan.training.fp8_bf16_layers_at_start = 6;
  EXPECT_TRUE(MiddleStagesAlike(plan.model, plan.training, plan.parallel));
}

TEST(UnevenSplit, ChunksCarryTheirOwnLayers) {
  Plan plan = LlamaPlan(4096, 16, 1, 4, 64);  // 32 layers: 7 + 9 + 9 + 7
  plan.parallel.first_stage_layers = plan.parallel.last_stage_layers = 7;
  plan.options.overlap_p2p_communication = true;  // keep the sends out of F and B
  const StepEstimate est =
      EstimateStep(plan.model, plan.cluster, plan.training, plan.parallel, plan.options);
  Plan even = plan;
  even.parallel.first_stage_layers = even.parallel.last_stage_layers = 0;
  const StepEstimate flat =
      EstimateStep(even.model, even.cluster, even.training, even.parallel, even.options);
  // A middle stage does 9 layers where the even split does 8.
  EXPECT_NEAR(est.costs.chunks[1].forward_s / flat.costs.chunks[1].forward_s, 9.0 / 8, 1e-9);
  const SimulationReport r = SimulatePlan(plan);
  EXPECT_NEAR(r.memory.stages[1].parameters / r.memory.stages[2].parameters, 1, 1e-12);
  EXPECT_GT(r.memory.stages[1].parameters, SimulatePlan(even).memory.stages[1].parameters);
}

TEST(BlockRecompute, OnlyTheFirstLayersOfAChunkRecompute) {
  Plan plan = LlamaPlan(4096, 8, 1, 1, 16);
  plan.parallel.recompute = Recompute::kFull;
  const SimulationReport all = SimulatePlan(plan);
  plan.parallel.recompute_num_layers = 8;  // 8 of 32
  const SimulationReport some = SimulatePlan(plan);
  plan.parallel.recompute = Recompute::kNone;
  plan.parallel.recompute_num_layers = 0;
  const SimulationReport none = SimulatePlan(plan);
  EXPECT_NEAR(some.estimate.stages[0].recompute_s, all.estimate.stages[0].recompute_s / 4, 1e-12);
  EXPECT_LT(all.memory.stages[0].activations_bytes, some.memory.stages[0].activations_bytes);
  EXPECT_LT(some.memory.stages[0].activations_bytes, none.memory.stages[0].activations_bytes);
  EXPECT_DOUBLE_EQ(some.estimate.hardware_flops - none.estimate.hardware_flops,
                   (all.estimate.hardware_flops - none.estimate.hardware_flops) / 4);
}

TEST(Overlap, BucketedGradientReductionHidesBehindTheBackward) {
  // 1F1B, TP 2, PP 1 (the case), 16 GPUs: 8 data-parallel replicas over two nodes.
  Plan plan = LlamaPlan(4096, 16, 2, 1, 64);
  plan.parallel.sequence_parallel = true;
  const SimulationReport after = SimulatePlan(plan);
  EXPECT_DOUBLE_EQ(after.breakdown.dp_exposed_s, after.breakdown.dp_comm_s);
  plan.options.overlap_grad_reduce = true;
  const SimulationReport overlapped = SimulatePlan(plan);
  EXPECT_DOUBLE_EQ(overlapped.breakdown.dp_comm_s, after.breakdown.dp_comm_s);
  EXPECT_LT(overlapped.breakdown.dp_exposed_s, 0.5 * overlapped.breakdown.dp_comm_s);
  EXPECT_LT(overlapped.step_time_s, after.step_time_s);
  // 4 billion parameters per GPU in 40-million-parameter buckets, each its own phase.
  const StageCosts& st = overlapped.estimate.costs.stages[0];
  EXPECT_EQ(st.dp_buckets,
            static_cast<int>(std::ceil(overlapped.memory.stages[0].parameters / 40e6)));
  int phases = 0;
  for (const SimulatedPhase& ph : overlapped.sim.phases) phases += ph.name == "dp grad sync";
  EXPECT_EQ(phases, st.dp_buckets);
  // The first buckets start before the backward ends.
  EXPECT_LT(overlapped.sim.phases.front().start_s, overlapped.sim.pipeline_end_s);
}

TEST(Overlap, ParameterGatherHidesBehindTheNextForward) {
  Plan plan = LlamaPlan(4096, 16, 2, 1, 64);
  plan.parallel.distributed_optimizer = true;
  plan.options.overlap_grad_reduce = true;
  const StageCosts before = SimulatePlan(plan).estimate.costs.stages[0];
  plan.options.overlap_param_gather = true;
  const StageCosts after = SimulatePlan(plan).estimate.costs.stages[0];
  EXPECT_DOUBLE_EQ(after.dp_param_gather_s + after.dp_param_gather_hidden_s,
                   before.dp_param_gather_s);
  EXPECT_LT(after.dp_param_gather_s, 0.5 * before.dp_param_gather_s);
}

TEST(Overlap, TensorParallelCommunicationPipelinedWithItsGemms) {
  Plan plan = LlamaPlan(8192, 8, 8, 1, 8);
  // The GPU's work alone: the host's issue time, which the GPU waits for only where the
  // communication it overlaps is no longer there to cover it, is another test's.
  plan.cluster.host = {};
  plan.parallel.sequence_parallel = true;
  const SimulationReport plain = SimulatePlan(plan);
  plan.options.tp_comm_overlap = true;
  const SimulationReport overlapped = SimulatePlan(plan);
  EXPECT_LT(overlapped.breakdown.tp_comm_s, 0.5 * plain.breakdown.tp_comm_s);
  EXPECT_EQ(plain.breakdown.tp_comm_hidden_s, 0);
  // What is exposed plus what is hidden is the collectives' whole time (userbuffers replace
  // the asynchronous input-gradient reduction, so compare with it off).
  plan.options.tp_comm_overlap = false;
  plan.options.async_tensor_parallel_allreduce = false;
  const SimulationReport blocking = SimulatePlan(plan);
  EXPECT_NEAR(overlapped.breakdown.tp_comm_s + overlapped.breakdown.tp_comm_hidden_s,
              blocking.breakdown.tp_comm_s, 1e-9 * blocking.breakdown.tp_comm_s);
  // The GEMMs pay for it: split into chunks, and on the SMs the reduce-scatter kernels leave.
  EXPECT_GT(overlapped.breakdown.compute_s, plain.breakdown.compute_s);
  EXPECT_LT(overlapped.breakdown.compute_s, 1.2 * plain.breakdown.compute_s);  // 12% here, TP 8
  // Each of the forward's four collectives is paired with the GEMM next to it, the way
  // Transformer Engine runs it on H100: the all-gathers by ring exchange in tp chunks, the
  // reduce-scatters pipelined in 4 chunks beside 24 (projection) and 16 (fc2) SMs.
  plan.options.tp_comm_overlap = true;
  const LayerWork w =
      TransformerLayerWork(plan.model, plan.parallel, Precision::kBf16, plan.options);
  ASSERT_EQ(w.forward.num_comm, 4);
  for (int i = 0; i < w.forward.num_comm; ++i) {
    ASSERT_GE(w.forward.overlap_with[i], 0) << w.forward.comm[i].name;
    EXPECT_EQ(w.forward.work[w.forward.overlap_with[i]].kind, WorkKind::kGemm);
    const bool gather = w.forward.comm[i].collective == Collective::kAllGather;
    EXPECT_EQ(w.forward.overlap_kind[i], gather ? TpOverlap::kRing : TpOverlap::kPipeline);
    EXPECT_EQ(w.forward.overlap_parts[i], gather ? 8 : 4);
  }
  EXPECT_EQ(w.forward.overlap_sms[1], 24);  // after the projection
  EXPECT_EQ(w.forward.overlap_sms[3], 16);  // after fc2
  // In FP8 the reduce-scatters run by ring exchange too; the input gradients' in bulk.
  const LayerWork f8 =
      TransformerLayerWork(plan.model, plan.parallel, Precision::kFp8, plan.options);
  EXPECT_EQ(f8.forward.overlap_kind[1], TpOverlap::kRing);
  for (int i = 0; i < w.backward_input.num_comm; ++i) {
    if (w.backward_input.comm[i].collective == Collective::kReduceScatter) {
      EXPECT_EQ(w.backward_input.overlap_kind[i], TpOverlap::kBulk);
    }
  }
  // Without the SM count the GEMMs lose only their chunking.
  plan.cluster.gpu.sm_count = 0;
  const SimulationReport no_sms = SimulatePlan(plan);
  EXPECT_LT(no_sms.breakdown.compute_s, overlapped.breakdown.compute_s);
  EXPECT_GT(no_sms.breakdown.compute_s, plain.breakdown.compute_s);
}

TEST(Fsdp, BytesPerParameterShardWhatTheStrategySays) {
  TrainingSpec t;  // bf16, Adam
  const int d = 8;
  EXPECT_DOUBLE_EQ(
      BytesPerParam(t, {.dp = d, .distributed_optimizer = true, .fsdp = Fsdp::kOptim}, {}).total(),
      6 + 12.0 / d);
  EXPECT_DOUBLE_EQ(
      BytesPerParam(t, {.dp = d, .distributed_optimizer = true, .fsdp = Fsdp::kOptimGrads}, {})
          .total(),
      2 + 16.0 / d);
  EXPECT_DOUBLE_EQ(
      BytesPerParam(t, {.dp = d, .distributed_optimizer = true, .fsdp = Fsdp::kOptimGradsParams},
                    {})
          .total(),
      18.0 / d);
}

TEST(Fsdp, ParametersGatheredPerLayerEveryMicroBatch) {
  Plan plan = LlamaPlan(8192, 8, 1, 1, 64);  // 8 data-parallel replicas in one node
  plan.parallel.distributed_optimizer = true;
  const SimulationReport dist = SimulatePlan(plan);
  plan.parallel.fsdp = Fsdp::kOptimGradsParams;
  const SimulationReport fsdp = SimulatePlan(plan);
  // Memory: 18/8 bytes per parameter plus two gathered layers and one layer's gradients.
  const StageMemory& s = fsdp.memory.stages[0];
  EXPECT_NEAR(s.weights_bytes + s.gradients_bytes + s.optimizer_bytes, 18.0 / 8 * s.parameters, 1);
  EXPECT_DOUBLE_EQ(s.fsdp_buffer_bytes,
                   2 * 2 * LayerParameters(plan.model, 1) + 4 * LayerParameters(plan.model, 1));
  EXPECT_LT(fsdp.peak_memory_bytes, dist.peak_memory_bytes);
  // Time: per micro-batch gathers (forward and backward) and a reduce-scatter, mostly hidden;
  // no reduction after the backward and no gather after the step.
  EXPECT_GT(fsdp.estimate.stages[0].dp_comm_s, 0);
  EXPECT_LT(fsdp.estimate.stages[0].dp_exposed_s, 0.2 * fsdp.estimate.stages[0].dp_comm_s);
  EXPECT_EQ(fsdp.estimate.costs.stages[0].dp_grad_sync_s, 0);
  EXPECT_EQ(fsdp.estimate.costs.stages[0].dp_param_gather_s, 0);
}

// Megatron-FSDP's per-layer traffic runs on its own stream beside each operation: the timeline
// and the trace show it in the data-parallel lane, each operation's from its start and within
// it, adding up to the breakdown's figure per micro-batch.
TEST(Fsdp, TheTrafficOfEachOperationIsInTheDataParallelLane) {
  Plan plan = LlamaPlan(8192, 8, 1, 1, 64);
  plan.parallel.distributed_optimizer = true;
  for (const SimulatedOp& o : SimulatePlan(plan).sim.ops) EXPECT_EQ(o.fsdp_comm_s, 0);
  plan.parallel.fsdp = Fsdp::kOptimGradsParams;
  const SimulationReport r = SimulatePlan(plan);
  double sum = 0;
  for (const SimulatedOp& o : r.sim.ops) {
    EXPECT_GT(o.fsdp_comm_s, 0) << OpLabel(r.schedule, o.op);
    EXPECT_LE(o.fsdp_comm_s, o.end_s - o.start_s + 1e-12) << OpLabel(r.schedule, o.op);
    sum += o.fsdp_comm_s;
  }
  EXPECT_NEAR(sum, NumMicrobatches(plan.training, plan.parallel) * r.estimate.stages[0].dp_comm_s,
              1e-9 * sum);
  const std::string svg = TimelineSvg(r.schedule, r.sim, {});
  EXPECT_NE(svg.find("<title>stage 0 F0: Megatron-FSDP gathers / reduce-scatters "),
            std::string::npos);
  EXPECT_NE(svg.find(">data-parallel comm</text>"), std::string::npos);
  const TimelineTrace trace = TimelineTraceEvents(r.schedule, r.sim);
  const auto fsdp_events =
      std::count_if(trace.events.begin(), trace.events.end(), [](const TraceEvent& e) {
        return e.name == "FSDP gather / reduce-scatter" && e.category == "dp-comm";
      });
  EXPECT_EQ(static_cast<size_t>(fsdp_events), r.sim.ops.size());
}

TEST(Fsdp, ShardedFp8WeightsDropTheirTransposesUnlessKept) {
  // Megatron-LM's examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh: Llama 3 8B, FP8
  // primary weights, Megatron-FSDP optim_grads_params on 8 H100s.
  Plan plan = LlamaPlan(8192, 8, 1, 1, 128);
  plan.parallel.distributed_optimizer = true;
  plan.parallel.fsdp = Fsdp::kOptimGradsParams;
  plan.training.precision = Precision::kFp8;
  plan.training.fp8_param_gather = true;
  const double linear = 32 * LayerLinearWeights(plan.model, 1);
  const StageMemory dropped = SimulatePlan(plan).memory.stages[0];
  // Every weight's 16-bit shard (2/8 bytes), the linears' in FP8 instead (1/8 byte).
  EXPECT_NEAR(dropped.weights_bytes, 2.0 / 8 * dropped.parameters - 1.0 / 8 * linear, 1);
  plan.training.keep_fp8_transpose_cache = true;
  const StageMemory kept = SimulatePlan(plan).memory.stages[0];
  EXPECT_NEAR(kept.weights_bytes - dropped.weights_bytes, linear, 1);  // 1 byte per weight
  // Without parameter sharding the transposes stay whatever the flag says (2 bytes per
  // linear weight: the FP8 weight and its transpose).
  plan.parallel.fsdp = Fsdp::kOptimGrads;
  const StageMemory zero2 = SimulatePlan(plan).memory.stages[0];
  plan.training.keep_fp8_transpose_cache = false;
  EXPECT_DOUBLE_EQ(SimulatePlan(plan).memory.stages[0].weights_bytes, zero2.weights_bytes);
  EXPECT_NEAR(zero2.weights_bytes, 2.0 * zero2.parameters, 1);
}

TEST(Dropout, NoMasksAndNoKernelsWithoutIt) {
  ModelSpec m = ModelPreset("gpt3-1.3b");  // Megatron's 0.1 dropouts
  const ParallelConfig p{.tp = 2};
  const CostOptions unfused = Attention(AttentionBackend::kUnfused);
  const double with = LayerActivationBytes(m, p, Precision::kBf16, unfused);
  m.hidden_dropout = m.attention_dropout = 0;
  const double without = LayerActivationBytes(m, p, Precision::kBf16, unfused);
  const double sbh = 2048.0 * 2048;                             // s b h
  const double probs = 16.0 / 2 * 2048 * 2048;                  // heads per GPU x s^2
  EXPECT_DOUBLE_EQ(with - without, 2 * sbh + (2 + 1) * probs);  // masks; dropout's output
  EXPECT_EQ(
      Find(TransformerLayerWork(m, p, Precision::kBf16, unfused).forward, "attention dropout"),
      nullptr);
  EXPECT_DOUBLE_EQ(EmbeddingActivationBytes(m, p), 0);
}

TEST(Flops, CoreCountsHalfTheCausalAttention) {
  const ModelSpec m = ModelPreset("llama3-8b");
  TrainingSpec t;
  t.global_batch_size = 1;
  const double full = ModelFlopsPerStep(m, t, Megatron2022Options());
  const double core = ModelFlopsPerStep(m, t, MegatronCoreOptions());
  EXPECT_DOUBLE_EQ(full - core, 3 * m.num_layers * CoreAttentionForwardFlops(m));
  // Megatron-Bridge's Llama 3 8B at s = 8192: 51.47 GFLOP per token (its README).
  EXPECT_NEAR(core / 8192 / 1e9, 51.47, 0.01);
}

}  // namespace
}  // namespace ptdp
