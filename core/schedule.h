// Pipeline schedules: for a schedule kind, p stages, m micro-batches and v model chunks per
// stage, the ordered operations each stage runs. Generated once here and interpreted twice:
// timed by the simulator and run by the executor, so what is simulated is what is executed.
//
// Conventions (Megatron-LM's): model chunk c on pipeline stage r holds virtual stage
// c * p + r, so the model's layers flow 0 -> 1 -> ... -> p-1 on chunk 0, then again on chunk 1,
// and so on. Micro-batches and chunks are numbered from 0.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/parallel_config.h"

namespace ptdp {

enum class OpKind : uint8_t {
  kForward,     // F: forward of one micro-batch through one model chunk
  kBackward,    // B: backward; the input gradient, plus the weight gradient unless split
  kWeightGrad,  // W: weight gradient alone (zero-bubble schedules split it from B)
};

char Letter(OpKind kind);  // 'F' | 'B' | 'W'

inline constexpr int kNoStage = -1;

struct PipelineOp {
  OpKind kind;
  int32_t microbatch;
  int32_t chunk;
  // Point-to-point traffic implied by the operation: the stage it receives its input from
  // before it can run (activation for F, output gradient for B) and the stage it sends its
  // result to when done; kNoStage when none (first/last virtual stage, W).
  int32_t recv_from = kNoStage;
  int32_t send_to = kNoStage;

  bool operator==(const PipelineOp&) const = default;
};

struct PipelineSchedule {
  Schedule kind = Schedule::k1F1B;
  int stages = 1;                            // p
  int microbatches = 1;                      // m
  int chunks = 1;                            // v
  bool split_backward = false;               // B and W are separate operations (zb-h1)
  std::vector<std::vector<PipelineOp>> ops;  // ops[r]: stage r's operations, in order

  int virtual_stages() const { return stages * chunks; }
  int VirtualStage(int stage, int chunk) const { return chunk * stages + stage; }
};

// Why (kind, p, m, v) has no schedule, or "" when it has one:
//  - every kind: p >= 1, m >= 1, v >= 1;
//  - gpipe, 1f1b, zb-h1: v == 1;
//  - interleaved: v >= 2, p >= 2, m % p == 0 (Megatron's default micro-batch group size
//    N = p, which needs m >= p and m % N == 0).
std::string ScheduleProblem(Schedule kind, int stages, int microbatches, int chunks);

// Why a step of `stages` x `microbatches` x `chunks` forward passes is too long to build and
// simulate (more than kMaxPipelineOps, core/limits.h), or "". The callers name what sets the
// micro-batches (a global batch, a micro-batch size).
std::string ScheduleSizeProblem(int64_t stages, int64_t microbatches, int64_t chunks);

// The operations of every stage. Orders:
//  - gpipe: all forwards, then all backwards, in micro-batch order.
//  - 1f1b (PipeDream-Flush, Megatron's forward_backward_pipelining_without_interleaving):
//    min(p - r - 1, m) warm-up forwards on stage r, then one forward / one backward, then the
//    remaining backwards.
//  - interleaved (Megatron's forward_backward_pipelining_with_interleaving, group size N = p):
//    forwards follow get_schedule_table (N micro-batches per chunk in turn), backwards the same
//    table with chunks reversed; warm-up (p - r - 1) * 2 + (v - 1) * N forwards, capped at m v
//    (then every forward comes first); then forward k + warm-up / backward k pairs; then the
//    remaining backwards.
//  - zb-h1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", handcrafted H1): min(p - r, m)
//    forwards, then for each micro-batch k: B_k, W_{k - r} (stage r defers r weight gradients),
//    the next forward; the deferred W's close the stage. At most p micro-batches are held on
//    any stage (forwarded, weight gradient not yet done), 1F1B's peak.
// Throws InternalError when ScheduleProblem or ScheduleSizeProblem is not empty.
PipelineSchedule MakeSchedule(Schedule kind, int stages, int microbatches, int chunks);

// Micro-batch chunks whose activations stage r holds, at most, during the step: forwarded and
// not yet released (by B, or by W when the backward is split). 1f1b: min(p - r, m); gpipe: m.
int MaxInFlight(const PipelineSchedule& schedule, int stage);

// The same without building the schedule (the planner's many (kind, p, m, v)), from the orders
// above: gpipe m; 1f1b min(p - r, m); zb-h1 min(p, m) (stage r's warm-up min(p - r, m) forwards
// plus its r deferred weight gradients); interleaved min(m v, (p - r - 1) 2 + (v - 1) p + 1)
// (the warm-up forwards and the first steady-state one). Requires ScheduleProblem to be "".
int MaxInFlight(Schedule kind, int stages, int microbatches, int chunks, int stage);

// The peak over stage r's operations of the sum of the weights of its in-flight chunks,
// weight[c] for a chunk c in flight (its activations when the chunks differ: uneven splits,
// layouts, dense and MoE layers). Without interleaving (one chunk) MaxInFlight x weight[0];
// interleaved follows the orders above without building the schedule, in O(v) steps (the held
// weight is periodic and piecewise linear in the steady state). `weight` has
// `chunks` entries. Requires ScheduleProblem to be "".
double PeakInFlightWeight(Schedule kind, int stages, int microbatches, int chunks, int stage,
                          std::span<const double> weight);

}  // namespace ptdp
