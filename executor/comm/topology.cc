#include "executor/comm/topology.h"

#include "core/error.h"

namespace ptdp {

RankCoords CoordsOf(int world_rank, const ParallelConfig& p) {
  PTDP_CHECK(world_rank >= 0 && world_rank < p.world_size());
  RankCoords c;
  c.tp = world_rank % p.tp;
  c.cp = world_rank / p.tp % p.cp;
  c.dp = world_rank / (p.tp * p.cp) % p.dp;
  c.pp = world_rank / (p.tp * p.cp * p.dp);
  return c;
}

int WorldRankOf(const RankCoords& c, const ParallelConfig& p) {
  return c.tp + p.tp * (c.cp + p.cp * (c.dp + p.dp * c.pp));
}

ExpertCoords ExpertCoordsOf(int world_rank, const ParallelConfig& p) {
  PTDP_CHECK(world_rank >= 0 && world_rank < p.world_size());
  const int etp = p.expert_tp();
  const auto edp = static_cast<int>(p.expert_dp());
  PTDP_CHECK(int64_t{etp} * p.ep * edp * p.pp == p.world_size());
  ExpertCoords c;
  c.etp = world_rank % etp;
  c.ep = world_rank / etp % p.ep;
  c.edp = world_rank / (etp * p.ep) % edp;
  c.pp = world_rank / (etp * p.ep * edp);
  return c;
}

int WorldRankOf(const ExpertCoords& c, const ParallelConfig& p) {
  const int etp = p.expert_tp();
  return c.etp + etp * (c.ep + p.ep * (c.edp + static_cast<int>(p.expert_dp()) * c.pp));
}

namespace {

// ProcessGroups' member and name for each GroupId, in the enum's order.
constexpr std::unique_ptr<Comm> ProcessGroups::*kMembers[kNumGroups] = {
    &ProcessGroups::tp,        &ProcessGroups::cp,    &ProcessGroups::pp,
    &ProcessGroups::dp,        &ProcessGroups::dp_cp, &ProcessGroups::model_parallel,
    &ProcessGroups::embedding, &ProcessGroups::etp,   &ProcessGroups::ep,
    &ProcessGroups::edp};
constexpr const char* kNames[kNumGroups] = {
    "tp", "cp", "pp", "dp", "dp_cp", "model_parallel", "embedding", "etp", "ep", "edp"};

}  // namespace

const char* Name(GroupId group) { return kNames[static_cast<size_t>(group)]; }

std::array<GroupSplit, kNumGroups> GroupSplitsOf(int world_rank, const ParallelConfig& p) {
  const RankCoords c = CoordsOf(world_rank, p);
  // Colors name the coordinates the members share (mixed-radix numbers over them); keys order
  // them.
  const int dp_cp_rank = c.cp + p.cp * c.dp;
  const bool on_ends = p.pp > 1 && (c.pp == 0 || c.pp == p.pp - 1);
  const ExpertCoords e = ExpertCoordsOf(world_rank, p);
  const int etp = p.expert_tp();
  const auto edp = static_cast<int>(p.expert_dp());
  std::array<GroupSplit, kNumGroups> s;
  auto at = [&](GroupId g) -> GroupSplit& { return s[static_cast<size_t>(g)]; };
  at(GroupId::kTp) = {(c.pp * p.dp + c.dp) * p.cp + c.cp, c.tp};
  at(GroupId::kCp) = {(c.pp * p.dp + c.dp) * p.tp + c.tp, c.cp};
  at(GroupId::kPp) = {(c.dp * p.cp + c.cp) * p.tp + c.tp, c.pp};
  at(GroupId::kDp) = {(c.pp * p.cp + c.cp) * p.tp + c.tp, c.dp};
  at(GroupId::kDpCp) = {c.pp * p.tp + c.tp, dp_cp_rank};
  at(GroupId::kModelParallel) = {dp_cp_rank, c.pp * p.tp + c.tp};
  at(GroupId::kEmbedding) = {on_ends ? dp_cp_rank * p.tp + c.tp : -1, c.pp};
  at(GroupId::kEtp) = {(e.pp * edp + e.edp) * p.ep + e.ep, e.etp};
  at(GroupId::kEp) = {(e.pp * edp + e.edp) * etp + e.etp, e.ep};
  at(GroupId::kEdp) = {(e.pp * p.ep + e.ep) * etp + e.etp, e.edp};
  return s;
}

std::unique_ptr<Comm>& Member(ProcessGroups& g, GroupId group) {
  return g.*kMembers[static_cast<size_t>(group)];
}

ProcessGroups MakeProcessGroups(std::unique_ptr<Comm> world, const ParallelConfig& p) {
  PTDP_CHECK(world->size() == p.world_size());
  ProcessGroups g;
  g.coords = CoordsOf(world->rank(), p);
  g.expert_coords = ExpertCoordsOf(world->rank(), p);
  const std::array<GroupSplit, kNumGroups> splits = GroupSplitsOf(world->rank(), p);
  for (int i = 0; i < kNumGroups; ++i) {
    const GroupSplit& s = splits[static_cast<size_t>(i)];
    Member(g, static_cast<GroupId>(i)) = world->Split(s.color, s.key);
  }
  g.world = std::move(world);
  return g;
}

}  // namespace ptdp
