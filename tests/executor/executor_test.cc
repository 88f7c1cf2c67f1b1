// Executor pieces that run in one process: rank layout, counter-based RNG, CPU kernels against
// hand-computed values, data, the refusals of CheckExecutable, checkpoints and the launch line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "executor/backend/cpu.h"
#include "executor/comm/comm.h"
#include "executor/comm/standin.h"
#include "executor/comm/topology.h"
#include "executor/launch/launch.h"
#include "executor/model/context_parallel.h"
#include "executor/model/gpt_params.h"
#include "executor/model/rng.h"
#include "executor/train/checkpoint.h"
#include "executor/train/data.h"
#include "executor/train/optimizer.h"
#include "executor/train/trainer.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyLayout;
using testing_executor::TinyModel;
using testing_executor::TinyPlan;

std::vector<float> Host(Backend& b, Span s) {
  std::vector<float> out(static_cast<size_t>(s.numel));
  b.Download(s, out.data());
  return out;
}

Tensor Make(Backend& b, std::vector<int64_t> shape, std::vector<float> values,
            MemCategory category = MemCategory::kWorkspace) {
  Tensor t(b, DType::kF32, std::move(shape), category);
  if (!values.empty()) b.Upload(t.span(), values.data());
  return t;
}

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

TEST(SequenceShard, LoadBalancedChunksAndPositionRuns) {
  // get_batch_on_this_cp_rank: 16 tokens in 4 chunks; rank 0 keeps chunks 0 and 3, rank 1
  // chunks 1 and 2.
  const SequenceShard r0{16, 2, 0}, r1{16, 2, 1};
  std::vector<int64_t> p0, p1;
  for (int64_t i = 0; i < 8; ++i) p0.push_back(r0.Position(i)), p1.push_back(r1.Position(i));
  EXPECT_EQ(p0, (std::vector<int64_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(p1, (std::vector<int64_t>{4, 5, 6, 7, 8, 9, 10, 11}));
  // A sequence-parallel slice across the two chunks is two runs; within one, one run.
  EXPECT_EQ(PositionRuns(r0, 2, 4), (std::vector<PositionRun>{{2, 2, 2}, {4, 12, 2}}));
  EXPECT_EQ(PositionRuns(r1, 4, 4), (std::vector<PositionRun>{{4, 8, 4}}));
  EXPECT_EQ(PositionRuns(SequenceShard{16, 1, 0}, 3, 5), (std::vector<PositionRun>{{3, 3, 5}}));
  // Every position exactly once over the CP group; each rank the same causal work (the
  // number of (query, key) pairs with key <= query).
  std::vector<int> seen(32, 0);
  for (int r = 0; r < 4; ++r) {
    const SequenceShard s{32, 4, r};
    int64_t work = 0;
    for (int64_t i = 0; i < s.local(); ++i) {
      ++seen[static_cast<size_t>(s.Position(i))];
      work += s.Position(i) + 1;
    }
    EXPECT_EQ(work, 132) << "rank " << r;
  }
  EXPECT_EQ(seen, std::vector<int>(32, 1));
}

TEST(Rng, CounterBasedAndKeyedByName) {
  const RngStream a(1234, "layers.0.mlp.fc1.weight"), b(1234, "layers.1.mlp.fc1.weight");
  EXPECT_EQ(a.Bits(17), RngStream(1234, "layers.0.mlp.fc1.weight").Bits(17));
  EXPECT_NE(a.Bits(17), a.Bits(18));
  EXPECT_NE(a.Bits(17), b.Bits(17));
  double sum = 0, sq = 0;
  for (uint64_t i = 0; i < 20000; ++i) {
    sum += a.Normal(i);
    sq += a.Normal(i) * a.Normal(i);
  }
  EXPECT_NEAR(sum / 20000, 0.0, 0.03);
  EXPECT_NEAR(sq / 20000, 1.0, 0.03);
  // Random123's known-answer test for Philox4x32-10 with zero counter and key.
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
}

TEST(CpuBackend, GemmHonoursTransposesAndLeadingDimensions) {
  auto b = MakeCpuBackend();
  // A (2, 3) inside rows of 4; B^T given as (2, 3).
  Tensor a = Make(*b, {8}, {1, 2, 3, 0, 4, 5, 6, 0});
  Tensor bt = Make(*b, {6}, {1, 0, 1, 0, 1, 0});
  Tensor c = Make(*b, {4}, {});
  b->Gemm(false, true, 2, 2, 3, 1.0, a.span(), 4, bt.span(), 3, 0.0, c.span(), 2);
  EXPECT_EQ(Host(*b, c.span()), (std::vector<float>{4, 2, 10, 5}));
}

TEST(CpuBackend, LayerNormAndGelu) {
  auto b = MakeCpuBackend();
  Tensor x = Make(*b, {2, 2}, {1, 3, -2, 2});
  Tensor w = Make(*b, {2}, {2, 1}), bias = Make(*b, {2}, {0, 1});
  Tensor out = Make(*b, {2, 2}, {}), mean = Make(*b, {2}, {}), rstd = Make(*b, {2}, {});
  b->LayerNormForward(out.span(), mean.span(), rstd.span(), x.span(), w.span(), bias.span(), 2, 2,
                      0.0);
  // Row 0: mean 2, std 1 -> xhat (-1, 1); row 1: mean 0, std 2 -> (-1, 1).
  EXPECT_EQ(Host(*b, out.span()), (std::vector<float>{-2, 2, -2, 2}));
  EXPECT_EQ(Host(*b, mean.span()), (std::vector<float>{2, 0}));
  Tensor g = Make(*b, {3}, {});
  Tensor in = Make(*b, {3}, {0, 1, -1});
  b->Gelu(g.span(), in.span());
  const auto gv = Host(*b, g.span());
  EXPECT_FLOAT_EQ(gv[0], 0.0f);
  EXPECT_NEAR(gv[1], 0.8413447, 1e-6);  // x Phi(x)
  EXPECT_NEAR(gv[2], -0.1586553, 1e-6);
}

TEST(CpuBackend, VocabParallelCrossEntropyPieces) {
  auto b = MakeCpuBackend();
  // One row, local vocabulary [2, 5) of which 2 entries are real (the last is padding).
  Tensor logits = Make(*b, {1, 3}, {1, 2, 100});
  Tensor mx = Make(*b, {1}, {}), se = Make(*b, {1}, {}), tl = Make(*b, {1}, {});
  Tensor loss = Make(*b, {1}, {});
  Tensor target(*b, DType::kI32, {1}, MemCategory::kWorkspace);
  const int32_t t = 3;
  b->Upload(target.span(), &t);
  b->CrossEntropyMax(mx.span(), logits.span(), 1, 3, 2);
  EXPECT_EQ(Host(*b, mx.span())[0], 2.0f);  // padding (100) is not a candidate
  b->CrossEntropyExp(logits.span(), se.span(), tl.span(), mx.span(), target.span(), 2, 1, 3, 2);
  EXPECT_EQ(Host(*b, tl.span())[0], 2.0f);
  b->CrossEntropyFinish(logits.span(), loss.span(), se.span(), mx.span(), tl.span(), 1, 3);
  EXPECT_NEAR(Host(*b, loss.span())[0], std::log(std::exp(1.0) + std::exp(2.0)) - 2.0, 1e-6);
  b->CrossEntropyBackward(logits.span(), target.span(), 2, 1, 3, 1.0);
  const auto d = Host(*b, logits.span());
  const double p0 = std::exp(1.0) / (std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(d[0], p0, 1e-6);
  EXPECT_NEAR(d[1], (1 - p0) - 1, 1e-6);
  EXPECT_EQ(d[2], 0.0f);
}

TEST(CpuBackend, AccountsMemoryByCategory) {
  auto b = MakeCpuBackend();
  {
    Tensor w(*b, DType::kF32, {100}, MemCategory::kWeights);
    Tensor a(*b, DType::kF64, {10}, MemCategory::kActivations);
    EXPECT_EQ(b->memory().current_bytes[0], 400);
    EXPECT_EQ(b->memory().current_total_bytes, 480);
  }
  EXPECT_EQ(b->memory().current_total_bytes, 0);
  EXPECT_EQ(b->memory().peak_total_bytes, 480);
  EXPECT_EQ(b->memory().peak_bytes[static_cast<size_t>(MemCategory::kActivations)], 80);
}

TEST(GptParams, ShardsAreSlicesOfTheSameFullModel) {
  auto b = MakeCpuBackend();
  const Plan one = TinyPlan({}), two = TinyPlan({.tp = 2});
  GptParams full(one.model, one.parallel, {0, 0, 0}, DType::kF32, *b);
  full.Initialize(11);
  for (int tp_rank = 0; tp_rank < 2; ++tp_rank) {
    GptParams shard(two.model, two.parallel, {tp_rank, 0, 0}, DType::kF32, *b);
    shard.Initialize(11);
    ASSERT_EQ(shard.infos().size(), full.infos().size());
    for (size_t i = 0; i < full.infos().size(); ++i) {
      const ParamInfo& f = full.infos()[i];
      const ParamInfo& s = shard.infos()[i];
      ASSERT_EQ(f.name, s.name);
      const auto fv = Host(*b, full.Ref(f).value), sv = Host(*b, shard.Ref(s).value);
      for (int64_t r = 0; r < s.local_rows; ++r) {
        for (int64_t c = 0; c < s.local_cols; ++c) {
          ASSERT_EQ(sv[static_cast<size_t>(r * s.local_cols + c)],
                    fv[static_cast<size_t>((s.row_begin + r) * f.local_cols + s.col_begin + c)])
              << s.name;
        }
      }
    }
  }
}

TEST(Data, DeterministicSplitAndSequences) {
  const TokenData d = TokenData::FromFile(kDefaultDataFile, 32, 1234);
  EXPECT_EQ(d.train_bytes(), std::filesystem::file_size(kDefaultDataFile) * 9 / 10);
  std::vector<int32_t> a(33), b(33);
  d.TrainSequence(5, 32, a.data());
  TokenData::FromFile(kDefaultDataFile, 32, 1234).TrainSequence(5, 32, b.data());
  EXPECT_EQ(a, b);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 256);
  const TokenData s = TokenData::Synthetic(100, 1);
  s.TrainSequence(3, 32, a.data());
  const int stride = (a[1] - a[0] + 100) % 100;
  for (int i = 1; i <= 32; ++i) EXPECT_EQ(a[i], (a[i - 1] + stride) % 100);
  EXPECT_THROW(TokenData::FromFile("/nonexistent/file", 32, 1), InputError);
}

TEST(CheckExecutable, RefusesWhatTheCpuPathDoesNotImplement) {
  EXPECT_TRUE(CheckExecutable(TinyPlan({}), {}).empty());
  EXPECT_TRUE(
      CheckExecutable(TinyPlan({.tp = 2}, TinyModel{.llama = true, .groups = 2}), {}).empty());
  // Key/value heads replicated over TP (tp > query groups) is not implemented.
  const auto gqa = CheckExecutable(TinyPlan({.tp = 2}, TinyModel{.llama = true, .groups = 1}), {});
  ASSERT_EQ(gqa.size(), 1u);
  EXPECT_EQ(gqa[0],
            "parallel.tp: tp 2 larger than num_query_groups 1 (key/value heads replicated over "
            "tensor-parallel ranks) is not implemented by the CPU executor; use tp dividing the "
            "query groups");
  Plan odd = TinyPlan({}, TinyModel{.llama = true});
  odd.model.kv_channels = 15;
  ASSERT_EQ(CheckExecutable(odd, {}).size(), 1u);
  EXPECT_EQ(CheckExecutable(odd, {}).front(),
            "model.kv_channels: rotary embeddings need an even head size, got 15");
  Plan small = TinyPlan({}, TinyModel{.vocab = 100});
  ASSERT_EQ(CheckExecutable(small, {}).size(), 1u);
  EXPECT_NE(CheckExecutable(small, {}).front().find("at least 256 entries, got 100"),
            std::string::npos);
  EXPECT_TRUE(CheckExecutable(small, {.data = "synthetic"}).empty());
  Plan huge = TinyPlan({});
  huge.model.hidden_size = 65536;
  huge.model.num_layers = 64;
  ASSERT_EQ(CheckExecutable(huge, {}).size(), 1u);
  EXPECT_EQ(CheckExecutable(huge, {}).front().rfind("model: each rank needs about", 0), 0u);
}

// The context-parallel attention kernels against the single-block ones, in fp64: blocks of
// keys merged through their log-sum-exp (in either order) give the causal attention, and the
// blocks' backward passes sum to its gradients.
TEST(CpuBackend, AttentionBlocksComposeToCausalAttention) {
  auto b = MakeCpuBackend();
  const int64_t S = 8, B = 2, H = 4, G = 2, D = 4, W = (H + 2 * G) * D, Wkv = 2 * G * D;
  const int64_t half = S / 2 * B;  // rows of four positions
  auto random = [&](std::vector<int64_t> shape, const char* name) {
    Tensor t(*b, DType::kF64, std::move(shape), MemCategory::kWorkspace);
    std::vector<double> v(static_cast<size_t>(t.numel()));
    const RngStream rng(3, name);
    for (size_t i = 0; i < v.size(); ++i) v[i] = rng.Normal(i);
    b->Upload(t.span(), v.data());
    return t;
  };
  auto zeros = [&](std::vector<int64_t> shape) {
    return Tensor(*b, DType::kF64, std::move(shape), MemCategory::kWorkspace);
  };
  auto host = [&](Span s) {
    std::vector<double> v(static_cast<size_t>(s.numel));
    b->Download(s, v.data());
    return v;
  };
  const Tensor qkv = random({S * B, W}, "qkv"), dctx = random({S * B, H * D}, "dctx");
  Tensor kv = zeros({S * B, Wkv});
  for (int64_t g = 0; g < G; ++g) {  // each group's [k | v] after its two query heads
    b->Copy2D(kv.span().Slice(g * 2 * D, kv.numel() - g * 2 * D), Wkv,
              qkv.span().Slice((g * 4 + 2) * D, qkv.numel() - (g * 4 + 2) * D), W, S * B, 2 * D);
  }
  Tensor ctx = zeros({S * B, H * D}), probs = zeros({B, H, S, S}), dqkv = zeros({S * B, W});
  b->AttentionForward(ctx.span(), probs.span(), qkv.span(), S, B, H, G, D);
  b->AttentionBackward(dqkv.span(), dctx.span(), qkv.span(), probs.span(), S, B, H, G, D);

  auto rows = [](const Tensor& t, int64_t first, int64_t count) {
    const int64_t cols = t.numel() / t.dim(0);
    return t.span().Slice(first * cols, count * cols);
  };
  Tensor bctx = zeros({S * B, H * D}), lse = zeros({S * B, H});
  b->Fill(lse.span(), -std::numeric_limits<double>::infinity());
  // Ring-style: queries 0-3 against keys 0-3 (causal); queries 4-7 against keys 4-7 (causal)
  // and then keys 0-3 (in full).
  b->AttentionBlockForward(rows(bctx, 0, half), rows(lse, 0, half), rows(qkv, 0, half),
                           rows(kv, 0, half), 4, 4, B, H, G, D, true);
  b->AttentionBlockForward(rows(bctx, half, half), rows(lse, half, half), rows(qkv, half, half),
                           rows(kv, half, half), 4, 4, B, H, G, D, true);
  b->AttentionBlockForward(rows(bctx, half, half), rows(lse, half, half), rows(qkv, half, half),
                           rows(kv, 0, half), 4, 4, B, H, G, D, false);
  // All-gather-style: queries 4-7 against keys 0-7 at once, the mask aligned bottom right.
  Tensor gctx = zeros({half, H * D}), glse = zeros({half, H});
  b->Fill(glse.span(), -std::numeric_limits<double>::infinity());
  b->AttentionBlockForward(gctx.span(), glse.span(), rows(qkv, half, half), kv.span(), 4, 8, B, H,
                           G, D, true);
  const auto want = host(ctx.span()), got = host(bctx.span()), gathered = host(gctx.span());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-12) << i;
    if (i >= want.size() / 2) {
      ASSERT_NEAR(gathered[i - want.size() / 2], want[i], 1e-12) << i;
    }
  }

  Tensor dq = zeros({S * B, W}), dkv = zeros({S * B, Wkv});
  b->AttentionBlockBackward(rows(dq, 0, half), rows(dkv, 0, half), rows(dctx, 0, half),
                            rows(bctx, 0, half), rows(lse, 0, half), rows(qkv, 0, half),
                            rows(kv, 0, half), 4, 4, B, H, G, D, true);
  b->AttentionBlockBackward(rows(dq, half, half), rows(dkv, half, half), rows(dctx, half, half),
                            rows(bctx, half, half), rows(lse, half, half), rows(qkv, half, half),
                            rows(kv, half, half), 4, 4, B, H, G, D, true);
  b->AttentionBlockBackward(rows(dq, half, half), rows(dkv, 0, half), rows(dctx, half, half),
                            rows(bctx, half, half), rows(lse, half, half), rows(qkv, half, half),
                            rows(kv, 0, half), 4, 4, B, H, G, D, false);
  const auto full = host(dqkv.span()), q = host(dq.span()), k = host(dkv.span());
  for (int64_t r = 0; r < S * B; ++r) {
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t c = 0; c < 4 * D; ++c) {  // the group's two q heads, then its k and v
        const double want_g = full[static_cast<size_t>(r * W + g * 4 * D + c)];
        const double got_g = c < 2 * D ? q[static_cast<size_t>(r * W + g * 4 * D + c)]
                                       : k[static_cast<size_t>(r * Wkv + g * 2 * D + c - 2 * D)];
        ASSERT_NEAR(got_g, want_g, 1e-12) << "row " << r << " group " << g << " column " << c;
      }
    }
  }
}

