// The planner: its branch-and-bound ranking equals brute force; rejections add up; constraints
// hold; a search with no plan says why and what would help.
#include "planner/planner.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/presets.h"
#include "core/schedule.h"
#include "planner/space.h"
#include "simulator/bounds.h"
#include "simulator/cost_model.h"
#include "simulator/memory_model.h"

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

struct Space {
  const char* model;
  const char* cluster;
  int64_t gpus, batch;
};

class Exactness : public ::testing::TestWithParam<Space> {};

TEST_P(Exactness, BranchAndBoundEqualsBruteForce) {
  PlanRequest req =
      Request(GetParam().model, GetParam().cluster, GetParam().gpus, GetParam().batch);
  req.top_k = 15;
  const PlanSearchResult fast = SearchPlans(req);
  const std::vector<RankedPlan> slow = BruteForcePlans(req);
  ASSERT_EQ(fast.plans.size(), slow.size());
  ASSERT_FALSE(slow.empty());
  for (size_t i = 0; i < slow.size(); ++i) {
    EXPECT_EQ(fast.plans[i].plan.parallel, slow[i].plan.parallel) << "rank " << i + 1;
    EXPECT_EQ(fast.plans[i].report.step_time_s, slow[i].report.step_time_s);
  }
  // It got there simulating a small part of the space (top_k = 15 of it at least).
  EXPECT_LT(fast.simulated * 4, fast.fits) << fast.simulated << " of " << fast.fits;
}

INSTANTIATE_TEST_SUITE_P(SmallSpaces, Exactness,
                         ::testing::Values(Space{"seed-example", "dgx-a100-80gb", 8, 128},
                                           Space{"gpt3-1.3b", "dgx-h100", 16, 64},
                                           Space{"llama2-7b", "dgx-a100-40gb", 8, 32}),
                         [](const auto& info) { return std::to_string(info.index); });

TEST(Planner, ExactWithUnevenSplitsShardingAndFp8) {
  // 22 layers divide no pipeline size above 2: every deeper pipeline needs an uneven split.
  PlanRequest req = Request("seed-example", "dgx-h100", 16, 64);
  req.model.num_layers = 22;
  req.training.precision = Precision::kFp8;
  req.top_k = 20;
  const PlanSearchResult fast = SearchPlans(req);
  const std::vector<RankedPlan> slow = BruteForcePlans(req);
  ASSERT_EQ(fast.plans.size(), slow.size());
  for (size_t i = 0; i < slow.size(); ++i) {
    EXPECT_EQ(fast.plans[i].plan.parallel, slow[i].plan.parallel) << "rank " << i + 1;
    EXPECT_EQ(fast.plans[i].report.step_time_s, slow[i].report.step_time_s);
  }
  // The space holds uneven splits and Megatron-FSDP, and every candidate runs with the
  // overlaps recommended for Megatron-Core.
  int uneven = 0, fsdp = 0;
  Rejections ignored;
  EnumerateConfigs(req.model, req.training, req.gpus, req.constraints, ignored,
                   [&](const ParallelConfig& p) {
                     uneven += UnevenSplit(p);
                     fsdp += p.fsdp != Fsdp::kNone;
                   });
  EXPECT_GT(uneven, 0);
  EXPECT_GT(fsdp, 0);
  EXPECT_TRUE(fast.plans.front().plan.options.overlap_grad_reduce);
  req.recommend_overlap = false;
  EXPECT_FALSE(SearchPlans(req).plans.front().plan.options.overlap_grad_reduce);
}

