// The sweep (planner/sweep.h): its points are the searches `ptdp plan` runs, its figures the
// arithmetic written out here, its fronts and efficiencies as defined; the command line's values
// read or refused with the flag named.
#include "planner/sweep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/presets.h"
#include "megatron/rules.h"

namespace ptdp {
namespace {

// The InputError's text `parse` throws ("" when it throws none).
template <typename F>
std::string ErrorOf(F&& parse) {
  try {
    parse();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SweepParse, GpuCountsAsListsAndRanges) {
  EXPECT_EQ(ParseGpuCounts("512,1024,2048"), (std::vector<int64_t>{512, 1024, 2048}));
  EXPECT_EQ(ParseGpuCounts("2048,512,512"), (std::vector<int64_t>{512, 2048}));
  EXPECT_EQ(ParseGpuCounts("64"), (std::vector<int64_t>{64}));
  EXPECT_EQ(ParseGpuCounts("512:16384:x2"),
            (std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384}));
  EXPECT_EQ(ParseGpuCounts("8:100:*3"), (std::vector<int64_t>{8, 24, 72}));
  EXPECT_EQ(ParseGpuCounts("1024:4096:+1024"), (std::vector<int64_t>{1024, 2048, 3072, 4096}));
  EXPECT_EQ(ParseGpuCounts("512:1000:x2"), (std::vector<int64_t>{512}));
  EXPECT_EQ(ParseGpuCounts("1:64:+1").size(), kMaxSweepGpuCounts);
}

TEST(SweepParse, BadGpuCountsNameTheFlag) {
  EXPECT_EQ(ErrorOf([] { ParseGpuCounts("64:8:x2"); }),
            "--gpus: the range stops (8) below its start (64) (hint: a list (512,1024,2048) or a "
            "range START:STOP:xFACTOR (512:16384:x2) or START:STOP:+STEP (1024:4096:+1024))");
  EXPECT_EQ(ErrorOf([] {
              ParseGpuCounts("8:64:x1");
            }).rfind("--gpus: the range's factor must be at least 2, got 1 (hint: ", 0),
            0u);
  for (const char* bad : {"0", "8,,16", "eight", "-8", "8:64", "8:64:/2", "8:64:x", "8:64:+0",
                          "0:64:x2", "8:64:x2:1", "", "1:65:+1", "1:1000:+1", "2000000"}) {
    const std::string error = ErrorOf([&] { ParseGpuCounts(bad); });
    EXPECT_EQ(error.rfind("--gpus: ", 0), 0u) << bad << ": " << error;
  }
  EXPECT_NE(ErrorOf([] { ParseGpuCounts("1:100:+1"); }).find("more than 64 GPU counts"),
            std::string::npos);
  EXPECT_EQ(ErrorOf([] { ParseGpuCounts("eight", "--x"); }),
            "--x: expected a positive integer for a GPU count, got \"eight\" (hint: a list "
            "(512,1024,2048) or a range START:STOP:xFACTOR (512:16384:x2) or START:STOP:+STEP "
            "(1024:4096:+1024))");
}

TEST(SweepParse, BatchesFixedAndScaled) {
  const std::vector<SweepBatch> b = ParseSweepBatches("1024,2048@512");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].At(16384), 1024);
  EXPECT_EQ(b[0].Text(), "1,024");
  EXPECT_EQ(b[1].At(512), 2048);
  EXPECT_EQ(b[1].At(16384), 65536);
  EXPECT_EQ(b[1].At(768), 3072);
  EXPECT_EQ(b[1].Text(), "2,048@512");
  // 100 x 8 / 6 = 133.3: the nearest multiple of 8 is 136; 100 x 1 / 6 = 16.7 -> 16; the
  // smallest is the multiple itself.
  EXPECT_EQ((SweepBatch{.sequences = 100, .at_gpus = 6, .multiple_of = 8}.At(8)), 136);
  EXPECT_EQ((SweepBatch{.sequences = 100, .at_gpus = 6, .multiple_of = 1}.At(1)), 17);
  EXPECT_EQ((SweepBatch{.sequences = 1, .at_gpus = 1024, .multiple_of = 8}.At(8)), 8);
  for (const char* bad : {"", "2048@", "@512", "2048@0", "0", "2048,2048", "2048@x", "1e3"}) {
    const std::string error = ErrorOf([&] { ParseSweepBatches(bad); });
    EXPECT_EQ(error.rfind("--global-batch: ", 0), 0u) << bad << ": " << error;
  }
}

