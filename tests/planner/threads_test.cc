// The search on several threads: the same result as on one, bit for bit (plans, their order and
// ties, counts, rejection examples, the closest miss, every kept point, the reference's rank);
// progress reported from the calling thread; a stop requested by the progress callback stops
// every thread and reaches the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/presets.h"
#include "planner/planner.h"
#include "planner/space.h"

namespace ptdp {
namespace {

PlanRequest Request(const char* model, const char* cluster, int64_t gpus, int64_t batch) {
  PlanRequest r;
  r.model = ModelPreset(model);
  r.cluster = ClusterPreset(cluster);
  r.gpus = gpus;
  r.training.global_batch_size = batch;
  return r;
}

void ExpectSamePoint(const CandidatePoint& a, const CandidatePoint& b) {
  EXPECT_EQ(a.parallel, b.parallel);
  EXPECT_EQ(a.step_lower_bound_s, b.step_lower_bound_s);
  EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
  EXPECT_EQ(a.fits, b.fits);
}

void ExpectSameResult(const PlanSearchResult& one, const PlanSearchResult& many) {
  EXPECT_EQ(one.examined, many.examined);
  EXPECT_EQ(one.valid, many.valid);
  EXPECT_EQ(one.fits, many.fits);
  EXPECT_EQ(one.simulated, many.simulated);
  EXPECT_EQ(one.rejected.counts, many.rejected.counts);
  EXPECT_EQ(one.rejected.examples, many.rejected.examples);
  ASSERT_EQ(one.plans.size(), many.plans.size());
  for (size_t i = 0; i < one.plans.size(); ++i) {
    SCOPED_TRACE("rank " + std::to_string(i + 1));
    EXPECT_EQ(one.plans[i].plan.parallel, many.plans[i].plan.parallel);
    EXPECT_EQ(one.plans[i].plan.options, many.plans[i].plan.options);
    EXPECT_EQ(one.plans[i].report.step_time_s, many.plans[i].report.step_time_s);
    EXPECT_EQ(one.plans[i].report.peak_memory_bytes, many.plans[i].report.peak_memory_bytes);
  }
  ASSERT_EQ(one.closest_out_of_memory.has_value(), many.closest_out_of_memory.has_value());
  if (one.closest_out_of_memory) {
    ExpectSamePoint(*one.closest_out_of_memory, *many.closest_out_of_memory);
  }
  EXPECT_EQ(one.closest_out_of_memory_problem, many.closest_out_of_memory_problem);
  ASSERT_EQ(one.points.size(), many.points.size());
  for (size_t i = 0; i < one.points.size(); ++i) ExpectSamePoint(one.points[i], many.points[i]);
  ASSERT_EQ(one.reference.has_value(), many.reference.has_value());
  if (one.reference) {
    EXPECT_EQ(one.reference->rank, many.reference->rank);
    EXPECT_EQ(one.reference->problem, many.reference->problem);
  }
}

struct Case {
  const char* name;
  PlanRequest request;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"seed-example, reference", Request("seed-example", "dgx-a100-80gb", 8, 128)});
  cases.back().request.reference = ParallelConfig{.tp = 2, .pp = 4, .dp = 1};
  cases.push_back({"gpt3-1.3b", Request("gpt3-1.3b", "dgx-h100", 16, 64)});
  cases.push_back({"llama2-7b", Request("llama2-7b", "dgx-a100-40gb", 8, 32)});
  // Many out of memory (the closest miss and the skipped hopeless layouts), with every point
  // kept and without.
  cases.push_back({"megatron-1t", Request("megatron-1t", "dgx-a100-80gb", 256, 512)});
  cases.push_back({"megatron-1t, points", Request("megatron-1t", "dgx-a100-80gb", 256, 512)});
  cases.back().request.keep_points = true;
  cases.push_back({"gpt3-175b on 1024", Request("gpt3-175b", "dgx-a100-80gb", 1024, 1536)});
  // Experts, context parallelism, FP8, a hybrid stack, ties (layouts of equal time and memory
  // differing in knobs that change neither).
  cases.push_back({"mixtral-8x7b", Request("mixtral-8x7b", "dgx-h100", 64, 256)});
  cases.push_back({"llama3-70b fp8", Request("llama3-70b", "dgx-h100", 64, 512)});
  cases.back().request.training.precision = Precision::kFp8;
  cases.push_back({"nemotron-3-nano", Request("nemotron-3-nano", "dgx-h100", 16, 64)});
  cases.push_back({"llama3-8b long", Request("llama3-8b", "dgx-h100", 32, 32)});
  cases.back().request.model.seq_length = 32768;
  // Nothing fits.
  cases.push_back({"gpt3-175b on 8", Request("gpt3-175b", "dgx-a100-40gb", 8, 64)});
  for (Case& c : cases) c.request.top_k = 25;
  return cases;
}

