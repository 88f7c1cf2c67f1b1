// Hybrid (Mamba) models in the cost model: the SSD scan's and a small Mamba layer's work by hand,
// tensor parallelism's split, attention-only and MLP-only layers as the halves of a transformer
// layer, a Mamba layer's saved activations by hand, the layer kinds of each pipeline stage, and
// parameters, FLOPs and memory adding up to the model's.
#include <gtest/gtest.h>

#include <cmath>

#include "core/presets.h"
#include "core/schedule.h"
#include "core/spec_yaml.h"
#include "simulator/cost_model.h"
#include "simulator/flops.h"
#include "simulator/layer_work.h"
#include "simulator/memory_model.h"

namespace ptdp {
namespace {

// h 16; Mamba 4 heads of 8 (d_inner 32), state 4 in 2 groups; 256 tokens (two chunks of 128).
const ModelSpec& Tiny() {
  static const ModelSpec m = ParseModelYaml(
      "num_layers: 4\nhidden_size: 16\nnum_attention_heads: 2\nnum_query_groups: 1\n"
      "ffn_hidden_size: 64\nvocab_size: 256\nseq_length: 256\nactivation: squared_relu\n"
      "normalization: rmsnorm\nposition_embedding: none\ntied_embeddings: false\n"
      "add_bias_linear: false\nhidden_dropout: 0\nattention_dropout: 0\n"
      "hybrid_layer_pattern: \"M*-M\"\nmamba_num_heads: 4\nmamba_head_dim: 8\n"
      "mamba_state_dim: 4\nmamba_num_groups: 2\n");
  return m;
}

const Work* Find(const PassWork& pass, std::string_view name) {
  for (int i = 0; i < pass.num_work; ++i) {
    if (name == pass.work[i].name) return &pass.work[i];
  }
  return nullptr;
}

TEST(HybridCost, SsdScanByHand) {
  // T 256, 2 chunks of Q 128, 4 heads of P 8, N 4, 2 groups, 2-byte elements; S = 2 x 4 x 8 x 4.
  const SsdScan s = SsdScanWork(256, 2, 4, 8, 4, 2, 2);
  EXPECT_DOUBLE_EQ(s.forward_flops, 256 * (2 * 128 * 4 * 2 + 128 * 8 * 4 + 4 * 4 * 8 * 4));
  EXPECT_DOUBLE_EQ(s.backward_flops, 256 * (6 * 128 * 4 * 2 + 3 * 128 * 8 * 4 + 10 * 4 * 8 * 4));
  EXPECT_DOUBLE_EQ(s.forward_bytes, 2 * 256 * (5 * 32 + 4 * 2 * 4) + 256 * (8 + 4) +
                                        8 * 256 * 2 * 128 + 256 * 4 * (2 + 24));
  EXPECT_DOUBLE_EQ(s.backward_bytes, 2 * 256 * (16 * 32 + 15 * 2 * 4) + 256 * (24 + 10) +
                                         24 * 256 * 2 * 128 + 64 * 256 * 4);
}

TEST(HybridCost, MambaLayerWorkByHand) {
  const ModelSpec& m = Tiny();
  const LayerWork w = LayerKindWork(m, {.tp = 1}, Precision::kBf16, {}, LayerKind::kMamba);
  // in_proj: 256 tokens x (2 x 32 + 2 x 2 x 4 + 4 = 84) x 16; out_proj 256 x 16 x 32.
  const Work* in_proj = Find(w.forward, "mamba in_proj");
  ASSERT_NE(in_proj, nullptr);
  EXPECT_EQ(in_proj->gemm, (GemmShape{256, 84, 16, 1}));
  EXPECT_DOUBLE_EQ(in_proj->flops, 2.0 * 256 * 84 * 16);
  const Work* out_proj = Find(w.forward, "mamba out_proj");
  ASSERT_NE(out_proj, nullptr);
  EXPECT_EQ(out_proj->gemm, (GemmShape{256, 16, 32, 1}));
  // The convolution over x, B, C (32 + 16 channels): read and write, memory-bound.
  const Work* conv = Find(w.forward, "causal conv1d");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->kind, WorkKind::kMemory);
  EXPECT_DOUBLE_EQ(conv->bytes, 2.0 * 256 * 48 * 2);
  const Work* scan = Find(w.forward, "mamba ssd chunk scan");
  ASSERT_NE(scan, nullptr);
  EXPECT_EQ(scan->kind, WorkKind::kScan);
  EXPECT_EQ(scan->gemm, (GemmShape{128, 8, 4, 2 * 4}));  // chunk shape, chunks x heads
  EXPECT_DOUBLE_EQ(scan->flops, SsdScanWork(256, 2, 4, 8, 4, 2, 2).forward_flops);
  const double forward = 2.0 * 256 * 84 * 16 + 2.0 * 256 * 16 * 32 + scan->flops;
  EXPECT_DOUBLE_EQ(w.forward.flops(), forward);
  EXPECT_DOUBLE_EQ(MambaForwardFlops(m), forward);
  EXPECT_DOUBLE_EQ(LayerKindForwardFlops(m, LayerKind::kMamba), forward);
  // The input gradient: both linears' dgrad GEMMs and the scan's backward (with its
  // recomputation); the weight gradient: both linears' wgrad GEMMs.
  EXPECT_DOUBLE_EQ(w.backward_input.flops(), 2.0 * 256 * 84 * 16 + 2.0 * 256 * 16 * 32 +
                                                 SsdScanWork(256, 2, 4, 8, 4, 2, 2).backward_flops);
  EXPECT_DOUBLE_EQ(w.backward_weight.flops(), 2.0 * 256 * 84 * 16 + 2.0 * 256 * 16 * 32);
  EXPECT_EQ(w.backward_input.num_comm, 0);  // tp 1
  EXPECT_DOUBLE_EQ(w.parameters, 2156);
  // Selective recompute (the core attention's) has nothing to redo here; full redoes it all.
  EXPECT_EQ(LayerKindWork(m, {.tp = 1, .recompute = Recompute::kSelective}, Precision::kBf16, {},
                          LayerKind::kMamba)
                .recompute.num_work,
            0);
  EXPECT_DOUBLE_EQ(LayerKindWork(m, {.tp = 1, .recompute = Recompute::kFull}, Precision::kBf16, {},
                                 LayerKind::kMamba)
                       .recompute.flops(),
                   forward);
}

TEST(HybridCost, TensorParallelismSplitsTheMambaHeads) {
  const ModelSpec m = ModelPreset("nemotron-3-nano");
  const LayerWork one = LayerKindWork(m, {.tp = 1}, Precision::kBf16, {}, LayerKind::kMamba);
  const LayerWork four = LayerKindWork(m, {.tp = 4, .sequence_parallel = true}, Precision::kBf16,
                                       {}, LayerKind::kMamba);
  EXPECT_DOUBLE_EQ(four.forward.flops(), one.forward.flops() / 4);
  EXPECT_DOUBLE_EQ(four.backward_input.flops(), one.backward_input.flops() / 4);
  // Sequence parallelism: all-gather before in_proj, reduce-scatter after out_proj.
  ASSERT_EQ(four.forward.num_comm, 2);
  EXPECT_EQ(four.forward.comm[0].collective, Collective::kAllGather);
  EXPECT_EQ(four.forward.comm[1].collective, Collective::kReduceScatter);
  // The mixer's tensors split four ways, its norm replicated.
  EXPECT_NEAR(four.parameters, (one.parameters - 2688) / 4 + 2688, 1e-6);
  // Context parallelism: each GPU scans all 8192 tokens of 1/cp of the heads, between two
  // all-to-alls; the same scan work.
  const LayerWork cp =
      LayerKindWork(m, {.tp = 1, .cp = 2}, Precision::kBf16, {}, LayerKind::kMamba);
  EXPECT_DOUBLE_EQ(Find(cp.forward, "mamba ssd chunk scan")->flops,
                   Find(one.forward, "mamba ssd chunk scan")->flops / 2);
  EXPECT_EQ(cp.forward.comm[0].collective, Collective::kAllToAll);
}

// A transformer layer is its attention block and its MLP block: work, parameters, activations.
TEST(HybridCost, AttentionAndMlpLayersAreTheHalvesOfATransformerLayer) {
  for (const char* name : {"gpt3-1.3b", "qwen3-30b-a3b"}) {
    const ModelSpec m = ModelPreset(name);
    const bool moe = m.moe();
    const LayerKind whole = moe ? LayerKind::kMoeTransformer : LayerKind::kTransformer;
    const LayerKind mlp = moe ? LayerKind::kMoe : LayerKind::kMlp;
    const ParallelConfig p{.tp = 2, .ep = moe ? 4 : 1, .sequence_parallel = true};
    const LayerWork t = LayerKindWork(m, p, Precision::kBf16, {}, whole);
    const LayerWork a = LayerKindWork(m, p, Precision::kBf16, {}, LayerKind::kAttention);
    const LayerWork f = LayerKindWork(m, p, Precision::kBf16, {}, mlp);
    EXPECT_DOUBLE_EQ(a.forward.flops() + f.forward.flops(), t.forward.flops()) << name;
    EXPECT_DOUBLE_EQ(a.forward.bytes() + f.forward.bytes(), t.forward.bytes()) << name;
    EXPECT_DOUBLE_EQ(a.backward_input.flops() + f.backward_input.flops(), t.backward_input.flops())
        << name;
    EXPECT_EQ(a.forward.num_comm + f.forward.num_comm, t.forward.num_comm) << name;
    EXPECT_NEAR(a.parameters + f.parameters, t.parameters, 1e-6 * t.parameters) << name;
    EXPECT_NEAR(LayerActivationBytes(m, p, Precision::kBf16, {}, false, LayerKind::kAttention) +
                    LayerActivationBytes(m, p, Precision::kBf16, {}, false, mlp),
                LayerActivationBytes(m, p, Precision::kBf16, {}, false, whole), 1e-3)
        << name;
    EXPECT_DOUBLE_EQ(
        LayerKindForwardFlops(m, LayerKind::kAttention) + LayerKindForwardFlops(m, mlp),
        LayerKindForwardFlops(m, whole))
        << name;
  }
}

TEST(HybridCost, MambaActivationsByHand) {
  const ModelSpec& m = Tiny();
  // 256 tokens: the norm's input and in_proj's input (2 + 2 bytes x 16), the scan's input z x
  // B C dt (2 x 84) and ungated output (2 x 32), the gated norm's input (2 x 32) and fp32 1/rms
  // per group (4 x 2), out_proj's input (2 x 32).
  EXPECT_DOUBLE_EQ(
      LayerActivationBytes(m, {.tp = 1}, Precision::kBf16, {}, false, LayerKind::kMamba),
      256.0 * (4 * 16 + 2 * 84 + 2 * 32 + 2 * 32 + 4 * 2 + 2 * 32));
  // W needs in_proj's and out_proj's inputs.
  EXPECT_DOUBLE_EQ(
      LayerWeightGradActivationBytes(m, {.tp = 1}, Precision::kBf16, false, LayerKind::kMamba),
      256.0 * 2 * (16 + 32));
  // Full recompute keeps the layer's input only.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, {.tp = 1, .recompute = Recompute::kFull},
                                        Precision::kBf16, {}, false, LayerKind::kMamba),
                   256.0 * 2 * 16);
}

