// Memory model: Korthikanti et al. 2022's Table 2 pinned by hand, its generalisation to GQA and
// SwiGLU, bytes per parameter (18, 6 + 12/d, ...), per-stage memory from the schedule's
// in-flight counts, and the rejection message.
#include <gtest/gtest.h>

#include "core/presets.h"
#include "simulator/layer_work.h"
#include "simulator/memory_model.h"

namespace ptdp {
namespace {

// Megatron's unfused core attention (scores in memory): the implementation Korthikanti et al.
// 2022's formulas describe.
CostOptions Unfused() {
  CostOptions o;
  o.attention = AttentionBackend::kUnfused;
  return o;
}

// Table 2's six formulas, hand-evaluated (sbh = s * b * h; as/h = a s / h).
struct Table2Case {
  double s, b, h, a, t;
  double none, sp, selective, sp_selective, full;
};

TEST(KorthikantiTable2, EachFormulaForSeveralShapes) {
  const Table2Case cases[] = {
      // GPT-3 175B layer, t = 8: sbh = 25,165,824, as/h = 16. 23 sbh, 14.25 sbh, 13 sbh,
      // 4.25 sbh, 2 sbh.
      {2048, 1, 12288, 96, 8, 578813952, 358612992, 327155712, 106954752, 50331648},
      // t = 1: 34 + 80 = 114 sbh; selective 34 sbh.
      {2048, 1, 12288, 96, 1, 2868903936, 2868903936, 855638016, 855638016, 50331648},
      // sbh = 8,388,608, as/h = 8, t = 2: 42 sbh, 37 sbh, 22 sbh, 17 sbh.
      {1024, 4, 2048, 16, 2, 352321536, 310378496, 184549376, 142606336, 16777216},
      // sbh = 33,554,432, as/h = 32, t = 4: 56 sbh, 48.5 sbh, 16 sbh, 8.5 sbh.
      {4096, 2, 4096, 32, 4, 1879048192, 1627389952, 536870912, 285212672, 67108864},
  };
  for (const Table2Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "s=" << c.s << " b=" << c.b << " h=" << c.h << " a=" << c.a << " t=" << c.t);
    EXPECT_EQ(KorthikantiTable2Bytes(c.s, c.b, c.h, c.a, c.t, false, Recompute::kNone), c.none);
    EXPECT_EQ(KorthikantiTable2Bytes(c.s, c.b, c.h, c.a, c.t, true, Recompute::kNone), c.sp);
    EXPECT_EQ(KorthikantiTable2Bytes(c.s, c.b, c.h, c.a, c.t, false, Recompute::kSelective),
              c.selective);
    EXPECT_EQ(KorthikantiTable2Bytes(c.s, c.b, c.h, c.a, c.t, true, Recompute::kSelective),
              c.sp_selective);
    EXPECT_EQ(KorthikantiTable2Bytes(c.s, c.b, c.h, c.a, c.t, false, Recompute::kFull), c.full);
  }
}

TEST(LayerActivations, EqualTable2ForGptInSixteenBits) {
  for (const char* name : {"gpt3-175b", "megatron-1.7b", "gpt3-1.3b", "megatron-1t"}) {
    const ModelSpec m = ModelPreset(name);
    for (int t : {1, 2, 4, 8}) {
      for (int b : {1, 3}) {
        for (bool sp : {false, true}) {
          if (sp && t == 1) continue;  // Megatron refuses sequence parallelism without TP
          for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
            if (rc == Recompute::kFull && sp) continue;  // Table 2 lists full as 2sbh only
            ParallelConfig p{
                .tp = t, .micro_batch_size = b, .sequence_parallel = sp, .recompute = rc};
            for (Precision precision : {Precision::kBf16, Precision::kFp16}) {
              EXPECT_DOUBLE_EQ(LayerActivationBytes(m, p, precision, Unfused()),
                               KorthikantiTable2Bytes(m.seq_length, b, m.hidden_size,
                                                      m.num_attention_heads, t, sp, rc))
                  << name << " t=" << t << " b=" << b << " sp=" << sp << " " << Name(rc);
            }
          }
        }
      }
    }
  }
}

