// Megatron-LM's validity rules, each accepted and rejected, with its message.
#include "megatron/rules.h"

#include <gtest/gtest.h>

#include "core/presets.h"

namespace ptdp {
namespace {

struct Case {
  ModelSpec model = ModelPreset("seed-example");  // 24 layers, 32 heads
  TrainingSpec training{.global_batch_size = 128};
  ParallelConfig parallel{.tp = 2, .pp = 4, .dp = 1, .micro_batch_size = 4};
  int64_t gpus = 8;

  std::vector<Violation> Check() const {
    return CheckParallelConfig(model, training, parallel, gpus);
  }
  std::vector<std::string_view> Ids() const {
    std::vector<std::string_view> ids;
    for (const Violation& v : Check()) ids.push_back(RuleId(v.rule));
    return ids;
  }
  std::string FirstMessage() const {
    const auto v = Check();
    return v.empty() ? "" : v.front().message;
  }
};

using Ids = std::vector<std::string_view>;

TEST(MegatronRules, TheFoundingDocumentsLayoutIsAccepted) { EXPECT_EQ(Case().Ids(), Ids{}); }

TEST(MegatronRules, WorldSize) {
  Case c;
  c.gpus = 12;  // 12 % (2 * 4) != 0
  EXPECT_EQ(c.Ids(), Ids{"world-size"});
  EXPECT_EQ(c.FirstMessage(),
            "world size (12) is not divisible by total_model_size (tp 2 x pp 4 = 8)");
  c.gpus = 16;
  EXPECT_EQ(c.FirstMessage(),
            "data-parallel size must be world size / (tp x pp) = 16 / 8 = 2, got 1");
  c.parallel.dp = 2;
  EXPECT_EQ(c.Ids(), Ids{});
}

TEST(MegatronRules, GlobalBatchDivisibleByMicroBatchTimesDp) {
  Case c;
  c.parallel.micro_batch_size = 5;
  EXPECT_EQ(c.Ids(), Ids{"global-batch-divisible"});
  EXPECT_EQ(c.FirstMessage(),
            "global batch size (128) is not divisible by micro batch size (5) times data "
            "parallel size (1)");
  c.parallel.micro_batch_size = 128;  // one micro-batch per step is allowed
  EXPECT_EQ(c.Ids(), Ids{});
}

TEST(MegatronRules, HeadsAndQueryGroupsAgainstTp) {
  Case c;
  c.parallel = {.tp = 3, .pp = 1, .dp = 1, .micro_batch_size = 1};
  c.gpus = 3;
  c.training.global_batch_size = 3;
  EXPECT_EQ(c.Ids(), (Ids{"heads-divisible-by-tp", "query-groups-vs-tp"}));
  EXPECT_EQ(c.FirstMessage(),
            "num_attention_heads (32) must be a multiple of tensor_model_parallel_size (3)");

  // GQA: 8 groups; TP 16 is a multiple of 8 (groups are replicated) and is accepted.
  c.model = ModelPreset("llama3-70b");  // 64 heads, 8 groups, 80 layers
  c.parallel.tp = 16;
  c.gpus = 16;
  c.training.global_batch_size = 16;
  EXPECT_EQ(c.Ids(), Ids{});
  c.model.num_query_groups = 16;
  c.parallel.tp = 32;  // 64 % 32 == 0 and 32 % 16 == 0
  c.gpus = 32;
  EXPECT_EQ(c.Ids(), Ids{});
  c.model.num_query_groups = 32;
  c.model.num_attention_heads = 96;
  c.parallel.tp = 12;  // 96 % 12 == 0, but 32 % 12 and 12 % 32 are not
  c.gpus = 12;
  c.training.global_batch_size = 12;
  EXPECT_EQ(c.Ids(), Ids{"query-groups-vs-tp"});
}

TEST(MegatronRules, LayersDivisibleByPp) {
  Case c;
  c.parallel = {.tp = 1, .pp = 5, .dp = 1, .micro_batch_size = 1};
  c.gpus = 5;
  EXPECT_EQ(c.Ids(), Ids{"layers-divisible-by-pp"});
  EXPECT_EQ(c.FirstMessage(),
            "number of layers (24) should be divisible by the pipeline-model-parallel size (5)");
}

TEST(MegatronRules, Interleaving) {
  Case c;  // pp 4, 6 layers per stage, m = 32
  c.parallel.schedule = Schedule::kInterleaved;
  c.parallel.virtual_stages = 3;
  EXPECT_EQ(c.Ids(), Ids{});
  c.parallel.virtual_stages = 4;  // 6 % 4 != 0
  EXPECT_EQ(c.Ids(), Ids{"virtual-stages-divide-layers"});
  EXPECT_EQ(c.FirstMessage(),
            "number of layers per pipeline stage (6) must be divisible by the number of virtual "
            "stages per pipeline rank (4)");

  c.parallel.virtual_stages = 2;
  c.parallel.micro_batch_size = 32;  // m = 4: equal to pp, accepted
  EXPECT_EQ(c.Ids(), Ids{});
  c.parallel.micro_batch_size = 64;  // m = 2 < pp
  EXPECT_EQ(c.Ids(), Ids{"interleaved-microbatches"});
  c.training.global_batch_size = 192;
  c.parallel.micro_batch_size = 32;  // m = 6: not a multiple of pp
  EXPECT_EQ(c.Ids(), Ids{"interleaved-microbatches"});
  EXPECT_EQ(c.FirstMessage(),
            "number of microbatches (6) must be at least, and a multiple of, the "
            "pipeline-model-parallel size (4) with the interleaved schedule");

  Case two;  // pp 2 cannot interleave
  two.parallel = {.tp = 4,
                  .pp = 2,
                  .dp = 1,
                  .micro_batch_size = 1,
                  .virtual_stages = 2,
                  .schedule = Schedule::kInterleaved};
  EXPECT_EQ(two.Ids(), Ids{"interleaved-needs-pp"});
  EXPECT_EQ(two.FirstMessage(),
            "pipeline-model-parallel size should be greater than 2 with interleaved schedule "
            "(without p2p communication overlap), got 2");
  // With --overlap-p2p-communication Megatron takes pp 2.
  CostOptions overlap;
  overlap.overlap_p2p_communication = true;
  EXPECT_TRUE(
      CheckParallelConfig(two.model, two.training, two.parallel, two.gpus, overlap).empty());
}

TEST(MegatronRules, ScheduleAndVirtualStagesAgree) {
  Case c;
  c.parallel.virtual_stages = 2;  // with 1f1b
  EXPECT_EQ(c.Ids(), Ids{"schedule-virtual-stages"});
  EXPECT_EQ(c.FirstMessage(), "virtual_stages 2 needs the interleaved schedule, not 1f1b");
  c.parallel.schedule = Schedule::kZbH1;
  EXPECT_EQ(c.Ids(), Ids{"schedule-virtual-stages"});
  c.parallel.virtual_stages = 1;
  EXPECT_EQ(c.Ids(), Ids{});
  c.parallel.schedule = Schedule::kGpipe;
  EXPECT_EQ(c.Ids(), Ids{});
}

TEST(MegatronRules, SequenceParallelNeedsTp) {
  Case c;
  c.parallel.sequence_parallel = true;
  EXPECT_EQ(c.Ids(), Ids{});
  c.parallel.tp = 1;
  c.parallel.dp = 2;
  EXPECT_EQ(c.Ids(), Ids{"sequence-parallel-needs-tp"});
}

TEST(MegatronRules, NumberOfMicrobatchesIsDerived) {
  Case c;
  EXPECT_EQ(NumMicrobatches(c.training, c.parallel), 32);  // 128 / (4 * 1)
  c.parallel = {.tp = 1, .pp = 1, .dp = 8, .micro_batch_size = 2};
  EXPECT_EQ(NumMicrobatches(c.training, c.parallel), 8);
}

// The table itself: every rule has a check, every check names the Megatron-LM code it mirrors
// and says what is wrong and how to fix it, the leading checks come first, and a chain reports
// its first broken check only (Megatron's if / elif).
TEST(MegatronRules, EveryCheckOfTheTableIsComplete) {
  const std::span<const RuleCheck> checks = MegatronRuleChecks();
  std::vector<int> per_rule(kNumRules, 0);
  bool leading = true;
  const Case c;
  const CostOptions options;  // the input refers to it: it must outlive the input
  const RuleInput in = MakeRuleInput(c.model, c.training, c.parallel, c.gpus, options);
  for (const RuleCheck& check : checks) {
    ++per_rule[static_cast<int>(check.rule)];
    EXPECT_FALSE(check.megatron.empty()) << RuleId(check.rule);
    EXPECT_NE(check.broken, nullptr) << RuleId(check.rule);
    EXPECT_TRUE(!check.key.empty() || check.key_of != nullptr) << check.megatron;
    ASSERT_NE(check.message, nullptr) << check.megatron;
    ASSERT_NE(check.hint, nullptr) << check.megatron;
    EXPECT_FALSE(check.message(in).empty()) << check.megatron;
    EXPECT_FALSE(check.hint(in).empty()) << check.megatron;
    EXPECT_TRUE(leading || !check.leading) << check.megatron << ": a leading check after others";
    leading = check.leading;
  }
  for (int r = 0; r < kNumRules; ++r) {
    EXPECT_GT(per_rule[r], 0) << RuleId(static_cast<Rule>(r)) << " has no check";
  }
}

TEST(MegatronRules, AChainSaysItsFirstBrokenCheckOnly) {
  // Uneven stages on one pipeline stage, with the loss counted as a layer: Megatron stops at the
  // first of its elifs (the account-for options), as the table's chain does.
  Case c;
  c.parallel = {.tp = 2, .pp = 1, .dp = 4, .micro_batch_size = 4};
  c.parallel.first_stage_layers = 5;
  c.parallel.account_for_loss = true;
  EXPECT_EQ(c.Ids(), Ids{"uneven-stages"});
  EXPECT_EQ(FirstBrokenRule(c.model, c.training, c.parallel, c.gpus), Rule::kUnevenStages);
}

}  // namespace
}  // namespace ptdp