TEST(SweepParse, Tokens) {
  EXPECT_EQ(ParseTokenCount("15T"), 15e12);
  EXPECT_EQ(ParseTokenCount("300B"), 300e9);
  EXPECT_EQ(ParseTokenCount("2G"), 2e9);
  EXPECT_EQ(ParseTokenCount("1.5M"), 1.5e6);
  EXPECT_EQ(ParseTokenCount("10k"), 1e4);
  EXPECT_EQ(ParseTokenCount("1.5e13"), 1.5e13);
  EXPECT_EQ(ParseTokenCount("15000000000000"), 15e12);
  for (const char* bad : {"", "T", "-5T", "0", "abc", "15TB", "1e19", "nan", "inf", "15 T"}) {
    const std::string error = ErrorOf([&] { ParseTokenCount(bad); });
    EXPECT_EQ(error.rfind("--tokens: ", 0), 0u) << bad << ": " << error;
  }
  EXPECT_EQ(ErrorOf([] {
              ParseTokenCount("-5T");
            }).rfind("--tokens: must be at least 1 token, got -5T (hint: ", 0),
            0u);
}

TEST(SweepParse, Prices) {
  EXPECT_EQ(ParsePrice("dgx-h100=2.5"), (std::pair<std::string, double>{"dgx-h100", 2.5}));
  EXPECT_EQ(ParsePrice("a=$3"), (std::pair<std::string, double>{"a", 3}));
  for (const char* bad : {"dgx-h100", "=2", "dgx-h100=", "dgx-h100=-1", "dgx-h100=0",
                          "dgx-h100=abc", "dgx-h100=1e9", "dgx-h100=inf"}) {
    const std::string error = ErrorOf([&] { ParsePrice(bad); });
    EXPECT_EQ(error.rfind("--price: ", 0), 0u) << bad << ": " << error;
  }
  EXPECT_EQ(ErrorOf([] { ParsePrice("dgx-h100"); }),
            "--price: expected CLUSTER=USD_PER_GPU_HOUR, got \"dgx-h100\" (hint: "
            "CLUSTER=USD_PER_GPU_HOUR, one --price per cluster, e.g. --price dgx-h100=2.5)");
}

SweepRequest SmallSweep() {
  SweepRequest r;
  r.model = ModelPreset("llama3-8b");
  r.clusters = {ClusterPreset("dgx-a100-80gb"), ClusterPreset("dgx-h100")};
  r.gpu_counts = {8, 16, 32};
  r.trainings = {TrainingSpec{.precision = Precision::kBf16},
                 TrainingSpec{.precision = Precision::kFp8}};
  r.batches = {SweepBatch{.sequences = 64, .at_gpus = 8}};
  r.tokens = 1e12;
  r.price_per_gpu_hour = {{"dgx-h100", 2.5}};
  return r;
}

