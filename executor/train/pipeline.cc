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

PipelineStepStats PipelineRunner::RunStep(const std::function<MicroBatch(int)>& batch,
                                          double loss_scale) {
  const int r = pp_.rank();
  const int last = schedule_.virtual_stages() - 1;
  std::map<std::pair<int, int>, ChunkActs> acts;
  std::map<std::pair<int, int>, WeightGradQueue> queues;
  std::map<int, MicroBatch> batches;
  auto micro = [&](int i) -> const MicroBatch& {
    auto it = batches.find(i);
    if (it == batches.end()) it = batches.emplace(i, batch(i)).first;
    return it->second;
  };
  auto label = [&](const PipelineOp& op) {
    std::string s = fmt::format("{}{}", Letter(op.kind), op.microbatch);
    if (schedule_.chunks > 1) s += fmt::format(".{}", op.chunk);
    return s;
  };

  // A GPU backend runs kernels asynchronously: an operation has ended when its kernels have.
  auto done = [&] {
    Synchronize(backend_);
    return recorder_.Now();
  };
  // Per model chunk: the index of its first F and of its last B or W in this stage's list.
  const std::vector<PipelineOp>& ops = schedule_.ops[static_cast<size_t>(r)];
  std::vector<size_t> first_forward(static_cast<size_t>(schedule_.chunks), ops.size());
  std::vector<size_t> last_grad(static_cast<size_t>(schedule_.chunks), ops.size());
  for (size_t i = ops.size(); i-- > 0;) {
    const auto c = static_cast<size_t>(ops[i].chunk);
    if (ops[i].kind == OpKind::kForward) {
      first_forward[c] = i;
    } else if (last_grad[c] == ops.size()) {
      last_grad[c] = i;
    }
  }
  PipelineStepStats stats;
  stats.start_s = done();
  double loss_sum = 0;
  int losses = 0;
  for (size_t index = 0; index < ops.size(); ++index) {
    const PipelineOp& op = ops[index];
    const int vs = schedule_.VirtualStage(r, op.chunk);
    const std::pair<int, int> key{op.microbatch, op.chunk};
    const MicroBatch& mb = micro(op.microbatch);
    auto receive = [&](bool backward, MemCategory category) {
      Tensor t(backend_, model_.dtype(), {model_.local_rows(), model_.hidden()}, category);
      const double t0 = recorder_.Now();
      pp_.Recv(t.span(), op.recv_from, Tag(backward, vs, op.microbatch));
      stats.recv_wait_s += recorder_.Add(fmt::format("recv {}", label(op)), "recv", t0,
                                         recorder_.Now(), op.microbatch, op.chunk);
      return t;
    };
    auto send = [&](Tensor t, bool backward, int to_vs) {
      Pending p;
      p.posted_s = recorder_.Now();
      p.request = pp_.Isend(t.span(), op.send_to, Tag(backward, to_vs, op.microbatch));
      p.buffer = std::move(t);
      p.name = fmt::format("send {}", label(op));
      p.microbatch = op.microbatch;
      p.chunk = op.chunk;
      pending_.push_back(std::move(p));
    };

    if (op.kind == OpKind::kForward) {
      Tensor input;
      if (op.recv_from != kNoStage) input = receive(false, MemCategory::kActivations);
      if (listener_ != nullptr && first_forward[static_cast<size_t>(op.chunk)] == index) {
        listener_->BeforeFirstForward(op.chunk);
      }
      const double t0 = recorder_.Now();
      double loss = 0;
      Tensor out = model_.Forward(op.chunk, std::move(input), mb, &acts[key], &loss);
      stats.busy_s += recorder_.Add(label(op), "forward", t0, done(), op.microbatch, op.chunk);
      if (vs == last) {
        loss_sum += loss / static_cast<double>(model_.rows());
        ++losses;
      }
      if (op.send_to != kNoStage) send(std::move(out), false, vs + 1);
    } else if (op.kind == OpKind::kBackward) {
      Tensor grad;
      if (op.recv_from != kNoStage) grad = receive(true, MemCategory::kCommBuffers);
      const double t0 = recorder_.Now();
      auto it = acts.find(key);
      PTDP_CHECK(it != acts.end());
      WeightGradQueue& queue = queues[key];
      std::function<void(int)> part_done;
      if (listener_ != nullptr && last_grad[static_cast<size_t>(op.chunk)] == index) {
        part_done = [this, chunk = op.chunk](int part) { listener_->PartDone(chunk, part); };
      }
      Tensor dx = model_.Backward(op.chunk, it->second, std::move(grad), mb, loss_scale, queue,
                                  schedule_.split_backward, part_done);
      acts.erase(it);
      if (!schedule_.split_backward) queues.erase(key);
      stats.busy_s += recorder_.Add(label(op), "backward", t0, done(), op.microbatch, op.chunk);
      if (op.send_to != kNoStage) send(std::move(dx), true, vs - 1);
    } else {
      const double t0 = recorder_.Now();
      auto it = queues.find(key);
      PTDP_CHECK(it != queues.end());
      it->second.Run(backend_);
      queues.erase(it);
      stats.busy_s += recorder_.Add(label(op), "weight-grad", t0, done(), op.microbatch, op.chunk);
    }
    if (listener_ != nullptr) {
      if (last_grad[static_cast<size_t>(op.chunk)] == index) listener_->GradientsDone(op.chunk);
      listener_->Progress();
    }
    ++stats.ops;
    if (after_op_) after_op_(stats.ops);
    PollSends(false);
  }
  PollSends(true);
  PTDP_CHECK(acts.empty() && queues.empty());
  stats.end_s = recorder_.Now();
  stats.loss = losses > 0 ? loss_sum / losses : 0;
  return stats;
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
