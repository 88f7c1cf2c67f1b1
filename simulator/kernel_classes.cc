#include "simulator/kernel_classes.h"

#include "core/error.h"
#include "simulator/layer_work.h"

namespace ptdp {
namespace {

// The kernels of `pass`, timed, added by class `times` over (n of them).
void AddPass(const KernelTimer& timer, const PassWork& pass, double times, KernelClassTimes& to) {
  for (int i = 0; i < pass.num_work; ++i) {
    const Work& w = pass.work[i];
    const double t = times * timer(w);
    if (w.core_attention) {
      to.attention_s += t;
      continue;
    }
    switch (w.kind) {
      case WorkKind::kGemm:
      case WorkKind::kGroupedGemm:
      case WorkKind::kScan:
        to.gemm_s += t;
        break;
      case WorkKind::kAttentionForward:
      case WorkKind::kAttentionBackward:
        to.attention_s += t;
        break;
      case WorkKind::kMemory:
        to.memory_s += t;
        break;
    }
  }
}

void AddLayer(const KernelTimer& timer, const LayerWork& layer, double times,
              KernelClassTimes& to) {
  for (const PassWork* pass :
       {&layer.forward, &layer.backward_input, &layer.backward_weight, &layer.recompute}) {
    AddPass(timer, *pass, times, to);
  }
}

}  // namespace

std::vector<KernelClassTimes> StageKernelClassTimes(const Plan& plan,
                                                    const StepEstimate& estimate) {
  const ModelSpec& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  const TrainingSpec& training = plan.training;
  const Precision precision = training.precision;
  const KernelTimer timer(plan.cluster, precision, plan.options);
  const auto microbatches = static_cast<double>(NumMicrobatches(training, p));
  const std::vector<ChunkLayers> chunks = ChunkLayerKinds(m, training, p);
  const int vstages = static_cast<int>(chunks.size());
  PTDP_CHECK(vstages == p.pp * p.virtual_stages);
  PTDP_CHECK(static_cast<int>(estimate.costs.stages.size()) == p.pp);

  std::vector<KernelClassTimes> stages(static_cast<size_t>(p.pp));
  for (int v = 0; v < vstages; ++v) {
    KernelClassTimes& to = stages[static_cast<size_t>(v % p.pp)];
    for (int slot = 0; slot < ChunkLayers::kSlots; ++slot) {
      const int n = chunks[static_cast<size_t>(v)].Slot(slot);
      if (n == 0) continue;
      const auto kind = static_cast<LayerKind>(slot / 4);
      const bool fp8 = (slot / 2) % 2 == 1, recompute = slot % 2 == 1;
      ParallelConfig q = p;
      if (!recompute) q.recompute = Recompute::kNone;
      const LayerWork layer =
          LayerKindWork(m, q, precision, plan.options, kind, precision == Precision::kFp8 && !fp8,
                        training.fp8_recipe);
      AddLayer(timer, layer, n * microbatches, to);
    }
    if (v == 0) AddLayer(timer, EmbeddingWork(m, p, precision, plan.options), microbatches, to);
    if (v == vstages - 1) {
      AddLayer(timer, OutputWork(m, p, precision, plan.options), microbatches, to);
    }
  }
  for (int r = 0; r < p.pp; ++r) {
    stages[static_cast<size_t>(r)].optimizer_s =
        estimate.costs.stages[static_cast<size_t>(r)].optimizer_s;
  }
  return stages;
}

}  // namespace ptdp
