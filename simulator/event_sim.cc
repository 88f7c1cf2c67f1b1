#include "simulator/event_sim.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace ptdp {
namespace {

constexpr double kNotYet = -1.0;

double Duration(const PipelineSchedule& s, const ChunkCosts& c, OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return c.forward_s;
    case OpKind::kBackward:
      return s.split_backward ? c.backward_input_s : c.backward_input_s + c.backward_weight_s;
    case OpKind::kWeightGrad:
      return c.backward_weight_s;
  }
  return 0;
}

// The state of the pipeline phase while the stages' operation lists play.
struct Pipeline {
  // arrival[kind][mb * V + vs]: when the input of (mb, vs) is available on its stage.
  std::vector<double> forward_arrival, backward_arrival;
  std::vector<double> clock;  // per stage: when its compute stream is free
  std::vector<double> link_free_forward, link_free_backward;  // per sending stage
  std::vector<size_t> next;                         // per stage: its next operation in list order
  std::vector<char> queued;                         // per stage: on the worklist
  std::vector<int> worklist;                        // stages that may be able to run
  std::vector<std::vector<SimulatedOp>> per_stage;  // the operations run, per stage
  // The last backward / weight-gradient op per virtual stage, the one whose end completes the
  // chunk's gradients: its start and end, for the overlapped DP sync.
  std::vector<double> chunk_grads_start, chunk_grads_done;
};

// Every stage idle at time 0, nothing arrived, every stage on the worklist (stage 0 first).
Pipeline StartPipeline(const PipelineSchedule& s) {
  const int p = s.stages, vstages = s.virtual_stages();
  Pipeline pl;
  pl.forward_arrival.assign(static_cast<size_t>(s.microbatches) * vstages, kNotYet);
  pl.backward_arrival.assign(pl.forward_arrival.size(), kNotYet);
  pl.clock.assign(p, 0.0);
  pl.link_free_forward.assign(p, 0.0);
  pl.link_free_backward.assign(p, 0.0);
  pl.next.assign(p, 0);
  pl.queued.assign(p, 1);
  pl.worklist.resize(p);
  for (int r = 0; r < p; ++r) pl.worklist[r] = p - 1 - r;
  pl.per_stage.resize(p);
  for (int r = 0; r < p; ++r) pl.per_stage[r].reserve(s.ops[r].size());
  pl.chunk_grads_start.assign(vstages, 0.0);
  pl.chunk_grads_done.assign(vstages, 0.0);
  return pl;
}

// Sends the result of `op` (stage r, virtual stage vs, ended at `end`) on the stage's link in
// its direction, and puts the receiving stage on the worklist.
void Send(const PipelineSchedule& s, const ChunkCosts& c, int r, int vs, const PipelineOp& op,
          double end, Pipeline& pl, SimResult& result) {
  const bool forward = op.kind == OpKind::kForward;
  double& link = forward ? pl.link_free_forward[r] : pl.link_free_backward[r];
  const double send_start = std::max(end, link);
  const double arrive = send_start + (forward ? c.send_forward_s : c.send_backward_s);
  link = arrive;
  const int peer_vs = forward ? vs + 1 : vs - 1;
  const size_t peer_slot = static_cast<size_t>(op.microbatch) * s.virtual_stages() + peer_vs;
  (forward ? pl.forward_arrival : pl.backward_arrival)[peer_slot] = arrive;
  result.transfers.push_back({r, op.send_to, op, send_start, arrive});
  if (!pl.queued[op.send_to]) {
    pl.queued[op.send_to] = 1;
    pl.worklist.push_back(op.send_to);
  }
}

// Runs `op`, stage r's next operation, and sends its result; false, running nothing, while its
// input has not arrived.
bool RunOp(const PipelineSchedule& s, const StepCosts& costs, int r, const PipelineOp& op,
           Pipeline& pl, SimResult& result) {
  const int vs = s.VirtualStage(r, op.chunk);
  const size_t slot = static_cast<size_t>(op.microbatch) * s.virtual_stages() + vs;
  double ready = 0.0;
  if (op.recv_from != kNoStage) {
    ready = op.kind == OpKind::kForward ? pl.forward_arrival[slot] : pl.backward_arrival[slot];
    if (ready == kNotYet) return false;  // blocked until the producer runs
  }
  const ChunkCosts& c = costs.chunks[vs];
  const double start = std::max(pl.clock[r], ready);
  const double end = start + Duration(s, c, op.kind);
  pl.clock[r] = end;
  SimulatedOp& done = pl.per_stage[r].emplace_back(SimulatedOp{r, op, start, end});
  if (op.kind == OpKind::kForward) {
    done.cp_comm_s = c.forward_cp_s;
    done.ep_dispatch_s = c.forward_ep_dispatch_s;
    done.ep_combine_s = c.forward_ep_combine_s;
    done.tp_comm_s = c.forward_tp_s;
    done.fsdp_comm_s = c.forward_fsdp_s;
  } else if (op.kind == OpKind::kBackward) {
    done.cp_comm_s = c.backward_cp_s;
    done.ep_dispatch_s = c.backward_ep_dispatch_s;
    done.ep_combine_s = c.backward_ep_combine_s;
    done.tp_comm_s = c.backward_tp_s + (s.split_backward ? 0 : c.weight_tp_s);
    done.fsdp_comm_s = c.backward_fsdp_s + (s.split_backward ? 0 : c.weight_fsdp_s);
  } else {
    done.tp_comm_s = c.weight_tp_s;
    done.fsdp_comm_s = c.weight_fsdp_s;
  }
  result.stages[r].busy_s += end - start;
  if (op.kind == (s.split_backward ? OpKind::kWeightGrad : OpKind::kBackward)) {
    pl.chunk_grads_start[vs] = start;
    pl.chunk_grads_done[vs] = end;
  }
  if (op.send_to != kNoStage) Send(s, c, r, vs, op, end, pl, result);
  return true;
}