TEST(CheckExecutable, RunsContextParallelPlansAndChecksTheirSplits) {
  EXPECT_TRUE(CheckExecutable(TinyPlan({.cp = 2}), {}).empty());
  EXPECT_TRUE(
      CheckExecutable(
          TinyPlan({.tp = 2, .sequence_parallel = true, .cp = 2, .cp_comm = CpComm::kA2a}), {})
          .empty());
  // Plans changed after the reader checked them.
  Plan odd = TinyPlan({.cp = 2});
  odd.model.seq_length = 30;
  ASSERT_EQ(CheckExecutable(odd, {}).size(), 1u);
  EXPECT_EQ(CheckExecutable(odd, {}).front(),
            "parallel.cp: seq_length 30 must be a multiple of 2 x cp = 4 (each CP rank holds two "
            "chunks of every sequence)");
  Plan sp = TinyPlan({.tp = 4, .sequence_parallel = true, .cp = 2});
  sp.model.seq_length = sp.model.max_position_embeddings = 36;
  ASSERT_EQ(CheckExecutable(sp, {}).size(), 1u);
  EXPECT_EQ(CheckExecutable(sp, {}).front(),
            "parallel.sequence_parallel: each context-parallel rank's 18 tokens (seq_length 36 / "
            "cp 2) must be divisible by tp 4 to shard them");
  Plan a2a = TinyPlan({.cp = 2, .cp_comm = CpComm::kA2a});
  a2a.model.num_query_groups = 1;
  ASSERT_EQ(CheckExecutable(a2a, {}).size(), 1u);
  EXPECT_EQ(CheckExecutable(a2a, {}).front(),
            "parallel.cp_comm: a2a gives each CP rank 1/cp of the query groups of its tensor "
            "rank, but 1 query groups over tp 1 do not split over cp 2; use cp_comm p2p or "
            "allgather");
}