TEST(Planner, ContextParallelIsSearchedExactlyAndWinsOnLongSequences) {
  // Llama 3 8B at 64k tokens per sequence on 16 H100s: a sequence's activations fill the GPU
  // unless it is split; the search covers cp (and each exchange) and agrees with brute force.
  PlanRequest req = Request("llama3-8b", "dgx-h100", 16, 16);
  req.model.seq_length = req.model.max_position_embeddings = 65536;
  req.constraints.recomputes = {Recompute::kNone};
  req.top_k = 10;
  const PlanSearchResult fast = SearchPlans(req);
  const std::vector<RankedPlan> slow = BruteForcePlans(req);
  ASSERT_EQ(fast.plans.size(), slow.size());
  ASSERT_FALSE(slow.empty());
  for (size_t i = 0; i < slow.size(); ++i) {
    EXPECT_EQ(fast.plans[i].plan.parallel, slow[i].plan.parallel) << "rank " << i + 1;
  }
  EXPECT_GT(fast.plans.front().plan.parallel.cp, 1);
  int comms[3] = {0, 0, 0};
  Rejections rejected;
  EnumerateConfigs(req.model, req.training, req.gpus, req.constraints, rejected,
                   [&](const ParallelConfig& p) {
                     if (p.cp > 1) ++comms[static_cast<int>(p.cp_comm)];
                   });
  EXPECT_GT(comms[0], 0);
  EXPECT_GT(comms[1], 0);
  EXPECT_GT(comms[2], 0);
  // a2a at cp 16 cannot split 8 query groups: counted under Megatron's rule.
  EXPECT_GT(rejected.counts.at("context-parallel"), 0);
  // --fix cp=4 cp-comm=a2a.
  ApplyFix("cp=4", req.constraints);
  ApplyFix("cp-comm=a2a", req.constraints);
  for (const RankedPlan& r : SearchPlans(req).plans) {
    EXPECT_EQ(r.plan.parallel.cp, 4);
    EXPECT_EQ(r.plan.parallel.cp_comm, CpComm::kA2a);
  }
}

TEST(Planner, ExpertParallelismIsSearchedExactly) {
  // A small mixture of experts (8 experts, top 2) on 16 H100s: the search covers ep (dividing
  // the experts, the expert grid dividing the GPUs) with etp 1 or tp, and agrees with brute
  // force.
  PlanRequest req = Request("mixtral-8x7b", "dgx-h100", 16, 64);
  req.model.num_layers = 8;
  req.model.seq_length = 2048;
  req.constraints.recomputes = {Recompute::kNone};
  req.constraints.schedules = {Schedule::k1F1B};
  req.constraints.cp = 1;
  req.top_k = 10;
  const PlanSearchResult fast = SearchPlans(req);
  const std::vector<RankedPlan> slow = BruteForcePlans(req);
  ASSERT_EQ(fast.plans.size(), slow.size());
  ASSERT_FALSE(slow.empty());
  for (size_t i = 0; i < slow.size(); ++i) {
    EXPECT_EQ(fast.plans[i].plan.parallel, slow[i].plan.parallel) << "rank " << i + 1;
  }
  std::set<std::pair<int, int>> layouts;
  Rejections rejected;
  EnumerateConfigs(req.model, req.training, req.gpus, req.constraints, rejected,
                   [&](const ParallelConfig& p) {
                     layouts.insert({p.ep, p.expert_tp()});
                   });
  EXPECT_TRUE(layouts.count({8, 1}));
  EXPECT_TRUE(layouts.count({4, 2}));
  EXPECT_FALSE(layouts.count({16, 1}));  // 8 experts cannot split 16 ways
  // With expert parallelism the plans run the all-to-all dispatcher.
  for (const RankedPlan& r : fast.plans) {
    if (r.plan.parallel.ep > 1) {
      EXPECT_EQ(r.plan.options.moe_token_dispatcher, MoeDispatcher::kAllToAll);
    }
  }
  // A dense model has no expert dimension.
  PlanRequest dense = Request("seed-example", "dgx-a100-80gb", 8, 128);
  EnumerateConfigs(dense.model, dense.training, dense.gpus, dense.constraints, rejected,
                   [&](const ParallelConfig& p) { EXPECT_EQ(p.ep, 1); });
}