// Plays every stage's list until each is done or blocked; throws InternalError when a stage
// waits forever (a schedule bug).
void PlayPipeline(const PipelineSchedule& s, const StepCosts& costs, Pipeline& pl,
                  SimResult& result) {
  while (!pl.worklist.empty()) {
    const int r = pl.worklist.back();
    pl.worklist.pop_back();
    pl.queued[r] = 0;
    const auto& ops = s.ops[r];
    while (pl.next[r] < ops.size() && RunOp(s, costs, r, ops[pl.next[r]], pl, result)) ++pl.next[r];
  }
  for (int r = 0; r < s.stages; ++r) {
    if (pl.next[r] != s.ops[r].size()) {
      const PipelineOp& op = s.ops[r][pl.next[r]];
      throw InternalError(
          fmt::format("{} schedule p={} m={} v={}: stage {} waits forever at "
                      "{}{}.{}",
                      Name(s.kind), s.stages, s.microbatches, s.chunks, r, Letter(op.kind),
                      op.microbatch, op.chunk));
    }
  }
}

// Activation memory over time on stage r: F holds its chunk's activations from its start; B
// releases them at its end (all of them, or all but what W needs when the backward is split); W
// releases the rest.
void ActivationMemory(const PipelineSchedule& s, const StepCosts& costs, int r,
                      const std::vector<SimulatedOp>& ops, StageResult& st) {
  std::vector<std::pair<double, double>> deltas;
  deltas.reserve(ops.size());
  int held = 0;
  for (const SimulatedOp& o : ops) {
    const ChunkCosts& c = costs.chunks[s.VirtualStage(r, o.op.chunk)];
    const double kept = s.split_backward ? c.weight_grad_activation_bytes : 0.0;
    switch (o.op.kind) {
      case OpKind::kForward:
        deltas.emplace_back(o.start_s, c.activation_bytes);
        st.peak_in_flight = std::max(st.peak_in_flight, ++held);
        break;
      case OpKind::kBackward:
        deltas.emplace_back(o.end_s, -(c.activation_bytes - kept));
        if (!s.split_backward) --held;
        break;
      case OpKind::kWeightGrad:
        deltas.emplace_back(o.end_s, -kept);
        --held;
        break;
    }
  }
  // Releases at time t happen before allocations at the same t (a stream frees, then runs).
  std::stable_sort(deltas.begin(), deltas.end(), [](const auto& a, const auto& b) {
    return a.first < b.first || (a.first == b.first && a.second < b.second);
  });
  double bytes = 0;
  for (const auto& [t, delta] : deltas) {
    bytes += delta;
    if (!st.activation_bytes_over_time.empty() && st.activation_bytes_over_time.back().first == t) {
      st.activation_bytes_over_time.back().second = bytes;
    } else {
      st.activation_bytes_over_time.emplace_back(t, bytes);
    }
    st.peak_activation_bytes = std::max(st.peak_activation_bytes, bytes);
  }
}

// Pipeline phase figures: its end, each stage's idle time and bubble, their means, and each
// stage's activation memory.
void PipelineFigures(const PipelineSchedule& s, const StepCosts& costs, const Pipeline& pl,
                     SimResult& result) {
  const int p = s.stages;
  result.pipeline_end_s = *std::max_element(pl.clock.begin(), pl.clock.end());
  for (int r = 0; r < p; ++r) {
    StageResult& st = result.stages[r];
    // A stage busy all along sums its operations in another order than its clock: the
    // difference can be an ulp below zero, which is none.
    st.idle_s = std::max(0.0, result.pipeline_end_s - st.busy_s);
    st.bubble_fraction = result.pipeline_end_s > 0 ? st.idle_s / result.pipeline_end_s : 0;
    result.bubble_fraction += st.bubble_fraction / p;
    result.bubble_s += st.idle_s / p;
    ActivationMemory(s, costs, r, pl.per_stage[r], st);
  }
}