TEST(CpuBackend, RotaryAndSwiGluAgainstHandValues) {
  auto b = MakeCpuBackend();
  // One group of one head, D = 4, two positions; q = k = [1, 0, 0, 0], v = 0. At position 1 the
  // first frequency turns by 1 rad: rotate-half pairs element 0 with element 2.
  Tensor qkv = Make(*b, {2, 12}, {1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,  //
                                  1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0});
  b->Rotary(qkv.span(), 2, 1, 1, 1, 4, 10000, 0, false);
  const auto r = Host(*b, qkv.span());
  EXPECT_EQ(r[0], 1.0f);  // position 0 is not rotated
  EXPECT_NEAR(r[12], std::cos(1.0), 1e-6);
  EXPECT_NEAR(r[14], std::sin(1.0), 1e-6);
  EXPECT_NEAR(r[16], std::cos(1.0), 1e-6);  // k too
  EXPECT_EQ(r[20], 0.0f);                   // v untouched
  b->Rotary(qkv.span(), 2, 1, 1, 1, 4, 10000, 0, true);
  EXPECT_NEAR(Host(*b, qkv.span())[12], 1.0, 1e-6);
  // seq_begin shifts the positions (a context-parallel rank's chunk): one token at position 1.
  Tensor one = Make(*b, {1, 12}, {1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0});
  b->Rotary(one.span(), 1, 1, 1, 1, 4, 10000, 1, false);
  EXPECT_NEAR(Host(*b, one.span())[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(Host(*b, one.span())[2], std::sin(1.0), 1e-6);
  Tensor in = Make(*b, {1, 2}, {1, 2}), out = Make(*b, {1, 1}, {});
  b->SwiGlu(out.span(), in.span(), 1, 1);
  EXPECT_NEAR(Host(*b, out.span())[0], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);  // silu(1) * 2
}

TEST(Launch, MpirunLineRunsThisBinaryWithOneRankPerGpu) {
  const LaunchCommand c =
      MakeLaunchCommand(8, "/x/ptdp", {"--plan", "p.yaml"}, {"--hostfile", "h"}, true);
  EXPECT_EQ(c.argv[1], "-np");
  EXPECT_EQ(c.argv[2], "8");
  const std::vector<std::string> tail(c.argv.end() - 6, c.argv.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"--hostfile", "h", "/x/ptdp", "execute", "--plan",
                                            "p.yaml"}));
#ifdef OMPI_MAJOR_VERSION
  EXPECT_NE(std::find(c.argv.begin(), c.argv.end(), "--allow-run-as-root"), c.argv.end());
  EXPECT_NE(std::find(c.argv.begin(), c.argv.end(), "OPENBLAS_NUM_THREADS=1"), c.argv.end());
#endif
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ptdp-ckpt-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    backend_ = MakeCpuBackend();
    groups_ = MakeProcessGroups(MakeLocalComm(*backend_), ParallelConfig{});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
  ProcessGroups groups_;
};