TEST(SearchThreads, TheResultIsTheSameOnAnyNumberOfThreads) {
  for (Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    c.request.threads = 1;
    const PlanSearchResult one = SearchPlans(c.request);
    for (int threads : {2, 3, 8}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      c.request.threads = threads;
      ExpectSameResult(one, SearchPlans(c.request));
    }
  }
}

TEST(SearchThreads, AreTheSameAsOneWalkOfTheSpace) {
  // Walking the space's parts in order is EnumerateConfigs: the same candidates in the same
  // order, the same counts and examples.
  const PlanRequest req = Request("mixtral-8x7b", "dgx-h100", 64, 256);
  std::vector<ParallelConfig> whole, parts;
  Rejections rejected_whole, rejected_parts;
  const int64_t examined =
      EnumerateConfigs(req.model, req.training, req.gpus, req.constraints, rejected_whole,
                       [&](const ParallelConfig& p) { whole.push_back(p); });
  const ConfigSpace space(req.model, req.training, req.gpus, req.constraints);
  ASSERT_GT(space.parts(), 10U);
  RuleTally tally;
  int64_t examined_parts = 0;
  for (size_t i = 0; i < space.parts(); ++i) {
    RuleTally own;
    examined_parts += space.Walk(i, own, [&](const ParallelConfig& p) { parts.push_back(p); });
    tally.Add(own);
  }
  tally.AddTo(rejected_parts);
  EXPECT_EQ(examined, examined_parts);
  EXPECT_EQ(whole, parts);
  EXPECT_EQ(rejected_whole.counts, rejected_parts.counts);
  EXPECT_EQ(rejected_whole.examples, rejected_parts.examples);
}

TEST(SearchThreads, ProgressComesFromTheCallingThreadAndNeverGoesBack) {
  PlanRequest req = Request("gpt3-175b", "dgx-a100-80gb", 1024, 1536);
  req.threads = 4;
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::pair<int64_t, int64_t>> calls;
  bool other_thread = false;
  req.progress = [&](int64_t valid, int64_t simulated) {
    other_thread = other_thread || std::this_thread::get_id() != caller;
    calls.emplace_back(valid, simulated);
  };
  const PlanSearchResult res = SearchPlans(req);
  EXPECT_FALSE(other_thread);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), std::make_pair(res.valid, res.simulated));
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GE(calls[i].first, calls[i - 1].first);
    EXPECT_GE(calls[i].second, calls[i - 1].second);
    EXPECT_LE(calls[i].first, res.valid);
  }
}

TEST(SearchThreads, AStopFromTheProgressCallbackStopsEveryThread) {
  PlanRequest req = Request("gpt3-175b", "dgx-a100-80gb", 1024, 1536);
  req.threads = 3;
  int calls = 0;
  req.progress = [&](int64_t, int64_t) {
    if (++calls == 2) throw std::runtime_error("stop");
  };
  EXPECT_THROW(SearchPlans(req), std::runtime_error);
  EXPECT_EQ(calls, 2);
  // The search runs again afterwards (nothing left behind).
  req.progress = {};
  EXPECT_FALSE(SearchPlans(req).plans.empty());
}

}  // namespace
}  // namespace ptdp