TEST(HybridCost, EachStageHasItsShareOfThePattern) {
  const ModelSpec m = ModelPreset("nemotron-3-nano");
  const TrainingSpec t{.global_batch_size = 64};
  const std::vector<ChunkLayers> k = ChunkLayerKinds(m, t, {.tp = 1, .pp = 4});
  ASSERT_EQ(k.size(), 4u);
  // Layers 0-12: MEMEM*EMEMEM*.
  EXPECT_EQ(k[0].OfKind(LayerKind::kMamba), 6);
  EXPECT_EQ(k[0].OfKind(LayerKind::kMoe), 5);
  EXPECT_EQ(k[0].OfKind(LayerKind::kAttention), 2);
  EXPECT_EQ(k[0].moe(), 5);
  int mamba = 0, attention = 0;
  for (const ChunkLayers& c : k) {
    EXPECT_EQ(c.total(), 13);
    mamba += c.OfKind(LayerKind::kMamba);
    attention += c.OfKind(LayerKind::kAttention);
  }
  EXPECT_EQ(mamba, 23);
  EXPECT_EQ(attention, 6);
  // FP8 with the first and last layer in bf16; block recompute of two layers per chunk.
  const TrainingSpec fp8{.global_batch_size = 64,
                         .precision = Precision::kFp8,
                         .fp8_recipe = Fp8Recipe::kTensorwise,
                         .fp8_bf16_layers_at_start = 1,
                         .fp8_bf16_layers_at_end = 1};
  const std::vector<ChunkLayers> f = ChunkLayerKinds(
      m, fp8, {.tp = 1, .pp = 4, .recompute = Recompute::kFull, .recompute_num_layers = 2});
  const int mamba_kind = static_cast<int>(LayerKind::kMamba);
  const int moe_kind = static_cast<int>(LayerKind::kMoe);
  EXPECT_EQ(f[0].count[mamba_kind][0][1], 1);  // layer 0: bf16, recomputed
  EXPECT_EQ(f[0].count[moe_kind][1][1], 1);    // layer 1: FP8, recomputed
  EXPECT_EQ(f[0].fp8(), 12);
  EXPECT_EQ(f[3].count[moe_kind][0][0], 1);  // layer 51: bf16
  EXPECT_EQ(f[3].fp8(), 12);
}