// EP is a split of a stage's ranks, not a factor beside DP: the layout's product is the GPUs
// (TP 1 x PP 1 x DP 64 on 64), and the experts' own grid, ETP x EP x EDP, is the stage's ranks.
TEST(Planner, MoeLayoutsMultiplyToTheGpus) {
  ParallelConfig p{.tp = 1, .pp = 1, .dp = 64, .ep = 4, .etp = 1};
  EXPECT_EQ(SizesText(p), "TP 1 x PP 1 x DP 64 (experts: ETP 1 x EP 4 x EDP 16)");
  EXPECT_EQ(Describe(p), "tp 1 x pp 1 x dp 64 (experts: etp 1 x ep 4 x edp 16), mbs 1, 1f1b");
  // ETP left at 0 is TP (Megatron's default); with CP the stage is TP x CP x DP.
  p = {.tp = 2, .pp = 4, .dp = 4, .cp = 2, .ep = 8, .etp = 0};
  EXPECT_EQ(SizesText(p), "TP 2 x CP 2 p2p x PP 4 x DP 4 (experts: ETP 2 x EP 8 x EDP 1)");
  // A grid that does not divide the stage (a layout being refused) has no EDP to say.
  p = {.tp = 1, .pp = 1, .dp = 6, .ep = 4, .etp = 1};
  EXPECT_EQ(SizesText(p), "TP 1 x PP 1 x DP 6 (experts: ETP 1 x EP 4 x EDP ?)");
  // Dense layouts are unchanged.
  EXPECT_EQ(SizesText({.tp = 2, .pp = 4, .dp = 1}), "TP 2 x PP 4 x DP 1");
}

TEST(Planner, HybridModelOnSixteenH100s) {
  // Nemotron-3-Nano (Mamba-2, attention and MoE layers) on 16 H100s: plans are found, their
  // pipelines split the pattern by layers as Megatron's hybrid stack does (evenly or by first /
  // last stage counts, never counting the embedding or loss, no virtual stages without a
  // layout), and the search agrees with brute force.
  PlanRequest req = Request("nemotron-3-nano", "dgx-h100", 16, 64);
  req.constraints.recomputes = {Recompute::kNone, Recompute::kFull};
  req.top_k = 10;
  const PlanSearchResult fast = SearchPlans(req);
  ASSERT_FALSE(fast.plans.empty());
  const std::vector<RankedPlan> slow = BruteForcePlans(req);
  ASSERT_EQ(fast.plans.size(), slow.size());
  for (size_t i = 0; i < slow.size(); ++i) {
    EXPECT_EQ(fast.plans[i].plan.parallel, slow[i].plan.parallel) << "rank " << i + 1;
  }
  for (const RankedPlan& r : fast.plans) {
    EXPECT_TRUE(r.plan.model.hybrid());
    EXPECT_EQ(r.report.memory_problem, "");
  }
  Rejections rejected;
  int pipelined = 0;
  EnumerateConfigs(req.model, req.training, req.gpus, req.constraints, rejected,
                   [&](const ParallelConfig& p) {
                     EXPECT_EQ(p.virtual_stages, 1);
                     EXPECT_FALSE(p.account_for_embedding || p.account_for_loss);
                     EXPECT_EQ(req.model.mamba_num_groups % p.tp, 0);
                     pipelined += p.pp > 1;
                   });
  EXPECT_GT(pipelined, 0);
  // Tensor parallelism beyond the 8 Mamba groups breaks Megatron's check.
  EXPECT_GT(rejected.counts["hybrid-model"], 0);
  // Asked for, interleaving is examined and refused in Megatron's words.
  req.constraints.schedules = {Schedule::kInterleaved};
  const PlanSearchResult none = SearchPlans(req);
  EXPECT_TRUE(none.plans.empty());
  EXPECT_GT(none.rejected.counts.count("hybrid-model"), 0u);
}

TEST(Planner, PipelineSplitsOfLlama405B) {
  // 126 layers on 16 stages: the embedding and loss counted as layers (128 / 16: 7 + 8 x 14 + 7
  // layers), listed once although first = last = 7 places the same layers; other uneven
  // splits; never the even split, which does not exist.
  const std::vector<ParallelConfig> splits = PipelineSplits(126, 16);
  bool accounted = false;
  std::set<std::vector<int>> placements;
  for (ParallelConfig s : splits) {
    accounted |= s.account_for_embedding && s.account_for_loss;
    EXPECT_FALSE(s.first_stage_layers == 7 && s.last_stage_layers == 7);
    EXPECT_TRUE(UnevenSplit(s));
    s.pp = 16;
    EXPECT_TRUE(placements.insert(SplitLayers(126, s).layers).second);
  }
  EXPECT_TRUE(accounted);
  EXPECT_GT(splits.size(), 1u);
  // At pp 2, the embedding and loss counted as layers is the even split: listed once.
  EXPECT_EQ(PipelineSplits(80, 2).front(), ParallelConfig{});
  int even_like = 0;
  for (const ParallelConfig& s : PipelineSplits(80, 2)) {
    even_like += s.first_stage_layers == 0 && s.last_stage_layers == 0;
  }
  EXPECT_EQ(even_like, 1);
}

