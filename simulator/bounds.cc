#include "simulator/bounds.h"

#include <algorithm>

#include "core/error.h"

namespace ptdp {

namespace {

// What the bound reads of one virtual stage's costs, and of one pipeline stage's.
struct ChunkSums {
  double busy;           // F + B + W
  double head;           // F and its send: the forward of micro-batch 0 passing through
  double tail;           // the backward passing through (B alone when W is split off)
  double send_backward;  // its input gradient's send
};
ChunkSums SumsOf(const ChunkCosts& ch, bool split) {
  return {
      ch.forward_s + ch.backward_input_s + ch.backward_weight_s, ch.forward_s + ch.send_forward_s,
      split ? ch.backward_input_s : ch.backward_input_s + ch.backward_weight_s, ch.send_backward_s};
}
struct StageSums {
  double sync;       // the data-parallel reduction the step waits for (its last bucket's share)
  double embedding;  // the tied embedding's all-reduce
  double after;      // the optimizer and the parameter gather
};
StageSums SumsOf(const StageCosts& st, int v) {
  return {st.overlap_grad_sync ? st.dp_grad_sync_s / (v * st.dp_buckets) : st.dp_grad_sync_s,
          st.embedding_sync_s, st.optimizer_s + st.dp_param_gather_s};
}

// chunk(vs) -> ChunkSums, stage(r) -> StageSums.
template <typename ChunkAt, typename StageAt>
double LowerBound(Schedule kind, int p, int m, int v, const ChunkAt& chunk, const StageAt& stage) {
  const bool split = kind == Schedule::kZbH1;
  double pipeline_end = 0, grads_ready = 0, tail_phases = 0;
  double head = 0;  // forward of micro-batch 0 through virtual stages 0 .. r-1, with sends
  double tail = 0;  // backward through virtual stages r-1 .. 0, with sends
  for (int r = 0; r < p; ++r) {
    double busy = 0;
    for (int c = 0; c < v; ++c) busy += chunk(c * p + r).busy;
    busy *= m;
    const double end = head + busy;
    // Every schedule here ends a stage with a backward of chunk 0 unless the backward is split
    // (zb-h1 ends with weight gradients, which nothing waits for).
    // From virtual stage r down to 0 (virtual stage 0 sends nothing back).
    const ChunkSums here = chunk(r);  // chunk 0 of stage r = virtual stage r
    const double back = r > 0 ? tail + here.send_backward : 0.0;
    pipeline_end = std::max(pipeline_end, end + (split ? 0.0 : back));
    const StageSums st = stage(r);
    grads_ready = std::max(grads_ready, end + st.sync + st.embedding);
    tail_phases = std::max(tail_phases, st.after);
    head += here.head;
    tail += here.tail + (r > 0 ? here.send_backward : 0.0);
  }
  return std::max(pipeline_end, grads_ready) + tail_phases;
}

}  // namespace

double StepTimeLowerBound(Schedule kind, int p, int m, int v, const StepCosts& costs) {
  PTDP_CHECK(static_cast<int>(costs.chunks.size()) == p * v &&
             static_cast<int>(costs.stages.size()) == p);
  const bool split = kind == Schedule::kZbH1;
  return LowerBound(
      kind, p, m, v, [&](int vs) { return SumsOf(costs.chunks[vs], split); },
      [&](int r) { return SumsOf(costs.stages[r], v); });
}

double StepTimeLowerBound(Schedule kind, int p, int m, int v, const StepCostsView& costs) {
  PTDP_CHECK(static_cast<int>(costs.chunk_of.size()) == p * v &&
             static_cast<int>(costs.stage_of.size()) == p);
  const bool split = kind == Schedule::kZbH1;
  // With few distinct entries (a search's usual case) each one's sums are formed once; the
  // same operations in the same order give the same bits.
  constexpr int kFew = 16;
  const int chunks = static_cast<int>(costs.chunks.size());
  const int stages = static_cast<int>(costs.stages.size());
  if (chunks > kFew || stages > kFew) {
    return LowerBound(
        kind, p, m, v, [&](int vs) { return SumsOf(costs.chunk(vs), split); },
        [&](int r) { return SumsOf(costs.stage(r), v); });
  }
  ChunkSums chunk[kFew];
  for (int i = 0; i < chunks; ++i) chunk[i] = SumsOf(costs.chunks[i], split);
  StageSums stage[kFew];
  for (int i = 0; i < stages; ++i) stage[i] = SumsOf(costs.stages[i], v);
  return LowerBound(
      kind, p, m, v, [&](int vs) { return chunk[costs.chunk_of[vs]]; },
      [&](int r) { return stage[costs.stage_of[r]]; });
}

double StepTimeLowerBound(const PipelineSchedule& s, const StepCosts& costs) {
  return StepTimeLowerBound(s.kind, s.stages, s.microbatches, s.chunks, costs);
}

HeldActivations HeldActivationsOf(const PipelineSchedule& s) {
  const int v = s.chunks;
  HeldActivations out;
  out.held.resize(s.stages);
  for (int r = 0; r < s.stages; ++r) {
    std::vector<int> h(2 * v, 0);
    auto& list = out.held[r];
    auto dominated = [](const std::vector<int>& a, const std::vector<int>& b) {
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] > b[i]) return false;
      }
      return true;  // a <= b everywhere
    };
    for (const PipelineOp& op : s.ops[r]) {
      const int c = op.chunk;
      if (op.kind == OpKind::kForward) {
        ++h[c];
        // A moment after an allocation can be a peak; keep it unless another covers it.
        if (std::none_of(list.begin(), list.end(),
                         [&](const std::vector<int>& k) { return dominated(h, k); })) {
          std::erase_if(list, [&](const std::vector<int>& k) { return dominated(k, h); });
          list.push_back(h);
        }
      } else if (op.kind == OpKind::kBackward) {
        --h[c];
        if (s.split_backward) ++h[v + c];
      } else {
        --h[v + c];
      }
    }
  }
  return out;
}

std::vector<double> PeakActivationBytes(const PipelineSchedule& s, const HeldActivations& held,
                                        const StepCosts& costs) {
  const int v = s.chunks;
  std::vector<double> peak(s.stages, 0.0);
  for (int r = 0; r < s.stages; ++r) {
    for (const std::vector<int>& h : held.held[r]) {
      double bytes = 0;
      for (int c = 0; c < v; ++c) {
        const ChunkCosts& ch = costs.chunks[s.VirtualStage(r, c)];
        bytes += h[c] * ch.activation_bytes + h[v + c] * ch.weight_grad_activation_bytes;
      }
      peak[r] = std::max(peak[r], bytes);
    }
  }
  return peak;
}

}  // namespace ptdp
