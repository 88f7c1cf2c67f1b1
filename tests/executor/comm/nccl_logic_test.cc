// The NCCL communicator's logic without a GPU (executor/comm/nccl_logic.h): how point-to-point
// messages are grouped, checked against a model of NCCL's semantics on every pipeline schedule; the
// order of messages (NCCL has no tags); the groups ncclCommSplit forms from
// executor/comm/topology.h's colors and keys; the unique id's exchange over the TCP store.
#include "executor/comm/nccl_logic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <map>
#include <optional>
#include <tuple>

#include "core/schedule.h"
#include "executor/backend/cpu.h"
#include "executor/comm/topology.h"
#include "executor/launch/tcp_store.h"

namespace ptdp {
namespace {

TEST(NcclEdges, RingNeighboursInRoundsOfDisjointPairs) {
  EXPECT_TRUE(NeighbourEdges(1).empty());
  EXPECT_EQ(NeighbourEdges(2), (std::vector<Edge>{{0, 1}, {1, 0}}));
  EXPECT_EQ(NeighbourEdges(3), (std::vector<Edge>{{0, 1}, {1, 2}, {2, 0}, {0, 2}, {1, 0}, {2, 1}}));
  EXPECT_EQ(EdgeRounds(2).size(), 2u);
  EXPECT_EQ(EdgeRounds(4).size(), 4u);
  EXPECT_EQ(EdgeRounds(8).size(), 4u);
  for (const int n : {2, 3, 4, 5, 7, 8, 16}) {
    SCOPED_TRACE(n);
    const std::vector<std::vector<Edge>> rounds = EdgeRounds(n);
    EXPECT_LE(rounds.size(), 6u);
    std::vector<Edge> all;
    for (const auto& round : rounds) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (const Edge& e : round) {
        ++seen[static_cast<size_t>(e.from)];
        ++seen[static_cast<size_t>(e.to)];
        all.push_back(e);
      }
      EXPECT_LE(*std::max_element(seen.begin(), seen.end()), 1);
      // Every rank's split arguments name its own pair, the sender first.
      for (int r = 0; r < n; ++r) {
        const SplitArgs a = EdgeSplit(round, r);
        if (seen[static_cast<size_t>(r)] == 0) {
          EXPECT_EQ(a.color, -1);
          continue;
        }
        const Edge& e = round.at(static_cast<size_t>(a.color));
        EXPECT_EQ(a.key, e.from == r ? 0 : 1);
        EXPECT_TRUE(e.from == r || e.to == r);
      }
    }
    EXPECT_EQ(all.size(), NeighbourEdges(n).size());
  }
}

// A model of NCCL point-to-point semantics. Each rank's host runs its program (the pipeline
// runner's receives, sends and final wait for one step); what it issues becomes groups of
// operations on streams, in order. A group is in flight when it heads its stream; an operation
// completes when its matching operation at the peer is in flight too (the k-th send from a to b
// matches the k-th receive at b from a); a group completes when all its operations have. The
// host blocks after a receive until the receive's group completes (the runner synchronises its
// compute stream, which waits for it, after every operation), and at the final wait until
// every group has.
struct HostAction {
  enum Kind { kIsend, kRecv, kWaitAll } kind;
  int peer = 0;
  int tag = 0;
};

enum class P2pDesign {
  kPairCommunicators,  // NcclComm's: a stream per ordered pair, each message issued alone
  kOneStreamGrouped,   // one stream; queued sends issued with the next receive in one group
  kOneStreamAlone,     // one stream; each send and receive issued alone
};

struct Outcome {
  bool deadlock = false;
  std::string order_error;  // a receive that met a message of another tag
};

Outcome Simulate(const std::vector<std::vector<HostAction>>& programs, P2pDesign design) {
  const int n = static_cast<int>(programs.size());
  struct Op {
    bool send;
    int peer, tag;
    int64_t index = 0;  // k: the k-th send a->b or receive b<-a
    bool done = false;
  };
  struct Group {
    std::vector<Op> ops;
    bool done() const {
      return std::all_of(ops.begin(), ops.end(), [](const Op& op) { return op.done; });
    }
  };
  // (rank, stream) -> its groups in order, and the index of the head.
  std::map<std::pair<int, int>, std::vector<Group>> streams;
  std::map<std::pair<int, int>, size_t> heads;
  std::map<std::tuple<int, int, bool>, int64_t> counts;  // (rank, peer, send) -> issued
  std::vector<std::vector<Op>> queued(static_cast<size_t>(n));
  std::vector<size_t> pc(static_cast<size_t>(n), 0);
  // What a blocked host waits for: a group (stream, index), or everything (index -1).
  std::vector<std::optional<std::pair<std::pair<int, int>, int64_t>>> waiting(
      static_cast<size_t>(n));
  auto stream_of = [&](int r, const Op& op) {
    if (design != P2pDesign::kPairCommunicators) return std::pair<int, int>{r, 0};
    return std::pair<int, int>{r, (op.send ? 1 : -1) * (op.peer + 1)};
  };
  auto issue = [&](int r, std::vector<Op> ops) {
    if (ops.empty()) return std::pair<std::pair<int, int>, int64_t>{{r, 0}, -1};
    for (Op& op : ops) op.index = counts[{r, op.peer, op.send}]++;
    const auto key = stream_of(r, ops.front());
    streams[key].push_back({std::move(ops)});
    return std::pair<std::pair<int, int>, int64_t>{key, int64_t(streams[key].size()) - 1};
  };
  auto complete = [&](const std::pair<std::pair<int, int>, int64_t>& what, int r) {
    if (what.second >= 0) return heads[what.first] > static_cast<size_t>(what.second);
    for (const auto& [key, groups] : streams) {
      if (key.first == r && heads[key] < groups.size()) return false;
    }
    return true;
  };
  Outcome out;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const auto ri = static_cast<size_t>(r);
      while (pc[ri] < programs[ri].size()) {
        if (waiting[ri] && !complete(*waiting[ri], r)) break;
        waiting[ri].reset();
        const HostAction& a = programs[ri][pc[ri]];
        const Op op{a.kind == HostAction::kIsend, a.peer, a.tag};
        if (a.kind == HostAction::kIsend) {
          if (design == P2pDesign::kOneStreamGrouped) {
            queued[ri].push_back(op);
          } else {
            issue(r, {op});
          }
        } else if (a.kind == HostAction::kRecv) {
          std::vector<Op> group;
          group.swap(queued[ri]);
          group.push_back(op);
          waiting[ri] = issue(r, std::move(group));
        } else {
          std::vector<Op> group;
          group.swap(queued[ri]);
          issue(r, std::move(group));
          waiting[ri] = std::pair<std::pair<int, int>, int64_t>{{r, 0}, -1};
        }
        ++pc[ri];
        progress = true;
      }
    }
    // The network: operations of in-flight groups meet their peers'.
    for (auto& [key, groups] : streams) {
      if (heads[key] == groups.size()) continue;
      const int r = key.first;
      for (Op& op : groups[heads[key]].ops) {
        if (op.done || !op.send) continue;
        for (auto& [peer_key, peer_groups] : streams) {
          if (peer_key.first != op.peer || heads[peer_key] == peer_groups.size()) continue;
          for (Op& other : peer_groups[heads[peer_key]].ops) {
            if (other.done || other.send || other.peer != r || other.index != op.index) continue;
            if (other.tag != op.tag && out.order_error.empty()) {
              out.order_error = "rank " + std::to_string(op.peer) + " received tag " +
                                std::to_string(op.tag) + " where it expected " +
                                std::to_string(other.tag);
            }
            op.done = other.done = true;
            progress = true;
          }
        }
      }
    }
    for (auto& [key, groups] : streams) {
      while (heads[key] < groups.size() && groups[heads[key]].done()) {
        ++heads[key];
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    if (pc[static_cast<size_t>(r)] < programs[static_cast<size_t>(r)].size()) out.deadlock = true;
  }
  for (auto& [key, groups] : streams) {
    if (heads[key] < groups.size()) out.deadlock = true;
  }
  return out;
}

// One step of PipelineRunner::RunStep on every stage, as host actions (executor/train/pipeline.cc's
// tags).
std::vector<std::vector<HostAction>> StepPrograms(const PipelineSchedule& s) {
  auto tag = [&](bool backward, int vs, int mb) {
    return ((backward ? 1 : 0) * s.virtual_stages() + vs) * s.microbatches + mb;
  };
  std::vector<std::vector<HostAction>> programs(static_cast<size_t>(s.stages));
  for (int r = 0; r < s.stages; ++r) {
    auto& p = programs[static_cast<size_t>(r)];
    for (const PipelineOp& op : s.ops[static_cast<size_t>(r)]) {
      const int vs = s.VirtualStage(r, op.chunk);
      const bool backward = op.kind == OpKind::kBackward;
      if (op.kind == OpKind::kWeightGrad) continue;
      if (op.recv_from != kNoStage) {
        p.push_back({HostAction::kRecv, op.recv_from, tag(backward, vs, op.microbatch)});
      }
      if (op.send_to != kNoStage) {
        p.push_back({HostAction::kIsend, op.send_to,
                     tag(backward, backward ? vs - 1 : vs + 1, op.microbatch)});
      }
    }
    p.push_back({HostAction::kWaitAll, 0, 0});
  }
  return programs;
}

struct Case {
  Schedule kind;
  int p, m, v;
};

std::string NameOf(const Case& c) {
  return std::string(Name(c.kind)) + " p" + std::to_string(c.p) + " m" + std::to_string(c.m) +
         " v" + std::to_string(c.v);
}

constexpr Case kCases[] = {{Schedule::kGpipe, 2, 4, 1},       {Schedule::kGpipe, 4, 3, 1},
                           {Schedule::k1F1B, 2, 1, 1},        {Schedule::k1F1B, 2, 8, 1},
                           {Schedule::k1F1B, 4, 8, 1},        {Schedule::k1F1B, 8, 3, 1},
                           {Schedule::kInterleaved, 2, 4, 2}, {Schedule::kInterleaved, 4, 8, 2},
                           {Schedule::kInterleaved, 4, 4, 3}, {Schedule::kInterleaved, 8, 16, 2},
                           {Schedule::kZbH1, 2, 4, 1},        {Schedule::kZbH1, 4, 8, 1},
                           {Schedule::kZbH1, 4, 2, 1}};

TEST(P2pDesigns, PairCommunicatorsCompleteEveryScheduleWithMessagesInOrder) {
  for (const Case& c : kCases) {
    const Outcome o =
        Simulate(StepPrograms(MakeSchedule(c.kind, c.p, c.m, c.v)), P2pDesign::kPairCommunicators);
    EXPECT_FALSE(o.deadlock) << NameOf(c);
    EXPECT_EQ(o.order_error, "") << NameOf(c);
  }
}

// Why not one stream: issued alone, the sends deadlock 1F1B's steady state (both stages send,
// then wait for the other's send behind their own); grouped with the next receive (Megatron's
// batching, applied to the runner's order), they still deadlock the interleaved schedule.
TEST(P2pDesigns, OneStreamDeadlocksAloneAndGrouped) {
  auto deadlocks = [](const Case& c, P2pDesign design) {
    return Simulate(StepPrograms(MakeSchedule(c.kind, c.p, c.m, c.v)), design).deadlock;
  };
  EXPECT_TRUE(deadlocks({Schedule::k1F1B, 2, 4, 1}, P2pDesign::kOneStreamAlone));
  EXPECT_TRUE(deadlocks({Schedule::k1F1B, 4, 8, 1}, P2pDesign::kOneStreamAlone));
  EXPECT_FALSE(deadlocks({Schedule::k1F1B, 4, 8, 1}, P2pDesign::kOneStreamGrouped));
  EXPECT_TRUE(deadlocks({Schedule::kInterleaved, 2, 4, 2}, P2pDesign::kOneStreamGrouped));
}

// The model sees messages met out of order (NCCL has no tags): stage 0 sends micro-batch 1
// before 0.
TEST(P2pDesigns, MessagesOutOfOrderAreSeen) {
  const Outcome o =
      Simulate({{{HostAction::kIsend, 1, 1}, {HostAction::kIsend, 1, 0}, {HostAction::kWaitAll}},
                {{HostAction::kRecv, 0, 0}, {HostAction::kRecv, 0, 1}, {HostAction::kWaitAll}}},
               P2pDesign::kPairCommunicators);
  EXPECT_EQ(o.order_error, "rank 1 received tag 1 where it expected 0");
  EXPECT_FALSE(o.deadlock);
}

// A Comm that only records the Split calls MakeProcessGroups makes (colors and keys), for one
// rank of a world.
class SplitRecorder final : public Comm {
 public:
  SplitRecorder(int rank, int size, std::vector<std::pair<int, int>>* calls)
      : rank_(rank), size_(size), calls_(calls) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<Comm> Split(int color, int key) override {
    calls_->push_back({color, key});
    return color < 0 ? nullptr : std::make_unique<SplitRecorder>(0, 1, nullptr);
  }
  void AllReduce(Span, ReduceOp) override {}
  void AllGather(Span, Span) override {}
  void ReduceScatter(Span, Span) override {}
  void AllToAll(Span, Span) override {}
  void AllToAllV(Span, const std::vector<int64_t>&, Span, const std::vector<int64_t>&) override {}
  void AllGatherV(Span, Span, const std::vector<int64_t>&) override {}
  void ReduceScatterV(Span, Span, const std::vector<int64_t>&) override {}
  void Broadcast(Span, int) override {}
  void Barrier() override {}
  std::unique_ptr<CommRequest> Isend(Span, int, int) override { return nullptr; }
  void Recv(Span, int, int) override {}
  int max_tag() const override { return 0; }
  std::vector<std::string> GatherStrings(const std::string&, int) override { return {}; }
  double AllReduceHost(double v, ReduceOp) override { return v; }

