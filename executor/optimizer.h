// The end of a step, as Megatron-LM's finalize_model_grads + optimizer.step run it:
//  1. sequence parallelism: gradients of parameters replicated over TP but fed by a sequence
//     shard (LayerNorms, row-parallel biases, positions) are all-reduced over TP;
//  2. the tied word embedding's two copies (first and last stage) all-reduce their gradients;
//  3. data parallelism: the gradient buffer's dense range is all-reduced over DP x CP (each
//     context-parallel rank holds the gradients of its tokens; Megatron reduces over "data
//     parallel with context parallel"), its expert range over the expert data-parallel group
//     (Megatron's expert gradient buffers, reduced over expt_dp); or, with the distributed
//     optimizer, each range is reduce-scattered over its group (each rank then owns 1/size of
//     the range: its gradients, optimizer state and update), whose updated parameters are
//     all-gathered after the step;
//  4. the global gradient norm counts each parameter once: TP-replicated parameters on tensor
//     rank 0 only, the last stage's embedding copy not at all, replicas of a range on the first
//     rank of its group, shards once each; gradients are scaled by clip_grad / (norm + 1e-6)
//     when that is below 1 (Megatron's clip_grad_norm);
//  5. Adam (decoupled weight decay, none on biases and norms) or SGD with momentum 0.9, with the
//     state in the parameters' precision (fp32 on the CPU path).
// The loss was scaled by 1 / (tokens per step), so summing gradients over DP x CP averages them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/training_spec.h"
#include "executor/backend.h"
#include "executor/gpt_params.h"
#include "executor/measure.h"
#include "executor/topology.h"

namespace ptdp {

struct OptimizerStepInfo {
  double grad_norm = 0;  // before clipping
  double clip_scale = 1;
};

class TrainingOptimizer {
 public:
  // With `distributed` (the distributed optimizer), params' dense range must be a multiple of
  // dp x cp long and its expert range a multiple of the expert data-parallel size.
  TrainingOptimizer(GptParams& params, Backend& backend, ProcessGroups& groups,
                    const TrainingSpec& training, bool distributed, bool sequence_parallel,
                    Recorder& recorder);

  // Reduces the gradients, clips, updates the parameters and zeroes the gradients. `step` is
  // 1-based (Adam's bias correction).
  OptimizerStepInfo Step(int64_t step);

  // The optimizer state this rank owns (for checkpoints): Adam m and v, or SGD momentum.
  std::vector<Span> state() const;

 private:
  // A range of the flat buffers and the group its gradients are reduced over.
  struct Range {
    FlatRange flat;
    Comm* group = nullptr;
    bool distributed = false;  // sharded over the group
    FlatRange shard;           // what this rank updates: the whole range unless distributed
    int64_t state_offset = 0;  // of the shard's optimizer state in m_ and v_
    Tensor grad_shard;         // distributed: this rank's reduced gradient slice
    // The gradients this rank updates with: the buffer's, or the reduced slice.
    Span grads(const GptParams& params) const;
  };
  void ReduceGradients();
  double GradNorm();
  void Update(const Range& range, int64_t step, double grad_scale);

  GptParams& params_;
  Backend& backend_;
  ProcessGroups& groups_;
  TrainingSpec training_;
  bool sequence_parallel_;
  Recorder& recorder_;
  std::vector<Range> ranges_;  // dense, then experts
  Tensor m_, v_;  // Adam moments (SGD: m_ is the momentum) of the ranges' shards, in order
};

}  // namespace ptdp
