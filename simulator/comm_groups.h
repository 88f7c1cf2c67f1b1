// The communication groups of one simulated configuration, one per parallel dimension it has
// (`ptdp simulate --explain`, `ptdp plan --explain`): how large a group is, how many nodes it
// spans and with how many of its GPUs on each, the link its traffic runs over, the bandwidth
// the cost model moves it at, what travels, and the step's time and bytes of it as the
// simulation counted them.
//
// The placements are the cost model's (collectives.h: Megatron's rank order tp-cp-ep-dp-pp,
// the worst-placed group of each kind); the figures are SimulationReport's breakdown, nothing
// recomputed: time per step on the average pipeline stage (the data-parallel groups and the
// embedding's: on the stage whose data-parallel communication takes longest), bytes per GPU and
// step as nccl-tests sizes (the full gathered size of an all-gather or reduce-scatter, what a rank
// holds for an all-to-all, what it sends for a send; a ring's steps each).
#pragma once

#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/plan.h"
#include "simulator/collectives.h"
#include "simulator/simulate.h"

namespace ptdp {

// The links a group's traffic crosses: none (one rank), NVLink inside one node, the network
// (one rank per node: every byte leaves the node), or both (a hierarchical collective: several
// ranks per node, NVLink among them and the NICs between the nodes).
enum class GroupLink { kNone, kNvlink, kNetwork, kNvlinkAndNetwork };
inline constexpr EnumName<GroupLink> kGroupLinkNames[] = {
    {"none", GroupLink::kNone},
    {"NVLink", GroupLink::kNvlink},
    {"network", GroupLink::kNetwork},
    {"NVLink + network", GroupLink::kNvlinkAndNetwork}};
inline std::string_view Name(GroupLink l) { return NameOf<GroupLink>(kGroupLinkNames, l); }

GroupLink LinkOf(const GroupPlacement& group);

struct CommGroupRow {
  // "TP", "CP", "DP", "DP x CP", "PP", "embedding", "EP" (or "EP x ETP"), "ETP", "EDP"
  std::string name;
  GroupPlacement placement;  // ranks = the group's size; nodes; ranks_per_node
  GroupLink link = GroupLink::kNone;
  // The bandwidth the cost model moves the group's bytes at over its slowest link
  // (CollectiveBandwidth), per GPU; 0 without traffic. PP: the worst pair of neighbouring
  // stages, whose link is the row's.
  double bandwidth_bytes_per_s = 0;
  std::string traffic;  // what travels; "" when nothing does
  // Whether time_s, hidden_s and bytes are this group's own; false when its traffic is counted
  // under another row (DP with cp > 1: the gradients reduce over DP x CP) or there is none.
  bool has_figures = false;
  double time_s = 0;    // per step: exposed inside the operations (TP, CP, EP, ETP), busy (PP, DP)
  double hidden_s = 0;  // TP and CP: what overlap hides behind the kernels
  double bytes = 0;     // per GPU and step
};

// Rows in the order TP, CP (cp > 1), DP, DP x CP (cp > 1), PP, embedding (the first and last
// stage's tied-embedding reduction, pp > 1), then for MoE models EP, ETP, EDP.
// `report` is SimulatePlan(plan)'s.
std::vector<CommGroupRow> CommGroupRows(const Plan& plan, const SimulationReport& report);

// The rows as a JSON array of objects (name, size, nodes, gpus_per_node, link,
// bandwidth_bytes_per_s, traffic, and with figures time_s, hidden_s, bytes); `indent` spaces
// before each line after the first.
std::string CommGroupsJson(const std::vector<CommGroupRow>& rows, int indent = 0);

}  // namespace ptdp
