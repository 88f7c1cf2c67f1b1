#include "executor/train/pipeline.h"

#include <fmt/format.h>

#include "core/error.h"
#include "executor/backend/cuda.h"

namespace ptdp {

PipelineRunner::PipelineRunner(GptModel& model, Backend& backend, Comm& pp,
                               const PipelineSchedule& schedule, Recorder& recorder)
    : model_(model), backend_(backend), pp_(pp), schedule_(schedule), recorder_(recorder) {
  PTDP_CHECK(pp.size() == schedule.stages);
  if (schedule.stages > 1) {
    const int64_t tags = 2 * int64_t{schedule.virtual_stages()} * schedule.microbatches;
    if (tags - 1 > pp.max_tag()) {
      throw InputError({"", 0, "parallel"},
                       fmt::format("the schedule needs {} message tags, this MPI allows {}", tags,
                                   int64_t{pp.max_tag()} + 1));
    }
  }
}

int PipelineRunner::Tag(bool backward, int vs, int mb) const {
  return ((backward ? 1 : 0) * schedule_.virtual_stages() + vs) * schedule_.microbatches + mb;
}

void PipelineRunner::PollSends(bool wait_all) {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    bool done = p.request->Test();
    if (!done && wait_all) {
      p.request->Wait();
      done = true;
    }
    if (done) {
      recorder_.Add(p.name, "send", p.posted_s, recorder_.Now(), p.microbatch, p.chunk);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

struct PipelineRunner::Step {
  Step(const std::function<MicroBatch(int)>& batch, double loss_scale)
      : batch(batch), loss_scale(loss_scale) {}

  const std::function<MicroBatch(int)>& batch;
  const double loss_scale;
  std::map<std::pair<int, int>, ChunkActs> acts;
  std::map<std::pair<int, int>, WeightGradQueue> queues;
  std::map<int, MicroBatch> batches;
  // Per model chunk: the index of its first F and of its last B or W in this stage's list.
  std::vector<size_t> first_forward, last_grad;
  PipelineStepStats stats;
  double loss_sum = 0;
  int losses = 0;

  // Micro-batch i, drawn the first time an operation asks for it.
  const MicroBatch& Micro(int i) {
    auto it = batches.find(i);
    if (it == batches.end()) it = batches.emplace(i, batch(i)).first;
    return it->second;
  }
};

PipelineStepStats PipelineRunner::RunStep(const std::function<MicroBatch(int)>& batch,
                                          double loss_scale) {
  const std::vector<PipelineOp>& ops = schedule_.ops[static_cast<size_t>(pp_.rank())];
  Step step(batch, loss_scale);
  step.first_forward.assign(static_cast<size_t>(schedule_.chunks), ops.size());
  step.last_grad.assign(static_cast<size_t>(schedule_.chunks), ops.size());
  for (size_t i = ops.size(); i-- > 0;) {
    const auto c = static_cast<size_t>(ops[i].chunk);
    if (ops[i].kind == OpKind::kForward) {
      step.first_forward[c] = i;
    } else if (step.last_grad[c] == ops.size()) {
      step.last_grad[c] = i;
    }
  }
  step.stats.start_s = Done();
  for (size_t index = 0; index < ops.size(); ++index) {
    const PipelineOp& op = ops[index];
    const MicroBatch& mb = step.Micro(op.microbatch);
    if (op.kind == OpKind::kForward) {
      RunForward(step, op, index, mb);
    } else if (op.kind == OpKind::kBackward) {
      RunBackward(step, op, index, mb);
    } else {
      RunWeightGrad(step, op);
    }
    if (listener_ != nullptr) {
      if (step.last_grad[static_cast<size_t>(op.chunk)] == index) {
        listener_->GradientsDone(op.chunk);
      }
      listener_->Progress();
    }
    ++step.stats.ops;
    if (after_op_) after_op_(step.stats.ops);
    PollSends(false);
  }
  PollSends(true);
  PTDP_CHECK(step.acts.empty() && step.queues.empty());
  step.stats.end_s = recorder_.Now();
  step.stats.loss = step.losses > 0 ? step.loss_sum / step.losses : 0;
  return step.stats;
}

void PipelineRunner::RunForward(Step& step, const PipelineOp& op, size_t index,
                                const MicroBatch& mb) {
  const int vs = schedule_.VirtualStage(pp_.rank(), op.chunk);
  const std::pair<int, int> key{op.microbatch, op.chunk};
  Tensor input;
  if (op.recv_from != kNoStage) input = Receive(step, op, false, MemCategory::kActivations);
  if (listener_ != nullptr && step.first_forward[static_cast<size_t>(op.chunk)] == index) {
    listener_->BeforeFirstForward(op.chunk);
  }
  const double t0 = recorder_.Now();
  double loss = 0;
  Tensor out = model_.Forward(op.chunk, std::move(input), mb, &step.acts[key], &loss);
  step.stats.busy_s += recorder_.Add(Label(op), "forward", t0, Done(), op.microbatch, op.chunk);
  if (vs == schedule_.virtual_stages() - 1) {
    step.loss_sum += loss / static_cast<double>(model_.rows());
    ++step.losses;
  }
  if (op.send_to != kNoStage) Send(op, std::move(out), false, vs + 1);
}

void PipelineRunner::RunBackward(Step& step, const PipelineOp& op, size_t index,
                                 const MicroBatch& mb) {
  const int vs = schedule_.VirtualStage(pp_.rank(), op.chunk);
  const std::pair<int, int> key{op.microbatch, op.chunk};
  Tensor grad;
  if (op.recv_from != kNoStage) grad = Receive(step, op, true, MemCategory::kCommBuffers);
  const double t0 = recorder_.Now();
  auto it = step.acts.find(key);
  PTDP_CHECK(it != step.acts.end());
  WeightGradQueue& queue = step.queues[key];
  std::function<void(int)> part_done;
  if (listener_ != nullptr && step.last_grad[static_cast<size_t>(op.chunk)] == index) {
    part_done = [this, chunk = op.chunk](int part) { listener_->PartDone(chunk, part); };
  }
  Tensor dx = model_.Backward(op.chunk, it->second, std::move(grad), mb, step.loss_scale, queue,
                              schedule_.split_backward, part_done);
  step.acts.erase(it);
  if (!schedule_.split_backward) step.queues.erase(key);
  step.stats.busy_s += recorder_.Add(Label(op), "backward", t0, Done(), op.microbatch, op.chunk);
  if (op.send_to != kNoStage) Send(op, std::move(dx), true, vs - 1);
}

void PipelineRunner::RunWeightGrad(Step& step, const PipelineOp& op) {
  const double t0 = recorder_.Now();
  auto it = step.queues.find(std::pair<int, int>{op.microbatch, op.chunk});
  PTDP_CHECK(it != step.queues.end());
  it->second.Run(backend_);
  step.queues.erase(it);
  step.stats.busy_s += recorder_.Add(Label(op), "weight-grad", t0, Done(), op.microbatch, op.chunk);
}

Tensor PipelineRunner::Receive(Step& step, const PipelineOp& op, bool backward,
                               MemCategory category) {
  const int vs = schedule_.VirtualStage(pp_.rank(), op.chunk);
  Tensor t(backend_, model_.dtype(), {model_.local_rows(), model_.hidden()}, category);
  const double t0 = recorder_.Now();
  pp_.Recv(t.span(), op.recv_from, Tag(backward, vs, op.microbatch));
  step.stats.recv_wait_s += recorder_.Add(fmt::format("recv {}", Label(op)), "recv", t0,
                                          recorder_.Now(), op.microbatch, op.chunk);
  return t;
}

void PipelineRunner::Send(const PipelineOp& op, Tensor t, bool backward, int to_vs) {
  Pending p;
  p.posted_s = recorder_.Now();
  p.request = pp_.Isend(t.span(), op.send_to, Tag(backward, to_vs, op.microbatch));
  p.buffer = std::move(t);
  p.name = fmt::format("send {}", Label(op));
  p.microbatch = op.microbatch;
  p.chunk = op.chunk;
  pending_.push_back(std::move(p));
}

std::string PipelineRunner::Label(const PipelineOp& op) const {
  std::string s = fmt::format("{}{}", Letter(op.kind), op.microbatch);
  if (schedule_.chunks > 1) s += fmt::format(".{}", op.chunk);
  return s;
}

double PipelineRunner::Done() {
  Synchronize(backend_);
  return recorder_.Now();
}

double PipelineRunner::Evaluate(const std::function<MicroBatch(int)>& batch) {
  const int r = pp_.rank(), p = schedule_.stages;
  const int last = schedule_.virtual_stages() - 1;
  double loss_sum = 0;
  int losses = 0;
  for (int mb = 0; mb < schedule_.microbatches; ++mb) {
    const MicroBatch micro = batch(mb);
    for (int c = 0; c < schedule_.chunks; ++c) {
      const int vs = schedule_.VirtualStage(r, c);
      Tensor input;
      if (vs > 0) {
        input = Tensor(backend_, model_.dtype(), {model_.local_rows(), model_.hidden()},
                       MemCategory::kActivations);
        pp_.Recv(input.span(), (r + p - 1) % p, Tag(false, vs, mb));
      }
      ChunkActs acts;
      double loss = 0;
      Tensor out = model_.Forward(c, std::move(input), micro, &acts, &loss);
      if (vs == last) {
        loss_sum += loss / static_cast<double>(model_.rows());
        ++losses;
      } else {
        Pending pending;
        pending.request = pp_.Isend(out.span(), (r + 1) % p, Tag(false, vs + 1, mb));
        pending.buffer = std::move(out);
        pending.name = fmt::format("send eval F{}", mb);
        pending.posted_s = recorder_.Now();
        pending_.push_back(std::move(pending));
      }
      PollSends(false);
    }
  }
  PollSends(true);
  return losses > 0 ? loss_sum / losses : 0;
}

}  // namespace ptdp
