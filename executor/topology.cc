#include "executor/topology.h"

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

ProcessGroups MakeProcessGroups(std::unique_ptr<Comm> world, const ParallelConfig& p) {
  PTDP_CHECK(world->size() == p.world_size());
  ProcessGroups g;
  g.coords = CoordsOf(world->rank(), p);
  const RankCoords& c = g.coords;
  // Colors name the coordinates the members share (mixed-radix numbers over them); keys order
  // them.
  const int dp_cp_rank = c.cp + p.cp * c.dp;
  g.tp = world->Split((c.pp * p.dp + c.dp) * p.cp + c.cp, c.tp);
  g.cp = world->Split((c.pp * p.dp + c.dp) * p.tp + c.tp, c.cp);
  g.pp = world->Split((c.dp * p.cp + c.cp) * p.tp + c.tp, c.pp);
  g.dp = world->Split((c.pp * p.cp + c.cp) * p.tp + c.tp, c.dp);
  g.dp_cp = world->Split(c.pp * p.tp + c.tp, dp_cp_rank);
  g.model_parallel = world->Split(dp_cp_rank, c.pp * p.tp + c.tp);
  const bool on_ends = p.pp > 1 && (c.pp == 0 || c.pp == p.pp - 1);
  g.embedding = world->Split(on_ends ? dp_cp_rank * p.tp + c.tp : -1, c.pp);
  g.expert_coords = ExpertCoordsOf(world->rank(), p);
  const ExpertCoords& e = g.expert_coords;
  const int etp = p.expert_tp();
  const auto edp = static_cast<int>(p.expert_dp());
  g.etp = world->Split((e.pp * edp + e.edp) * p.ep + e.ep, e.etp);
  g.ep = world->Split((e.pp * edp + e.edp) * etp + e.etp, e.ep);
  g.edp = world->Split((e.pp * p.ep + e.ep) * etp + e.etp, e.edp);
  g.world = std::move(world);
  return g;
}

}  // namespace ptdp
