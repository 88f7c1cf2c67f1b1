// Training in one process: data, the refusals of CheckExecutable, and what Execute measures and
// holds (recompute's and flash attention's memory, the asynchronous input-gradient reduction,
// kernel timing by class), with Megatron's gradient buckets.
#include "executor/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/backend/cpu.h"
#include "executor/comm/comm.h"
#include "executor/comm/standin.h"
#include "executor/comm/topology.h"
#include "executor/model/gpt_params.h"
#include "executor/train/data.h"
#include "executor/train/optimizer.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyModel;
using testing_executor::TinyPlan;

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
