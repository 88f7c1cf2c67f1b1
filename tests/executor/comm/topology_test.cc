// Megatron's process groups (executor/comm/topology.h): the rank layout of the dense and expert
// grids, the groups MakeProcessGroups splits the world into, and the stand-in groups of
// --profile-rank (executor/comm/standin.h).
#include "executor/comm/topology.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/error.h"
#include "executor/backend/cpu.h"
#include "executor/comm/comm.h"
#include "executor/comm/standin.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyPlan;

TEST(Topology, MegatronOrderTensorThenDataThenPipeline) {
  // formulas.md: world 8, t = d = p = 2.
  ParallelConfig p;
  p.tp = p.dp = p.pp = 2;
  EXPECT_EQ(CoordsOf(0, p), (RankCoords{0, 0, 0}));
  EXPECT_EQ(CoordsOf(1, p), (RankCoords{1, 0, 0}));
  EXPECT_EQ(CoordsOf(2, p), (RankCoords{0, 0, 1}));  // DP group [0, 2]
  EXPECT_EQ(CoordsOf(4, p), (RankCoords{0, 1, 0}));  // PP group [0, 4]
  EXPECT_EQ(CoordsOf(7, p), (RankCoords{1, 1, 1}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(WorldRankOf(CoordsOf(r, p), p), r);
}

TEST(Topology, ContextParallelBetweenTensorAndData) {
  // Megatron's tp-cp-ep-dp-pp: world 16 with tp = cp = dp = pp = 2.
  const ParallelConfig p{.tp = 2, .pp = 2, .dp = 2, .cp = 2};
  EXPECT_EQ(CoordsOf(1, p), (RankCoords{.tp = 1}));
  EXPECT_EQ(CoordsOf(2, p), (RankCoords{.cp = 1}));
  EXPECT_EQ(CoordsOf(4, p), (RankCoords{.dp = 1}));
  EXPECT_EQ(CoordsOf(8, p), (RankCoords{.pp = 1}));
  EXPECT_EQ(CoordsOf(13, p), (RankCoords{.tp = 1, .pp = 1, .dp = 1, .cp = 0}));
  EXPECT_EQ(CoordsOf(14, p), (RankCoords{.tp = 0, .pp = 1, .dp = 1, .cp = 1}));
  for (int r = 0; r < 16; ++r) EXPECT_EQ(WorldRankOf(CoordsOf(r, p), p), r);
}

// A world rank that only records what MakeProcessGroups splits it into (ninja's habit of a fake
// behind the interface): each group it returns remembers its color and key.
class SplitOnlyComm final : public Comm {
 public:
  SplitOnlyComm(int rank, int size, int color = 0, int key = 0)
      : rank_(rank), size_(size), color_(color), key_(key) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int color() const { return color_; }
  int key() const { return key_; }
  std::unique_ptr<Comm> Split(int color, int key) override {
    if (color < 0) return nullptr;
    return std::make_unique<SplitOnlyComm>(-1, -1, color, key);
  }
  void AllReduce(Span, ReduceOp) override { Unused(); }
  void AllGather(Span, Span) override { Unused(); }
  void ReduceScatter(Span, Span) override { Unused(); }
  void AllToAll(Span, Span) override { Unused(); }
  void AllToAllV(Span, const std::vector<int64_t>&, Span, const std::vector<int64_t>&) override {
    Unused();
  }
  void AllGatherV(Span, Span, const std::vector<int64_t>&) override { Unused(); }
  void ReduceScatterV(Span, Span, const std::vector<int64_t>&) override { Unused(); }
  void Broadcast(Span, int) override { Unused(); }
  void Barrier() override { Unused(); }
  std::unique_ptr<CommRequest> Isend(Span, int, int) override { Unused(); }
  void Recv(Span, int, int) override { Unused(); }
  int max_tag() const override { return 0; }
  std::vector<std::string> GatherStrings(const std::string&, int) override { Unused(); }
  double AllReduceHost(double, ReduceOp) override { Unused(); }

 private:
  [[noreturn]] static void Unused() { throw InternalError("SplitOnlyComm: not a real group"); }
  int rank_, size_, color_, key_;
};

// Every group of one kind over all world ranks: members ordered by their key.
std::set<std::vector<int>> GroupsOf(const std::vector<ProcessGroups>& all,
                                    std::unique_ptr<Comm> ProcessGroups::*kind) {
  std::map<int, std::map<int, int>> by_color;  // color -> key -> world rank
  for (size_t r = 0; r < all.size(); ++r) {
    const auto* c = dynamic_cast<const SplitOnlyComm*>((all[r].*kind).get());
    if (c == nullptr) continue;
    EXPECT_TRUE(by_color[c->color()].emplace(c->key(), static_cast<int>(r)).second);
  }
  std::set<std::vector<int>> groups;
  for (const auto& [color, members] : by_color) {
    std::vector<int> ranks;
    for (const auto& [key, rank] : members) ranks.push_back(rank);
    groups.insert(ranks);
  }
  return groups;
}

TEST(Topology, GroupsInMegatronsOrderWithContextParallel) {
  // executor/comm/topology.h's example: world 16, tp = cp = dp = pp = 2.
  const ParallelConfig p{.tp = 2, .pp = 2, .dp = 2, .cp = 2};
  std::vector<ProcessGroups> all;
  for (int r = 0; r < 16; ++r) {
    all.push_back(MakeProcessGroups(std::make_unique<SplitOnlyComm>(r, 16), p));
  }
  using G = std::set<std::vector<int>>;
  EXPECT_EQ(GroupsOf(all, &ProcessGroups::tp),
            (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(GroupsOf(all, &ProcessGroups::cp),
            (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(GroupsOf(all, &ProcessGroups::dp),
            (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(GroupsOf(all, &ProcessGroups::pp),
            (G{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  // Gradients and optimizer shards: data parallel with context parallel, cp rank fastest.
  EXPECT_EQ(GroupsOf(all, &ProcessGroups::dp_cp),
            (G{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(GroupsOf(all, &ProcessGroups::model_parallel),
            (G{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  EXPECT_EQ(GroupsOf(all, &ProcessGroups::embedding), GroupsOf(all, &ProcessGroups::pp));
  EXPECT_EQ(all[6].coords, (RankCoords{.tp = 0, .pp = 0, .dp = 1, .cp = 1}));
}

// The expert grid (Megatron's etp-ep-edp-pp, executor/comm/topology.h) over the same ranks as the
// dense one.
TEST(Topology, ExpertGroupsInMegatronsOrder) {
  using G = std::set<std::vector<int>>;
  auto make = [](const ParallelConfig& p) {
    std::vector<ProcessGroups> all;
    for (int r = 0; r < p.world_size(); ++r) {
      all.push_back(MakeProcessGroups(
          std::make_unique<SplitOnlyComm>(r, static_cast<int>(p.world_size())), p));
    }
    return all;
  };
  // executor/comm/topology.h's example: world 8, tp 2, dp 4, ep 4, etp 1 (edp 2): each EP group
  // spans TP and DP ranks.
  const ParallelConfig a{.tp = 2, .dp = 4, .ep = 4, .etp = 1};
  const std::vector<ProcessGroups> ga = make(a);
  EXPECT_EQ(GroupsOf(ga, &ProcessGroups::ep), (G{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(GroupsOf(ga, &ProcessGroups::edp), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(GroupsOf(ga, &ProcessGroups::etp), (G{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(ga[5].expert_coords, (ExpertCoords{.etp = 0, .ep = 1, .edp = 1, .pp = 0}));
  // World 16: tp = cp = dp = pp = 2 with ep 2 and etp 2 (tp's default): per stage, ETP pairs of
  // consecutive ranks (the TP groups), EP pairs of stride 2 (here the CP groups), expert data
  // parallel pairs of stride 4; stages as in the dense grid.
  const ParallelConfig b{.tp = 2, .pp = 2, .dp = 2, .cp = 2, .ep = 2};
  const std::vector<ProcessGroups> gb = make(b);
  EXPECT_EQ(GroupsOf(gb, &ProcessGroups::etp), GroupsOf(gb, &ProcessGroups::tp));
  EXPECT_EQ(GroupsOf(gb, &ProcessGroups::ep), GroupsOf(gb, &ProcessGroups::cp));
  EXPECT_EQ(GroupsOf(gb, &ProcessGroups::edp),
            (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(gb[static_cast<size_t>(r)].expert_coords.pp, gb[static_cast<size_t>(r)].coords.pp);
    EXPECT_EQ(WorldRankOf(ExpertCoordsOf(r, b), b), r);
  }
  EXPECT_EQ(ExpertCoordsOf(14, b), (ExpertCoords{.etp = 0, .ep = 1, .edp = 1, .pp = 1}));
  // A dense layout: experts on no one's grid but their own; etp = tp, edp = dp x cp.
  const ParallelConfig c{.tp = 2, .dp = 2, .cp = 2};
  const std::vector<ProcessGroups> gc = make(c);
  EXPECT_EQ(GroupsOf(gc, &ProcessGroups::etp), GroupsOf(gc, &ProcessGroups::tp));
  EXPECT_EQ(GroupsOf(gc, &ProcessGroups::edp), GroupsOf(gc, &ProcessGroups::dp_cp));
  EXPECT_EQ(GroupsOf(gc, &ProcessGroups::ep).size(), 8u);
}

// Stand-in groups (--profile-rank) have the sizes and places Megatron's order gives every rank,
// for each group of both grids.
TEST(Topology, StandInGroupsHaveTheGroupsOfMegatronsOrder) {
  Plan plan =
      TinyPlan({.tp = 2, .pp = 2, .dp = 2, .sequence_parallel = true, .cp = 2, .ep = 4, .etp = 1},
               {.layers = 4, .experts = 4, .topk = 2, .expert_ffn = 64});
  const ParallelConfig& p = plan.parallel;
  auto backend = MakeCpuBackend();
  for (int r = 0; r < p.world_size(); ++r) {
    StandInTallies tallies;
    const ProcessGroups g = MakeStandInGroups(r, p, *backend, &tallies);
    const RankCoords c = CoordsOf(r, p);
    const ExpertCoords e = ExpertCoordsOf(r, p);
    EXPECT_EQ(g.coords, c);
    auto expect = [&](const std::unique_ptr<Comm>& comm, int64_t size, int rank, const char* what) {
      ASSERT_NE(comm, nullptr) << what << " of rank " << r;
      EXPECT_EQ(comm->size(), size) << what << " of rank " << r;
      EXPECT_EQ(comm->rank(), rank) << what << " of rank " << r;
    };
    expect(g.world, p.world_size(), r, "world");
    expect(g.tp, p.tp, c.tp, "tp");
    expect(g.cp, p.cp, c.cp, "cp");
    expect(g.pp, p.pp, c.pp, "pp");
    expect(g.dp, p.dp, c.dp, "dp");
    expect(g.dp_cp, p.dp * p.cp, c.cp + p.cp * c.dp, "dp_cp");
    expect(g.model_parallel, p.tp * p.pp, c.pp * p.tp + c.tp, "model_parallel");
    expect(g.embedding, 2, c.pp == 0 ? 0 : 1, "embedding");  // pp 2: both stages are ends
    expect(g.etp, p.expert_tp(), e.etp, "etp");
    expect(g.ep, p.ep, e.ep, "ep");
    expect(g.edp, p.expert_dp(), e.edp, "edp");
  }
}

}  // namespace
}  // namespace ptdp
