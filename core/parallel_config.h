// ParallelConfig: one PTD-P layout, the knobs Megatron-LM exposes as flags.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/enum_names.h"

namespace ptdp {

struct TrainingSpec;

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1 };
enum class Recompute { kNone, kSelective, kFull };

inline constexpr EnumName<Schedule> kScheduleNames[] = {{"gpipe", Schedule::kGpipe},
                                                        {"1f1b", Schedule::k1F1B},
                                                        {"interleaved", Schedule::kInterleaved},
                                                        {"zb-h1", Schedule::kZbH1}};
inline constexpr EnumName<Recompute> kRecomputeNames[] = {
    {"none", Recompute::kNone}, {"selective", Recompute::kSelective}, {"full", Recompute::kFull}};

inline std::string_view Name(Schedule s) { return NameOf<Schedule>(kScheduleNames, s); }
inline std::string_view Name(Recompute r) { return NameOf<Recompute>(kRecomputeNames, r); }

struct ParallelConfig {
  int tp = 1;                // --tensor-model-parallel-size
  int pp = 1;                // --pipeline-model-parallel-size
  int dp = 1;                // derived by Megatron as world / (tp * pp)
  int micro_batch_size = 1;  // --micro-batch-size
  int virtual_stages = 1;    // model chunks per pipeline rank (v); > 1 only when interleaved
  Schedule schedule = Schedule::k1F1B;
  bool sequence_parallel = false;          // --sequence-parallel
  Recompute recompute = Recompute::kNone;  // --recompute-granularity
  bool distributed_optimizer = false;      // --use-distributed-optimizer

  bool operator==(const ParallelConfig&) const = default;

  int64_t world_size() const { return int64_t{tp} * pp * dp; }
};

// Micro-batches per pipeline per step, m = GBS / (MBS * DP) (Megatron derives it; there is no
// --num-microbatches). Requires the division to be exact (see CheckParallelConfig).
int64_t NumMicrobatches(const TrainingSpec& training, const ParallelConfig& parallel);

}  // namespace ptdp
