// Collectives: the nccl-tests bus-bandwidth arithmetic, NCCL's latency model, and which groups
// cross nodes in Megatron's rank order (compared with explicit rank lists, formulas.md).
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/presets.h"
#include "simulator/collectives.h"

namespace ptdp {
namespace {

TEST(BusBandwidth, NcclTestsFactors) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kSendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 1), 0.0);
}

TEST(CollectiveTime, HandComputedOnDgxA100) {
  const ClusterSpec c = ClusterPreset("dgx-a100-80gb");
  // 1 GB all-reduce in one node: 8.4 us + 14 NVLink steps x 3.4 us + 1.75 GB / 230 GB/s.
  EXPECT_NEAR(CollectiveTime(c, Collective::kAllReduce, 1e9, PlaceGroup(0, 1, 8, 8)),
              8.4e-6 + 14 * 3.4e-6 + 1.75e9 / 230e9, 1e-12);
  // 1 GB all-reduce over 4 nodes, one rank each (a DP group of TP-8 ranks): 6 network steps,
  // 1.5 GB through one 24 GB/s NIC.
  EXPECT_NEAR(CollectiveTime(c, Collective::kAllReduce, 1e9, PlaceGroup(0, 8, 4, 8)),
              8.4e-6 + 6 * 9.6e-6 + 1.5e9 / 24e9, 1e-12);
  // 32 ranks, 8 per node on 4 nodes: 62 steps, 6 of them across nodes; the 8 NICs of a node
  // carry the group: min(230, 8 x 24) = 192 GB/s.
  EXPECT_NEAR(CollectiveTime(c, Collective::kAllReduce, 1e9, PlaceGroup(0, 1, 32, 8)),
              8.4e-6 + 56 * 3.4e-6 + 6 * 9.6e-6 + 2 * 31.0 / 32 * 1e9 / 192e9, 1e-12);
  // A send to the next node: one step, 1 GB through one NIC.
  EXPECT_NEAR(CollectiveTime(c, Collective::kSendRecv, 1e9, PlaceGroup(0, 48, 2, 8)),
              8.4e-6 + 9.6e-6 + 1e9 / 24e9, 1e-12);
  // One rank: nothing to do.
  EXPECT_EQ(CollectiveTime(c, Collective::kAllReduce, 1e9, PlaceGroup(0, 1, 1, 8)), 0);
}

TEST(GroupBusBandwidth, HierarchicalGroupsUseTheirRanksNics) {
  const ClusterSpec c = ClusterPreset("dgx-a100-80gb");
  EXPECT_EQ(GroupBusBandwidth(c, PlaceGroup(0, 1, 8, 8)), 230e9);   // NVLink
  EXPECT_EQ(GroupBusBandwidth(c, PlaceGroup(0, 8, 16, 8)), 24e9);   // 1 rank per node
  EXPECT_EQ(GroupBusBandwidth(c, PlaceGroup(0, 2, 32, 8)), 96e9);   // 4 ranks per node
  EXPECT_EQ(GroupBusBandwidth(c, PlaceGroup(0, 1, 16, 8)), 192e9);  // 8 per node, NIC-bound
}

// Megatron's rank of (tp, dp, pp) coordinates, order tp-cp-ep-dp-pp with cp = ep = 1.
int64_t Rank(const ParallelConfig& p, int tp, int dp, int pp) {
  return tp + int64_t{p.tp} * (dp + int64_t{p.dp} * pp);
}

// Nodes and the most ranks on one node of an explicit rank list.
GroupPlacement Explicit(const std::vector<int64_t>& ranks, int gpus_per_node) {
  std::map<int64_t, int64_t> per_node;
  for (int64_t r : ranks) ++per_node[r / gpus_per_node];
  GroupPlacement g;
  g.ranks = static_cast<int64_t>(ranks.size());
  g.nodes = static_cast<int64_t>(per_node.size());
  g.ranks_per_node = 0;
  for (const auto& [node, n] : per_node) g.ranks_per_node = std::max(g.ranks_per_node, n);
  return g;
}