TEST(Planner, ReferenceRankIsItsPlaceInTheFullRanking) {
  PlanRequest req = Request("seed-example", "dgx-a100-80gb", 8, 128);
  const ParallelConfig seed{.tp = 2, .pp = 4, .dp = 1, .micro_batch_size = 4};
  req.reference = seed;
  const PlanSearchResult res = SearchPlans(req);
  ASSERT_TRUE(res.reference && res.reference->simulated);
  EXPECT_EQ(res.reference->problem, "");
  PlanRequest all = req;
  all.top_k = 1 << 20;
  const std::vector<RankedPlan> everything = BruteForcePlans(all);
  int64_t position = 0;
  for (size_t i = 0; i < everything.size(); ++i) {
    if (everything[i].plan.parallel == seed) position = static_cast<int64_t>(i) + 1;
  }
  ASSERT_GT(position, 0);
  EXPECT_EQ(res.reference->rank, position);
  EXPECT_EQ(static_cast<int64_t>(everything.size()), res.fits);
}

// The progress callback sees the search advance and changes nothing in its result.
TEST(Planner, ProgressIsReportedWithoutChangingTheResult) {
  PlanRequest req = Request("gpt3-175b", "dgx-a100-80gb", 1024, 1536);
  const PlanSearchResult quiet = SearchPlans(req);
  std::vector<std::pair<int64_t, int64_t>> calls;
  req.progress = [&calls](int64_t valid, int64_t simulated) {
    calls.emplace_back(valid, simulated);
  };
  const PlanSearchResult res = SearchPlans(req);
  ASSERT_GT(quiet.valid, 16384) << "too small a search to report progress";
  EXPECT_EQ(res.valid, quiet.valid);
  EXPECT_EQ(res.simulated, quiet.simulated);
  ASSERT_EQ(res.plans.size(), quiet.plans.size());
  for (size_t i = 0; i < res.plans.size(); ++i) {
    EXPECT_EQ(res.plans[i].report.step_time_s, quiet.plans[i].report.step_time_s);
  }
  // One call per 16,384 valid candidates, then one per simulation, never going back.
  ASSERT_EQ(static_cast<int64_t>(calls.size()), quiet.valid / 16384 + quiet.simulated);
  EXPECT_EQ(calls.front(), std::make_pair(int64_t{16384}, int64_t{0}));
  EXPECT_EQ(calls.back(), std::make_pair(quiet.valid, quiet.simulated));
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GE(calls[i].first, calls[i - 1].first);
    EXPECT_GE(calls[i].second, calls[i - 1].second);
  }
}

TEST(Planner, RejectionsAddUpAndNameMegatronsRules) {
  const PlanRequest req = Request("gpt3-175b", "dgx-a100-80gb", 64, 1536);
  const PlanSearchResult res = SearchPlans(req);
  EXPECT_EQ(res.examined,
            res.valid + res.rejected.total() - res.rejected.counts.at("out-of-memory"));
  EXPECT_EQ(res.valid, res.fits + res.rejected.counts.at("out-of-memory"));
  for (const auto& [reason, count] : res.rejected.counts) {
    EXPECT_GT(count, 0);
    EXPECT_FALSE(res.rejected.examples.at(reason).empty());
  }
  EXPECT_EQ(res.rejected.examples.at("heads-divisible-by-tp"),
            "tp 64 x pp 1 x dp 1, mbs 1, 1f1b: num_attention_heads (96) must be a multiple of "
            "tensor_model_parallel_size (64)");
  ASSERT_TRUE(res.closest_out_of_memory);
  EXPECT_GT(res.closest_out_of_memory->peak_memory_bytes, res.memory_limit_bytes);
  for (const RankedPlan& p : res.plans) {
    EXPECT_LE(p.report.peak_memory_bytes, res.memory_limit_bytes);
  }
}

