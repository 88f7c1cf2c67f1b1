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
//     state in the parameters' precision (fp32, or fp64 for gradient checks).
// The loss was scaled by 1 / (tokens per step), so summing gradients over DP x CP averages them.
//
// Mixed precision (bf16 or fp16 model weights; Megatron's Float16OptimizerWithFloat16Params, or
// its DistributedOptimizer): the gradients are fp32 main_grad (gpt_params.h), reduced in fp32;
// the optimizer holds fp32 main weights for what it updates (its shard under the distributed
// optimizer), copied from the 16-bit weights when it is built (Megatron clones them so), steps
// them and the fp32 moments, then rounds them into the model's weights (Backend::Convert) before
// the all-gather of the distributed optimizer, which moves 16-bit weights. Memory: the main
// weights count as optimizer state, as Megatron counts them. fp16 adds the dynamic loss scaler
// (loss_scaler.h): after the reductions the main gradients are unscaled and checked; an inf or
// NaN anywhere skips the step (gradients zeroed, no update, Adam's step count unchanged).
#pragma once

#include <cstdint>
#include <vector>

#include "core/training_spec.h"
#include "executor/backend.h"
#include "executor/gpt_params.h"
#include "executor/loss_scaler.h"
#include "executor/measure.h"
#include "executor/topology.h"

namespace ptdp {

struct OptimizerStepInfo {
  double grad_norm = 0;  // before clipping (0 for a skipped step)
  double clip_scale = 1;
  double loss_scale = 1;  // the loss scale the step's gradients carried (fp16; else 1)
  bool skipped = false;   // fp16: an inf or NaN gradient skipped the update
};

class TrainingOptimizer {
 public:
  // With `distributed` (the distributed optimizer), params' dense range must be a multiple of
  // dp x cp long and its expert range a multiple of the expert data-parallel size. Build it
  // after params are initialised (or loaded): 16-bit params' main weights start as their copy.
  // `loss_scaler` applies to fp16 params only.
  TrainingOptimizer(GptParams& params, Backend& backend, ProcessGroups& groups,
                    const TrainingSpec& training, bool distributed, bool sequence_parallel,
                    Recorder& recorder, const LossScalerOptions& loss_scaler = {});

  // What the step's loss must be multiplied by before the backward: fp16's loss scale, else 1.
  double loss_scale() const;

  // Reduces the gradients, clips, updates the parameters and zeroes the gradients. `step` is
  // 1-based (Adam's bias correction).
  OptimizerStepInfo Step(int64_t step);

  // The optimizer state this rank owns (for checkpoints): Adam m and v, or SGD momentum; then,
  // under mixed precision, the fp32 main weights; then, for fp16, the loss scaler's state.
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
  // fp16: divides the gradients this rank updates with by the loss scale; whether any rank
  // found an inf or NaN among them.
  bool UnscaleAndCheck(double scale);
  double GradNorm();
  void Update(const Range& range, int64_t step, double grad_scale);
  LossScalerState ReadScaler() const;

  GptParams& params_;
  Backend& backend_;
  ProcessGroups& groups_;
  TrainingSpec training_;
  bool sequence_parallel_;
  Recorder& recorder_;
  std::vector<Range> ranges_;  // dense, then experts
  Tensor m_, v_;  // Adam moments (SGD: m_ is the momentum) of the ranges' shards, in order
  Tensor main_;   // mixed precision: the fp32 main weights of the ranges' shards, in order
  LossScalerOptions scaler_options_;
  // fp16: the LossScalerState as 4 fp64 values, in backend memory so that checkpoints carry it.
  Tensor scaler_;
};

}  // namespace ptdp
