// The train room (executor/train/): training a plan with its exact layout: the entry points
// here, the schedule runner (pipeline.h), optimizer, data, checkpoints and loss scaling; it
// builds on model/ and the rooms below it.
//
// The executor's entry points: check that a plan can run here, then train it with its exact
// layout, one call per rank, and report what was measured.
//
//   CheckExecutable(plan, options)            -> reasons it cannot run (empty: it can); call it
//                                                before allocating anything, on every rank
//   Execute(plan, options, groups, backend)   -> per-step losses and times; on world rank 0 the
//                                                gathered measurements (trace, bubble, memory)
//   ResultsJson(plan, options, result)        -> the results file `ptdp execute` writes
//
// The model is the plan's GPT (core/model_spec.h) as Megatron-LM builds it (executor/model/gpt.h):
// GeLU or SwiGLU, LayerNorm or RMSNorm, learned or rotary positions, tied or untied embeddings,
// with or without biases, multi-head or grouped-query attention (with tp dividing the query
// groups), dense or with mixture-of-experts layers (executor/model/moe.h: dropless top-k routing,
// experts over ep and etp, shared experts; no biases, no auxiliary loss). Tokens are bytes, so
// model.vocab_size must be at least 256 with a text file (entries beyond 255 are never targets);
// math runs in the options' dtype whatever the plan's precision: fp32 (the default), fp64 (gradient
// checks), or bf16/fp16 mixed precision as Megatron-LM runs it (16-bit weights and activations,
// fp32 main_grad, main weights and moments, fp32 cross entropy; fp16 with the dynamic loss scaler;
// executor/model/gpt.h, optimizer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan.h"
#include "core/trace.h"
#include "executor/backend/backend.h"
#include "executor/backend/kernel_clock.h"
#include "executor/comm/topology.h"
#include "executor/train/loss_scaler.h"

namespace ptdp {

struct ExecuteOptions {
  int64_t steps = 10;         // train until this many optimizer steps are done (a resumed run too)
  std::string data = {};      // text file, "synthetic", or "" for kDefaultDataFile
  std::string save_dir = {};  // "" = no checkpoints
  int64_t save_interval = 0;  // save every K steps (and after the last); 0 = after the last only
  std::string load_dir = {};  // "" = start from the initialisation
  // Save over other runs' checkpoints in save_dir (--save-overwrite); otherwise each save
  // refuses a folder holding another run's (checkpoint.h), unless the run resumed from it.
  bool save_overwrite = false;
  bool keep_trace = false;         // keep every operation's interval for a Chrome trace
  bool gather_parameters = false;  // assemble the final full model on world rank 0
  // Validation loss (forward only, on one global batch of held-out sequences: the same ones
  // every time) every K steps and after the last; 0 = after the last only.
  int64_t eval_interval = 0;
  DType dtype = DType::kF32;           // kF32, kF64, kBF16 or kF16
  LossScalerOptions loss_scaler = {};  // fp16 only
  // The memory one rank's backend holds (a GPU's); 0: the ranks share this machine's memory;
  // -1: a GPU of unknown size (not checked).
  int64_t device_memory_bytes = 0;
  // Time the backend's kernels by class (executor/backend/kernel_clock.h) for `ptdp validate`'s
  // rows: each kernel bracketed by the backend's clock (host timestamps on the CPU, events
  // on a GPU).
  bool time_kernel_classes = false;
  // `ptdp execute --profile-rank R`: this process is rank R alone, its groups stand-ins
  // (executor/comm/standin.h); it reports its own figures as world rank 0 reports a job's.
  // -1: a job.
  int profile_rank = -1;
  // Test hooks for fault injection, called on every rank: before each step (1-based), and
  // after each pipeline operation of a step (its 1-based index in the stage's list).
  std::function<void(int64_t step)> on_step_begin = {};
  std::function<void(int64_t step, int64_t operation)> on_operation = {};
  // Called on every rank when a step's training is done (before its evaluation or checkpoint).
  std::function<void(int64_t step)> on_step_end = {};
  // Called during each checkpoint save, with the step and the phase (checkpoint.h).
  std::function<void(int64_t step, std::string_view phase)> on_save = {};
};

// Everything that stops the CPU executor from running `plan` (model features it does not
// implement, vocabulary vs. byte tokens, memory beyond this machine), as messages naming the
// plan key; empty when it can run. The plan itself has passed ParsePlanYaml's checks.
std::vector<std::string> CheckExecutable(const Plan& plan, const ExecuteOptions& options);

struct StepLog {
  int64_t step = 0;  // 1-based
  double loss = 0;   // mean per-token loss over the global batch
  double grad_norm = 0;
  double loss_scale = 1;        // fp16: the step's loss scale
  bool skipped = false;         // fp16: an overflow skipped the step's update
  double validation_loss = -1;  // when evaluated after this step, else -1
  double time_s = 0;            // wall time of the step on world rank 0 (training only)
  double pipeline_s = 0;        // first op start to last op end over all ranks (rank 0 only)
  double bubble_fraction = 0;   // mean over ranks of 1 - busy / pipeline_s (rank 0 only)
};

struct RankReport {
  int world_rank = 0;
  RankCoords coords;
  ExpertCoords expert;  // its place on the expert grid
  MemoryStats memory;
  double busy_s = 0;  // F, B and W time over the measured steps
  double recv_wait_s = 0;
  int64_t parameters = 0;  // elements of this rank's flat buffer (with padding)
  // A GPU backend's caching allocator: the peak it held from the device (0 on the CPU).
  int64_t peak_reserved_bytes = 0;
  // With time_kernel_classes: kernel seconds by class over the measured steps.
  KernelSeconds kernel_s{};
};

struct ExecuteResult {
  std::string backend = "cpu";  // Backend::name() of the run
  int profile_rank = -1;        // ExecuteOptions::profile_rank: the figures are that rank's alone
  int64_t first_step = 1;       // the first step this run executed (after a resume: saved step + 1)
  // The run's identity (checkpoint.h): the resumed checkpoint's, else new.
  std::string run_id;
  std::vector<StepLog> steps;
  std::string data_description;
  int64_t tokens_per_step = 0;
  double total_time_s = 0;
  // World rank 0 only: every rank's report, per-stage busy time per step (mean over the
  // stage's ranks and the measured steps) and the mean bubble fraction over measured steps
  // (all but the run's first step when it ran more than one: the first includes warm-up).
  std::vector<RankReport> ranks;
  std::vector<double> stage_busy_s;
  // With time_kernel_classes: per stage, kernel seconds by class per step (mean over the
  // stage's ranks and the measured steps); empty otherwise.
  std::vector<KernelSeconds> stage_kernel_s;
  double bubble_fraction = 0;
  int64_t measured_steps = 0;
  std::vector<TraceTrack> tracks;
  std::vector<TraceEvent> events;
  // With gather_parameters: the final model, name -> full row-major values
  // (executor/model/gpt_params.h).
  std::map<std::string, std::vector<double>> parameters;
};

// Collective over groups.world. Progress lines (one per step, on world rank 0) go to
// `progress` when not null.
ExecuteResult Execute(const Plan& plan, const ExecuteOptions& options, ProcessGroups& groups,
                      Backend& backend, std::ostream* progress);

std::string ResultsJson(const Plan& plan, const ExecuteOptions& options,
                        const ExecuteResult& result);

}  // namespace ptdp