ModelSpec TinyGqaSwiglu() {
  ModelSpec m;
  m.name = "tiny";
  m.num_layers = 4;
  m.hidden_size = 64;
  m.num_attention_heads = 8;
  m.num_query_groups = 2;
  m.kv_channels = 8;
  m.ffn_hidden_size = 128;
  m.vocab_size = 1000;
  m.seq_length = 8;
  m.max_position_embeddings = 8;
  m.activation = Activation::kSwiglu;
  m.normalization = Normalization::kRmsNorm;
  m.position_embedding = PositionEmbedding::kRope;
  m.tied_embeddings = false;
  m.add_bias_linear = false;
  return m;
}

TEST(LayerActivations, GeneralisedToGroupedQueryAttentionAndSwiglu) {
  const ModelSpec m = TinyGqaSwiglu();  // s 8, h 64, a 8, g 2, d 8, f 128, e = 2 (bf16)
  // t = 1: norms, QKV and fc1 inputs, masks: 8 * 64 * (4*2 + 2) = 5120; Q K V 2*8*8*(8+4) =
  // 1536; projection input 2*8*8*8 = 1024; SwiGLU input and output 2*8*(256+128) = 6144; K, V
  // repeated to 8 heads 2*8*8*2*6 = 1536; scores (2*2+1)*8*64 = 2560. Sum 17920.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, {.tp = 1}, Precision::kBf16, Unfused()), 17920);
  // t = 2: 4 heads and 1 group per GPU, f/t = 64: 5120 + 768 + 512 + 3072 + 768 + 1280 = 11520.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, {.tp = 2}, Precision::kBf16, Unfused()), 11520);
  // Selective drops the 1280 bytes of scores; full keeps the 2 * 8 * 64 byte input.
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, {.tp = 2, .recompute = Recompute::kSelective},
                                        Precision::kBf16, Unfused()),
                   10240);
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, {.tp = 2, .recompute = Recompute::kFull},
                                        Precision::kBf16, Unfused()),
                   1024);
  // fp32: every activation doubles but the 1-byte masks: the two hidden-dropout masks (2 * 8 *
  // 64 = 1024 bytes) and the attention-dropout mask (4 heads * 8 * 8 = 256 bytes).
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, {.tp = 2}, Precision::kFp32, Unfused()),
                   2 * 11520 - 1024 - 4 * 64);
}

TEST(BytesPerParam, MixedPrecisionAdamIs18AndDistributedIs6Plus12OverD) {
  TrainingSpec bf16;
  bf16.precision = Precision::kBf16;
  EXPECT_DOUBLE_EQ(BytesPerParam(bf16, {.dp = 64}, {}).total(), 18);
  for (int d : {1, 2, 8, 64}) {
    const BytesPerParameter b = BytesPerParam(bf16, {.dp = d, .distributed_optimizer = true}, {});
    EXPECT_DOUBLE_EQ(b.total(), 6 + 12.0 / d) << d;
    EXPECT_DOUBLE_EQ(b.weights, 2);
    EXPECT_DOUBLE_EQ(b.gradients, 4);
  }
}

TEST(BytesPerParam, Fp16GradientsFp32TrainingAndSgd) {
  TrainingSpec t;
  t.precision = Precision::kFp16;  // Megatron keeps 2-byte main gradients for fp16 by default
  EXPECT_DOUBLE_EQ(BytesPerParam(t, {}, {}).total(), 16);
  EXPECT_DOUBLE_EQ(BytesPerParam(t, {}, {.accumulate_allreduce_grads_in_fp32 = true}).total(), 18);
  t.precision = Precision::kFp32;  // weight 4, gradient 4, m and v 8, no master copy
  EXPECT_DOUBLE_EQ(BytesPerParam(t, {}, {}).total(), 16);
  EXPECT_DOUBLE_EQ(BytesPerParam(t, {.dp = 4, .distributed_optimizer = true}, {}).total(),
                   8 + 8.0 / 4);
  t.precision = Precision::kBf16;
  t.optimizer = Optimizer::kSgd;  // momentum 4 + master 4
  EXPECT_DOUBLE_EQ(BytesPerParam(t, {}, {}).total(), 2 + 4 + 8);
}

