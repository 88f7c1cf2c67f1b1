// The discrete-event simulator: plays a PipelineSchedule (core/schedule.h) with durations from
// the cost model (simulator/costs.h) and reports what one training step looks like.
//
// Model of the machine:
//  - one compute stream per pipeline stage runs the stage's operations in list order; an
//    operation starts when the stream is free and its input has arrived;
//  - point-to-point sends run on their own link (one per sending stage and direction), in the
//    order they are issued, so they do not block compute; a receive waits for the matching
//    send's start plus its transfer time;
//  - tensor-parallel collectives are inside the operations' durations;
//  - the data-parallel gradient reduction runs after the stage's last operation, or, overlapped
//    (--overlap-grad-reduce), bucket by bucket on its own stream as each model chunk's last
//    backward (or weight-gradient) operation fills the chunk's buckets; the tied-embedding
//    reduction follows it on first and last stage;
//  - the optimizer step starts on every stage when every stage has its gradients (Megatron's
//    global gradient-norm all-reduce synchronises them), then the parameter all-gather of the
//    distributed optimizer.
#pragma once

#include <string>
#include <vector>

#include "core/schedule.h"
#include "simulator/costs.h"

namespace ptdp {

struct SimulatedOp {
  int stage = 0;
  PipelineOp op;
  double start_s = 0;
  double end_s = 0;
  // Inside [start_s, end_s), summed over the operation's layers (costs.h ChunkCosts): the
  // context-parallel exchanges (busy), the MoE dispatch and combine, and the tensor-parallel
  // collectives (exposed; pictures only: the trace leaves them out).
  double cp_comm_s = 0;
  double ep_dispatch_s = 0;
  double ep_combine_s = 0;
  double tp_comm_s = 0;
  // Megatron-FSDP's parameter gathers and gradient reduce-scatters for the operation (busy, on
  // their own stream from its start; pictures and traces only).
  double fsdp_comm_s = 0;
};

struct SimulatedTransfer {
  int from_stage = 0;
  int to_stage = 0;
  PipelineOp op;  // the operation whose result is sent
  double start_s = 0;
  double end_s = 0;  // arrival at to_stage
};

// Per-stage work after the pipeline: DP gradient sync, embedding sync, optimizer, gather.
struct SimulatedPhase {
  int stage = 0;
  std::string name;      // "dp grad sync", "embedding sync", "optimizer", "dp param gather"
  std::string category;  // "dp-comm" | "optimizer"
  double start_s = 0;
  double end_s = 0;
};

struct StageResult {
  double busy_s = 0;           // compute stream busy during the pipeline phase
  double idle_s = 0;           // compute stream idle between 0 and pipeline_end_s
  double bubble_fraction = 0;  // idle_s / pipeline_end_s
  int peak_in_flight = 0;      // micro-batch chunks holding activations at once
  // Data-parallel communication the stage waits for after its last operation: the reduction's
  // tail (all of it when not overlapped), the embedding sync, the parameter gather.
  double dp_exposed_s = 0;
  double peak_activation_bytes = 0;
  // Activation bytes held over time: a step function, (time, bytes from then on).
  std::vector<std::pair<double, double>> activation_bytes_over_time;
};

struct SimResult {
  double step_time_s = 0;      // end of the last phase on any stage
  double pipeline_end_s = 0;   // end of the last pipeline operation on any stage
  double bubble_fraction = 0;  // mean over stages of StageResult::bubble_fraction
  double bubble_s = 0;         // mean over stages of StageResult::idle_s
  double optimizer_start_s = 0;
  std::vector<StageResult> stages;
  std::vector<SimulatedOp> ops;  // every operation, stage by stage in list order
  std::vector<SimulatedTransfer> transfers;
  std::vector<SimulatedPhase> phases;
  // The name pictures give the context-parallel exchange (SimulatePlan sets it from the
  // plan's --cp-comm-type).
  std::string cp_comm_label = "CP ring (KV)";
};

// Plays `schedule` with `costs` (costs.chunks has schedule.virtual_stages() entries, costs.stages
// has schedule.stages). Throws InternalError if the lists cannot complete (a schedule bug).
SimResult SimulateStep(const PipelineSchedule& schedule, const StepCosts& costs);

// Uniform costs for studying schedules: every chunk takes forward_s, backward_input_s and
// backward_weight_s, communication and the optimizer are free.
StepCosts UniformCosts(const PipelineSchedule& schedule, double forward_s, double backward_input_s,
                       double backward_weight_s);

}  // namespace ptdp
