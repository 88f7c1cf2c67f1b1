// What the event simulator needs to time one training step, as the cost model computes it:
// durations and sizes per virtual stage (model chunk) and per pipeline stage. This header is
// the contract between the cost model (cost_model.h fills it) and the event simulator
// (event_sim.h plays a PipelineSchedule with it). Times in seconds, sizes in bytes.
#pragma once

#include <span>
#include <vector>

namespace ptdp {

// One model chunk on one pipeline stage (virtual stage c * p + r), for one micro-batch.
struct ChunkCosts {
  double forward_s = 0;          // F, including the tensor-parallel collectives inside it
  double backward_input_s = 0;   // B: input gradient, recomputed forward (if any), TP comm
  double backward_weight_s = 0;  // W: weight gradient. Schedules that do not split the backward
                                 // run B and W back to back as one operation.
  double send_forward_s = 0;     // F's output activation to the next virtual stage (0 if last)
  double send_backward_s = 0;    // B's input gradient to the previous virtual stage (0 if first)
  double activation_bytes = 0;   // stored from F until the backward releases it
  double weight_grad_activation_bytes = 0;  // the part of it W still needs after B (split only)
  // For pictures (the durations above already hold them): inside F and inside the backward (B
  // with its recomputation; W has none), summed over the chunk's layers, the context-parallel
  // exchanges (busy: with ring attention also what its kernels hide) and the MoE collectives
  // that carry tokens, or their gradients, to the experts' ranks (dispatch; in the backward the
  // combine's gradient) and back (combine); and the tensor-parallel collectives (exposed) of F,
  // of B with its recomputation, and of W (where the schedule runs B and W as one backward, the
  // backward's are B's and W's together: B's figure is less what W's kernels hide).
  double forward_cp_s = 0, forward_ep_dispatch_s = 0, forward_ep_combine_s = 0;
  double backward_cp_s = 0, backward_ep_dispatch_s = 0, backward_ep_combine_s = 0;
  double forward_tp_s = 0, backward_tp_s = 0, weight_tp_s = 0;
  // Megatron-FSDP's per-layer traffic of the chunk, on its own stream beside the kernels (busy;
  // the durations above hold what they wait for of it): the parameter gathers before F and
  // before the backward, the gradients' reduce-scatters after it (W's, where the backward is
  // split).
  double forward_fsdp_s = 0, backward_fsdp_s = 0, weight_fsdp_s = 0;
};

// One pipeline stage (all its chunks), once per step.
struct StageCosts {
  double dp_grad_sync_s = 0;     // gradient all-reduce (or reduce-scatter with the distributed
                                 // optimizer) over the data-parallel group, all buckets
  double dp_param_gather_s = 0;  // parameter all-gather after the step (distributed optimizer)
                                 // that the step waits for: all of it, or with
                                 // --overlap-param-gather what the next forward cannot hide
  double dp_param_gather_hidden_s = 0;  // the rest, run during the next step's forward
  double embedding_sync_s = 0;          // tied-embedding gradient all-reduce, first and last stage
  double optimizer_s = 0;          // the optimizer update of this stage's (shard of) parameters
  bool overlap_grad_sync = false;  // the DP reduction runs bucket by bucket in the backward
  int dp_buckets = 1;              // gradient buckets per model chunk (with overlap_grad_sync)
  double static_bytes = 0;         // weights + gradients + optimizer state + fixed buffers
  // For reports (the event simulator does not read them): the part of dp_grad_sync_s,
  // dp_param_gather_s and dp_param_gather_hidden_s over the expert data-parallel group (MoE
  // experts' parameters); the bytes per GPU (nccl-tests sizes) of those collectives, of the
  // expert group's part of them, and of the embedding sync.
  double expert_dp_comm_s = 0;
  double dp_comm_bytes = 0, expert_dp_comm_bytes = 0, embedding_sync_bytes = 0;
};

struct StepCosts {
  std::vector<ChunkCosts> chunks;  // indexed by virtual stage c * p + r
  std::vector<StageCosts> stages;  // indexed by pipeline stage r
};

// StepCosts with each repeated entry held once, as a search reads them without copying:
// virtual stage vs's costs are chunks[chunk_of[vs]], pipeline stage r's stages[stage_of[r]].
struct StepCostsView {
  std::span<const ChunkCosts> chunks;
  std::span<const int> chunk_of;
  std::span<const StageCosts> stages;
  std::span<const int> stage_of;
  const ChunkCosts& chunk(int vs) const { return chunks[chunk_of[vs]]; }
  const StageCosts& stage(int r) const { return stages[stage_of[r]]; }
};

}  // namespace ptdp
