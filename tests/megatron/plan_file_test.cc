// Plan files: round trips, and every kind of bad input with its exact message, Megatron-LM's
// refusals of a layout named at the key at fault.
#include "megatron/plan_file.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/presets.h"
#include "core/spec_yaml.h"
#include "tests/support/text_edits.h"

namespace ptdp {
namespace {

std::string PlanError(const std::string& text) { return ErrorOf(ParsePlanYaml, text); }

Plan ExamplePlan() {
  Plan p;
  p.model = ModelPreset("llama3-70b");
  p.cluster = ClusterPreset("hgx-h200");
  p.num_gpus = 64;
  p.training.global_batch_size = 512;
  p.training.precision = Precision::kBf16;
  p.training.lr = 3e-4;
  p.training.adam_beta2 = 0.95;
  p.training.seed = 42;
  p.parallel = {.tp = 8,
                .pp = 4,
                .dp = 2,
                .micro_batch_size = 1,
                .virtual_stages = 2,
                .schedule = Schedule::kInterleaved,
                .sequence_parallel = true,
                .recompute = Recompute::kSelective,
                .distributed_optimizer = true};
  return p;
}

// The seed example's layout: TP 2 x PP 4 x DP 1, micro-batch 4, 1F1B.
std::string SeedPlanText() {
  Plan p;
  p.model = ModelPreset("seed-example");
  p.cluster = ClusterPreset("dgx-a100-80gb");
  p.num_gpus = 8;
  p.training.global_batch_size = 128;
  p.parallel = {.tp = 2, .pp = 4, .dp = 1, .micro_batch_size = 4};
  return WritePlanYaml(p);
}

TEST(RoundTrip, PlanFileReadsBackEqualAndWritesBackIdentical) {
  const Plan plan = ExamplePlan();
  const std::string text = WritePlanYaml(plan);
  const Plan back = ParsePlanYaml(text, "plan.yaml");
  EXPECT_EQ(back, plan);
  EXPECT_EQ(WritePlanYaml(back), text);
}

TEST(RoundTrip, AwkwardValuesSurvive) {
  Plan plan = ExamplePlan();
  plan.model.name = "my \"odd\": model # not a comment\\ é";
  plan.cluster.description = "line one\nline two\ttabbed";
  plan.cluster.gpu.peak_fp32_flops = 19.5e12;
  plan.cluster.gpu.hbm_bandwidth_bytes_per_s = 0.1 * 1e9;
  plan.cluster.nic_busbw_bytes_per_s = 23.7e9;
  plan.training.adam_eps = 1e-8;
  plan.training.weight_decay = 0.1;
  plan.training.clip_grad = 0;
  const std::string text = WritePlanYaml(plan);
  EXPECT_EQ(ParsePlanYaml(text), plan);
  EXPECT_EQ(WritePlanYaml(ParsePlanYaml(text)), text);
}

TEST(BadInput, PlanSectionsNameTheirKeyPath) {
  const std::string text = SeedPlanText();
  EXPECT_EQ(PlanError(Replace(text, "  tp: 2", "  tpp: 2\n  tp: 2")),
            "m.yaml:" + std::to_string(LineOf(text, "  tp:")) +
                ": parallel.tpp: unknown key (hint: did you mean tp?)");
  // A misspelt required key: named where it stands, with the key it should be.
  EXPECT_EQ(PlanError(Replace(text, "  tp: 2", "  tpp: 2")),
            "m.yaml:" + std::to_string(LineOf(text, "  tp:")) +
                ": parallel.tp: missing required key (hint: this file has tpp here: did you "
                "mean tp?)");
  EXPECT_EQ(PlanError(Replace(text, "  seq_length:", "  seq_len:")),
            "m.yaml:" + std::to_string(LineOf(text, "  seq_length:")) +
                ": model.seq_length: missing required key (hint: this file has seq_len here: "
                "did you mean seq_length?)");
  EXPECT_EQ(PlanError(Replace(text, "  schedule: 1f1b", "  schedule: 2f2b")),
            "m.yaml:" + std::to_string(LineOf(text, "  schedule:")) +
                ": parallel.schedule: unknown value \"2f2b\" (expected one of: gpipe, 1f1b, "
                "interleaved, zb-h1)");
  EXPECT_EQ(
      PlanError(Replace(text, "  name: \"seed-example\"\n", "")),
      "m.yaml:" + std::to_string(LineOf(text, "model:")) + ": model.name: missing required key");
  EXPECT_EQ(PlanError(Replace(text, "version: 1", "version: 2")),
            "m.yaml:2: version: unsupported plan version 2 (this ptdp reads version 1)");
  EXPECT_EQ(PlanError(Replace(text, "  precision: bf16", "  precision: int8")),
            "m.yaml:" + std::to_string(LineOf(text, "  precision:")) +
                ": training.precision: unknown value \"int8\" (expected one of: bf16, fp16, "
                "fp32, fp8)");
  EXPECT_EQ(PlanError(Replace(text, "  adam_beta2: 0.999", "  adam_beta2: 1.5")),
            "m.yaml:" + std::to_string(LineOf(text, "  adam_beta2:")) +
                ": training.adam_beta2: must be below 1, got 1.5");
}

TEST(BadInput, ImpossiblePlansNameTheKeyAtFault) {
  const std::string text = SeedPlanText();
  EXPECT_EQ(PlanError(text), "");
  EXPECT_EQ(PlanError(Replace(Replace(text, "  tp: 2", "  tp: 3"), "gpus: 8", "gpus: 12")),
            "m.yaml:" + std::to_string(LineOf(text, "  tp:")) +
                ": parallel.tp: num_attention_heads (32) must be a multiple of "
                "tensor_model_parallel_size (3) (hint: use a tensor-parallel size that divides "
                "the number of attention heads; 1 more problem after this one)");
  EXPECT_EQ(PlanError(Replace(text, "gpus: 8", "gpus: 16")),
            "m.yaml:" + std::to_string(LineOf(text, "  dp:")) +
                ": parallel.dp: data-parallel size must be world size / (tp x pp) = 16 / 8 = 2, "
                "got 1 (hint: set dp to 2)");
  EXPECT_EQ(PlanError(Replace(text, "  micro_batch_size: 4", "  micro_batch_size: 3")),
            "m.yaml:" + std::to_string(LineOf(text, "  global_batch_size:")) +
                ": training.global_batch_size: global batch size (128) is not divisible by micro "
                "batch size (3) times data parallel size (1) (hint: pick a micro-batch size and "
                "data-parallel size whose product divides the global batch)");
  EXPECT_EQ(PlanError(Replace(text, "  schedule: 1f1b", "  schedule: interleaved")),
            "m.yaml:" + std::to_string(LineOf(text, "  virtual_stages:")) +
                ": parallel.virtual_stages: the interleaved schedule needs virtual_stages > 1, "
                "got 1 (hint: use schedule 1f1b for one model chunk per pipeline rank)");
  EXPECT_EQ(PlanError(Replace(Replace(Replace(text, "  tp: 2", "  tp: 1"), "gpus: 8", "gpus: 4"),
                              "  sequence_parallel: false", "  sequence_parallel: true")),
            "m.yaml:" + std::to_string(LineOf(text, "  sequence_parallel:")) +
                ": parallel.sequence_parallel: Cannot use sequence parallelism without tensor "
                "parallelism (tp is 1) (hint: drop sequence_parallel or use tp > 1)");
}

TEST(BadInput, MissingFileNamesThePath) {
  try {
    LoadPlanFile("/nonexistent/plan.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/plan.yaml: cannot read file: No such file or directory");
  }
}

}  // namespace
}  // namespace ptdp
