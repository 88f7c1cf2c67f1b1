// The end of a step, as Megatron-LM's finalize_model_grads + optimizer.step run it:
//  1. sequence parallelism: gradients of parameters replicated over TP but fed by a sequence
//     shard (LayerNorms, row-parallel biases, positions) are all-reduced over TP;
//  2. the tied word embedding's two copies (first and last stage) all-reduce their gradients;
//  3. data parallelism: the gradient buffer is all-reduced over DP x CP (each context-parallel
//     rank holds the gradients of its tokens; Megatron reduces over "data parallel with context
//     parallel"), or reduce-scattered with the distributed optimizer (each DP x CP rank then owns
//     1/(dp cp) of the flat buffer: its gradients, optimizer state and update), whose updated
//     parameters are all-gathered after the step;
//  4. the global gradient norm counts each parameter once: TP-replicated parameters on tensor
//     rank 0 only, the last stage's embedding copy not at all, DP shards once each; gradients
//     are scaled by clip_grad / (norm + 1e-6) when that is below 1 (Megatron's clip_grad_norm);
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
  // With `distributed`, params' flat buffers must be a multiple of dp x cp long.
  TrainingOptimizer(GptParams& params, Backend& backend, ProcessGroups& groups,
                    const TrainingSpec& training, bool distributed, bool sequence_parallel,
                    Recorder& recorder);

  // Reduces the gradients, clips, updates the parameters and zeroes the gradients. `step` is
  // 1-based (Adam's bias correction).
  OptimizerStepInfo Step(int64_t step);

  // The optimizer state this rank owns (for checkpoints): Adam m and v, or SGD momentum.
  std::vector<Span> state() const;
  int64_t shard_begin() const { return shard_begin_; }  // of the flat buffers this rank updates
  int64_t shard_end() const { return shard_end_; }

 private:
  void ReduceGradients();
  double GradNorm(Span grads, int64_t base);
  void Update(Span grads, int64_t base, int64_t step, double grad_scale);

  GptParams& params_;
  Backend& backend_;
  ProcessGroups& groups_;
  TrainingSpec training_;
  bool distributed_;
  bool sequence_parallel_;
  Recorder& recorder_;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  Tensor grad_shard_;  // distributed: this rank's reduced gradient slice
  Tensor m_, v_;       // Adam moments (SGD: m_ is the momentum), over [shard_begin, shard_end)
};

}  // namespace ptdp