TEST_F(CheckpointTest, RoundTripsAndAnInterruptedSaveLeavesThePreviousOne) {
  Tensor params = Make(*backend_, {3}, {1, 2, 3});
  Tensor m = Make(*backend_, {3}, {4, 5, 6});
  SaveCheckpoint(dir_, {10, 80, 1234}, "layout A", params.span(), {m.span()}, groups_, *backend_);
  // A later save that died after writing its rank file but before the manifest and `latest`.
  std::filesystem::create_directories(dir_ / "step-00000020");
  std::ofstream(dir_ / "step-00000020" / "rank-00000.bin") << "partial";
  Tensor p2 = Make(*backend_, {3}, {}), m2 = Make(*backend_, {3}, {});
  const CheckpointState s =
      LoadCheckpoint(dir_, "layout A", p2.span(), {m2.span()}, groups_, *backend_);
  EXPECT_EQ(s.step, 10);
  EXPECT_EQ(s.sequences_consumed, 80);
  EXPECT_EQ(Host(*backend_, p2.span()), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Host(*backend_, m2.span()), (std::vector<float>{4, 5, 6}));
  try {
    LoadCheckpoint(dir_, "layout B", p2.span(), {m2.span()}, groups_, *backend_);
    ADD_FAILURE() << "a different layout loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("saved with a different model or layout"),
              std::string::npos);
  }
}

