#include "core/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/limits.h"

namespace ptdp {
namespace {

// Megatron's get_schedule_table: micro-batches in groups of `group`, each group run through
// every chunk in turn; the last group takes whatever micro-batches remain.
std::vector<std::pair<int, int>> ScheduleTable(int m, int v, int group) {
  std::vector<std::pair<int, int>> table;
  table.reserve(static_cast<size_t>(m) * v);
  for (int lo = 0; lo < m; lo += group) {
    const int hi = lo + group >= m ? m : lo + group;
    for (int c = 0; c < v; ++c) {
      for (int mb = lo; mb < hi; ++mb) table.emplace_back(mb, c);
    }
  }
  return table;
}

std::vector<PipelineOp> OneFOneB(int p, int m, int r) {
  std::vector<PipelineOp> ops;
  const int warmup = std::min(p - r - 1, m);
  for (int i = 0; i < warmup; ++i) ops.push_back({OpKind::kForward, i, 0});
  for (int i = 0; i < m - warmup; ++i) {
    ops.push_back({OpKind::kForward, warmup + i, 0});
    ops.push_back({OpKind::kBackward, i, 0});
  }
  for (int i = m - warmup; i < m; ++i) ops.push_back({OpKind::kBackward, i, 0});
  return ops;
}

std::vector<PipelineOp> Gpipe(int m) {
  std::vector<PipelineOp> ops;
  for (int i = 0; i < m; ++i) ops.push_back({OpKind::kForward, i, 0});
  for (int i = 0; i < m; ++i) ops.push_back({OpKind::kBackward, i, 0});
  return ops;
}

std::vector<PipelineOp> Interleaved(int p, int m, int v, int r,
                                    const std::vector<std::pair<int, int>>& table) {
  const int total = m * v;
  const int group = p;  // Megatron's default microbatch_group_size_per_vp_stage
  const int warmup = std::min((p - r - 1) * 2 + (v - 1) * group, total);
  auto forward = [&](int k) {
    return PipelineOp{OpKind::kForward, table[k].first, table[k].second};
  };
  auto backward = [&](int k) {
    return PipelineOp{OpKind::kBackward, table[k].first, v - 1 - table[k].second};
  };
  std::vector<PipelineOp> ops;
  ops.reserve(2 * static_cast<size_t>(total));
  for (int k = 0; k < warmup; ++k) ops.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(forward(k + warmup));
    ops.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(backward(k));
  return ops;
}

std::vector<PipelineOp> ZbH1(int p, int m, int r) {
  std::vector<PipelineOp> ops;
  const int first_forwards = std::min(p - r, m);
  for (int i = 0; i < first_forwards; ++i) ops.push_back({OpKind::kForward, i, 0});
  int weight_grads = 0;
  for (int k = 0; k < m; ++k) {
    ops.push_back({OpKind::kBackward, k, 0});
    if (k - r >= 0) ops.push_back({OpKind::kWeightGrad, weight_grads++, 0});
    if (k + p - r < m) ops.push_back({OpKind::kForward, k + p - r, 0});
  }
  while (weight_grads < m) ops.push_back({OpKind::kWeightGrad, weight_grads++, 0});
  return ops;
}

}  // namespace

char Letter(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return 'F';
    case OpKind::kBackward:
      return 'B';
    case OpKind::kWeightGrad:
      return 'W';
  }
  return '?';
}

std::string ScheduleProblem(Schedule kind, int p, int m, int v) {
  if (p < 1) return fmt::format("the pipeline needs at least one stage, got {}", p);
  if (m < 1) return fmt::format("the step needs at least one micro-batch, got {}", m);
  if (v < 1) return fmt::format("each stage needs at least one model chunk, got {}", v);
  if (kind != Schedule::kInterleaved) {
    if (v != 1) return fmt::format("{} runs one model chunk per stage, got {}", Name(kind), v);
    return "";
  }
  if (v < 2) return fmt::format("interleaved needs at least 2 model chunks per stage, got {}", v);
  if (p < 2) return "interleaved needs at least 2 pipeline stages";
  if (m % p != 0) {
    return fmt::format(
        "interleaved needs the micro-batches ({}) to be a multiple of the "
        "pipeline stages ({})",
        m, p);
  }
  return "";
}

std::string ScheduleSizeProblem(int64_t p, int64_t m, int64_t v) {
  // Each factor is at most an int: the product of three fits a double exactly enough to compare.
  const double ops = static_cast<double>(p) * static_cast<double>(m) * static_cast<double>(v);
  if (ops <= static_cast<double>(kMaxPipelineOps)) return "";
  return fmt::format(
      "{} pipeline stage{} x {} micro-batch{}{} = {:.0f} forward passes per step; ptdp builds "
      "schedules of at most {}",
      p, p == 1 ? "" : "s", m, m == 1 ? "" : "es",
      v > 1 ? fmt::format(" x {} model chunks", v) : "", ops, kMaxPipelineOps);
}

