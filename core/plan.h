// Plan: everything needed to simulate or execute one training layout, fully resolved, so that a
// plan file means the same thing on any machine and in any later version that reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"

namespace ptdp {

inline constexpr int kPlanVersion = 1;

struct Plan {
  ModelSpec model;
  ClusterSpec cluster;
  int64_t num_gpus = 0;  // == parallel.world_size() in a valid plan
  TrainingSpec training;
  ParallelConfig parallel = {};
  CostOptions options =
      {};  // the software that runs it (plan key `options`; absent: Megatron-Core)

  bool operator==(const Plan&) const = default;
};

// The layout for people: "TP 2 x PP 4 x DP 1, micro-batch 4 (m = 32), 1f1b, SP, selective
// recompute, dist-opt".
std::string LayoutLine(const Plan& plan);

// Transformer layers per pipeline stage in runs: {7, 8, 8, ..., 8, 7} -> "7+8x14+7".
std::string UnevenSplitText(const std::vector<int>& per_stage);

}  // namespace ptdp
