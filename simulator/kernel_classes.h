// The simulator's kernel time by class, per pipeline stage and step, for `ptdp validate`'s rows
// against the executor's measured kernel classes (executor/backend/kernel_clock.h): the cost
// model's kernels (layer_work.h) of every micro-batch through the stage's chunks, timed one by one
// from the profile (KernelTimer) and summed by kind:
//   gemm:         matrix products (kGemm, the MoE experts' grouped GEMMs, Mamba's scan);
//   attention:    the core attention (Work::core_attention: flash-style kernels, or every
//                 kernel of the unfused path, its batched GEMMs and softmax included, as the
//                 executor's attention kernels hold them);
//   memory-bound: every other kernel (norms, activations, embeddings, the cross entropy, ...);
//   optimizer:    the optimizer step of the stage's parameters (cost_model.h).
// Kernel time only: no collectives, no launch overhead, no pipeline bubble. Recomputation is in
// (the executor's clock times the recomputed kernels too).
#pragma once

#include <vector>

#include "core/plan.h"
#include "simulator/cost_model.h"

namespace ptdp {

struct KernelClassTimes {
  double gemm_s = 0;
  double attention_s = 0;
  double memory_s = 0;
  double optimizer_s = 0;
};

// One entry per pipeline stage, for one step; `estimate` is the plan's EstimateStep (for the
// optimizer's time).
std::vector<KernelClassTimes> StageKernelClassTimes(const Plan& plan, const StepEstimate& estimate);

}  // namespace ptdp
