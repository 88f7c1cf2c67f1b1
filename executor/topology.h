// Where a rank sits in the PTD-P layout, and its communicators. Megatron-LM's default order
// "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py; shared/reference/formulas.md): the
// tensor-parallel index varies fastest, then data parallel, then pipeline, so
//   world_rank = tp_rank + tp * (dp_rank + dp * pp_rank)
// (context and expert parallel are 1 here). For world 8 with tp = dp = pp = 2: TP groups [0,1]
// [2,3] [4,5] [6,7]; DP groups [0,2] [1,3] [4,6] [5,7]; PP groups [0,4] [1,5] [2,6] [3,7].
#pragma once

#include <memory>

#include "core/parallel_config.h"
#include "executor/comm.h"

namespace ptdp {

struct RankCoords {
  int tp = 0;
  int pp = 0;
  int dp = 0;
  bool operator==(const RankCoords&) const = default;
};

RankCoords CoordsOf(int world_rank, const ParallelConfig& parallel);
int WorldRankOf(const RankCoords& coords, const ParallelConfig& parallel);

struct ProcessGroups {
  RankCoords coords;
  std::unique_ptr<Comm> world;
  std::unique_ptr<Comm> tp;              // same pp, dp; ordered by tp rank
  std::unique_ptr<Comm> pp;              // same tp, dp; ordered by stage
  std::unique_ptr<Comm> dp;              // same tp, pp; ordered by dp rank
  std::unique_ptr<Comm> model_parallel;  // same dp: tp x pp ranks (one model replica)
  // First and last pipeline stage with the same tp and dp (the tied word embedding's two
  // copies); nullptr on middle stages and when pp == 1.
  std::unique_ptr<Comm> embedding;
};

// Collective over `world` (whose size must be parallel.world_size()).
ProcessGroups MakeProcessGroups(std::unique_ptr<Comm> world, const ParallelConfig& parallel);

}  // namespace ptdp