TEST(HybridCost, ParametersFlopsAndMemoryAddUpToTheModel) {
  const ModelSpec m = ModelPreset("nemotron-3-nano");
  const ClusterSpec c = ClusterPreset("dgx-h100");
  const TrainingSpec t{.global_batch_size = 64};
  const ParallelConfig p{.tp = 1, .pp = 4, .dp = 1, .micro_batch_size = 1};
  // Every stage's parameters (tp 1, ep 1: nothing sharded) make the whole model.
  const std::vector<int> in_flight =
      InFlightPerStage(MakeSchedule(p.schedule, p.pp, 64, p.virtual_stages));
  const MemoryEstimate mem = EstimateMemory(m, c, t, p, in_flight);
  double params = 0;
  for (const StageMemory& s : mem.stages) params += s.parameters;
  EXPECT_NEAR(params, static_cast<double>(CountParameters(m).total), 1);
  // Model FLOPs: three times the forward of every layer by kind (the attention's s x s
  // products halved for the causal mask, as Megatron-Core counts) and the LM head.
  const double forward =
      23 * LayerKindForwardFlops(m, LayerKind::kMamba) +
      23 * LayerKindForwardFlops(m, LayerKind::kMoe) +
      6 * (LayerKindForwardFlops(m, LayerKind::kAttention) - CoreAttentionForwardFlops(m)) +
      OutputForwardFlops(m);
  EXPECT_NEAR(ModelFlopsPerStep(m, t, MegatronCoreOptions()), 3 * 64 * forward, 1e-9 * forward);
  // Selective recompute redoes the 6 attention layers' s x s products only.
  ParallelConfig selective = p;
  selective.recompute = Recompute::kSelective;
  EXPECT_NEAR(HardwareFlopsPerStep(m, t, selective, MegatronCoreOptions()) -
                  ModelFlopsPerStep(m, t, MegatronCoreOptions()),
              64 * 6 * CoreAttentionForwardFlops(m), 1e-6 * forward);
  // The step: each stage's F is the sum of its layers'.
  const StepEstimate est = EstimateStep(m, c, t, p, MegatronCoreOptions());
  ASSERT_EQ(est.costs.chunks.size(), 4u);
  for (const ChunkCosts& chunk : est.costs.chunks) EXPECT_GT(chunk.forward_s, 0);
  EXPECT_NE(est.costs.chunks[1].forward_s, est.costs.chunks[2].forward_s);  // MMMMMM vs MMMMM**
}

}  // namespace
}  // namespace ptdp