TEST(BytesPerParam, Bf16GradientsWithGradReduceInBf16) {
  TrainingSpec t;
  for (const Precision p : {Precision::kBf16, Precision::kFp8}) {
    t.precision = p;
    EXPECT_DOUBLE_EQ(BytesPerParam(t, {}, {.grad_reduce_in_bf16 = true}).gradients, 2);
    EXPECT_DOUBLE_EQ(BytesPerParam(t, {}, {}).gradients, 4);
  }
  // Only bf16 training has it: fp16 follows --accumulate-allreduce-grads-in-fp32, fp32 stays 4.
  t.precision = Precision::kFp16;
  EXPECT_DOUBLE_EQ(BytesPerParam(t, {}, {.grad_reduce_in_bf16 = true}).gradients, 2);
  t.precision = Precision::kFp32;
  EXPECT_DOUBLE_EQ(BytesPerParam(t, {}, {.grad_reduce_in_bf16 = true}).gradients, 4);
}

TEST(Workspaces, PyTorchsAndTransformerEnginesCublasWorkspacesByComputeCapability) {
  constexpr double kMiB = 1024.0 * 1024;
  EXPECT_DOUBLE_EQ(WorkspaceBytes(9.0, {}), 32 * kMiB + 32 * kMiB);
  EXPECT_DOUBLE_EQ(WorkspaceBytes(10.0, {}), 64 * kMiB);
  EXPECT_DOUBLE_EQ(WorkspaceBytes(8.0, {}), 8 * kMiB + 128 * 1024 + 4 * kMiB);
  EXPECT_DOUBLE_EQ(WorkspaceBytes(0, {}), WorkspaceBytes(8.0, {}));  // not known: pre-Hopper
  // CUBLAS_WORKSPACE_CONFIG=:4096:8 replaces PyTorch's default; 0 turns it off.
  EXPECT_DOUBLE_EQ(WorkspaceBytes(8.0, {.cublas_workspace_bytes = 4096 * 8 * 1024}),
                   32 * kMiB + 4 * kMiB);
  EXPECT_DOUBLE_EQ(WorkspaceBytes(9.0, {.cublas_workspace_bytes = 0}), 32 * kMiB);
}

TEST(OutputLayer, TheLossHoldsThe16BitLogitsBesideTheirFp32Copy) {
  const ModelSpec m = ModelPreset("llama3-8b");
  const ParallelConfig p{.tp = 2, .micro_batch_size = 2};
  const double sbv = double(m.seq_length) * 2 * PaddedVocabSize(m, 2) / 2;
  EXPECT_DOUBLE_EQ(OutputTransientBytes(m, p, Precision::kBf16), 2 * sbv);
  EXPECT_DOUBLE_EQ(OutputTransientBytes(m, p, Precision::kFp8), 2 * sbv);
  EXPECT_DOUBLE_EQ(OutputTransientBytes(m, p, Precision::kFp32), 0);
  // Deferred output-layer weight gradients: each deferred micro-batch's logits gradient and the
  // layer's input stay on the last stage, at most the limit, at most the m - 1 done.
  const double in = double(m.seq_length) * 2 * m.hidden_size;  // s b h, no SP here
  CostOptions defer{.defer_embedding_wgrad_compute = true};
  EXPECT_DOUBLE_EQ(DeferredEmbeddingWgradBytes(m, p, Precision::kBf16, defer, 8),
                   7 * (2 * sbv + 2 * in));
  defer.wgrad_deferral_limit = 2;
  EXPECT_DOUBLE_EQ(DeferredEmbeddingWgradBytes(m, p, Precision::kBf16, defer, 8),
                   2 * (2 * sbv + 2 * in));
  EXPECT_DOUBLE_EQ(DeferredEmbeddingWgradBytes(m, p, Precision::kBf16, defer, 1), 0);
  EXPECT_DOUBLE_EQ(DeferredEmbeddingWgradBytes(m, p, Precision::kBf16, {}, 8), 0);
  // The jit-fused loss keeps one more fp32 copy.
  EXPECT_DOUBLE_EQ(
      OutputTransientBytes(m, p, Precision::kBf16, {.cross_entropy_loss_fusion = true}), 6 * sbv);
  // The last stage holds it on top of its in-flight layers and kept output buffers (1F1B:
  // one micro-batch there), unless a layer's recomputation holds more.
  TrainingSpec t;
  t.precision = Precision::kBf16;
  t.global_batch_size = 16;
  ParallelConfig q{.tp = 2, .pp = 2, .dp = 1, .micro_batch_size = 2};
  const ClusterSpec c = ClusterPreset("dgx-h100");
  const MemoryEstimate est =
      EstimateMemory(m, c, t, q, InFlightPerStage(MakeSchedule(Schedule::k1F1B, 2, 8, 1)), {});
  const double layers = m.num_layers / 2 * LayerActivationBytes(m, q, t.precision, {});
  EXPECT_DOUBLE_EQ(
      est.stages[1].activations_bytes,
      layers + OutputActivationBytes(m, q, t.precision) + OutputTransientBytes(m, q, t.precision));
}