TEST(Planner, SkippingHopelessLayoutsChangesNoCountOrExample) {
  // Layouts whose parameters alone overflow the GPU get no memory estimate (unless one is kept
  // for every point): the rejection counts, examples and the closest layout are the same as
  // when every layout is estimated, and the estimates kept confirm each skipped one was over.
  for (const char* model : {"megatron-1t", "mixtral-8x7b", "llama3-70b"}) {
    SCOPED_TRACE(model);
    const bool fp8 = std::string(model) == "llama3-70b";
    PlanRequest req = Request(model, fp8 ? "dgx-h100" : "dgx-a100-80gb", fp8 ? 64 : 256, 512);
    if (fp8) {
      req.training.precision = Precision::kFp8;
      req.training.fp8_param_gather = true;
    }
    const PlanSearchResult fast = SearchPlans(req);
    req.keep_points = true;
    const PlanSearchResult every = SearchPlans(req);
    EXPECT_EQ(fast.rejected.counts, every.rejected.counts);
    EXPECT_EQ(fast.rejected.examples, every.rejected.examples);
    ASSERT_TRUE(fast.closest_out_of_memory && every.closest_out_of_memory);
    EXPECT_EQ(fast.closest_out_of_memory->parallel, every.closest_out_of_memory->parallel);
    EXPECT_EQ(fast.closest_out_of_memory_problem, every.closest_out_of_memory_problem);
    EXPECT_EQ(fast.fits, every.fits);
    ASSERT_EQ(fast.plans.size(), every.plans.size());
    for (size_t i = 0; i < fast.plans.size(); ++i) {
      EXPECT_EQ(fast.plans[i].plan.parallel, every.plans[i].plan.parallel);
    }
    EXPECT_GT(every.rejected.counts.at("out-of-memory"), 0);
  }
}

TEST(Planner, ConstraintsAreHonoured) {
  PlanRequest req = Request("gpt3-6.7b", "dgx-a100-80gb", 32, 256);
  ApplyFix("tp=4", req.constraints);
  ApplyFix("recompute=none", req.constraints);
  req.constraints.max_pp = 2;
  req.memory_headroom = 0.2;
  const PlanSearchResult res = SearchPlans(req);
  ASSERT_FALSE(res.plans.empty());
  for (const RankedPlan& p : res.plans) {
    EXPECT_EQ(p.plan.parallel.tp, 4);
    EXPECT_LE(p.plan.parallel.pp, 2);
    EXPECT_EQ(p.plan.parallel.recompute, Recompute::kNone);
    EXPECT_LE(p.report.peak_memory_bytes, 0.8 * 85899345920.0);
  }
  SearchConstraints c;
  EXPECT_THROW(ApplyFix("tq=4", c), InputError);
  EXPECT_THROW(ApplyFix("tp=0", c), InputError);
  EXPECT_THROW(ApplyFix("schedule=2f2b", c), InputError);
  try {
    ApplyFix("tp", c);
    FAIL() << "ApplyFix(\"tp\") accepted a key without a value";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().key, "--fix");
    EXPECT_EQ(e.message(), "\"tp\": expected KEY=VALUE");
  }
}

