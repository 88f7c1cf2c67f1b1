// Per-operation work and timing: the GEMM table lookup, the roofline, the FLOPs of a layer
// against the published closed forms, the tensor-parallel collectives a layer issues.
#include <gtest/gtest.h>

#include <cmath>

#include "core/presets.h"
#include "simulator/flops.h"
#include "simulator/layer_work.h"
#include "simulator/op_time.h"

namespace ptdp {
namespace {

// Megatron's unfused core attention (the s x s products as batched GEMMs): what Korthikanti et
// al. 2022's FLOP formulas count.
CostOptions Unfused() {
  CostOptions o;
  o.attention = AttentionBackend::kUnfused;
  return o;
}

GpuSpec TwoByTwoByTwo() {
  GpuSpec g;
  g.peak_bf16_flops = g.peak_fp16_flops = 100e12;
  g.peak_fp32_flops = 10e12;
  g.hbm_bandwidth_bytes_per_s = 1e12;
  g.memory_efficiency = 0.5;
  // Sorted by (m, n, k): efficiency 0.1 + 0.4 [m = 1024] + 0.2 [n = 1024] + 0.1 [k = 1024].
  for (int64_t m : {256, 1024}) {
    for (int64_t n : {256, 1024}) {
      for (int64_t k : {256, 1024}) {
        g.gemm_efficiency.push_back(
            {m, n, k, 0.1 + 0.4 * (m == 1024) + 0.2 * (n == 1024) + 0.1 * (k == 1024)});
      }
    }
  }
  return g;
}

TEST(GemmEfficiency, GridPointsInterpolationInLogSpaceAndClamping) {
  const GpuSpec g = TwoByTwoByTwo();
  EXPECT_DOUBLE_EQ(GemmEfficiency(g, 256, 256, 256), 0.1);
  EXPECT_DOUBLE_EQ(GemmEfficiency(g, 1024, 1024, 1024), 0.8);
  EXPECT_DOUBLE_EQ(GemmEfficiency(g, 1024, 256, 1024), 0.6);
  // 512 is halfway between 256 and 1024 in log2.
  EXPECT_NEAR(GemmEfficiency(g, 512, 256, 256), 0.3, 1e-6);
  EXPECT_NEAR(GemmEfficiency(g, 512, 512, 512), 0.1 + 0.2 + 0.1 + 0.05, 1e-6);
  // Outside the grid: the edge's value.
  EXPECT_DOUBLE_EQ(GemmEfficiency(g, 64, 64, 64), 0.1);
  EXPECT_DOUBLE_EQ(GemmEfficiency(g, 1 << 20, 1 << 20, 1 << 20), 0.8);
  // One GemmTable answers the same, twice (its memo).
  const GemmTable table(g);
  EXPECT_NEAR(table.Efficiency(512, 512, 512), 0.45, 1e-6);
  EXPECT_NEAR(table.Efficiency(512, 512, 512), 0.45, 1e-6);
}

TEST(GemmEfficiency, ProfileTablePointsComeBackExactly) {
  const GpuSpec a100 = ClusterPreset("dgx-a100-80gb").gpu;
  for (const GemmEfficiencyPoint& p : a100.gemm_efficiency) {
    EXPECT_NEAR(GemmEfficiency(a100, p.m, p.n, p.k), p.efficiency, 1e-9)
        << p.m << "x" << p.n << "x" << p.k;
  }
  const GpuSpec cpu = ClusterPreset("cpu-local").gpu;  // one point: constant everywhere
  EXPECT_DOUBLE_EQ(GemmEfficiency(cpu, 7, 70000, 3), 0.5);
}

TEST(GemmTime, RooflineOfComputeAndMemory) {
  const GpuSpec g = TwoByTwoByTwo();
  // 1024^3 at efficiency 0.8 of 100 TFLOP/s; its 6 MB of traffic take 12 us, less.
  const GemmShape big{1024, 1024, 1024, 1};
  EXPECT_DOUBLE_EQ(GemmTime(g, Precision::kBf16, big, 6e6), big.flops() / (100e12 * 0.8));
  // A thin product whose traffic dominates: bytes / (1 TB/s x 0.5).
  const GemmShape thin{1024, 1024, 1, 1};
  EXPECT_DOUBLE_EQ(GemmTime(g, Precision::kBf16, thin, 4e6), 4e6 / 0.5e12);
  // Batched: looked up as m x batch rows; fp32 uses the fp32 peak.
  const GemmShape batched{256, 256, 256, 4};
  EXPECT_DOUBLE_EQ(GemmTime(g, Precision::kFp32, batched, 0),
                   batched.flops() / (10e12 * GemmEfficiency(g, 1024, 256, 256)));
  EXPECT_DOUBLE_EQ(MemoryTime(g, 1e9), 2e-3);
}

double GemmFlops(const PassWork& pass) { return pass.flops(); }

int Count(const PassWork& pass, Collective c) {
  int n = 0;
  for (int i = 0; i < pass.num_comm; ++i) n += pass.comm[i].collective == c;
  return n;
}

TEST(LayerWork, GptFlopsAreKorthikantiAppendixA) {
  const ModelSpec m = ModelPreset("gpt3-175b");
  const double s = m.seq_length, h = m.hidden_size;
  for (int t : {1, 8}) {
    for (int b : {1, 4}) {
      const ParallelConfig p{.tp = t, .micro_batch_size = b};
      const LayerWork w = TransformerLayerWork(m, p, Precision::kBf16, Unfused());
      // Forward 24 b s h^2 + 4 b s^2 h (Korthikanti et al. 2022, appendix A), split t ways.
      const double forward = (24 * b * s * h * h + 4 * b * s * s * h) / t;
      EXPECT_NEAR(GemmFlops(w.forward), forward, forward * 1e-12);
      // The backward does twice the forward: input gradients (B) and weight gradients (W).
      EXPECT_NEAR(GemmFlops(w.backward_input) + GemmFlops(w.backward_weight), 2 * forward,
                  forward * 1e-12);
      EXPECT_EQ(w.recompute.num_work, 0);
    }
  }
  const LayerWork full = TransformerLayerWork(m, {.tp = 8, .recompute = Recompute::kFull},
                                              Precision::kBf16, Unfused());
  EXPECT_DOUBLE_EQ(GemmFlops(full.recompute), GemmFlops(full.forward));
  EXPECT_EQ(full.recompute.num_comm, full.forward.num_comm);
  const LayerWork selective = TransformerLayerWork(m, {.tp = 8, .recompute = Recompute::kSelective},
                                                   Precision::kBf16, Unfused());
  EXPECT_NEAR(GemmFlops(selective.recompute), 4 * s * s * h / 8, 1);  // Q K^T and x V only
  EXPECT_EQ(selective.recompute.num_comm, 0);
}

TEST(LayerWork, ClosedFormFlopsMatchTheKernelsForGqaAndSwiglu) {
  for (const char* name : {"gpt3-175b", "llama3-70b", "llama2-7b", "megatron-1t"}) {
    const ModelSpec m = ModelPreset(name);
    const ParallelConfig one{.tp = 1, .micro_batch_size = 1};
    EXPECT_NEAR(TransformerLayerWork(m, one, Precision::kBf16, Unfused()).forward.flops(),
                LayerForwardFlops(m), LayerForwardFlops(m) * 1e-12)
        << name;
    EXPECT_NEAR(OutputWork(m, one, Precision::kBf16, Unfused()).forward.flops(),
                OutputForwardFlops(m), OutputForwardFlops(m) * 1e-12)
        << name;
  }
  // SwiGLU: the first linear is 2f wide, so the MLP costs 3 GEMMs of h x f.
  const ModelSpec llama = ModelPreset("llama3-70b");
  const double s = llama.seq_length, h = llama.hidden_size, f = llama.ffn_hidden_size;
  const LayerWork w = TransformerLayerWork(llama, {.tp = 1}, Precision::kBf16, Unfused());
  double mlp = 0;
  for (int i = 0; i < w.forward.num_work; ++i) {
    const std::string name = w.forward.work[i].name;
    if (name == "fc1" || name == "fc2") mlp += w.forward.work[i].flops;
  }
  EXPECT_DOUBLE_EQ(mlp, 3 * 2 * s * h * f);
}

TEST(Flops, ModelAndHardwareFlopsAreThePublishedFormulas) {
  for (const char* name : {"megatron-1.7b", "megatron-145.6b", "megatron-1t", "gpt3-175b"}) {
    const ModelSpec m = ModelPreset(name);
    TrainingSpec t;
    t.global_batch_size = 1536;
    const double model = ModelFlopsPerStep(m, t);
    EXPECT_NEAR(model, KorthikantiModelFlops(m, 1536), model * 1e-12) << name;
    const double full = HardwareFlopsPerStep(m, t, {.recompute = Recompute::kFull});
    EXPECT_NEAR(full, NarayananEq3Flops(m, 1536), full * 1e-12) << name;
    EXPECT_DOUBLE_EQ(HardwareFlopsPerStep(m, t, {}), model);
  }
  // 1.7B, batch 512: Eq. 3 at 137 TFLOP/s per GPU on 32 GPUs is the published 3.53 s.
  TrainingSpec t;
  t.global_batch_size = 512;
  EXPECT_NEAR(NarayananEq3Flops(ModelPreset("megatron-1.7b"), 512) / (137e12 * 32), 3.53, 0.005);
  EXPECT_DOUBLE_EQ(Mfu(312e12 * 10, 10, 1, 312e12), 1.0);
}

TEST(LayerWork, TensorParallelCollectivesPerLayer) {
  const ModelSpec m = ModelPreset("gpt3-175b");
  const double act = 2.0 * m.seq_length * 2 * m.hidden_size;  // s b h e with b = 2, bf16
  // Without sequence parallelism: 2 all-reduces forward, 2 backward (Megatron's f and g).
  const LayerWork tp =
      TransformerLayerWork(m, {.tp = 8, .micro_batch_size = 2}, Precision::kBf16, {});
  EXPECT_EQ(tp.forward.num_comm, 2);
  EXPECT_EQ(Count(tp.forward, Collective::kAllReduce), 2);
  EXPECT_EQ(tp.backward_input.num_comm, 2);
  EXPECT_EQ(Count(tp.backward_input, Collective::kAllReduce), 2);
  EXPECT_EQ(tp.backward_weight.num_comm, 0);
  for (int i = 0; i < tp.forward.num_comm; ++i) EXPECT_DOUBLE_EQ(tp.forward.comm[i].bytes, act);
  // With it: all-gather + reduce-scatter in each direction, same bytes.
  const LayerWork sp = TransformerLayerWork(
      m, {.tp = 8, .micro_batch_size = 2, .sequence_parallel = true}, Precision::kBf16, {});
  EXPECT_EQ(Count(sp.forward, Collective::kAllGather), 2);
  EXPECT_EQ(Count(sp.forward, Collective::kReduceScatter), 2);
  EXPECT_EQ(Count(sp.backward_input, Collective::kAllGather), 2);
  EXPECT_EQ(Count(sp.backward_input, Collective::kReduceScatter), 2);
  for (int i = 0; i < sp.backward_input.num_comm; ++i) {
    EXPECT_DOUBLE_EQ(sp.backward_input.comm[i].bytes, act);
  }
  // One GPU: none.
  const LayerWork one = TransformerLayerWork(m, {.tp = 1}, Precision::kBf16, {});
  EXPECT_EQ(one.forward.num_comm + one.backward_input.num_comm, 0);
  // The cross entropy adds three all-reduces of T floats to the output layer's forward.
  const LayerWork out = OutputWork(m, {.tp = 8}, Precision::kBf16, {});
  EXPECT_EQ(Count(out.forward, Collective::kAllReduce), 3);
  EXPECT_DOUBLE_EQ(out.forward.comm[0].bytes, 4.0 * m.seq_length);
}

TEST(LayerWork, MemoryBoundKernelsMoveTheirTensors) {
  const ModelSpec m = ModelPreset("megatron-1.7b");  // s 2048, h 2304, a 24
  // Megatron 2022's unfused attention (fused scale-mask-softmax, dropout): the s x s kernels.
  const LayerWork w = TransformerLayerWork(m, {.tp = 2, .micro_batch_size = 4}, Precision::kFp16,
                                           Megatron2022Options());
  const double scores = 4.0 * 12 * 2048 * 2048;  // b * a/t * s^2 elements
  // Each kernel checked must be there (a renamed kernel fails here rather than going unchecked).
  const std::pair<const char*, double> expected[] = {{"scale mask softmax", 4 * scores},
                                                     {"attention dropout", 5 * scores},
                                                     {"norm 1", 2 * 2 * 4 * 2048.0 * 2304}};
  for (const auto& [kernel, bytes] : expected) {
    int found = 0;
    for (int i = 0; i < w.forward.num_work; ++i) {
      if (std::string(w.forward.work[i].name) != kernel) continue;
      ++found;
      EXPECT_DOUBLE_EQ(w.forward.work[i].bytes, bytes) << kernel;
    }
    EXPECT_EQ(found, 1) << kernel;
  }
  // Megatron 2021 adds the weight gradients to the main gradients in a separate kernel
  // (2-byte gradient + 2-byte main gradient read and written: 6 bytes per parameter).
  const LayerWork old = TransformerLayerWork(m, {.tp = 2, .micro_batch_size = 4}, Precision::kFp16,
                                             Megatron2021Options());
  double accumulate = 0;
  for (int i = 0; i < old.backward_weight.num_work; ++i) {
    if (std::string(old.backward_weight.work[i].name) == "main-grad accumulate") {
      accumulate += old.backward_weight.work[i].bytes;
    }
  }
  const double h = 2304, weights = (3 * h * h + h * h + 2 * 4 * h * h) / 2;
  EXPECT_DOUBLE_EQ(accumulate, 6 * weights);
}

}  // namespace
}  // namespace ptdp