TEST(Placement, FormulasMdExampleWorld8) {
  // formulas.md: world 8, t = d = p = 2: TP [0,1] [2,3] ..., DP [0,2] [1,3] ..., PP [0,4] ....
  const ParallelConfig p{.tp = 2, .pp = 2, .dp = 2};
  EXPECT_EQ(Rank(p, 1, 0, 0), 1);
  EXPECT_EQ(Rank(p, 0, 1, 0), 2);
  EXPECT_EQ(Rank(p, 0, 0, 1), 4);
  // One 8-GPU node: nothing crosses.
  EXPECT_FALSE(TensorParallelGroup(p, 8).crosses_nodes());
  EXPECT_FALSE(DataParallelGroup(p, 8).crosses_nodes());
  EXPECT_FALSE(PipelinePair(p, 0, 8).crosses_nodes());
  // 4-GPU nodes: TP [0,1] and DP [0,2] stay on node 0, PP [0,4] spans nodes 0 and 1.
  EXPECT_FALSE(TensorParallelGroup(p, 4).crosses_nodes());
  EXPECT_FALSE(DataParallelGroup(p, 4).crosses_nodes());
  EXPECT_TRUE(PipelinePair(p, 0, 4).crosses_nodes());
  // 2-GPU nodes: only TP stays inside.
  EXPECT_FALSE(TensorParallelGroup(p, 2).crosses_nodes());
  EXPECT_TRUE(DataParallelGroup(p, 2).crosses_nodes());
  EXPECT_EQ(DataParallelGroup(p, 2), (GroupPlacement{2, 2, 1}));
}

TEST(Placement, NarayananLayoutsOnDgxNodes) {
  // TP 8 fills a node; DP and PP groups take one rank per node.
  const ParallelConfig t8{.tp = 8, .pp = 64, .dp = 6};
  EXPECT_EQ(TensorParallelGroup(t8, 8), (GroupPlacement{8, 1, 8}));
  EXPECT_EQ(DataParallelGroup(t8, 8), (GroupPlacement{6, 6, 1}));
  EXPECT_EQ(PipelinePair(t8, 0, 8), (GroupPlacement{2, 2, 1}));
  EXPECT_EQ(EmbeddingGroup(t8, 8), (GroupPlacement{2, 2, 1}));
  // TP 1, DP 32: eight DP ranks per node on four nodes. TP 2: four per node. TP 4: two.
  EXPECT_EQ(DataParallelGroup({.tp = 1, .pp = 1, .dp = 32}, 8), (GroupPlacement{32, 4, 8}));
  EXPECT_EQ(DataParallelGroup({.tp = 2, .pp = 1, .dp = 32}, 8), (GroupPlacement{32, 8, 4}));
  EXPECT_EQ(DataParallelGroup({.tp = 4, .pp = 1, .dp = 32}, 8), (GroupPlacement{32, 16, 2}));
  // TP 16 spans two nodes.
  EXPECT_EQ(TensorParallelGroup({.tp = 16, .pp = 1, .dp = 1}, 8), (GroupPlacement{16, 2, 8}));
  // TP 2 x DP 2 x PP 4 on 8-GPU nodes: stages 0-1 on node 0, 2-3 on node 1.
  const ParallelConfig small{.tp = 2, .pp = 4, .dp = 2};
  EXPECT_FALSE(PipelinePair(small, 0, 8).crosses_nodes());
  EXPECT_TRUE(PipelinePair(small, 1, 8).crosses_nodes());
  EXPECT_TRUE(PipelinePair(small, 3, 8).crosses_nodes());  // the wrap to the next chunk
}