TEST(Planner, NoPlanIsAnAnswerWithHints) {
  // GPT-3 175B cannot fit on 8 A100s with any layout.
  const PlanRequest big = Request("gpt3-175b", "dgx-a100-80gb", 8, 64);
  const PlanSearchResult oom = SearchPlans(big);
  EXPECT_TRUE(oom.plans.empty());
  EXPECT_GT(oom.valid, 0);
  const std::vector<std::string> hints = UnblockHints(big, oom);
  ASSERT_GE(hints.size(), 2u);
  EXPECT_EQ(hints[0].rfind("the closest layout needs ", 0), 0u);
  EXPECT_NE(hints[1].find("more GPUs: about "), std::string::npos);
  // A model no cluster ptdp plans for could hold: the hint says so instead of naming a GPU
  // count beyond its limit (or overflowing one).
  PlanRequest huge = Request("gpt3-175b", "dgx-a100-80gb", 8, 8);
  huge.model.num_layers = 16384;
  huge.model.hidden_size = 1 << 20;
  huge.model.ffn_hidden_size = 1 << 22;
  huge.model.kv_channels = (1 << 20) / huge.model.num_attention_heads;
  const PlanSearchResult too_big = SearchPlans(huge);
  ASSERT_TRUE(too_big.plans.empty());
  const std::vector<std::string> huge_hints = UnblockHints(huge, too_big);
  ASSERT_GE(huge_hints.size(), 2u);
  EXPECT_EQ(huge_hints[1].rfind("more GPUs than ptdp plans for: about ", 0), 0u) << huge_hints[1];
  EXPECT_NE(huge_hints[1].find("ptdp's limit is 1,048,576"), std::string::npos);

  // A global batch no layout can split: 4 GPUs, a model only tp 1 and pp 1 can hold.
  PlanRequest odd = Request("seed-example", "dgx-a100-80gb", 4, 2);
  odd.model.num_attention_heads = 3;
  odd.model.kv_channels = 2048 / 3;
  odd.model.num_query_groups = 3;
  odd.model.num_layers = 5;
  odd.constraints.uneven = false;  // an uneven split would put 5 layers on 2 stages
  odd.constraints.cp = 1;          // context parallelism would split the sequence instead
  const PlanSearchResult none = SearchPlans(odd);
  EXPECT_EQ(none.valid, 0);
  const std::vector<std::string> why = UnblockHints(odd, none);
  ASSERT_FALSE(why.empty());
  EXPECT_EQ(why[0].rfind("every layout breaks a Megatron-LM rule; the commonest is ", 0), 0u);
}

}  // namespace
}  // namespace ptdp