PipelineSchedule MakeSchedule(Schedule kind, int p, int m, int v) {
  std::string problem = ScheduleProblem(kind, p, m, v);
  if (problem.empty()) problem = ScheduleSizeProblem(p, m, v);
  if (!problem.empty()) throw InternalError("MakeSchedule: " + problem);
  PipelineSchedule s;
  s.kind = kind;
  s.stages = p;
  s.microbatches = m;
  s.chunks = v;
  s.split_backward = kind == Schedule::kZbH1;
  s.ops.resize(p);
  std::vector<std::pair<int, int>> table;
  if (kind == Schedule::kInterleaved) table = ScheduleTable(m, v, p);
  for (int r = 0; r < p; ++r) {
    switch (kind) {
      case Schedule::kGpipe:
        s.ops[r] = Gpipe(m);
        break;
      case Schedule::k1F1B:
        s.ops[r] = OneFOneB(p, m, r);
        break;
      case Schedule::kInterleaved:
        s.ops[r] = Interleaved(p, m, v, r, table);
        break;
      case Schedule::kZbH1:
        s.ops[r] = ZbH1(p, m, r);
        break;
    }
    // Peers: the neighbouring virtual stages, which live on stages r -/+ 1 (mod p).
    const int last = s.virtual_stages() - 1;
    for (PipelineOp& op : s.ops[r]) {
      const int vs = s.VirtualStage(r, op.chunk);
      const int prev = (r + p - 1) % p, next = (r + 1) % p;
      if (op.kind == OpKind::kForward) {
        op.recv_from = vs > 0 ? prev : kNoStage;
        op.send_to = vs < last ? next : kNoStage;
      } else if (op.kind == OpKind::kBackward) {
        op.recv_from = vs < last ? next : kNoStage;
        op.send_to = vs > 0 ? prev : kNoStage;
      }
    }
  }
  return s;
}

int MaxInFlight(const PipelineSchedule& schedule, int stage) {
  const OpKind release = schedule.split_backward ? OpKind::kWeightGrad : OpKind::kBackward;
  int held = 0, peak = 0;
  for (const PipelineOp& op : schedule.ops[stage]) {
    if (op.kind == OpKind::kForward) peak = std::max(peak, ++held);
    if (op.kind == release) --held;
  }
  return peak;
}

double PeakInFlightWeight(Schedule kind, int p, int m, int v, int r,
                          std::span<const double> weight) {
  PTDP_CHECK(static_cast<int>(weight.size()) == v);
  if (kind != Schedule::kInterleaved) return MaxInFlight(kind, p, m, v, r) * weight[0];
  const int64_t total = int64_t{m} * v, group = int64_t{p} * v;
  const int64_t warmup = std::min<int64_t>(total, int64_t{p - r - 1} * 2 + int64_t{v - 1} * p);
  // get_schedule_table: forward k runs chunk (k mod p v) / p; backward k the reverse chunk.
  const auto chunk = [&](int64_t k) { return static_cast<size_t>((k % group) / p); };
  // The warm-up's forwards, chunk by chunk: (n / p v) p + clamp(n mod p v - c p, 0, p) of chunk c
  // among the first n.
  double held = 0;
  for (int c = 0; c < v; ++c) {
    const int64_t n =
        (warmup / group) * p + std::clamp<int64_t>(warmup % group - int64_t{c} * p, 0, p);
    held += weight[static_cast<size_t>(c)] * static_cast<double>(n);
  }
  if (warmup == total) return held;
  // Steady state: step b runs forward warmup + b (the peak is after it), then backward b. The
  // chunks of both change every p steps, so the held weight is linear in b between their
  // boundaries (its maximum at one end of each piece), and periodic with period p v (a period
  // adds and removes every chunk p times): one period, O(v) pieces, is enough.
  double peak = 0;
  const int64_t steps = std::min(total - warmup, group);
  for (int64_t b = 0; b < steps;) {
    const int64_t end = std::min({steps, (b / p + 1) * p, b + (p - (warmup + b) % p)});
    const double in = weight[chunk(warmup + b)];
    const double out = weight[static_cast<size_t>(v - 1) - chunk(b)];
    const double slope = in - out;
    peak = std::max({peak, held + in, held + static_cast<double>(end - 1 - b) * slope + in});
    held += static_cast<double>(end - b) * slope;
    b = end;
  }
  return peak;
}

int MaxInFlight(Schedule kind, int p, int m, int v, int r) {
  PTDP_CHECK(r >= 0 && r < p && m >= 1 && v >= 1);
  switch (kind) {
    case Schedule::kGpipe:
      return m;
    case Schedule::k1F1B:
      return std::min(p - r, m);
    case Schedule::kZbH1:
      return std::min(p, m);
    case Schedule::kInterleaved:
      return static_cast<int>(
          std::min<int64_t>(int64_t{m} * v, int64_t{p - r - 1} * 2 + int64_t{v - 1} * p + 1));
  }
  return m;
}

}  // namespace ptdp