TEST(Placement, AgreesWithExplicitRankListsForEveryMember) {
  for (const ParallelConfig& p :
       {ParallelConfig{.tp = 2, .pp = 2, .dp = 2}, ParallelConfig{.tp = 2, .pp = 4, .dp = 2},
        ParallelConfig{.tp = 4, .pp = 3, .dp = 6}, ParallelConfig{.tp = 8, .pp = 4, .dp = 3},
        ParallelConfig{.tp = 3, .pp = 2, .dp = 5}, ParallelConfig{.tp = 16, .pp = 2, .dp = 2},
        ParallelConfig{.tp = 1, .pp = 5, .dp = 12}}) {
    for (int g : {2, 4, 8}) {
      SCOPED_TRACE(testing::Message()
                   << "tp " << p.tp << " dp " << p.dp << " pp " << p.pp << " gpus/node " << g);
      // The functions against explicit rank lists of every group of a kind: they must return
      // the worst-placed one (crossing nodes; then fewest ranks per node; then most nodes).
      auto worse = [](const GroupPlacement& a, const GroupPlacement& b) {
        if (a.crosses_nodes() != b.crosses_nodes()) return a.crosses_nodes();
        if (!a.crosses_nodes()) return false;
        if (a.ranks_per_node != b.ranks_per_node) return a.ranks_per_node < b.ranks_per_node;
        return a.nodes > b.nodes;
      };
      auto worst = [&](const std::vector<std::vector<int64_t>>& groups) {
        GroupPlacement w = Explicit(groups.front(), g);
        for (const auto& members : groups) {
          if (worse(Explicit(members, g), w)) w = Explicit(members, g);
        }
        return w;
      };
      std::vector<std::vector<int64_t>> tp_groups, dp_groups;
      for (int r = 0; r < p.pp; ++r) {
        for (int j = 0; j < p.dp; ++j) {
          tp_groups.emplace_back();
          for (int i = 0; i < p.tp; ++i) tp_groups.back().push_back(Rank(p, i, j, r));
        }
        for (int i = 0; i < p.tp; ++i) {
          dp_groups.emplace_back();
          for (int j = 0; j < p.dp; ++j) dp_groups.back().push_back(Rank(p, i, j, r));
        }
      }
      EXPECT_EQ(TensorParallelGroup(p, g), worst(tp_groups));
      EXPECT_EQ(DataParallelGroup(p, g), worst(dp_groups));
      for (int r = 0; r < p.pp; ++r) {
        const int next = (r + 1) % p.pp;
        if (next == r) continue;
        std::vector<std::vector<int64_t>> pairs;
        for (int i = 0; i < p.tp; ++i) {
          for (int j = 0; j < p.dp; ++j) {
            pairs.push_back({Rank(p, i, j, std::min(r, next)), Rank(p, i, j, std::max(r, next))});
          }
        }
        EXPECT_EQ(PipelinePair(p, r, g), worst(pairs)) << "stage " << r;
      }
    }
  }
}

}  // namespace
}  // namespace ptdp

namespace ptdp {
namespace {

TEST(Placement, GroupsThatStraddleNodesAreTheWorstOfTheirKind) {
  // TP 6 on 8-GPU nodes: group 0 is ranks 0-5 (one node), group 1 is ranks 6-11 (two nodes).
  ParallelConfig p{.tp = 6, .pp = 1, .dp = 4};
  const GroupPlacement tp = TensorParallelGroup(p, 8);
  EXPECT_TRUE(tp.crosses_nodes());
  EXPECT_EQ(tp.nodes, 2);
  // TP 4 x DP 2 with pipeline stages 8 ranks apart: every group stays in its node.
  ParallelConfig q{.tp = 4, .pp = 2, .dp = 2};
  EXPECT_FALSE(TensorParallelGroup(q, 8).crosses_nodes());
  EXPECT_FALSE(DataParallelGroup(q, 8).crosses_nodes());
  EXPECT_TRUE(PipelinePair(q, 0, 8).crosses_nodes());  // ranks x and x + 8
  // TP 2 x DP 2 x PP 4 (world 16): stages 4 ranks apart, so stage 1 -> 2 crosses (ranks 4-7
  // to 8-11) while stage 0 -> 1 does not.
  ParallelConfig r{.tp = 2, .pp = 4, .dp = 2};
  EXPECT_FALSE(PipelinePair(r, 0, 8).crosses_nodes());
  EXPECT_TRUE(PipelinePair(r, 1, 8).crosses_nodes());
  // DP groups with TP 3 on 8-GPU nodes: some are split between two nodes.
  ParallelConfig d{.tp = 3, .pp = 1, .dp = 2};
  EXPECT_FALSE(DataParallelGroup(d, 8).crosses_nodes());  // ranks {i, i+3} for i < 3: node 0
  ParallelConfig e{.tp = 3, .pp = 1, .dp = 8};
  EXPECT_TRUE(DataParallelGroup(e, 8).crosses_nodes());
}

}  // namespace
}  // namespace ptdp
