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
// A StepListener (the optimizer's data-parallel overlap, optimizer.h) hears where each model
// chunk's parameters are first needed and where its gradients are complete.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/schedule.h"
#include "executor/backend/kernel_clock.h"
#include "executor/backend/measure.h"
#include "executor/comm/comm.h"
#include "executor/model/gpt.h"

namespace ptdp {

struct PipelineStepStats {
  double loss = 0;    // last stage: mean per-token loss over this rank's micro-batches
  double busy_s = 0;  // F, B and W operations (tensor-parallel communication included)
  double recv_wait_s = 0;
  double start_s = 0;  // recorder time when the step's first operation was about to run
  double end_s = 0;    // recorder time when the last operation ended
  int64_t ops = 0;
  // With ExecuteOptions::time_kernel_classes: the step's kernel seconds by class (its
  // micro-batches and its optimizer step; executor/backend/kernel_clock.h), else zeros.
  KernelSeconds kernel_s{};
};

// What the runner tells a listener as it plays a step (Megatron's forward pre-hooks and its
// gradient-ready hooks: per layer in the last backward of a chunk, per chunk after a split
// backward's last W).
class StepListener {
 public:
  virtual ~StepListener() = default;
  // Just before the step's first forward of model chunk `chunk` (its weights are read).
  virtual void BeforeFirstForward(int chunk) = 0;
  // During the step's last B of `chunk` (when the schedule does not split the backward): the
  // weight gradients of one part of it (executor/model/gpt_params.h kHeadPart, ...) are complete.
  virtual void PartDone(int chunk, int part) = 0;
  // Just after the step's last operation that adds to `chunk`'s weight gradients (its last B,
  // or its last W when the schedule splits the backward).
  virtual void GradientsDone(int chunk) = 0;
  // After every operation: exchanges in flight may progress.
  virtual void Progress() = 0;
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
  // The listener of every later RunStep (not owned; nullptr: none).
  void set_listener(StepListener* listener) { listener_ = listener; }

  // Forward only (evaluation): every micro-batch through every chunk, in (micro-batch, chunk)
  // order on every stage, which has no cyclic wait; nothing is kept. Returns the mean
  // per-token loss over the micro-batches on the last stage, 0 elsewhere.
  double Evaluate(const std::function<MicroBatch(int)>& batch);

 private:
  // One RunStep's state: the micro-batches drawn, activations and weight-gradient queues by
  // (micro-batch, chunk), and the figures gathered (pipeline.cc).
  struct Step;
  // The operations of RunStep, each run as its kind says; `index` is its place in the stage's
  // list and `mb` its micro-batch.
  void RunForward(Step& step, const PipelineOp& op, size_t index, const MicroBatch& mb);
  void RunBackward(Step& step, const PipelineOp& op, size_t index, const MicroBatch& mb);
  void RunWeightGrad(Step& step, const PipelineOp& op);
  // The activation (or its gradient) that `op` receives from its previous stage, timed.
  Tensor Receive(Step& step, const PipelineOp& op, bool backward, MemCategory category);
  // Posts `t` to `op`'s next stage (virtual stage `to_vs`); PollSends completes it.
  void Send(const PipelineOp& op, Tensor t, bool backward, int to_vs);
  std::string Label(const PipelineOp& op) const;  // "F3", or "F3.1" with several chunks
  // The end of the operation: a GPU backend runs kernels asynchronously, so after they end.
  double Done();
  int Tag(bool backward, int receiving_virtual_stage, int microbatch) const;
  void PollSends(bool wait_all);

  GptModel& model_;
  Backend& backend_;
  Comm& pp_;
  const PipelineSchedule& schedule_;
  Recorder& recorder_;
  struct Pending {
    std::unique_ptr<CommRequest> request;
    Tensor buffer;
    std::string name;
    double posted_s = 0;
    int microbatch = 0, chunk = 0;
  };
  std::vector<Pending> pending_;
  std::function<void(int64_t)> after_op_;
  StepListener* listener_ = nullptr;
};

}  // namespace ptdp