TEST(Parameters, PerLayerMatchesCoreCountsAndShardsByTp) {
  for (const char* name : {"gpt3-175b", "llama3-70b", "llama2-7b", "megatron-1.7b"}) {
    const ModelSpec m = ModelPreset(name);
    EXPECT_DOUBLE_EQ(LayerParameters(m, 1), static_cast<double>(CountParameters(m).per_layer))
        << name;
  }
  // GPT (biases, LayerNorm): the two norms (4h) and the row-parallel biases (2h) stay whole.
  const ModelSpec gpt = ModelPreset("gpt3-175b");
  const double h = gpt.hidden_size, replicated = 6 * h;
  EXPECT_DOUBLE_EQ(LayerParameters(gpt, 8),
                   (LayerParameters(gpt, 1) - replicated) / 8 + replicated);
}

TEST(StageMemory, OneFOneBFirstStageHoldsAllLayersAndTheLastOne) {
  const ModelSpec m = ModelPreset("gpt3-175b");
  const ClusterSpec c = ClusterPreset("dgx-a100-80gb");
  TrainingSpec t;
  t.global_batch_size = 64;
  const ParallelConfig p{.tp = 8,
                         .pp = 8,
                         .dp = 1,
                         .micro_batch_size = 1,
                         .recompute = Recompute::kSelective,
                         .distributed_optimizer = false};
  const std::vector<int> in_flight = InFlightPerStage(MakeSchedule(Schedule::k1F1B, 8, 64, 1));
  ASSERT_EQ(in_flight, (std::vector<int>{8, 7, 6, 5, 4, 3, 2, 1}));  // min(p - r, m)
  const MemoryEstimate est = EstimateMemory(m, c, t, p, in_flight, Unfused());
  const double layer = LayerActivationBytes(m, p, t.precision, Unfused());
  const double scores = 5.0 * 96 / 8 * 2048 * 2048;  // transient of selective recompute
  // Korthikanti et al. 2022, 4.2.3: the first stage stores L layers' worth (p micro-batches of
  // L/p layers), plus the embedding's mask per micro-batch.
  EXPECT_DOUBLE_EQ(est.stages[0].activations_bytes,
                   m.num_layers * layer + 8 * EmbeddingActivationBytes(m, p) + scores);
  EXPECT_DOUBLE_EQ(est.stages[7].activations_bytes,
                   12 * layer + OutputActivationBytes(m, p, t.precision) + scores);
  for (int r = 0; r < 8; ++r) {
    const StageMemory& s = est.stages[r];
    EXPECT_EQ(s.in_flight, 8 - r);
    EXPECT_DOUBLE_EQ(s.weights_bytes + s.gradients_bytes + s.optimizer_bytes, 18 * s.parameters);
    // The cuBLAS workspaces of an A100 (compute capability 8.0): PyTorch's default, 8 MiB +
    // 128 KiB, and Transformer Engine's 4 MiB.
    EXPECT_EQ(s.workspace_bytes, 8 * 1024 * 1024 + 128 * 1024 + 4 * 1024 * 1024);
    const double used = s.weights_bytes + s.gradients_bytes + s.optimizer_bytes +
                        s.activations_bytes + s.workspace_bytes;
    EXPECT_DOUBLE_EQ(s.peak_bytes, used / (1 - c.gpu.fragmentation) + c.gpu.reserved_bytes);
  }
  EXPECT_EQ(est.largest_stage, 0);
}

