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
// Overlap (--overlap-grad-reduce, --overlap-param-gather; DataParallelOverlap): each range is
// split into Megatron's DDP buckets (GradientBuckets), each reduced (or reduce-scattered: the
// distributed optimizer then owns 1/size of every bucket, as Megatron's does) as soon as the
// pipeline says the model chunks it holds have their gradients (StepListener, pipeline.h), beside
// the rest of the backward; the step waits for them before step 4. The bucket holding the tied
// embedding waits for the embedding's all-reduce after the backward (its two copies' layouts
// differ, so that sum cannot follow a reduce-scatter), and under sequence parallelism the
// tensor-parallel sum of step 1 runs on the reduced gradients (TP ranks of one DP rank hold the
// same shards; the sums commute). With the parameter gather overlapped, each bucket's updated
// parameters are gathered beside what follows the step, and the next step's first forward of
// a chunk waits for the buckets it reads.
//
// Mixed precision (bf16 or fp16 model weights; Megatron's Float16OptimizerWithFloat16Params, or
// its DistributedOptimizer): the gradients are fp32 main_grad (executor/model/gpt_params.h),
// reduced in fp32; the optimizer holds fp32 main weights for what it updates (its shard under the
// distributed optimizer), copied from the 16-bit weights when it is built (Megatron clones them
// so), steps them and the fp32 moments, then rounds them into the model's weights
// (Backend::Convert) before the all-gather of the distributed optimizer, which moves 16-bit
// weights. Memory: the main weights count as optimizer state, as Megatron counts them. fp16 adds
// the dynamic loss scaler (loss_scaler.h): after the reductions the main gradients are unscaled and
// checked; an inf or NaN anywhere skips the step (gradients zeroed, no update, Adam's step count
// unchanged).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "core/training_spec.h"
#include "executor/backend/backend.h"
#include "executor/backend/measure.h"
#include "executor/comm/topology.h"
#include "executor/model/gpt_params.h"
#include "executor/train/loss_scaler.h"
#include "executor/train/pipeline.h"

namespace ptdp {

struct OptimizerStepInfo {
  double grad_norm = 0;  // before clipping (0 for a skipped step)
  double clip_scale = 1;
  double loss_scale = 1;  // the loss scale the step's gradients carried (fp16; else 1)
  bool skipped = false;   // fp16: an inf or NaN gradient skipped the update
};

// Megatron's data-parallel overlap as the executor runs it (the plan's options).
struct DataParallelOverlap {
  bool grad_reduce = false;       // --overlap-grad-reduce
  bool param_gather = false;      // --overlap-param-gather (the distributed optimizer's gather)
  int64_t bucket_parameters = 0;  // with grad_reduce: DdpBucketParameters (core/cost_options.h)
};

// One DDP bucket: a part of a range of the flat buffers, the model chunks whose parameters it
// holds, and whether it holds a tied word embedding's copy.
struct GradBucket {
  FlatRange flat;
  int first_chunk = 0, last_chunk = 0;
  bool tied_embedding = false;
  // The (chunk, backward part) pairs of its parameters (executor/model/gpt_params.h
  // ParamInfo::part), sorted: its gradients are complete when those parts are.
  std::vector<std::pair<int, int>> parts = {};
};

// The buckets of `range` (the dense or the expert parameters, `experts`; params laid out chunk
// after chunk, as GptParams lays them): each model chunk's share split into
// ceil(n / bucket_parameters) even buckets (the simulator's count), every boundary then rounded
// down to a multiple of `multiple` from the range's start (the distributed optimizer's group
// size: each bucket is sharded over it), so a bucket may reach into the next chunk. `range` is
// a multiple of `multiple` long; empty ranges have no bucket.
std::vector<GradBucket> GradientBuckets(const std::vector<ParamInfo>& infos, FlatRange range,
                                        bool experts, int64_t bucket_parameters, int64_t multiple);

class TrainingOptimizer final : public StepListener {
 public:
  // With `distributed` (the distributed optimizer), params' dense range must be a multiple of
  // dp x cp long and its expert range a multiple of the expert data-parallel size. Build it
  // after params are initialised (or loaded): 16-bit params' main weights start as their copy.
  // `loss_scaler` applies to fp16 params only.
  TrainingOptimizer(GptParams& params, Backend& backend, ProcessGroups& groups,
                    const TrainingSpec& training, bool distributed, bool sequence_parallel,
                    Recorder& recorder, const LossScalerOptions& loss_scaler = {},
                    const DataParallelOverlap& overlap = {});
  TrainingOptimizer(const TrainingOptimizer&) = delete;
  TrainingOptimizer& operator=(const TrainingOptimizer&) = delete;

