// The pipeline runner: plays this stage's list of a core/schedule.h PipelineSchedule, the same
// lists the simulator times. For each operation, in order:
//   F (micro-batch i, chunk c): receive the activation from op.recv_from (unless virtual stage
//     0), run the chunk's forward, send the output to op.send_to (unless the last virtual stage,
//     which computes the loss);
//   B: receive the output gradient (unless the last virtual stage), run the backward, send the
//     input gradient on (unless virtual stage 0); the weight gradients run at once unless the
//     schedule splits the backward;
//   W: run the weight gradients queued by B.
// Sends are non-blocking (their buffers are kept until they complete) and receives blocking, so
// a schedule whose lists have no cyclic wait (the simulator checks that) cannot deadlock.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/schedule.h"
#include "executor/comm.h"
#include "executor/gpt.h"
#include "executor/kernel_clock.h"
#include "executor/measure.h"

namespace ptdp {

struct PipelineStepStats {
  double loss = 0;    // last stage: mean per-token loss over this rank's micro-batches
  double busy_s = 0;  // F, B and W operations (tensor-parallel communication included)
  double recv_wait_s = 0;
  double start_s = 0;  // recorder time when the step's first operation was about to run
  double end_s = 0;    // recorder time when the last operation ended
  int64_t ops = 0;
  // With ExecuteOptions::time_kernel_classes: the step's kernel seconds by class (its
  // micro-batches and its optimizer step; kernel_clock.h), else zeros.
  KernelSeconds kernel_s{};
};

class PipelineRunner {
 public:
  // `pp` is the pipeline group (rank == stage). The runner uses the model's micro-batch shape.
  PipelineRunner(GptModel& model, Backend& backend, Comm& pp, const PipelineSchedule& schedule,
                 Recorder& recorder);

  // One step over micro-batches 0 .. m-1; `batch(i)` returns micro-batch i; `loss_scale` is one
  // token's weight in the step's objective (1 / (tokens per micro-batch * m * dp)).
  PipelineStepStats RunStep(const std::function<MicroBatch(int)>& batch, double loss_scale);

  // Called after each operation of RunStep with its 1-based index (tests inject faults here).
  void set_after_operation(std::function<void(int64_t)> hook) { after_op_ = std::move(hook); }

  // Forward only (evaluation): every micro-batch through every chunk, in (micro-batch, chunk)
  // order on every stage, which has no cyclic wait; nothing is kept. Returns the mean
  // per-token loss over the micro-batches on the last stage, 0 elsewhere.
  double Evaluate(const std::function<MicroBatch(int)>& batch);

 private:
  int Tag(bool backward, int receiving_virtual_stage, int microbatch) const;
  void PollSends(bool wait_all);

  GptModel& model_;
  Backend& backend_;
  Comm& pp_;
  const PipelineSchedule& schedule_;
  Recorder& recorder_;
  struct Pending {
    std::unique_ptr<SendRequest> request;
    Tensor buffer;
    std::string name;
    double posted_s = 0;
    int microbatch = 0, chunk = 0;
  };
  std::vector<Pending> pending_;
  std::function<void(int64_t)> after_op_;
};

}  // namespace ptdp
