// Where a rank sits in the PTD-P layout, and its communicators. Megatron-LM's default order
// "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py; shared/reference/formulas.md): the
// tensor-parallel index varies fastest, then context parallel, then data parallel, then
// pipeline, so
//   world_rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
// (expert parallel is 1 here). For world 16 with tp = cp = dp = pp = 2: TP groups [0,1] [2,3]
// ...; CP groups [0,2] [1,3] [4,6] ...; DP groups [0,4] [1,5] [2,6] [3,7] [8,12] ...; PP
// groups [0,8] [1,9] ...; the gradient (data parallel with context parallel) groups
// [0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15].
//
// The experts of a mixture-of-experts layer sit on a second grid over the same ranks (Megatron's
// expert_decoder_rank_generator, order etp-ep-edp-pp; simulator/collectives.h):
//   world_rank = etp_rank + etp * (ep_rank + ep * (edp_rank + edp * pp_rank))
// with etp = expert_tp() and edp = expert_dp() = tp cp dp / (etp ep); both grids keep the
// pipeline stage slowest, so a rank's stage is the same in each. For world 8 with tp = 2, dp = 4,
// ep = 4, etp = 1: EP groups [0,1,2,3] [4,5,6,7] (each spanning TP and DP ranks), expert data
// parallel [0,4] [1,5] [2,6] [3,7].
#pragma once

#include <array>
#include <memory>

#include "core/parallel_config.h"
#include "executor/comm/comm.h"

namespace ptdp {

struct RankCoords {
  int tp = 0;
  int pp = 0;
  int dp = 0;
  int cp = 0;  // last so that {tp, pp, dp} still reads as before context parallelism
  bool operator==(const RankCoords&) const = default;
};

RankCoords CoordsOf(int world_rank, const ParallelConfig& parallel);
int WorldRankOf(const RankCoords& coords, const ParallelConfig& parallel);

// A rank's place on the expert grid.
struct ExpertCoords {
  int etp = 0;
  int ep = 0;
  int edp = 0;
  int pp = 0;
  bool operator==(const ExpertCoords&) const = default;
};

ExpertCoords ExpertCoordsOf(int world_rank, const ParallelConfig& parallel);
int WorldRankOf(const ExpertCoords& coords, const ParallelConfig& parallel);

struct ProcessGroups {
  RankCoords coords;
  std::unique_ptr<Comm> world;
  std::unique_ptr<Comm> tp;  // same cp, dp, pp; ordered by tp rank
  std::unique_ptr<Comm> cp;  // same tp, dp, pp; ordered by cp rank (the attention's exchanges)
  std::unique_ptr<Comm> pp;  // same tp, cp, dp; ordered by stage
  std::unique_ptr<Comm> dp;  // same tp, cp, pp; ordered by dp rank
  // Same tp, pp: dp x cp ranks ordered by world rank (cp rank fastest). Megatron's "data
  // parallel with context parallel" group: each CP rank holds the gradients of its share of
  // the tokens, so gradients are reduced, and the distributed optimizer shards, over it.
  std::unique_ptr<Comm> dp_cp;
  std::unique_ptr<Comm> model_parallel;  // same dp, cp: tp x pp ranks (one model replica)
  // First and last pipeline stage with the same tp, cp and dp (the tied word embedding's two
  // copies); nullptr on middle stages and when pp == 1.
  std::unique_ptr<Comm> embedding;
  // The expert grid's groups (single ranks, etp == tp and dp x cp for a dense model):
  ExpertCoords expert_coords;
  std::unique_ptr<Comm> etp;  // same ep, edp, pp; ordered by etp rank (one expert's linears)
  std::unique_ptr<Comm> ep;   // same etp, edp, pp; ordered by ep rank (the token all-to-all)
  // Same etp, ep, pp; ordered by edp rank: the replicas of the same experts, over which their
  // gradients are reduced and the distributed optimizer shards their state.
  std::unique_ptr<Comm> edp;
};

// Collective over `world` (whose size must be parallel.world_size()).
ProcessGroups MakeProcessGroups(std::unique_ptr<Comm> world, const ParallelConfig& parallel);

// The groups of ProcessGroups other than the world, in this order, and how a rank joins each:
// Comm::Split's color (the coordinates the members share, as a mixed-radix number; negative:
// none, the embedding group off the end stages) and key (its order in the group).
enum class GroupId : uint8_t {
  kTp,
  kCp,
  kPp,
  kDp,
  kDpCp,
  kModelParallel,
  kEmbedding,
  kEtp,
  kEp,
  kEdp
};
inline constexpr int kNumGroups = 10;
const char* Name(GroupId group);  // "tp", "cp", "pp", "dp", "dp_cp", "model_parallel", ...
struct GroupSplit {
  int color = 0;
  int key = 0;
};
std::array<GroupSplit, kNumGroups> GroupSplitsOf(int world_rank, const ParallelConfig& parallel);
// The member of ProcessGroups for `group`.
std::unique_ptr<Comm>& Member(ProcessGroups& groups, GroupId group);

}  // namespace ptdp