TEST_F(CheckpointTest, DetectsCorruption) {
  Tensor params = Make(*backend_, {3}, {1, 2, 3});
  SaveCheckpoint(dir_, {1, 8, 1}, "L", params.span(), {}, groups_, *backend_);
  const auto file = dir_ / "step-00000001" / "rank-00000.bin";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(file) - 12));
  f.put('\x7f');
  f.close();
  try {
    LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_);
    ADD_FAILURE() << "a corrupt file loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos);
  }
}

// A rank file written by hand: magic, header, tensors, FNV-1a checksum (the format SaveCheckpoint
// writes), so that the reader's checks can be reached with any field.
std::string HandMadeRankFile(const std::string& header, const std::string& tensors) {
  std::string blob = "PTDPCKP1" + header + "\n" + tensors;
  const uint64_t sum = Fnv1a64(blob);
  blob.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  return blob;
}

TEST(CheckpointFile, ReadsItsHeaderAndTensors) {
  const std::string blob = HandMadeRankFile(
      "step=3\nsequences_consumed=24\nseed=7\nrank=1\ntensor0_bytes=4\ntensor1_bytes=8\n"
      "layout=L\n",
      "abcdefghijkl");
  const CheckpointRankFile f = ParseCheckpointRankFile(blob, "r.bin");
  EXPECT_EQ(f.state.step, 3);
  EXPECT_EQ(f.state.sequences_consumed, 24);
  EXPECT_EQ(f.state.seed, 7);
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.layout, "L");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(blob.substr(f.tensors[0].first, f.tensors[0].second), "abcd");
  EXPECT_EQ(blob.substr(f.tensors[1].first, f.tensors[1].second), "efghijkl");
}

