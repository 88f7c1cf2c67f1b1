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
  const int p = s.stages, m = s.microbatches, vstages = s.virtual_stages();
  PTDP_CHECK(static_cast<int>(costs.chunks.size()) == vstages);
  PTDP_CHECK(static_cast<int>(costs.stages.size()) == p);

  // arrival[kind][mb * V + vs]: when the input of (mb, vs) is available on its stage.
  std::vector<double> forward_arrival(static_cast<size_t>(m) * vstages, kNotYet);
  std::vector<double> backward_arrival(forward_arrival.size(), kNotYet);
  std::vector<double> clock(p, 0.0);
  std::vector<double> link_free_forward(p, 0.0), link_free_backward(p, 0.0);
  std::vector<size_t> next(p, 0);
  std::vector<char> queued(p, 1);
  std::vector<int> worklist(p);
  for (int r = 0; r < p; ++r) worklist[r] = p - 1 - r;

  SimResult result;
  result.stages.resize(p);
  size_t total_ops = 0;
  for (const auto& ops : s.ops) total_ops += ops.size();
  result.ops.reserve(total_ops);
  std::vector<std::vector<SimulatedOp>> per_stage(p);
  for (int r = 0; r < p; ++r) per_stage[r].reserve(s.ops[r].size());
  // The last backward / weight-gradient op per (stage, chunk), the one whose end completes the
  // chunk's gradients: its start and end, for the overlapped DP sync.
  std::vector<double> chunk_grads_start(vstages, 0.0), chunk_grads_done(vstages, 0.0);

  while (!worklist.empty()) {
    const int r = worklist.back();
    worklist.pop_back();
    queued[r] = 0;
    const auto& ops = s.ops[r];
    while (next[r] < ops.size()) {
      const PipelineOp& op = ops[next[r]];
      const int vs = s.VirtualStage(r, op.chunk);
      const size_t slot = static_cast<size_t>(op.microbatch) * vstages + vs;
      double ready = 0.0;
      if (op.recv_from != kNoStage) {
        ready = op.kind == OpKind::kForward ? forward_arrival[slot] : backward_arrival[slot];
        if (ready == kNotYet) break;  // blocked until the producer runs
      }
      const ChunkCosts& c = costs.chunks[vs];
      const double start = std::max(clock[r], ready);
      const double end = start + Duration(s, c, op.kind);
      clock[r] = end;
      SimulatedOp& done = per_stage[r].emplace_back(SimulatedOp{r, op, start, end});
      if (op.kind == OpKind::kForward) {
        done.cp_comm_s = c.forward_cp_s;
        done.ep_dispatch_s = c.forward_ep_dispatch_s;
        done.ep_combine_s = c.forward_ep_combine_s;
      } else if (op.kind == OpKind::kBackward) {
        done.cp_comm_s = c.backward_cp_s;
        done.ep_dispatch_s = c.backward_ep_dispatch_s;
        done.ep_combine_s = c.backward_ep_combine_s;
      }
      result.stages[r].busy_s += end - start;
      if (op.kind == (s.split_backward ? OpKind::kWeightGrad : OpKind::kBackward)) {
        chunk_grads_start[vs] = start;
        chunk_grads_done[vs] = end;
      }
      if (op.send_to != kNoStage) {
        const bool forward = op.kind == OpKind::kForward;
        double& link = forward ? link_free_forward[r] : link_free_backward[r];
        const double send_start = std::max(end, link);
        const double arrive = send_start + (forward ? c.send_forward_s : c.send_backward_s);
        link = arrive;
        const int peer_vs = forward ? vs + 1 : vs - 1;
        const size_t peer_slot = static_cast<size_t>(op.microbatch) * vstages + peer_vs;
        (forward ? forward_arrival : backward_arrival)[peer_slot] = arrive;
        result.transfers.push_back({r, op.send_to, op, send_start, arrive});
        if (!queued[op.send_to]) {
          queued[op.send_to] = 1;
          worklist.push_back(op.send_to);
        }
      }
      ++next[r];
    }
  }
  for (int r = 0; r < p; ++r) {
    if (next[r] != s.ops[r].size()) {
      const PipelineOp& op = s.ops[r][next[r]];
      throw InternalError(
          fmt::format("{} schedule p={} m={} v={}: stage {} waits forever at "
                      "{}{}.{}",
                      Name(s.kind), p, m, s.chunks, r, Letter(op.kind), op.microbatch, op.chunk));
    }
  }

  // Pipeline phase figures.
  result.pipeline_end_s = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < p; ++r) {
    StageResult& st = result.stages[r];
    st.idle_s = result.pipeline_end_s - st.busy_s;
    st.bubble_fraction = result.pipeline_end_s > 0 ? st.idle_s / result.pipeline_end_s : 0;
    result.bubble_fraction += st.bubble_fraction / p;
    result.bubble_s += st.idle_s / p;

    // Activation memory over time: F holds its chunk's activations from its start; B releases
    // them at its end (all of them, or all but what W needs when the backward is split); W
    // releases the rest.
    std::vector<std::pair<double, double>> deltas;
    deltas.reserve(per_stage[r].size());
    int held = 0;
    for (const SimulatedOp& o : per_stage[r]) {
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
      if (!st.activation_bytes_over_time.empty() &&
          st.activation_bytes_over_time.back().first == t) {
        st.activation_bytes_over_time.back().second = bytes;
      } else {
        st.activation_bytes_over_time.emplace_back(t, bytes);
      }
      st.peak_activation_bytes = std::max(st.peak_activation_bytes, bytes);
    }
  }

  // After the pipeline: gradient reduction (overlapped per chunk or after the last op),
  // embedding sync, then a global synchronisation point and the optimizer.
  std::vector<double> grads_ready(p, 0.0);
  for (int r = 0; r < p; ++r) {
    const StageCosts& sc = costs.stages[r];
    double t = clock[r];
    if (sc.dp_grad_sync_s > 0) {
      if (sc.overlap_grad_sync) {
        // Megatron's bucketed reduction (--overlap-grad-reduce): each chunk's gradients fill
        // dp_buckets buckets during the chunk's last backward, the layers' in reverse order,
        // taken as even through the operation; a bucket's reduction starts when it is full, on
        // one data-parallel stream per stage, in the order the buckets fill.
        const int k = std::max(1, sc.dp_buckets);
        std::vector<double> ready;
        for (int c = 0; c < s.chunks; ++c) {
          const int vs = s.VirtualStage(r, c);
          const double begin = chunk_grads_start[vs], span = chunk_grads_done[vs] - begin;
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
        t = std::max(clock[r], stream);
      } else {
        result.phases.push_back({r, "dp grad sync", "dp-comm", t, t + sc.dp_grad_sync_s});
        t += sc.dp_grad_sync_s;
      }
    }
    if (sc.embedding_sync_s > 0) {
      result.phases.push_back({r, "embedding sync", "dp-comm", t, t + sc.embedding_sync_s});
      t += sc.embedding_sync_s;
    }
    grads_ready[r] = t;
    result.stages[r].dp_exposed_s = t - clock[r];
  }
  result.optimizer_start_s = *std::max_element(grads_ready.begin(), grads_ready.end());
  result.step_time_s = result.optimizer_start_s;
  for (int r = 0; r < p; ++r) {
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
  for (auto& ops : per_stage) {
    result.ops.insert(result.ops.end(), ops.begin(), ops.end());
  }
  return result;
}

}  // namespace ptdp
