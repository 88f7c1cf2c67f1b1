// Stand-in communicators for `ptdp execute --profile-rank R`: the computation of one rank of a
// plan of any size on the one device at hand, its groups of the plan's sizes with this process
// as rank R's place in each, every exchange replaced by a local copy of the right size, timed
// apart from the computation.
//
// What each operation does to the data (the values are not the job's; only the shapes and the
// time are): AllGather and AllGatherV copy this rank's input into every block of the output;
// ReduceScatter(V) copies this rank's block of the input; AllToAll(V) copies each block to
// itself (the tokens a rank sends to peer j come back as peer j's, so MoE dispatch sizes stay
// this rank's own); AllReduce and Broadcast leave the data as it is; Isend completes at once;
// Recv fills its buffer with zeros (the previous stage's activations or the next stage's
// gradients). Host-side AllReduceHost returns the rank's own value and GatherStrings its own
// string. A rank's loss and gradient norm are therefore its own, not the job's.
//
// Each group tallies its calls, the bytes a real collective would carry (the nccl-tests size S:
// AllReduce and Broadcast the data, AllGather the gathered output, ReduceScatter and AllToAll
// the input, Isend the message; Recv counted apart) and the seconds its stand-in copies took
// (waiting for the backend's stream on a GPU).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel_config.h"
#include "executor/comm/comm.h"
#include "executor/comm/topology.h"

namespace ptdp {

struct StandInTally {
  int64_t calls = 0;
  double bytes = 0;           // sent or collective (nccl-tests S)
  double received_bytes = 0;  // point-to-point receives
  double seconds = 0;
};

// The tallies of one process's stand-in groups, by group name ("tp", "cp", "pp", "dp", "dp_cp",
// "model_parallel", "embedding", "etp", "ep", "edp", "world").
using StandInTallies = std::map<std::string, StandInTally>;

// Per step of the measured steps, from the tallies at the end of every step: the steps after
// the first (the first alone when it is the only one), each group's figures divided by their
// number.
StandInTallies PerMeasuredStep(const std::vector<StandInTallies>& at_step_end);

// World rank `rank`'s process groups for `parallel`, every one a stand-in of the group's real
// size holding the rank's real place in it (the same groups MakeProcessGroups makes under MPI:
// topology.cc's GroupSplitsOf); `tallies` (kept alive by the caller) collects what they carry.
ProcessGroups MakeStandInGroups(int rank, const ParallelConfig& parallel, Backend& backend,
                                StandInTallies* tallies);

}  // namespace ptdp
