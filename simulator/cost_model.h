// The cost model: for one configuration (model, cluster, training, parallel layout), the
// durations and sizes the event simulator plays (simulator/costs.h), from the per-kernel work
// (layer_work.h), the op timings (op_time.h) and the collectives (collectives.h).
//
// What each ChunkCosts holds, for virtual stage vs = c * p + r with L / (p v) layers:
//  - forward_s: the layers' forward, plus the embedding on vs 0 and the final norm, LM head and
//    cross entropy on the last one, with their tensor-parallel collectives;
//  - backward_input_s: the recomputed forward (full or selective) and the input gradients;
//  - backward_weight_s: the weight gradients, accumulated into the main gradients;
//  - send_forward_s / send_backward_s: the s b h activation (gradient) to the next (previous)
//    virtual stage over the link between the two pipeline ranks (NVLink or the NICs);
//    with sequence parallelism (or Megatron 2021's scatter-gather) 1/t of it per GPU. Without
//    --overlap-p2p-communication Megatron waits for its sends, so their time is added to the
//    sending operation and the send fields are 0;
//  - activation_bytes: the chunk's layers (memory_model.h) plus the embedding's mask on vs 0 and
//    the output layer's buffers on the last; weight_grad_activation_bytes: the linears' inputs.
// Each pass's time is its kernels and collectives (layer_work.h), stretched where the host
// cannot launch them as fast as the GPU runs them (the profile's host.kernel_launch_us; see
// Times() in cost_model.cc), less the async input-gradient reductions hidden behind the weight
// gradients (cost_options.h) when B and W run together; the forward of each stage's first chunk
// also carries the profile's host.microbatch_overhead_us.
// With an uneven split (core SplitLayers) each chunk has its own layer count, and in fp8
// training the layers kept in bf16 and, with --recompute-num-layers, the layers that recompute
// cost their own (layer_work.h ChunkLayerKinds), as do a hybrid model's Mamba, attention, MLP and
// MoE layers, each chunk its share of the pattern. Megatron-FSDP's per-layer gathers and
// reduce-scatters (optim_grads, optim_grads_params) run beside the passes; what they do not
// hide is added to F and W.
// And each StageCosts: the data-parallel gradient all-reduce (distributed optimizer: reduce-
// scatter, then a parameter all-gather after the step) of the stage's parameters over the DP
// group, in --ddp-bucket-size buckets per chunk with --overlap-grad-reduce, the gather partly
// hidden behind the next forward with --overlap-param-gather; the tied-embedding all-reduce
// between first and last stage (pp > 1); the optimizer update (memory-bound, over the stage's
// parameters or their 1/dp shard and fp8's weight casts, or the profile's host.optimizer_step_us
// where the host takes longer); static_bytes from memory_model.h without activations.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"
#include "simulator/costs.h"

namespace ptdp {

// Per pipeline stage and per micro-batch (all its chunks): where the time of F, B and W goes.
struct StageBreakdown {
  double compute_s = 0;  // kernels (GEMMs and memory-bound), including recomputation
  double tp_comm_s = 0;  // tensor-parallel collectives inside F, B and W (their exposed part)
  double tp_comm_hidden_s = 0;  // and the part --tp-comm-overlap pipelines behind the GEMMs
  double cp_comm_s = 0;  // context-parallel exchanges of the attention inside F and B (exposed)
  double cp_comm_hidden_s = 0;  // and the part ring attention hides behind its kernels
  double ep_comm_s = 0;         // MoE token dispatch and combine (expert-parallel groups)
  double etp_comm_s = 0;        // the part of ep_comm_s over the expert tensor-parallel group
  double pp_comm_s = 0;         // sends of activations and gradients (whether or not they block)
  double recompute_s = 0;       // the part of compute_s + tp_comm_s that recomputation adds
  double overhead_s = 0;        // the part of compute_s the GPU waits for the host (launch-bound)
  double dp_comm_s = 0;         // Megatron-FSDP's per-layer gathers and reduce-scatters (busy)
  double dp_exposed_s = 0;      // the part of them F, B and W wait for
  // The bytes of those collectives per GPU (the nccl-tests size S of each: the full gathered
  // size, an all-to-all's what the rank holds, a send's what it sends; ring steps each), over
  // groups of more than one rank: tensor parallel (with the embedding and output parts), context
  // parallel, expert parallel (with the all-gather dispatcher's EP x ETP group), expert tensor
  // parallel, pipeline sends, Megatron-FSDP.
  double tp_comm_bytes = 0, cp_comm_bytes = 0, ep_comm_bytes = 0, etp_comm_bytes = 0;
  double pp_comm_bytes = 0, dp_comm_bytes = 0;
};

struct StepEstimate {
  StepCosts costs;                     // for SimulateStep (event_sim.h)
  std::vector<StageBreakdown> stages;  // by pipeline stage
  int64_t microbatches = 0;            // m = GBS / (MBS * DP)
  double model_flops = 0;              // per step, all GPUs (flops.h)
  double hardware_flops = 0;           // per step, all GPUs, with recomputation
};

// What EstimateStep works out for a layer of each kind, and for the embedding and
// output parts, depends on fewer knobs than the whole configuration: tp, cp and its exchange,
// the micro-batch, sequence parallelism, recompute, whether the backward is split (zb-h1), TP
// communication overlap, whether pp > 1 (the output layer's copy of a tied embedding) and where
// the TP and CP groups sit. A search over many configurations of one model, cluster, training
// and software passes one cache to share them (and the prepared efficiency tables); the results
// are the same as without it. Not thread-safe.
class LayerCostCache {
 public:
  LayerCostCache();
  ~LayerCostCache();
  LayerCostCache(const LayerCostCache&) = delete;
  LayerCostCache& operator=(const LayerCostCache&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Requires a configuration that passes CheckParallelConfig (megatron/rules.h) and a cluster
// with a GEMM efficiency table; violations are InternalErrors. A cache, when given, must only
// ever see one model, cluster and training (and options differing only in the data-parallel
// overlap flags and bucket size).
StepEstimate EstimateStep(const ModelSpec& model, const ClusterSpec& cluster,
                          const TrainingSpec& training, const ParallelConfig& parallel,
                          const CostOptions& options = {}, LayerCostCache* cache = nullptr);

// What a search needs of EstimateStep besides the memory: StepTimeLowerBound (bounds.h) of
// EstimateStep(..., &cache).costs for the layout's schedule, the same number, without the
// per-stage copies and breakdowns (repeated virtual stages and pipeline stages are read once).
double EstimateStepLowerBound(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainingSpec& training, const ParallelConfig& parallel,
                              const CostOptions& options, LayerCostCache& cache);

// Closed-form step time, to compare with the event simulation. With T_r the time of one
// micro-batch through every chunk of stage r (F + B + W, blocking sends included), W_r its
// weight-gradient part and bars the means over stages:
//   pipeline = m max_r T_r + (p - 1)/v (T_bar - [zb-h1] 2 W_bar) + (p - 1)(send_f + send_b)_bar
// (1F1B and GPipe: bubble (p - 1)(tf + tb); interleaved: divided by v; ZB-H1: (p - 1)(tf + tb -
// 2 tw); Narayanan et al. 2021 and Qi et al. 2023, shared/reference/formulas.md), then the
// largest stage's gradient reduction (only its last chunk's share when overlapped), embedding
// reduction, optimizer and parameter gather.
double ClosedFormStepTime(const StepCosts& costs, Schedule kind, int stages, int64_t microbatches,
                          int chunks);

}  // namespace ptdp