// Every point is `ptdp plan`'s search of the same inputs and its recommendation (BestRunnable of
// the default top 10), with the figures written out; fp8 on the A100 is skipped, saying why.
TEST(Sweep, PointsAreThePlanSearchesWithTheirArithmetic) {
  const SweepRequest req = SmallSweep();
  const SweepResult res = RunSweep(req);
  ASSERT_EQ(res.points.size(), 2u * 2u * 3u);
  size_t i = 0;
  for (const ClusterSpec& cluster : req.clusters) {
    for (const TrainingSpec& training : req.trainings) {
      for (const int64_t gpus : req.gpu_counts) {
        const SweepPoint& p = res.points[i++];
        SCOPED_TRACE(p.cluster + " " + std::string(Name(p.precision)) + " " + std::to_string(gpus));
        EXPECT_EQ(p.cluster, cluster.name);
        EXPECT_EQ(p.precision, training.precision);
        EXPECT_EQ(p.gpus, gpus);
        EXPECT_EQ(p.global_batch, 8 * gpus);
        if (cluster.gpu.peak_fp8_flops <= 0 && training.precision == Precision::kFp8) {
          EXPECT_FALSE(p.best);
          EXPECT_EQ(p.problem, "no FP8 units on A100-SXM4-80GB");
          continue;
        }
        PlanRequest plan{
            .model = req.model, .cluster = cluster, .training = training, .gpus = gpus};
        plan.training.global_batch_size = p.global_batch;
        const PlanSearchResult searched = SearchPlans(plan);  // top 10, as `ptdp plan`
        ASSERT_FALSE(searched.plans.empty());
        const RunnablePlan best = BestRunnable(plan, searched);
        ASSERT_TRUE(p.best);
        EXPECT_EQ(p.best->plan, best.plan.plan);
        EXPECT_EQ(p.best->report.step_time_s, best.plan.report.step_time_s);
        EXPECT_EQ(p.examined, searched.examined);
        EXPECT_EQ(p.fits, searched.fits);
        // The figures, by hand: tokens per step over the step; the token budget over that.
        const double step = p.best->report.step_time_s;
        const double tokens_per_s = static_cast<double>(p.global_batch * 8192) / step;
        EXPECT_NEAR(p.tokens_per_s, tokens_per_s, 1e-9 * tokens_per_s);
        EXPECT_DOUBLE_EQ(p.tokens_per_s_per_gpu, p.tokens_per_s / static_cast<double>(gpus));
        EXPECT_DOUBLE_EQ(p.time_to_train_s, 1e12 / p.tokens_per_s);
        EXPECT_DOUBLE_EQ(p.gpu_hours, static_cast<double>(gpus) * p.time_to_train_s / 3600);
        if (cluster.name == "dgx-h100") {
          ASSERT_TRUE(p.cost_usd);
          EXPECT_DOUBLE_EQ(*p.cost_usd, 2.5 * p.gpu_hours);
        } else {
          EXPECT_FALSE(p.cost_usd);
        }
        EXPECT_DOUBLE_EQ(p.headroom, 1 - p.peak_memory_bytes / cluster.gpu.hbm_bytes);
        EXPECT_TRUE(p.problem.empty());
      }
    }
  }
}

TEST(Sweep, ScalingEfficiencyAndTheParetoFront) {
  const SweepRequest req = SmallSweep();
  const SweepResult res = RunSweep(req);
  // Per series, against its first point with a plan.
  for (size_t s = 0; s < res.points.size(); s += 3) {
    if (!res.points[s].best) continue;
    for (size_t k = 0; k < 3; ++k) {
      const SweepPoint& p = res.points[s + k];
      EXPECT_DOUBLE_EQ(p.scaling_efficiency,
                       p.tokens_per_s_per_gpu / res.points[s].tokens_per_s_per_gpu);
    }
  }
  // The A100 has no price: the front is of time and GPU-hours.
  ASSERT_EQ(ParetoAxes(req, res), SweepPareto::kTimeGpuHours);
  auto dominates = [](const SweepPoint& a, const SweepPoint& b) {
    return a.time_to_train_s <= b.time_to_train_s && a.gpu_hours <= b.gpu_hours &&
           (a.time_to_train_s < b.time_to_train_s || a.gpu_hours < b.gpu_hours);
  };
  int front = 0;
  for (const SweepPoint& p : res.points) {
    if (!p.best) {
      EXPECT_FALSE(p.pareto);
      continue;
    }
    const bool dominated = std::any_of(res.points.begin(), res.points.end(),
                                       [&](const auto& q) { return q.best && dominates(q, p); });
    EXPECT_EQ(p.pareto, !dominated) << p.cluster << " " << p.gpus;
    front += p.pareto;
  }
  EXPECT_GE(front, 1);

  // Priced everywhere: time and cost; without tokens: tokens/s and GPUs.
  SweepRequest priced = req;
  priced.price_per_gpu_hour["dgx-a100-80gb"] = 1.5;
  priced.trainings.pop_back();
  priced.gpu_counts = {8};
  EXPECT_EQ(ParetoAxes(priced, RunSweep(priced)), SweepPareto::kTimeCost);
  priced.tokens = 0;
  const SweepResult untimed = RunSweep(priced);
  EXPECT_EQ(ParetoAxes(priced, untimed), SweepPareto::kThroughputGpus);
  EXPECT_EQ(untimed.points[0].time_to_train_s, 0);
  EXPECT_FALSE(untimed.points[0].cost_usd);
}

