#include "executor/topology.h"

#include "core/error.h"

namespace ptdp {

RankCoords CoordsOf(int world_rank, const ParallelConfig& p) {
  PTDP_CHECK(world_rank >= 0 && world_rank < p.world_size());
  return {world_rank % p.tp, world_rank / (p.tp * p.dp), world_rank / p.tp % p.dp};
}

int WorldRankOf(const RankCoords& c, const ParallelConfig& p) {
  return c.tp + p.tp * (c.dp + p.dp * c.pp);
}

ProcessGroups MakeProcessGroups(std::unique_ptr<Comm> world, const ParallelConfig& p) {
  PTDP_CHECK(world->size() == p.world_size());
  ProcessGroups g;
  g.coords = CoordsOf(world->rank(), p);
  const RankCoords& c = g.coords;
  // Colors name the coordinates the members share; keys order them.
  g.tp = world->Split(c.pp * p.dp + c.dp, c.tp);
  g.pp = world->Split(c.tp * p.dp + c.dp, c.pp);
  g.dp = world->Split(c.tp * p.pp + c.pp, c.dp);
  g.model_parallel = world->Split(c.dp, c.pp * p.tp + c.tp);
  const bool on_ends = p.pp > 1 && (c.pp == 0 || c.pp == p.pp - 1);
  g.embedding = world->Split(on_ends ? c.tp * p.dp + c.dp : -1, c.pp);
  g.world = std::move(world);
  return g;
}

}  // namespace ptdp