namespace ptdp {
namespace {

// What the search reads per candidate (EstimatePeakMemory, EstimateStepLowerBound through its
// cache) is what the full estimates give: the largest stage's memory, bit for bit, and the
// bound of EstimateStep's costs (worked out cold, every stage on its own), for every layout of
// spaces with deep pipelines, uneven splits, interleaving, FP8's bf16 layers, Megatron-FSDP,
// experts and a hybrid model.
TEST(Planner, TheSearchsFiguresAreTheFullEstimatesOnEveryLayout) {
  struct Case {
    const char* model;
    const char* cluster;
    int64_t gpus, batch;
    int layers = 0;  // 0: the preset's
    Precision precision = Precision::kBf16;
    const char* fix = "mbs=1";  // a smaller space, for the test's time
  };
  const Case cases[] = {{"gpt3-1.3b", "dgx-a100-80gb", 64, 512},
                        {"seed-example", "dgx-h100", 16, 64, 22, Precision::kFp8, "mbs=2"},
                        {"mixtral-8x7b", "dgx-h100", 16, 64, 8},
                        {"nemotron-3-nano", "dgx-h100", 16, 64, 0, Precision::kFp8}};
  int64_t layouts = 0, deep = 0;
  std::map<std::tuple<Schedule, int, int, int>, std::vector<int>> in_flight;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    PlanRequest req = Request(c.model, c.cluster, c.gpus, c.batch);
    if (c.layers > 0) req.model.num_layers = c.layers;
    req.training.precision = c.precision;
    if (c.precision == Precision::kFp8) req.training.fp8_bf16_layers_at_end = 1;
    ApplyFix(c.fix, req.constraints);
    LayerCostCache cache;
    Rejections ignored;
    EnumerateConfigs(
        req.model, req.training, req.gpus, req.constraints, ignored,
        [&](const ParallelConfig& p) {
          const CostOptions options = PlanOptions(req, p);
          const int m = static_cast<int>(NumMicrobatches(req.training, p));
          auto [at, made] = in_flight.try_emplace({p.schedule, p.pp, m, p.virtual_stages});
          if (made)
            at->second = InFlightPerStage(MakeSchedule(p.schedule, p.pp, m, p.virtual_stages));
          const std::vector<int>& held = at->second;
          const MemoryEstimate all =
              EstimateMemory(req.model, req.cluster, req.training, p, held, options);
          const MemoryPeak peak =
              EstimatePeakMemory(req.model, req.cluster, req.training, p, held, options);
          ASSERT_EQ(peak.stage, all.largest_stage) << Describe(p);
          ASSERT_TRUE(peak.memory == all.stages[all.largest_stage]) << Describe(p);
          const StepEstimate step = EstimateStep(req.model, req.cluster, req.training, p, options);
          const double bound = StepTimeLowerBound(
              p.schedule, p.pp, static_cast<int>(step.microbatches), p.virtual_stages, step.costs);
          ASSERT_EQ(EstimateStepLowerBound(req.model, req.cluster, req.training, p, options, cache),
                    bound)
              << Describe(p);
          ++layouts;
          deep += p.pp > 2;
        },
        req.options);
  }
  EXPECT_GT(layouts, 30000);
  EXPECT_GT(deep, 5000);
}

// Layouts whose step is a schedule too long to simulate (core/limits.h kMaxPipelineOps) are
// valid but left out, counted like those out of memory, and none is simulated: 175B on 64 GPUs
// with a batch of 2^20 once simulated 2^26 operations per layout and took 21 GB.
TEST(Planner, SchedulesTooLongToSimulateAreCountedNotSimulated) {
  PlanRequest req = Request("gpt3-1.3b", "dgx-a100-80gb", 8, int64_t{1} << 20);
  req.reference = ParallelConfig{.tp = 1, .pp = 8, .dp = 1, .micro_batch_size = 1};
  const PlanSearchResult res = SearchPlans(req);
  const int64_t too_long = res.rejected.counts.at("schedule-too-long");
  EXPECT_GT(too_long, 0);
  EXPECT_EQ(res.rejected.examples.at("schedule-too-long").find("tp 1 x cp 8 p2p x pp 1 x dp 1"), 0u)
      << res.rejected.examples.at("schedule-too-long");
  EXPECT_EQ(res.valid, res.fits + res.rejected.counts.at("out-of-memory") + too_long);
  ASSERT_FALSE(res.plans.empty());
  for (const RankedPlan& r : res.plans) {
    EXPECT_EQ(
        ScheduleSizeProblem(r.plan.parallel.pp, NumMicrobatches(req.training, r.plan.parallel),
                            r.plan.parallel.virtual_stages),
        "");
  }
  ASSERT_TRUE(res.reference.has_value());
  EXPECT_EQ(res.reference->problem,
            "8 pipeline stages x 1048576 micro-batches = 8388608 forward passes per step; ptdp "
            "builds schedules of at most 524288");
}

// Each Blackwell profile (issue 31) plans Llama 3 70B on 144 GPUs, two NVL72 racks: the best
// plan uses every GPU, fits, and runs faster than on as many H100s.
class BlackwellProfile : public ::testing::TestWithParam<const char*> {};

TEST_P(BlackwellProfile, PlansLlama3On144Gpus) {
  const PlanSearchResult res = SearchPlans(Request("llama3-70b", GetParam(), 144, 512));
  ASSERT_FALSE(res.plans.empty());
  const RankedPlan& best = res.plans.front();
  EXPECT_EQ(best.plan.parallel.world_size(), 144);
  EXPECT_EQ(best.report.memory_problem, "");
  EXPECT_LE(best.report.peak_memory_bytes, ClusterPreset(GetParam()).gpu.hbm_bytes);
  const PlanSearchResult h100 = SearchPlans(Request("llama3-70b", "dgx-h100", 144, 512));
  ASSERT_FALSE(h100.plans.empty());
  EXPECT_LT(best.report.step_time_s, h100.plans.front().report.step_time_s);
}

INSTANTIATE_TEST_SUITE_P(Planner, BlackwellProfile,
                         ::testing::Values("dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

}  // namespace
}  // namespace ptdp
