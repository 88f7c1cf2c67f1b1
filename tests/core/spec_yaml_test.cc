// Strict YAML: round trips, and every kind of bad input with its exact message.
#include "core/spec_yaml.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "core/presets.h"
#include "core/units.h"
#include "core/yaml_io.h"

namespace ptdp {
namespace {

// The message a parser throws for `text`, or "" when it parses.
template <typename Parse>
std::string ErrorOf(Parse parse, const std::string& text) {
  try {
    parse(text, "m.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string ModelError(const std::string& text) { return ErrorOf(ParseModelYaml, text); }
std::string PlanError(const std::string& text) { return ErrorOf(ParsePlanYaml, text); }

const std::string kTinyModel =
    "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nvocab_size: 100\nseq_length: 32\n";

// 1-based line of the first line of `text` that starts with `prefix`.
int LineOf(const std::string& text, const std::string& prefix) {
  int line = 1;
  for (size_t pos = 0; pos < text.size(); ++line) {
    if (text.compare(pos, prefix.size(), prefix) == 0) return line;
    pos = text.find('\n', pos);
    if (pos == std::string::npos) break;
    ++pos;
  }
  return 0;
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

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

TEST(RoundTrip, ScaledNumbersReadBackExactly) {
  // Any decimal a person writes in a unit (GB/s, TFLOP/s) comes back as the same SI double.
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> mantissa(1, 9'999'999), exponent(-4, 4);
  for (int i = 0; i < 20000; ++i) {
    const double written = mantissa(rng) * std::pow(10.0, exponent(rng));
    for (double scale : {units::kTflops, units::kGBPerS, units::kMicrosecond}) {
      const double si = written * scale;
      const double reread = std::stod(YamlScaled(si, scale)) * scale;
      ASSERT_EQ(reread, si) << written << " scale " << scale;
    }
  }
  EXPECT_EQ(YamlScaled(312e12, units::kTflops), "312");
  EXPECT_EQ(YamlScaled(19.5e12, units::kTflops), "19.5");
  EXPECT_EQ(YamlScaled(0.08e12, units::kTflops), "0.08");
}

TEST(RoundTrip, ModelFileDefaultsAreMegatrons) {
  const ModelSpec m = ParseModelYaml(kTinyModel, "models/tiny.yaml");
  EXPECT_EQ(m.name, "tiny");  // the file's stem
  EXPECT_EQ(m.num_query_groups, 4);
  EXPECT_EQ(m.kv_channels, 16);
  EXPECT_EQ(m.ffn_hidden_size, 256);
  EXPECT_EQ(m.max_position_embeddings, 32);
  EXPECT_EQ(m.make_vocab_size_divisible_by, 128);
  EXPECT_EQ(m.activation, Activation::kGelu);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(ParseModelYaml(WriteModelYaml(m)), m);
}

TEST(BadInput, UnknownKeySuggestsTheClosestKnownOne) {
  EXPECT_EQ(ModelError(kTinyModel + "hidden_szie: 5\n"),
            "m.yaml:6: hidden_szie: unknown key (hint: did you mean hidden_size?)");
  const std::string far = ModelError(kTinyModel + "colour: red\n");
  EXPECT_EQ(far.substr(0, 64), "m.yaml:6: colour: unknown key (hint: known keys: activation, add");
}

TEST(BadInput, MissingRequiredKey) {
  EXPECT_EQ(ModelError("num_layers: 2\nnum_attention_heads: 4\nvocab_size: 100\nseq_length: 32\n"),
            "m.yaml:1: hidden_size: missing required key");
  EXPECT_EQ(ModelError(Replace(kTinyModel, "vocab_size: 100", "vocab_size:")),
            "m.yaml:4: vocab_size: has no value");
}

TEST(BadInput, WrongTypes) {
  EXPECT_EQ(ModelError(Replace(kTinyModel, "num_layers: 2", "num_layers: many")),
            "m.yaml:1: num_layers: expected an integer, got \"many\"");
  EXPECT_EQ(ModelError(Replace(kTinyModel, "num_layers: 2", "num_layers: \"2\"")),
            "m.yaml:1: num_layers: expected an integer, got the quoted string \"2\"");
  EXPECT_EQ(ModelError(Replace(kTinyModel, "num_layers: 2", "num_layers: 2.5")),
            "m.yaml:1: num_layers: expected an integer, got \"2.5\"");
  EXPECT_EQ(ModelError(Replace(kTinyModel, "num_layers: 2", "num_layers: [1, 2]")),
            "m.yaml:1: num_layers: expected an integer, got a list");
  EXPECT_EQ(ModelError(kTinyModel + "tied_embeddings: yes\n"),
            "m.yaml:6: tied_embeddings: expected true or false, got \"yes\"");
  EXPECT_EQ(ModelError(kTinyModel + "name: {a: 1}\n"),
            "m.yaml:6: name: expected a string, got a map");
  EXPECT_EQ(
      ModelError(kTinyModel + "activation: relu\n"),
      "m.yaml:6: activation: unknown value \"relu\" (expected one of: gelu, swiglu, squared_relu)");
}

TEST(BadInput, NonPositiveSizes) {
  EXPECT_EQ(ModelError(Replace(kTinyModel, "num_layers: 2", "num_layers: 0")),
            "m.yaml:1: num_layers: must be positive, got 0");
  EXPECT_EQ(ModelError(Replace(kTinyModel, "seq_length: 32", "seq_length: -32")),
            "m.yaml:5: seq_length: must be positive, got -32");
  // Beyond the limits (core/limits.h): 4 x hidden_size once overflowed an int.
  EXPECT_EQ(ModelError(Replace(kTinyModel, "num_layers: 2", "num_layers: 1000000")),
            "m.yaml:1: num_layers: at most 16384, got 1000000");
  EXPECT_EQ(ModelError(Replace(kTinyModel, "seq_length: 32", "seq_length: 100000000")),
            "m.yaml:5: seq_length: at most 16777216, got 100000000");
}

TEST(BadInput, DuplicateKeysSyntaxErrorsAndEmptyFiles) {
  EXPECT_EQ(ModelError(kTinyModel + "num_layers: 3\n"),
            "m.yaml:6: num_layers: duplicate key (first at line 1)");
  EXPECT_EQ(ModelError("num_layers: [2\n"),
            "m.yaml:2: invalid YAML: end of sequence flow not found");
  EXPECT_EQ(ModelError(""), "m.yaml: the file is empty");
  EXPECT_EQ(ModelError("# only a comment\n"), "m.yaml: the file is empty");
  EXPECT_EQ(ModelError("- num_layers: 2\n"), "m.yaml:1: expected a map of keys, got a list");
}

TEST(BadInput, ImpossibleModels) {
  EXPECT_EQ(ModelError(kTinyModel + "num_query_groups: 3\n"),
            "m.yaml:6: num_query_groups: num_attention_heads (4) must be a multiple of "
            "num_query_groups (3)");
  EXPECT_EQ(ModelError(Replace(kTinyModel, "hidden_size: 64", "hidden_size: 66")),
            "m.yaml:2: hidden_size: hidden_size (66) must be a multiple of num_attention_heads "
            "(4) (hint: give kv_channels (the per-head size) explicitly)");
  EXPECT_EQ(ModelError(kTinyModel + "max_position_embeddings: 16\n"),
            "m.yaml:6: max_position_embeddings: max_position_embeddings (16) must be at least "
            "seq_length (32)");
}

TEST(BadInput, ClusterProfiles) {
  const std::string text = WriteClusterYaml(ClusterPreset("dgx-h100"));
  // A subnormal rate once made every time infinite (and the output "inf s", exit 0).
  const std::string peak = text.substr(text.find("  peak_bf16_tflops:"));
  EXPECT_EQ(ErrorOf(ParseClusterYaml,
                    Replace(text, peak.substr(0, peak.find('\n')), "  peak_bf16_tflops: 1e-310")),
            "m.yaml:" + std::to_string(LineOf(text, "  peak_bf16_tflops")) +
                ": gpu.peak_bf16_tflops: expected a rate between 1e-06 and 1e+09, got 1e-310");
  EXPECT_EQ(ErrorOf(ParseClusterYaml, Replace(text, "  gpus_per_node: 8", "  gpus_per_node: 0")),
            "m.yaml:" + std::to_string(LineOf(text, "  gpus_per_node")) +
                ": node.gpus_per_node: must be positive, got 0");
  EXPECT_EQ(
      ErrorOf(ParseClusterYaml, Replace(text, "  hbm_bytes:", "  hbm_byte: 80\n  hbm_bytes:")),
      "m.yaml:" + std::to_string(LineOf(text, "  hbm_bytes")) +
          ": gpu.hbm_byte: unknown key (hint: did you mean hbm_bytes?)");
  EXPECT_EQ(ErrorOf(ParseClusterYaml,
                    Replace(text, "  nic_busbw_gb_per_s: 47", "  nic_busbw_gb_per_s: 60")),
            "m.yaml:" + std::to_string(LineOf(text, "  nic_busbw_gb_per_s")) +
                ": network.nic_busbw_gb_per_s: achieved bus bandwidth (60 GB/s) exceeds the "
                "NIC's rate (50 GB/s)");
}

TEST(BadInput, ClusterEfficiencyTablesAndAllowances) {
  const std::string text = WriteClusterYaml(ClusterPreset("cpu-local"));
  const std::string row = "    - {m: 1024, n: 1024, k: 1024, efficiency: 0.5}";
  const std::string line = std::to_string(LineOf(text, row));
  EXPECT_EQ(ErrorOf(ParseClusterYaml, Replace(text, "efficiency: 0.5}", "efficiency: 1.5}")),
            "m.yaml:" + line + ": gpu.gemm_efficiency[0].efficiency: must be at most 1, got 1.5");
  // Points at m = 2048 (k = 1024 and 64) need their m = 1024 partners: 1024x1024x64 is missing.
  EXPECT_EQ(ErrorOf(ParseClusterYaml,
                    Replace(text, row,
                            row + "\n    - {m: 2048, n: 1024, k: 1024, efficiency: 0.6}\n" +
                                "    - {m: 2048, n: 1024, k: 64, efficiency: 0.6}")),
            "m.yaml:" + std::to_string(LineOf(text, "  gemm_efficiency:")) +
                ": gpu.gemm_efficiency: the shapes must form a full grid over m, n and k; "
                "1024x1024x64 is missing");
  EXPECT_EQ(ErrorOf(ParseClusterYaml, Replace(text, row, row + "\n" + row)),
            "m.yaml:" + std::to_string(LineOf(text, row) + 1) +
                ": gpu.gemm_efficiency[1].m: shape 1024x1024x1024 appears twice");
  EXPECT_EQ(ErrorOf(ParseClusterYaml,
                    Replace(text, "  gemm_efficiency:", "  gemm_efficiency: []\n  unused:")),
            "m.yaml:" + std::to_string(LineOf(text, "  gemm_efficiency:")) +
                ": gpu.gemm_efficiency: expected a non-empty list, got an empty list");
  EXPECT_EQ(ErrorOf(ParseClusterYaml,
                    Replace(text, "  memory_efficiency: 0.5", "  memory_efficiency: 0")),
            "m.yaml:" + std::to_string(LineOf(text, "  memory_efficiency")) +
                ": gpu.memory_efficiency: must be positive, got 0");
  EXPECT_EQ(ErrorOf(ParseClusterYaml,
                    Replace(text, "  reserved_bytes: 100000000", "  reserved_bytes: 4000000000")),
            "m.yaml:" + std::to_string(LineOf(text, "  reserved_bytes")) +
                ": gpu.reserved_bytes: must be at least 0 and below hbm_bytes (4000000000), got "
                "4000000000");
  EXPECT_EQ(ErrorOf(ParseClusterYaml, Replace(text, "  fragmentation: 0.1", "  fragmentation: 1")),
            "m.yaml:" + std::to_string(LineOf(text, "  fragmentation")) +
                ": gpu.fragmentation: must be below 1, got 1");
}

TEST(RoundTrip, GemmTablesAreSortedOnReading) {
  ClusterSpec c = ClusterPreset("dgx-h100");
  const ClusterSpec sorted = c;
  std::mt19937 rng(3);
  std::shuffle(c.gpu.gemm_efficiency.begin(), c.gpu.gemm_efficiency.end(), rng);
  EXPECT_EQ(ParseClusterYaml(WriteClusterYaml(c)), sorted);
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