TEST(CheckpointFile, RefusesBadHeadersNamingTheFile) {
  const std::string good = "step=3\nsequences_consumed=24\nseed=7\nrank=0\ntensor0_bytes=4\n";
  const std::pair<std::string, std::string> cases[] = {
      {HandMadeRankFile("step=x3\nsequences_consumed=24\nseed=7\nrank=0\nlayout=L\n", ""),
       "the header's step is not a count: \"x3\""},
      {HandMadeRankFile("step=3\nsequences_consumed=24\nseed=7\nrank=-1\nlayout=L\n", ""),
       "the header's rank is not a count"},
      {HandMadeRankFile("step=3\nseed=7\nrank=0\nlayout=L\n", ""),
       "the header has no sequences_consumed"},
      {HandMadeRankFile(good + "layout=L\n", "ab"), "runs past the end of the file"},
      {HandMadeRankFile("step=3\nsequences_consumed=24\nseed=7\nrank=0\n"
                        "tensor0_bytes=99999999999999999999\nlayout=L\n",
                        "abcd"),
       "is not a count"},
      {HandMadeRankFile(good + "layout=L\n", "abcdef"), "2 bytes after the last tensor"},
      {"PTDPCKP1step=3\nseed=1\n and more", "checksum mismatch"},
      {"PTDPCKP2 and more bytes", "not a ptdp checkpoint file"},
      {"", "not a ptdp checkpoint file"},
  };
  for (const auto& [blob, message] : cases) {
    try {
      (void)ParseCheckpointRankFile(blob, "dir/rank-00000.bin");
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where().source, "dir/rank-00000.bin");
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST(CheckpointFile, ManifestIsStrictYaml) {
  const CheckpointManifest m = ParseCheckpointManifest(
      "format: ptdp-checkpoint\nversion: 1\nstep: 8\nsequences_consumed: 64\nseed: 1\n"
      "world_size: 2\nlayout: \"tp 1 | name: \\\"x\\\"\"\n",
      "m.yaml");
  EXPECT_EQ(m.state.step, 8);
  EXPECT_EQ(m.world_size, 2);
  EXPECT_EQ(m.layout, "tp 1 | name: \"x\"");
  const std::pair<std::string, std::string> cases[] = {
      {"format: other\nversion: 1\n", "not a ptdp checkpoint manifest"},
      {"format: ptdp-checkpoint\nversion: 1\nstep: -1\n", "must not be negative"},
      {"format: ptdp-checkpoint\nversion: 1\nstep: 1\nsequences_consumed: 1\nseed: 1\n"
       "world_size: 1\nlayout: L\nextra: 1\n",
       "extra"},
      {"[unclosed", "m.yaml"},
  };
  for (const auto& [text, message] : cases) {
    try {
      (void)ParseCheckpointManifest(text, "m.yaml");
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST_F(CheckpointTest, RefusesAnotherRanksFileAndAStaleFile) {
  Tensor params = Make(*backend_, {1}, {5});
  SaveCheckpoint(dir_, {2, 16, 1}, "L", params.span(), {}, groups_, *backend_);
  const auto file = dir_ / "step-00000002" / "rank-00000.bin";
  auto expect_refused = [&](const std::string& header, const std::string& message) {
    float value = 5;
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        << HandMadeRankFile(header, std::string(reinterpret_cast<const char*>(&value), 4));
    try {
      LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_);
      ADD_FAILURE() << "loaded; expected: " << message;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where().source, file.string());
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_refused("step=2\nsequences_consumed=16\nseed=1\nrank=1\ntensor0_bytes=4\nlayout=L\n",
                 "holds rank 1's state, not rank 0's");
  expect_refused("step=1\nsequences_consumed=8\nseed=1\nrank=0\ntensor0_bytes=4\nlayout=L\n",
                 "is from step 1, but the manifest is step 2");
  // The same header as the save's loads.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << HandMadeRankFile(
      "step=2\nsequences_consumed=16\nseed=1\nrank=0\ntensor0_bytes=4\nlayout=L\n",
      std::string("\0\0\xc0\x40", 4));
  EXPECT_EQ(LoadCheckpoint(dir_, "L", params.span(), {}, groups_, *backend_).step, 2);
  EXPECT_EQ(Host(*backend_, params.span()), (std::vector<float>{6}));
}

}  // namespace
}  // namespace ptdp

namespace ptdp {
namespace {

// Peak activation memory from the allocator's accounting, one process: selective recompute
// drops the attention softmax (B H S^2 per layer and micro-batch in flight), full recompute
// keeps only each layer's input; weights, gradients and optimizer state do not change.
TEST(Execute, RecomputeLowersThePeakActivationMemory) {
  MemoryStats peak[3];
  const Recompute modes[3] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  for (int i = 0; i < 3; ++i) {
    const Plan plan = TinyPlan({.recompute = modes[i]});
    auto backend = MakeCpuBackend();
    ProcessGroups groups = MakeProcessGroups(MakeLocalComm(*backend), plan.parallel);
    const ExecuteResult r = Execute(plan, {.steps = 2}, groups, *backend, nullptr);
    ASSERT_EQ(r.ranks.size(), 1u);
    peak[i] = r.ranks[0].memory;
  }
  const auto act = static_cast<size_t>(MemCategory::kActivations);
  const auto opt = static_cast<size_t>(MemCategory::kOptimizer);
  EXPECT_LT(peak[1].peak_bytes[act], peak[0].peak_bytes[act]);
  EXPECT_LT(peak[2].peak_bytes[act], peak[1].peak_bytes[act]);
  // The softmax of one micro-batch's 8 layers is 8 x (1 x 4 x 32 x 32) fp32 values, held by the
  // single micro-batch in flight of a one-stage pipeline; selective recompute holds one layer's
  // again while that layer's backward runs.
  EXPECT_GE(peak[0].peak_bytes[act] - peak[1].peak_bytes[act], 7 * 4 * 32 * 32 * 4);
  EXPECT_EQ(peak[0].peak_bytes[opt], peak[2].peak_bytes[opt]);
  // Adam's two moments over every parameter, in fp32.
  const Plan plan = TinyPlan({});
  auto backend = MakeCpuBackend();
  GptParams params(plan.model, plan.parallel, {}, DType::kF32, *backend);
  EXPECT_EQ(peak[0].peak_bytes[opt], 2 * 4 * params.values().numel);
}

// Flash-style attention (plan options.attention flash or fused) trains as the unfused one does
// (fp64: to rounding) and keeps the log-sum-exp (T x H per layer) instead of the softmax
// (B x H x S x S per layer).
TEST(Execute, FlashAttentionMatchesUnfusedAndKeepsNoSoftmax) {
  const TinyModel models[2] = {{}, {.llama = true, .groups = 2}};
  for (const TinyModel& model : models) {
    ExecuteResult runs[3];
    const AttentionBackend kinds[3] = {AttentionBackend::kUnfused, AttentionBackend::kFlash,
                                       AttentionBackend::kFused};
    for (int i = 0; i < 3; ++i) {
      const Plan plan = TinyPlan({.micro_batch = 2, .attention = kinds[i]}, model);
      auto backend = MakeCpuBackend();
      ProcessGroups groups = MakeProcessGroups(MakeLocalComm(*backend), plan.parallel);
      runs[i] = Execute(plan, {.steps = 3, .dtype = DType::kF64}, groups, *backend, nullptr);
    }
    for (int i = 1; i < 3; ++i) {
      ASSERT_EQ(runs[i].steps.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_NEAR(runs[i].steps[s].loss, runs[0].steps[s].loss,
                    1e-12 * std::abs(runs[0].steps[s].loss))
            << Name(kinds[i]) << " step " << s + 1 << (model.llama ? " (llama)" : "");
      }
    }
    EXPECT_EQ(runs[1].steps.back().loss, runs[2].steps.back().loss);  // one kernel on the CPU
    // 8 layers x (2 x 4 x 32 x 32) fp64 softmax values are not kept; the (64 x 4) log-sum-exps
    // are. Everything else alike.
    const auto act = static_cast<size_t>(MemCategory::kActivations);
    const int64_t softmax = 8 * 2 * 4 * 32 * 32 * 8, lse = 8 * 64 * 4 * 8;
    EXPECT_EQ(runs[0].ranks[0].memory.peak_bytes[act] - runs[1].ranks[0].memory.peak_bytes[act],
              softmax - lse);
  }
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

// Megatron's asynchronous input-gradient reduction: QKV's and fc1's input gradients are reduced
// beside their weight-gradient GEMMs (two per layer and micro-batch), which changes no
// arithmetic (rank 2, TP rank 0 of the last stage, alone with stand-in groups, gives the same
// losses either way);
// with sequence parallelism it is a reduce-scatter; a split backward (W ops) leaves it blocking.
TEST(Execute, AsyncInputGradReductionBesideTheWeightGradients) {
  auto run = [](bool async, bool sp, Schedule schedule) {
    Plan plan =
        TinyPlan({.tp = 2, .pp = 2, .schedule = schedule, .sequence_parallel = sp}, {.layers = 4});
    plan.options.async_tensor_parallel_allreduce = async;
    auto backend = MakeCpuBackend();
    StandInTallies tallies;
    ProcessGroups groups = MakeStandInGroups(2, plan.parallel, *backend, &tallies);
    ExecuteOptions options{.steps = 2, .keep_trace = true};
    options.profile_rank = 2;
    const ExecuteResult r = Execute(plan, options, groups, *backend, nullptr);
    std::map<std::string, int> beside;
    for (const TraceEvent& e : r.events) {
      if (e.name.find("(beside wgrad)") != std::string::npos) ++beside[e.name];
    }
    return std::pair{r, beside};
  };
  const auto [blocking, none] = run(false, false, Schedule::k1F1B);
  const auto [async, beside] = run(true, false, Schedule::k1F1B);
  EXPECT_TRUE(none.empty());
  // Stage 1 holds 2 layers; 8 micro-batches per step, 2 steps: 2 x 2 x 8 x 2.
  EXPECT_EQ(beside, (std::map<std::string, int>{{"tp all-reduce (beside wgrad)", 64}}));
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_GT(blocking.steps[s].loss, 0);
    EXPECT_EQ(async.steps[s].loss, blocking.steps[s].loss);
  }
  EXPECT_EQ(run(true, true, Schedule::k1F1B).second,
            (std::map<std::string, int>{{"tp reduce-scatter (beside wgrad)", 64}}));
  EXPECT_TRUE(run(true, false, Schedule::kZbH1).second.empty());
}

// Timing the kernels by class (`ptdp validate`'s rows) changes nothing the run computes or
// holds, times every class, and stays inside the time the stage was busy.
TEST(Execute, KernelClassTimingChangesNothingAndTimesEveryClass) {
  const Plan plan = TinyPlan({.micro_batch = 2});
  ExecuteResult runs[2];
  for (int timed = 0; timed < 2; ++timed) {
    auto backend = MakeCpuBackend();
    ProcessGroups groups = MakeProcessGroups(MakeLocalComm(*backend), plan.parallel);
    ExecuteOptions options{.steps = 3};
    options.time_kernel_classes = timed == 1;
    runs[timed] = Execute(plan, options, groups, *backend, nullptr);
  }
  for (size_t s = 0; s < 3; ++s) EXPECT_EQ(runs[1].steps[s].loss, runs[0].steps[s].loss);
  EXPECT_EQ(runs[1].ranks[0].memory.peak_bytes, runs[0].ranks[0].memory.peak_bytes);
  EXPECT_EQ(runs[1].ranks[0].memory.peak_total_bytes, runs[0].ranks[0].memory.peak_total_bytes);
  EXPECT_TRUE(runs[0].stage_kernel_s.empty());
  ASSERT_EQ(runs[1].stage_kernel_s.size(), 1u);
  const KernelSeconds& k = runs[1].stage_kernel_s[0];
  double kernels = 0;
  for (int c = 0; c < kNumKernelClasses; ++c) {
    EXPECT_GT(k[static_cast<size_t>(c)], 0) << Name(static_cast<KernelClass>(c));
    EXPECT_DOUBLE_EQ(runs[1].ranks[0].kernel_s[static_cast<size_t>(c)],
                     k[static_cast<size_t>(c)] * static_cast<double>(runs[1].measured_steps));
    if (static_cast<KernelClass>(c) != KernelClass::kOptimizer)
      kernels += k[static_cast<size_t>(c)];
  }
  EXPECT_LE(kernels, runs[1].stage_busy_s[0]);  // F, B and W hold the micro-batches' kernels
}

// In bf16 the flash-style path keeps its log-sum-exp in fp32 (executor/backend/backend.h's
// mixed-precision contract) and rounds where the unfused one does not (its output, once per call):
// the losses agree within bf16's rounding.
TEST(Execute, FlashAttentionInBf16TracksUnfused) {
  double last[2] = {0, 0};
  const AttentionBackend kinds[2] = {AttentionBackend::kUnfused, AttentionBackend::kFlash};
  for (int i = 0; i < 2; ++i) {
    const Plan plan = TinyPlan({.micro_batch = 2, .attention = kinds[i]});
    auto backend = MakeCpuBackend();
    ProcessGroups groups = MakeProcessGroups(MakeLocalComm(*backend), plan.parallel);
    const ExecuteResult r =
        Execute(plan, {.steps = 3, .dtype = DType::kBF16}, groups, *backend, nullptr);
    ASSERT_EQ(r.steps.size(), 3u);
    last[i] = r.steps.back().loss;
  }
  EXPECT_NEAR(last[1], last[0], 1e-2 * last[0]);
}

namespace bucket_test {

ParamInfo At(int chunk, int part, int64_t offset, int64_t numel, bool tied = false) {
  ParamInfo p;
  p.chunk = chunk;
  p.part = part;
  p.offset = offset;
  p.numel = numel;
  p.tied_embedding = tied;
  return p;
}

}  // namespace bucket_test

// Megatron's DDP buckets over a two-chunk range: chunk 0 holds [0, 100) (embedding, layers 0
// and 1), chunk 1 [100, 220) (layers 2 and 3, the head) and the padding to 224. Buckets of at
// most 50: ceil(100 / 50) = 2 for chunk 0 and ceil(124 / 50) = 3 for chunk 1, even, every end
// rounded down to a multiple of the group's 8, so one straddles the chunks.
TEST(GradientBuckets, EvenPerChunkRoundedToTheGroupAndStraddling) {
  using bucket_test::At;
  const std::vector<ParamInfo> infos = {At(0, kEmbeddingPart, 0, 40, /*tied=*/true),
                                        At(0, 0, 40, 30),
                                        At(0, 1, 70, 30),
                                        At(1, 2, 100, 50),
                                        At(1, 3, 150, 50),
                                        At(1, kHeadPart, 200, 20)};
  const std::vector<GradBucket> b = GradientBuckets(infos, {0, 224}, false, 50, 8);
  ASSERT_EQ(b.size(), 5u);
  const int64_t begins[] = {0, 48, 96, 136, 176}, ends[] = {48, 96, 136, 176, 224};
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].flat.begin, begins[i]) << i;
    EXPECT_EQ(b[i].flat.begin + b[i].flat.numel, ends[i]) << i;
  }
  EXPECT_TRUE(b[0].tied_embedding);
  EXPECT_FALSE(b[1].tied_embedding);
  EXPECT_EQ(b[2].first_chunk, 0);
  EXPECT_EQ(b[2].last_chunk, 1);
  using Parts = std::vector<std::pair<int, int>>;
  EXPECT_EQ(b[0].parts, (Parts{{0, kEmbeddingPart}, {0, 0}}));
  EXPECT_EQ(b[2].parts, (Parts{{0, 1}, {1, 2}}));
  EXPECT_EQ(b[4].parts, (Parts{{1, 3}, {1, kHeadPart}}));  // and the padding

  // All-reduced buckets need no rounding; a bucket larger than a chunk gives one per chunk;
  // an empty range (a dense model's experts) none.
  const std::vector<GradBucket> exact = GradientBuckets(infos, {0, 224}, false, 50, 1);
  ASSERT_EQ(exact.size(), 5u);
  EXPECT_EQ(exact[2].flat.begin, 100);
  EXPECT_EQ(exact[2].parts, (Parts{{1, 2}}));
  EXPECT_EQ(GradientBuckets(infos, {0, 224}, false, 1000, 8).size(), 2u);
  EXPECT_TRUE(GradientBuckets(infos, {224, 0}, true, 50, 8).empty());
}

}  // namespace
}  // namespace ptdp
