// One configuration, simulated end to end: the cost model's durations (cost_model.h), the
// schedule's operations (core/schedule.h) played by the event simulator (event_sim.h), the
// memory per stage (memory_model.h), and the figures `ptdp simulate` and `ptdp plan` report.
#pragma once

#include <string>
#include <vector>

#include "core/cost_options.h"
#include "core/plan.h"
#include "core/schedule.h"
#include "simulator/cost_model.h"
#include "simulator/event_sim.h"
#include "simulator/memory_model.h"

namespace ptdp {

// Where a step's time goes, on the average pipeline stage (DESIGN.md's `breakdown`). Compute
// and the three kinds of communication are busy times; communication that runs beside compute
// (overlapped sends, an overlapped gradient reduction) is counted too, so the parts can add up
// to more than the step.
struct StepBreakdown {
  double compute_s = 0;         // kernels, recomputation included, all micro-batches
  double tp_comm_s = 0;         // tensor-parallel collectives inside F, B, W, exposed
  double tp_comm_hidden_s = 0;  // and what --tp-comm-overlap hides behind their GEMMs
  double cp_comm_s = 0;         // context-parallel exchanges of the attention, exposed
  double cp_comm_hidden_s = 0;  // and what ring attention hides behind its kernels
  double ep_comm_s = 0;         // MoE token dispatch and combine all-to-alls (or gathers)
  double etp_comm_s = 0;        // of ep_comm_s, over the expert tensor-parallel group
  double pp_comm_s = 0;         // pipeline sends
  double dp_comm_s = 0;     // gradient reduction, embedding sync, parameter gather (largest stage),
                            // Megatron-FSDP's per-layer gathers and reduce-scatters
  double dp_exposed_s = 0;  // the part of dp_comm_s the step waits for (largest stage); the rest
                            // runs beside the backward or the next forward
  double edp_comm_s = 0;    // of dp_comm_s, over the expert data-parallel group (MoE experts)
  double embedding_comm_s = 0;  // of dp_comm_s, the tied-embedding all-reduce
  double optimizer_s = 0;       // the optimizer step (largest stage)
  double bubble_s = 0;          // idle time of the compute stream in the pipeline phase
  // Bytes per GPU and step of the same collectives (cost_model.h StageBreakdown): the average
  // stage's, and for dp (with the embedding sync) and its parts the stage dp_comm_s is of.
  double tp_comm_bytes = 0, cp_comm_bytes = 0, ep_comm_bytes = 0, etp_comm_bytes = 0;
  double pp_comm_bytes = 0, dp_comm_bytes = 0, edp_comm_bytes = 0, embedding_comm_bytes = 0;
};

struct SimulationReport {
  PipelineSchedule schedule;
  StepEstimate estimate;
  MemoryEstimate memory;
  SimResult sim;
  StepBreakdown breakdown;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0;     // model FLOPs / (step x GPUs), in 1e12 FLOP/s
  double hardware_tflops_per_gpu = 0;  // with recomputation
  double mfu = 0;                      // model FLOPs utilisation against the profile's peak
  double bubble_fraction = 0;
  double peak_memory_bytes = 0;  // the largest stage
  std::string memory_problem;    // "" when every stage fits in the GPU's memory
};

// The largest stage's allocated peak (StageMemory::allocated_bytes; 0 without stages).
inline double PeakAllocated(const SimulationReport& r) {
  return r.memory.stages.empty() ? 0 : r.memory.stages[r.memory.largest_stage].allocated_bytes();
}

// Requires a plan that passes CheckParallelConfig (violations are InternalErrors). The software
// behaviour is the plan's `options`.
SimulationReport SimulatePlan(const Plan& plan);

// DESIGN.md's `simulate --format json` object: step_time_s, tokens_per_s, model_tflops_per_gpu,
// hardware_tflops_per_gpu, mfu, bubble_fraction, peak_memory_bytes, fits, stages[] (forward_s,
// backward_s, weights_bytes, gradients_bytes, optimizer_bytes, activations_bytes, peak_bytes,
// bubble_fraction, ...), breakdown{compute_s, tp_comm_s, cp_comm_s, pp_comm_s, dp_comm_s,
// optimizer_s, bubble_s, ...}; `indent` spaces before each line after the first.
std::string SimulationJson(const SimulationReport& report, int indent = 0);
// The same members without the enclosing braces, to merge into a larger object.
std::string SimulationJsonMembers(const SimulationReport& report, int indent = 0);

}  // namespace ptdp
