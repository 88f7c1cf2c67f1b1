// `ptdp validate`'s comparison: what the executor measured against what the simulator
// predicts for the same plan, figure by figure, as a table for people and as JSON.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/cost_options.h"
#include "core/plan.h"
#include "executor/comm/standin.h"
#include "executor/train/trainer.h"
#include "simulator/simulate.h"

namespace ptdp {

// One figure, measured and simulated. ratio = simulated / measured; error = ratio - 1 (the
// prediction's relative error; positive: the simulator predicts more), or for a fraction (the
// bubble, where a relative error of values near 0 means little) the difference simulated -
// measured. Ratio and relative error are NaN (JSON null, "-" in the table) when the measured
// value is 0.
struct Compared {
  double measured = 0;
  double simulated = 0;
  bool difference = false;  // error is simulated - measured
  double ratio() const;
  double error() const;
};

// The error as the table prints it: "+1.2%" (a difference: "+0.012"); "-" when undefined.
std::string ErrorCell(const Compared& c);

struct StageComparison {
  int stage = 0;
  Compared busy_s;  // compute per step: F, B, W time (measured: mean over the stage's ranks)
  // One micro-batch through one of the stage's model chunks: the forward, and the backward (B
  // plus W). Measured: mean over the measured steps' operations of the stage's ranks (from the
  // executor's trace events; 0 when there are none); simulated: the cost model's, mean over the
  // stage's chunks.
  Compared forward_s;
  Compared backward_s;
  // Data-parallel communication the stage waits for per step (simulator's
  // StageResult::dp_exposed_s): the gradient reduction's and embedding sum's tail after the
  // stage's last pipeline operation, and the parameter gather (all of it, or with
  // --overlap-param-gather the time the next forward waited for it). Measured from the trace
  // events, mean over the stage's ranks and the measured steps.
  Compared dp_exposed_s;
  // Kernel time per step by class (executor/backend/kernel_clock.h, indexed by KernelClass: GEMM,
  // attention, memory-bound, optimizer). Measured: the backend's clock, mean over the stage's
  // ranks and the measured steps; simulated: simulator/kernel_classes.h. Only when the run
  // timed its kernels (ExecuteOptions::time_kernel_classes).
  bool has_kernels = false;
  std::array<Compared, kNumKernelClasses> kernels_s{};
  // Peak bytes by category; measured: the largest among the stage's ranks, from the executor's
  // allocator accounting.
  Compared weights_bytes;
  Compared gradients_bytes;
  Compared optimizer_bytes;
  Compared activations_bytes;
  // Measured: the peak of the accounted sum (with communication buffers and workspaces);
  // simulated: weights + gradients + optimizer + activations, without the profile's allowances.
  Compared total_bytes;
  double measured_other_bytes = 0;       // communication buffers + workspaces (peaks)
  double simulated_allowance_bytes = 0;  // profile's reserved bytes + fragmentation
  double simulated_peak_bytes = 0;       // total + allowances
  // A GPU backend: the most its caching allocator held from the device (over the stage's
  // ranks), against simulated_peak_bytes; 0 on the CPU.
  double measured_reserved_bytes = 0;
};

// `--profile-rank`: one group's stand-in exchanges (executor/comm/standin.h) per step, the bytes
// against the simulator's for the same group of the rank's stage (nccl-tests sizes).
struct StandInComparison {
  std::string group;   // "tp", "cp", "ep", "etp", "pp" (sent), "dp_cp", "edp", "embedding", ...
  Compared bytes;      // simulated NaN where the simulator has no figure for the group
  double seconds = 0;  // the stand-in copies' time (not a network's)
  int64_t calls = 0;
};

struct ValidationReport {
  std::string plan_path;
  std::string model;
  std::string layout;           // LayoutLine
  std::string backend = "cpu";  // the executor's backend (cpu or cuda)
  std::string profile;          // the profile's name
  std::string profile_source;   // "--cluster FILE" or "the plan's cluster section"
  int ranks = 0;
  int hosts = 0;
  int simulated_gpus_per_node = 0;
  int64_t first_step = 0;
  int64_t steps_run = 0;
  std::vector<double> step_times_s;
  Compared step_time_s;  // measured: median of the steps after the run's first
  // First operation start to last operation end; measured: median as for the step time.
  Compared pipeline_s;
  Compared bubble_fraction;  // measured: mean over the steps after the first; error: difference
  std::vector<StageComparison> stages;
  std::vector<std::string> notes;  // what was adjusted to simulate the run as executed
  // `--profile-rank R`: the rank measured alone (its stage's rows only; no step, pipeline or
  // bubble rows: one rank with stand-in exchanges has no pipeline), and its exchanges.
  int profile_rank = -1;
  std::vector<StandInComparison> stand_in;
};

// Fills report.stand_in from what a profiled rank's stand-ins carried per measured step
// (executor/comm/standin.h PerMeasuredStep) and the simulation of its stage.
void AddStandInRows(ValidationReport& report, const Plan& executed,
                    const SimulationReport& simulated, const StandInTallies& per_step);

// The simulator's settings for what the CPU executor does: non-blocking sends (Megatron's
// --overlap-p2p-communication), gradients reduced after the backward, blocking tensor-parallel
// collectives (no asynchronous input-gradient all-reduce), fp32 gradients accumulated by the
// weight-gradient GEMMs, MoE tokens dispatched by all-to-all. The attention is unfused here; the
// executor runs the plan's (unfused, or flash-style for flash and fused, and always with
// cp > 1), and `ptdp validate` sets it so.
CostOptions ExecutorCostOptions();

// `simulated` is SimulatePlan of `executed` (the plan as run: its cluster the profile, its
// precision fp32, its options ExecutorCostOptions()). `measured` needs its trace events
// (keep_trace) for the per-operation rows.
ValidationReport CompareRun(const Plan& executed, const ExecuteResult& measured,
                            const SimulationReport& simulated);

std::string ValidationText(const ValidationReport& report);

// {"plan", "model", "layout", "profile", "profile_source", "ranks", "hosts",
//  "simulated_gpus_per_node", "first_step", "steps_run", "measured_step_times_s": [...],
//  "step_time_s": {measured, simulated, ratio, error}, "pipeline_s": {...},
//  "bubble_fraction": {...}, "stages": [{"stage", "busy_s": {...}, "forward_s": {...},
//  "backward_s": {...}, "kernels_s": {"gemm": {...}, "attention", "memory_bound",
//  "optimizer"} (when timed), "memory_bytes": {"weights": {...}, "gradients",
//  "optimizer", "activations", "total", "measured_other", "simulated_allowance",
//  "simulated_peak"}}], "profile_rank": R or null, "stand_in": [{"group", "bytes": {...},
//  "seconds", "calls"}], "notes": [...], "simulation": <simulate --format json's object>}
std::string ValidationJson(const ValidationReport& report, const SimulationReport& simulated);

}  // namespace ptdp
