// Hybrid (Mamba) models in Megatron's terms: pretrain_mamba.py's flags written and read back,
// and Megatron's checks for hybrid layouts, in its words.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/presets.h"
#include "megatron/read_command.h"
#include "megatron/rules.h"
#include "megatron/write_flags.h"

namespace ptdp {
namespace {

Plan NanoPlan() {
  Plan plan;
  plan.model = ModelPreset("nemotron-3-nano");
  plan.cluster = ClusterPreset("dgx-h100");
  plan.num_gpus = 64;
  plan.training.global_batch_size = 512;
  plan.training.precision = Precision::kBf16;
  plan.parallel = {.tp = 2,
                   .pp = 4,
                   .dp = 8,
                   .ep = 8,
                   .etp = 1,
                   .micro_batch_size = 1,
                   .sequence_parallel = true,
                   .distributed_optimizer = true};
  return plan;
}

TEST(Hybrid, MegatronFlagsReadBackToTheSamePlan) {
  Plan plan = NanoPlan();
  const std::string line = MegatronArgsLine(plan);
  EXPECT_NE(line.find("--hybrid-override-pattern "
                      "'MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME' --mamba-num-heads 64 "
                      "--mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("--squared-relu"), std::string::npos);
  EXPECT_NE(line.find("--position-embedding-type none"), std::string::npos);
  MegatronCommand c = ReadMegatronCommand(
      "torchrun --nproc-per-node 8 --nnodes 8 pretrain_mamba.py " + line + " --vocab-size 131072",
      "cmd");
  ResolveWorldSize(c, *c.world_size);
  for (const MegatronFinding& f : c.findings) {
    EXPECT_NE(f.severity, MegatronFinding::Severity::kError) << f.flag << ": " << f.message;
  }
  ModelSpec expected = plan.model;
  expected.name = "megatron-command";
  EXPECT_EQ(c.model, expected);
  EXPECT_TRUE(c.model_complete);
  EXPECT_EQ(c.parallel, plan.parallel);

  // '|' in the pattern gives the pipeline stages (a layout; virtual stages = segments / pp),
  // and is written back the same way.
  plan.parallel.virtual_stages = 2;
  plan.parallel.schedule = Schedule::kInterleaved;
  plan.parallel.layout = {6, 7, 6, 7, 6, 7, 6, 7};
  const std::string piped = MegatronArgsLine(plan);
  EXPECT_NE(piped.find("'MEMEM*|EMEMEM*|EMEMEM|*EMEMEM|*EMEME|M*EMEME|MEM*EM|EMEMEME'"),
            std::string::npos)
      << piped;
  EXPECT_EQ(piped.find("--pipeline-model-parallel-layout"), std::string::npos);
  c = ReadMegatronCommand(
      "torchrun --nproc-per-node 8 --nnodes 8 pretrain_mamba.py " + piped + " --vocab-size 131072",
      "cmd");
  ResolveWorldSize(c, *c.world_size);
  EXPECT_EQ(c.model, expected);
  EXPECT_EQ(c.parallel, plan.parallel);
  EXPECT_TRUE(CheckParallelConfig(c.model, c.training, c.parallel, 64).empty());
}

TEST(Hybrid, MegatronFlagsOfAMambaScript) {
  // Without a pattern pretrain_mamba.py builds Mamba layers, or the ratios' pattern.
  MegatronCommand c = ReadMegatronCommand(
      "python pretrain_mamba.py --num-layers 10 --hidden-size 256 --num-attention-heads 4 "
      "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --vocab-size 1000 "
      "--hybrid-attention-ratio 0.2 --hybrid-mlp-ratio 0.2",
      "cmd");
  EXPECT_EQ(c.model.hybrid_layer_pattern, "MMM*-M*MM-");
  EXPECT_EQ(c.model.mamba_num_heads, 8);  // 2 x 256 / 64
  EXPECT_EQ(c.model.mamba_state_dim, 128);
  EXPECT_EQ(c.model.mamba_num_groups, 8);
  c = ReadMegatronCommand(
      "python pretrain_mamba.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
      "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --vocab-size 1000 "
      "--hybrid-override-pattern 'MM*M' --hybrid-attention-ratio 0.5",
      "cmd");
  ASSERT_TRUE(c.has_errors());
  EXPECT_EQ(c.findings.back().message,
            "The number of each type of layer in the override pattern must match the number in "
            "the overridden pattern.");
  // A GPT script ignores the hybrid options.
  c = ReadMegatronCommand(
      "python pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
      "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --vocab-size 1000 "
      "--hybrid-override-pattern 'MM*M'",
      "cmd");
  EXPECT_FALSE(c.model.hybrid());
  EXPECT_EQ(c.findings.back().message,
            "pretrain_gpt.py builds a GPT model, which ignores the hybrid (Mamba) options");
}

struct RuleCase {
  Plan plan = NanoPlan();
  std::vector<Violation> Check() const {
    return CheckParallelConfig(plan.model, plan.training, plan.parallel, plan.num_gpus);
  }
  std::string First() const {
    const auto v = Check();
    return v.empty() ? "" : fmt::format("{}: {}", RuleId(v.front().rule), v.front().message);
  }
};

TEST(Hybrid, MegatronsChecksOfAHybridLayout) {
  RuleCase c;
  EXPECT_EQ(c.First(), "");
  // 16 tensor-parallel ranks split the 32 attention heads and the 64 Mamba heads, not the 8
  // Mamba groups.
  c.plan.parallel.tp = 16;
  c.plan.parallel.dp = 1;
  EXPECT_EQ(c.First(),
            "hybrid-model: ngroups must be evenly divisible by tp_size (8 Mamba groups, tp 16)");
  c.plan.model.mamba_num_heads = 24;
  EXPECT_EQ(c.First(),
            "hybrid-model: nheads must be evenly divisble by tp_size (24 Mamba heads, tp 16)");
  // Context parallelism splits each TP rank's Mamba heads over the CP ranks.
  c = RuleCase();
  c.plan.model.mamba_num_heads = 12;
  c.plan.model.mamba_num_groups = 4;
  c.plan.parallel = {.tp = 1, .pp = 1, .dp = 8, .cp = 8, .ep = 8, .etp = 1};
  EXPECT_EQ(c.First(),
            "hybrid-model: nheads must be evenly divisible by tp_size * cp_size (12 Mamba heads, "
            "tp 1, cp 8)");
  c.plan.model.mamba_num_heads = 16;
  c.plan.model.mamba_num_groups = 16;
  c.plan.parallel.cp = 4;
  c.plan.parallel.dp = 16;
  c.plan.model.mamba_num_groups = 2;  // 2 groups on 4 CP ranks: each replicated twice
  EXPECT_EQ(c.First(), "");
  c.plan.model.mamba_num_groups = 8;
  c.plan.parallel.cp = 16;
  c.plan.parallel.dp = 4;
  c.plan.model.mamba_num_heads = 32;
  EXPECT_EQ(c.First(), "");
  // No virtual stages without a layout; no embedding or loss counted as layers.
  c = RuleCase();
  c.plan.parallel.virtual_stages = 13;
  c.plan.parallel.schedule = Schedule::kInterleaved;
  EXPECT_EQ(c.First(),
            "hybrid-model: Virtual pipeline parallelism (vp_stage != None) is not supported when "
            "hybrid_layer_pattern has no pipe ('|') separators.");
  c.plan.parallel.layout = std::vector<int>(52, 1);
  c.plan.parallel.pp = 4;
  EXPECT_EQ(c.First(), "");
  c = RuleCase();
  c.plan.parallel.account_for_embedding = true;
  EXPECT_EQ(c.First(),
            "hybrid-model: the hybrid model splits its layers alone: Megatron's hybrid stack does "
            "not count the embedding or the loss as layers");
  // FP8 needs in_proj's output width (2 x 4096 + 2 x 8 x 128 + 64 = 10304) a multiple of 16.
  c = RuleCase();
  c.plan.training.precision = Precision::kFp8;
  EXPECT_EQ(c.First(), "");
  c.plan.model.mamba_num_heads = 56;  // 2 x 3584 + 2048 + 56 = 9272
  EXPECT_EQ(c.First(),
            "fp8-options: For FP8, the innermost dimension of the Mamba layer input projection "
            "output tensor must be a multiple of 16.");
}

}  // namespace
}  // namespace ptdp
