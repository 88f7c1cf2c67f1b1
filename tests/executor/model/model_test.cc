// Model pieces in one process: context parallelism's load-balanced sequence shards, the
// counter-based RNG, and each rank's parameters as slices of the same full model.
#include <gtest/gtest.h>

#include <vector>

#include "executor/backend/cpu.h"
#include "executor/model/context_parallel.h"
#include "executor/model/gpt_params.h"
#include "executor/model/rng.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyPlan;

std::vector<float> Host(Backend& b, Span s) {
  std::vector<float> out(static_cast<size_t>(s.numel));
  b.Download(s, out.data());
  return out;
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

}  // namespace
}  // namespace ptdp