TEST(Sweep, APointWithoutAPlanSaysWhyAndBatchNotesAreHonest) {
  SweepRequest req;
  req.model = ModelPreset("llama3-70b");
  req.clusters = {ClusterPreset("dgx-h100")};
  req.gpu_counts = {8, 64};
  req.trainings = {TrainingSpec{}};
  req.batches = {SweepBatch{.sequences = 16, .at_gpus = 8}};
  size_t calls = 0;
  req.progress = [&](size_t done, size_t total) {
    EXPECT_EQ(done, ++calls);
    EXPECT_EQ(total, 2u);
  };
  const SweepResult res = RunSweep(req);
  ASSERT_EQ(res.points.size(), 2u);
  EXPECT_EQ(calls, 2u);
  // 70B on one node: nothing fits; the first of what `ptdp plan` says would help.
  PlanRequest plan{.model = req.model, .cluster = req.clusters[0], .training = {}, .gpus = 8};
  plan.training.global_batch_size = 16;
  const PlanSearchResult none = SearchPlans(plan);
  ASSERT_TRUE(none.plans.empty());
  EXPECT_FALSE(res.points[0].best);
  EXPECT_EQ(res.points[0].problem, UnblockHints(plan, none).front());
  EXPECT_EQ(res.points[0].scaling_efficiency, 0);
  EXPECT_FALSE(res.points[0].pareto);
  EXPECT_EQ(res.points[0].batch_note, "");
  // 8x the reference batch: said, and said not modelled.
  ASSERT_TRUE(res.points[1].best);
  EXPECT_EQ(res.points[1].global_batch, 128);
  EXPECT_EQ(res.points[1].scaling_efficiency, 1);  // the series' first point with a plan
  EXPECT_EQ(res.points[1].batch_note,
            "global batch 128: 8x the reference 16 (at 8 GPUs); beyond 4x the batch a model was "
            "tuned with, convergence per token may suffer (not modelled)");
  // Rounded, and far below.
  const SweepBatch small{.sequences = 100, .at_gpus = 64, .multiple_of = 4};
  req.batches = {small};
  req.gpu_counts = {24};
  req.progress = {};
  EXPECT_EQ(RunSweep(req).points[0].batch_note,
            "global batch 36: 100 x 24 / 64 GPUs = 37.5 sequences, rounded to a multiple of 4");
  req.gpu_counts = {8};
  EXPECT_EQ(
      RunSweep(req).points[0].batch_note,
      "global batch 12: 100 x 8 / 64 GPUs = 12.5 sequences, rounded to a multiple of 4; 1/8.3 "
      "of the reference 100 (at 64 GPUs); far below the batch a model was tuned with, the "
      "learning rate may need retuning (not modelled)");
}

// Where zb-h1 is the fastest, the point's plan is the best Megatron-LM runs, as `ptdp plan`
// recommends (README: Llama 3 70B on 64 H100s, global batch 512).
TEST(Sweep, TheBestPlanIsOneMegatronRuns) {
  SweepRequest req;
  req.model = ModelPreset("llama3-70b");
  req.clusters = {ClusterPreset("dgx-h100")};
  req.gpu_counts = {64};
  req.trainings = {TrainingSpec{}};
  req.batches = {SweepBatch{.sequences = 512}};
  const SweepPoint p = RunSweep(req).points.at(0);
  PlanRequest plan{.model = req.model, .cluster = req.clusters[0], .training = {}, .gpus = 64};
  plan.training.global_batch_size = 512;
  const PlanSearchResult searched = SearchPlans(plan);
  ASSERT_FALSE(RunsInMegatron(searched.plans.front().plan.parallel));  // the case in question
  const RunnablePlan best = BestRunnable(plan, searched);
  EXPECT_GT(best.rank, 1);
  ASSERT_TRUE(p.best);
  EXPECT_TRUE(RunsInMegatron(p.best->plan.parallel));
  EXPECT_EQ(p.best->plan, best.plan.plan);
  EXPECT_EQ(p.best->report.step_time_s, best.plan.report.step_time_s);
}

}  // namespace
}  // namespace ptdp