  // What the step's loss must be multiplied by before the backward: fp16's loss scale, else 1.
  double loss_scale() const;

  // Reduces the gradients, clips, updates the parameters and zeroes the gradients. `step` is
  // 1-based (Adam's bias correction).
  OptimizerStepInfo Step(int64_t step);

  // The optimizer state this rank owns (for checkpoints): Adam m and v, or SGD momentum; then,
  // under mixed precision, the fp32 main weights; then, for fp16, the loss scaler's state.
  std::vector<Span> state() const;

  // StepListener: with the overlap, the pipeline's hooks start the ready buckets' reductions,
  // wait for a chunk's gathered parameters, and let exchanges in flight progress.
  void BeforeFirstForward(int chunk) override;
  void PartDone(int chunk, int part) override;
  void GradientsDone(int chunk) override;
  void Progress() override;

  // Waits for every parameter gather in flight: call before anything but the next step reads
  // the parameters (evaluation, checkpoints, the final model) and before the end.
  void FinishParamGather();

 private:
  // A range of the flat buffers and the group its gradients are reduced over.
  struct Range {
    GradBucket bucket;  // its part of the flat buffers and the chunks it holds (the whole
                        // range, dense or experts, without overlap)
    Comm* group = nullptr;
    bool distributed = false;  // sharded over the group
    FlatRange shard;           // what this rank updates: the whole range unless distributed
    int64_t state_offset = 0;  // of the shard's optimizer state in m_ and v_
    Tensor grad_shard;         // distributed: this rank's reduced gradient slice
    bool experts = false;      // the expert range's
    // The overlapped exchanges in flight: the gradients' reduction, the parameters' gather
    // (its send buffer kept until then), and when they were started.
    bool reduction_started = false;
    std::unique_ptr<CommRequest> reduction;
    double reduction_start_s = 0;
    Tensor gather_in;
    std::unique_ptr<CommRequest> gather;
    double gather_start_s = 0;
    // The gradients this rank updates with: the buffer's, or the reduced slice.
    Span grads(const GptParams& params) const;
  };
  void ReduceGradients();
  void ReduceOverlapped();
  // Sums the sequence-parallel gradients over TP: `reduced`, those the optimizer updates with
  // (after the data-parallel reduction), or the whole buffer's (before it).
  void SequenceParallelAllReduce(bool reduced);
  void EmbeddingAllReduce();
  void StartReduction(Range& r);
  // Starts, last bucket first, the reductions whose gradients are now complete.
  void StartReadyReductions();
  // The trace name of r's gradient reduction.
  static const char* ReductionName(const Range& r);
  // Records a finished exchange of `r` (its reduction, or its gather) and drops its request.
  void Finished(Range& r, bool gather);
  void WaitGather(Range& r);
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
  DataParallelOverlap overlap_;
  std::vector<bool> chunk_grads_done_;        // this step's, with overlap_.grad_reduce
  std::set<std::pair<int, int>> parts_done_;  // (chunk, part), this step's
  std::vector<Range> ranges_;                 // dense, then experts (bucket by bucket with overlap)
  Tensor m_, v_;  // Adam moments (SGD: m_ is the momentum) of the ranges' shards, in order
  Tensor main_;   // mixed precision: the fp32 main weights of the ranges' shards, in order
  LossScalerOptions scaler_options_;
  // fp16: the LossScalerState as 4 fp64 values, in backend memory so that checkpoints carry it.
  Tensor scaler_;
};

}  // namespace ptdp
