// Strict YAML: round trips, and every kind of bad input with its exact message (plan files:
// tests/megatron/plan_file_test.cc).
#include "core/spec_yaml.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/error.h"
#include "core/presets.h"
#include "core/units.h"
#include "core/yaml_io.h"
#include "tests/support/text_edits.h"

namespace ptdp {
namespace {

std::string ModelError(const std::string& text) { return ErrorOf(ParseModelYaml, text); }
const std::string kTinyModel =
    "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nvocab_size: 100\nseq_length: 32\n";

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

TEST(BadInput, RouterGroups) {
  const std::string moe = kTinyModel + "num_experts: 8\nmoe_router_topk: 2\n";
  EXPECT_EQ(ModelError(moe + "moe_router_group_topk: 2\n"),
            "m.yaml:8: moe_router_group_topk: group-limited routing needs moe_router_num_groups "
            "too");
  EXPECT_EQ(ModelError(moe + "moe_router_num_groups: 3\nmoe_router_group_topk: 2\n"),
            "m.yaml:8: moe_router_num_groups: num_experts (8) should be divisible by "
            "moe_router_num_groups (3)");
  EXPECT_EQ(ModelError(moe + "moe_router_num_groups: 4\nmoe_router_group_topk: 5\n"),
            "m.yaml:9: moe_router_group_topk: moe_router_group_topk (5) should be smaller than "
            "moe_router_num_groups (4)");
  EXPECT_EQ(ModelError(kTinyModel + "moe_router_num_groups: 4\n"),
            "m.yaml:6: moe_router_num_groups: applies to mixture-of-experts models only "
            "(num_experts > 0)");
  const ModelSpec m = ModelPreset("deepseek-v3");
  EXPECT_EQ(m.moe_router_num_groups, 8);
  EXPECT_EQ(m.moe_router_group_topk, 4);
  EXPECT_EQ(ParseModelYaml(WriteModelYaml(m), "m.yaml"), m);
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
            "m.yaml:" + line +
                ": gpu.gemm_efficiency[0].efficiency: expected an efficiency between 0.0001 and 1, "
                "got 1.5");
  // A subnormal efficiency once printed `inf s` and `-nan%` with exit 0; the floor is 1e-4.
  EXPECT_EQ(ErrorOf(ParseClusterYaml, Replace(text, "efficiency: 0.5}", "efficiency: 1e-320}")),
            "m.yaml:" + line +
                ": gpu.gemm_efficiency[0].efficiency: expected an efficiency between 0.0001 and 1, "
                "got 1e-320");
  EXPECT_EQ(ParseClusterYaml(Replace(text, "efficiency: 0.5}", "efficiency: 0.0001}"))
                .gpu.gemm_efficiency[0]
                .efficiency,
            1e-4);
  EXPECT_EQ(ErrorOf(ParseClusterYaml,
                    Replace(text, "  memory_efficiency: 0.5", "  memory_efficiency: 5e-5")),
            "m.yaml:" + std::to_string(LineOf(text, "  memory_efficiency")) +
                ": gpu.memory_efficiency: expected an efficiency between 0.0001 and 1, got 5e-05");
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

// Latencies and host overheads: at most ten seconds each, so that a step's sum stays finite.
TEST(BadInput, ClusterLatenciesAreBounded) {
  const std::string text = WriteClusterYaml(ClusterPreset("dgx-h100"));
  const std::string latency = text.substr(text.find("  nic_step_latency_us:"));
  EXPECT_EQ(ErrorOf(ParseClusterYaml, Replace(text, latency.substr(0, latency.find('\n')),
                                              "  nic_step_latency_us: 1e300")),
            "m.yaml:" + std::to_string(LineOf(text, "  nic_step_latency_us")) +
                ": network.nic_step_latency_us: expected at most 1e+07 microseconds, got 1e+300");
  const std::string launch = text.substr(text.find("  kernel_launch_us:"));
  EXPECT_EQ(ErrorOf(ParseClusterYaml, Replace(text, launch.substr(0, launch.find('\n')),
                                              "  kernel_launch_us: 10000001")),
            "m.yaml:" + std::to_string(LineOf(text, "  kernel_launch_us")) +
                ": host.kernel_launch_us: expected at most 1e+07 microseconds, got 10000001");
}

// Old Mac line ends (CR alone) read as line breaks, numbered as such; CRLF as one break.
TEST(Yaml, CarriageReturnLineEnds) {
  const ModelSpec lf = ParseModelYaml(kTinyModel, "m.yaml");
  std::string cr = kTinyModel, crlf;
  std::replace(cr.begin(), cr.end(), '\n', '\r');
  for (char c : kTinyModel) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  EXPECT_EQ(ParseModelYaml("# a comment\r" + cr, "m.yaml"), lf);
  EXPECT_EQ(ParseModelYaml(crlf, "m.yaml"), lf);
  EXPECT_EQ(ModelError(Replace(cr, "hidden_size: 64", "hidden_size: 0")),
            "m.yaml:2: hidden_size: must be positive, got 0");
  EXPECT_EQ(ModelError("# a\r\r\n" + Replace(cr, "seq_length: 32", "seq_length: x")),
            "m.yaml:7: seq_length: expected an integer, got \"x\"");
}

// The duplicate-key check is linear: 200,000 keys once took 49 s (each compared with all the
// keys before it). Now well under a second; the bound leaves room for a sanitizer build.
TEST(Yaml, ManyKeysAreReadInLinearTime) {
  std::string text = kTinyModel;
  for (int i = 0; i < 200'000; ++i) text += "k" + std::to_string(i) + ": 1\n";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(ModelError(text).starts_with("m.yaml:6: k0: unknown key (hint: known keys: "));
  EXPECT_EQ(ModelError(text + "k7: 2\n"), "m.yaml:200006: k7: duplicate key (first at line 13)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20);
}

// A multi-token prediction block is layers: the layer bound (core/limits.h).
TEST(BadInput, MtpLayersHaveTheLayerBound) {
  EXPECT_EQ(ModelError(kTinyModel + "mtp_num_layers: 16385\n"),
            "m.yaml:6: mtp_num_layers: at most 16384, got 16385");
}

TEST(RoundTrip, GemmTablesAreSortedOnReading) {
  ClusterSpec c = ClusterPreset("dgx-h100");
  const ClusterSpec sorted = c;
  std::mt19937 rng(3);
  std::shuffle(c.gpu.gemm_efficiency.begin(), c.gpu.gemm_efficiency.end(), rng);
  EXPECT_EQ(ParseClusterYaml(WriteClusterYaml(c)), sorted);
}

}  // namespace
}  // namespace ptdp