// Megatron's bucketed reduction (--overlap-grad-reduce) on stage r: each chunk's gradients fill
// dp_buckets buckets during the chunk's last backward, the layers' in reverse order, taken as
// even through the operation; a bucket's reduction starts when it is full, on one data-parallel
// stream per stage, in the order the buckets fill. Returns when the stream is done.
double OverlappedGradSync(const PipelineSchedule& s, const StageCosts& sc, int r,
                          const Pipeline& pl, SimResult& result) {
  const int k = std::max(1, sc.dp_buckets);
  std::vector<double> ready;
  for (int c = 0; c < s.chunks; ++c) {
    const int vs = s.VirtualStage(r, c);
    const double begin = pl.chunk_grads_start[vs], span = pl.chunk_grads_done[vs] - begin;
    for (int b = 1; b <= k; ++b) ready.push_back(begin + span * b / k);
  }
  std::sort(ready.begin(), ready.end());
  const double each = sc.dp_grad_sync_s / (s.chunks * k);
  double stream = 0;
  for (double d : ready) {
    const double start = std::max(stream, d);
    stream = start + each;
    result.phases.push_back({r, "dp grad sync", "dp-comm", start, stream});
  }
  return stream;
}

// Stage r's gradient reduction (overlapped per chunk or after its last op), then the embedding
// sync; returns when its gradients are ready.
double GradientSync(const PipelineSchedule& s, const StepCosts& costs, int r, const Pipeline& pl,
                    SimResult& result) {
  const StageCosts& sc = costs.stages[r];
  double t = pl.clock[r];
  if (sc.dp_grad_sync_s > 0) {
    if (sc.overlap_grad_sync) {
      t = std::max(pl.clock[r], OverlappedGradSync(s, sc, r, pl, result));
    } else {
      result.phases.push_back({r, "dp grad sync", "dp-comm", t, t + sc.dp_grad_sync_s});
      t += sc.dp_grad_sync_s;
    }
  }
  if (sc.embedding_sync_s > 0) {
    result.phases.push_back({r, "embedding sync", "dp-comm", t, t + sc.embedding_sync_s});
    t += sc.embedding_sync_s;
  }
  result.stages[r].dp_exposed_s = t - pl.clock[r];
  return t;
}

// From the global synchronisation point on every stage: the optimizer, then the distributed
// optimizer's parameter gather; sets the step time.
void OptimizerPhases(const StepCosts& costs, SimResult& result) {
  result.step_time_s = result.optimizer_start_s;
  for (int r = 0; r < static_cast<int>(costs.stages.size()); ++r) {
    const StageCosts& sc = costs.stages[r];
    double t = result.optimizer_start_s;
    if (sc.optimizer_s > 0) {
      result.phases.push_back({r, "optimizer", "optimizer", t, t + sc.optimizer_s});
      t += sc.optimizer_s;
    }
    if (sc.dp_param_gather_s > 0) {
      result.phases.push_back({r, "dp param gather", "dp-comm", t, t + sc.dp_param_gather_s});
      t += sc.dp_param_gather_s;
      result.stages[r].dp_exposed_s += sc.dp_param_gather_s;
    }
    result.step_time_s = std::max(result.step_time_s, t);
  }
}

}  // namespace

StepCosts UniformCosts(const PipelineSchedule& schedule, double forward_s, double backward_input_s,
                       double backward_weight_s) {
  StepCosts costs;
  costs.chunks.assign(schedule.virtual_stages(), ChunkCosts{.forward_s = forward_s,
                                                            .backward_input_s = backward_input_s,
                                                            .backward_weight_s = backward_weight_s,
                                                            .activation_bytes = 1.0});
  costs.stages.assign(schedule.stages, StageCosts{});
  return costs;
}

SimResult SimulateStep(const PipelineSchedule& s, const StepCosts& costs) {
  const int p = s.stages;
  PTDP_CHECK(static_cast<int>(costs.chunks.size()) == s.virtual_stages());
  PTDP_CHECK(static_cast<int>(costs.stages.size()) == p);

  SimResult result;
  result.stages.resize(p);
  size_t total_ops = 0;
  for (const auto& ops : s.ops) total_ops += ops.size();
  result.ops.reserve(total_ops);
  Pipeline pl = StartPipeline(s);
  PlayPipeline(s, costs, pl, result);
  PipelineFigures(s, costs, pl, result);

  // After the pipeline: gradient reduction and embedding sync per stage, then a global
  // synchronisation point and the optimizer.
  std::vector<double> grads_ready(p, 0.0);
  for (int r = 0; r < p; ++r) grads_ready[r] = GradientSync(s, costs, r, pl, result);
  result.optimizer_start_s = *std::max_element(grads_ready.begin(), grads_ready.end());
  OptimizerPhases(costs, result);
  for (auto& ops : pl.per_stage) {
    result.ops.insert(result.ops.end(), ops.begin(), ops.end());
  }
  return result;
}

}  // namespace ptdp