TEST(StageMemory, InterleavedFirstStageHoldsOnePlusPMinusOneOverPvTimesL) {
  const ModelSpec m = ModelPreset("gpt3-175b");
  const ClusterSpec c = ClusterPreset("dgx-a100-80gb");
  TrainingSpec t;
  t.global_batch_size = 64;
  const int pp = 8, v = 3;
  const ParallelConfig p{.tp = 8,
                         .pp = pp,
                         .dp = 1,
                         .micro_batch_size = 1,
                         .virtual_stages = v,
                         .schedule = Schedule::kInterleaved,
                         .recompute = Recompute::kFull};
  const std::vector<int> in_flight =
      InFlightPerStage(MakeSchedule(Schedule::kInterleaved, pp, 64, v));
  EXPECT_EQ(in_flight[0], pp * v + pp - 1);
  const MemoryEstimate est = EstimateMemory(m, c, t, p, in_flight, Unfused());
  const double layer = LayerActivationBytes(m, p, t.precision, Unfused());
  const double layers_held = m.num_layers * (1 + (pp - 1.0) / (pp * v));  // Korthikanti 4.2.3
  const double transient = KorthikantiTable2Bytes(2048, 1, 12288, 96, 8, false, Recompute::kNone);
  EXPECT_DOUBLE_EQ(est.stages[0].activations_bytes,
                   layers_held * layer + in_flight[0] * EmbeddingActivationBytes(m, p) + transient);
}

TEST(StageMemory, RejectsWithTheNumbersWhenTheLargestStageDoesNotFit) {
  const ModelSpec m = ModelPreset("gpt3-175b");
  const ClusterSpec c = ClusterPreset("dgx-a100-80gb");
  TrainingSpec t;
  t.global_batch_size = 8;
  // 175B over 8 GPUs: ~22B parameters each, 18 bytes apiece, far beyond 80 GB.
  const ParallelConfig big{
      .tp = 8, .pp = 1, .dp = 1, .micro_batch_size = 1, .recompute = Recompute::kFull};
  const MemoryEstimate est = EstimateMemory(m, c, t, big, std::vector<int>{1});
  const std::string problem = MemoryProblem(est, c);
  EXPECT_NE(problem.find("pipeline stage 0 needs "), std::string::npos) << problem;
  // In GiB by default (the driver's 81,920 MiB), GB on request.
  EXPECT_NE(problem.find("A100-SXM4-80GB has 80.0 GiB"), std::string::npos) << problem;
  EXPECT_NE(MemoryProblem(est, c, MemoryUnit::kGB).find("A100-SXM4-80GB has 85.9 GB"),
            std::string::npos);
  EXPECT_NE(problem.find("optimizer"), std::string::npos) << problem;
  EXPECT_GT(est.peak_bytes(), 300e9);

  // The same model over 64 stages fits.
  const ParallelConfig small{
      .tp = 8, .pp = 16, .dp = 1, .micro_batch_size = 1, .recompute = Recompute::kFull};
  t.global_batch_size = 64;
  const MemoryEstimate ok =
      EstimateMemory(m, c, t, small, InFlightPerStage(MakeSchedule(Schedule::k1F1B, 16, 64, 1)));
  EXPECT_EQ(MemoryProblem(ok, c), "");
  EXPECT_LT(ok.peak_bytes(), 85.9e9);
}

}  // namespace
}  // namespace ptdp
