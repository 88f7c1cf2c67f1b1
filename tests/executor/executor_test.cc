// Executor pieces that run in one process: rank layout, counter-based RNG, CPU kernels against
// hand-computed values, data, the refusals of CheckExecutable, checkpoints and the launch line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "executor/backend_cpu.h"
#include "executor/checkpoint.h"
#include "executor/comm.h"
#include "executor/data.h"
#include "executor/gpt_params.h"
#include "executor/launch.h"
#include "executor/rng.h"
#include "executor/topology.h"
#include "executor/trainer.h"
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

}  // namespace
}  // namespace ptdp