 private:
  int rank_, size_;
  std::vector<std::pair<int, int>>* calls_;
};

// ncclCommSplit(comm, color, key): the ranks of one color form a communicator, ordered by key
// then by their rank in `comm` (as MPI_Comm_split). Returns, per split call of
// MakeProcessGroups, world rank `of`'s group as world ranks in their new rank order.
std::vector<std::vector<int>> GroupsOf(int of, const ParallelConfig& p) {
  const int n = p.world_size();
  std::vector<std::vector<std::pair<int, int>>> calls(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    MakeProcessGroups(std::make_unique<SplitRecorder>(r, n, &calls[static_cast<size_t>(r)]), p);
  }
  std::vector<std::vector<int>> groups;
  for (size_t call = 0; call < calls[0].size(); ++call) {
    const int color = calls[static_cast<size_t>(of)][call].first;
    std::vector<std::pair<int, int>> members;  // (key, world rank)
    for (int r = 0; r < n; ++r) {
      const auto [c, key] = calls[static_cast<size_t>(r)].at(call);
      if (color >= 0 && c == color) members.push_back({key, r});
    }
    std::sort(members.begin(), members.end());
    std::vector<int> group;
    for (const auto& m : members) group.push_back(m.second);
    groups.push_back(group);
  }
  return groups;
}

TEST(NcclSplits, FormMegatronsGroupsInRankOrder) {
  // executor/comm/topology.h's example: world 16, tp = cp = dp = pp = 2. Split order: tp, cp, pp,
  // dp, dp_cp, model_parallel, embedding, etp, ep, edp.
  ParallelConfig p;
  p.tp = p.cp = p.dp = p.pp = 2;
  std::vector<std::vector<int>> g = GroupsOf(5, p);
  ASSERT_EQ(g.size(), 10u);
  EXPECT_EQ(g[0], (std::vector<int>{4, 5}));          // tp
  EXPECT_EQ(g[1], (std::vector<int>{5, 7}));          // cp
  EXPECT_EQ(g[2], (std::vector<int>{5, 13}));         // pp, by stage
  EXPECT_EQ(g[3], (std::vector<int>{1, 5}));          // dp
  EXPECT_EQ(g[4], (std::vector<int>{1, 3, 5, 7}));    // dp x cp
  EXPECT_EQ(g[5], (std::vector<int>{4, 5, 12, 13}));  // one model replica
  EXPECT_EQ(g[6], (std::vector<int>{5, 13}));         // embedding: first and last stage
  g = GroupsOf(8, p);
  EXPECT_EQ(g[2], (std::vector<int>{0, 8}));
  EXPECT_EQ(g[3], (std::vector<int>{8, 12}));
  // Expert grid: world 8, tp 2, dp 4, ep 4, etp 1 (executor/comm/topology.h): EP [0..3] [4..7], EDP
  // [r, r+4].
  ParallelConfig e;
  e.tp = 2;
  e.dp = 4;
  e.ep = 4;
  e.etp = 1;
  g = GroupsOf(6, e);
  EXPECT_EQ(g[8], (std::vector<int>{4, 5, 6, 7}));  // ep
  EXPECT_EQ(g[9], (std::vector<int>{2, 6}));        // edp
}

TEST(NcclId, SharedOverTheStoreAndCheckedForSize) {
  TcpStoreOptions o;
  o.world_size = 3;
  o.timeout_s = 5;
  TcpStore root(o);
  const std::string id(128, '\7');
  std::vector<std::future<std::string>> others;
  for (int r = 1; r < 3; ++r) {
    others.push_back(std::async(std::launch::async, [&, r] {
      TcpStoreOptions mine = o;
      mine.rank = r;
      mine.port = root.port();
      TcpStore store(mine);
      const std::string got = IdOverStore(store, "nccl/world", 128)("");
      store.Barrier("got");
      return got;
    }));
  }
  EXPECT_EQ(IdOverStore(root, "nccl/world", 128)(id), id);
  root.Barrier("got");
  for (auto& f : others) EXPECT_EQ(f.get(), id);
  // A value of the wrong size under the key (another program on the port).
  TcpStoreOptions one = o;
  one.rank = 1;
  one.port = root.port();
  TcpStore store(one);
  root.Set("nccl/bad", "short");
  try {
    IdOverStore(store, "nccl/bad", 128)("");
    ADD_FAILURE() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("key \"nccl/bad\" holds 5 bytes, an NCCL unique id has "
                                         "128"),
              std::string::npos)
        << e.what();
  }
}

TEST(NcclId, OneRankOverALocalCommKeepsItsOwnId) {
  const std::unique_ptr<Backend> cpu = MakeCpuBackend(1);
  const std::unique_ptr<Comm> world = MakeLocalComm(*cpu);
  const std::string id = "0123456789abcdef";
  EXPECT_EQ(IdOverComm(*world, 16)(id), id);
}

}  // namespace
}  // namespace ptdp
