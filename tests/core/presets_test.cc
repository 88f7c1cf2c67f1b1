// Every built-in preset and profile parses, is self-consistent, and round-trips.
#include "core/presets.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/spec_yaml.h"

namespace ptdp {
namespace {

TEST(Presets, TheContractsPresetsExist) {
  for (const char* name :
       {"seed-example",    "megatron-1.7b",   "megatron-3.6b",   "megatron-7.5b",
        "megatron-18.4b",  "megatron-39.1b",  "megatron-76.1b",  "megatron-145.6b",
        "megatron-310.1b", "megatron-529.6b", "megatron-1t",     "gpt3-125m",
        "gpt3-350m",       "gpt3-1.3b",       "gpt3-2.7b",       "gpt3-6.7b",
        "gpt3-13b",        "gpt3-175b",       "llama2-7b",       "llama2-13b",
        "llama2-70b",      "llama3-8b",       "llama3-70b",      "llama3-405b",
        "mixtral-8x7b",    "qwen3-30b-a3b",   "qwen3-235b-a22b", "gpt-oss-120b",
        "deepseek-v3",     "nemotron-3-nano"}) {
    EXPECT_NO_THROW(ModelPreset(name)) << name;
  }
  for (const char* name :
       {"dgx-a100-80gb", "dgx-a100-40gb", "vtrain-a100", "dgx-h100", "hgx-h200", "cpu-local"}) {
    EXPECT_NO_THROW(ClusterPreset(name)) << name;
  }
  EXPECT_EQ(ModelPresetFiles().size(), 30u);
  EXPECT_EQ(ClusterPresetFiles().size(), 6u);
}

TEST(Presets, EveryModelPresetIsNamedAfterItsFileAndRoundTrips) {
  for (const PresetFile& file : ModelPresetFiles()) {
    const ModelSpec m = ModelPreset(file.name);
    EXPECT_EQ(m.name, file.name);
    // Heads of hidden / heads each, except the models whose cards say otherwise.
    if (!m.moe()) {
      EXPECT_EQ(m.kv_channels * m.num_attention_heads, m.hidden_size) << file.name;
    }
    EXPECT_EQ(ParseModelYaml(WriteModelYaml(m)), m) << file.name;
  }
}

TEST(Presets, EveryProfileIsNamedAfterItsFileAndRoundTrips) {
  for (const PresetFile& file : ClusterPresetFiles()) {
    const ClusterSpec c = ClusterPreset(file.name);
    EXPECT_EQ(c.name, file.name);
    EXPECT_EQ(ParseClusterYaml(WriteClusterYaml(c)), c) << file.name;
  }
}

TEST(Presets, ModernModelsUseTheirOwnArchitecture) {
  const ModelSpec llama = ModelPreset("llama3-70b");
  EXPECT_EQ(llama.num_query_groups, 8);
  EXPECT_EQ(llama.activation, Activation::kSwiglu);
  EXPECT_EQ(llama.normalization, Normalization::kRmsNorm);
  EXPECT_EQ(llama.position_embedding, PositionEmbedding::kRope);
  EXPECT_FALSE(llama.tied_embeddings);
  EXPECT_FALSE(llama.add_bias_linear);
  EXPECT_EQ(llama.vocab_size, 128256);
  EXPECT_EQ(ModelPreset("llama2-7b").vocab_size, 32000);
}

// The mixture-of-experts presets against their published totals and active parameters
// (model cards: Mixtral 46.7B / 12.9B, Qwen3 30.5B / 3.3B and 235B / 22B, DeepSeek-V3 671B /
// 37B without its MTP layer, GPT-OSS-120B 117B).
TEST(Presets, MixturesOfExpertsCountAsTheirCardsSay) {
  const auto billions = [](const char* name) {
    const ParameterCounts c = CountParameters(ModelPreset(name));
    return std::pair{c.total / 1e9, c.active / 1e9};
  };
  EXPECT_NEAR(billions("mixtral-8x7b").first, 46.7, 0.1);
  EXPECT_NEAR(billions("mixtral-8x7b").second, 12.9, 0.1);
  EXPECT_NEAR(billions("qwen3-30b-a3b").first, 30.5, 0.1);
  EXPECT_NEAR(billions("qwen3-30b-a3b").second, 3.3, 0.1);
  EXPECT_NEAR(billions("qwen3-235b-a22b").first, 235, 0.5);
  EXPECT_NEAR(billions("qwen3-235b-a22b").second, 22, 0.5);
  EXPECT_NEAR(billions("deepseek-v3").first, 671, 1);
  EXPECT_NEAR(billions("deepseek-v3").second, 37.5, 1);
  EXPECT_NEAR(billions("gpt-oss-120b").first, 117, 1);
  const ModelSpec ds = ModelPreset("deepseek-v3");
  EXPECT_EQ(ds.NumMoeLayers(), 58);
  EXPECT_FALSE(ds.IsMoeLayer(2));
  EXPECT_TRUE(ds.IsMoeLayer(3));
}

TEST(Presets, SeedExampleIsTheFoundingDocumentsModel) {
  const ModelSpec m = ModelPreset("seed-example");
  EXPECT_EQ(m.num_layers, 24);
  EXPECT_EQ(m.hidden_size, 2048);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_EQ(m.seq_length, 2048);
}

TEST(Presets, ProfilesCarryDatasheetFigures) {
  const ClusterSpec a100 = ClusterPreset("dgx-a100-80gb");
  EXPECT_EQ(a100.gpu.peak_bf16_flops, 312e12);
  EXPECT_EQ(a100.gpu.hbm_bytes, 81920LL * 1024 * 1024);
  EXPECT_EQ(a100.gpus_per_node, 8);
  EXPECT_EQ(a100.nic_bytes_per_s, 25e9);
  EXPECT_EQ(ClusterPreset("dgx-h100").gpu.peak_bf16_flops, 989e12);
  EXPECT_EQ(ClusterPreset("hgx-h200").gpu.hbm_bandwidth_bytes_per_s, 4800e9);
}

TEST(Presets, ResolveNamesAPresetOrAFileAndRefusesAnythingElse) {
  EXPECT_EQ(ResolveModel("gpt3-175b").num_layers, 96);
  EXPECT_EQ(ResolveCluster("dgx-h100").gpu.name, "H100-SXM5-80GB");
  try {
    ResolveModel("gpt-5", "--model");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().key, "--model");
    EXPECT_EQ(e.message(), "\"gpt-5\" is neither a model preset nor a file");
  }
  try {
    ResolveCluster("dgx-z", "--cluster");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).substr(0, 57),
              "--cluster: \"dgx-z\" is neither a hardware profile nor a fi");
  }
}

// What a new user types: a misspelt preset, a path that is not there, a Hugging Face folder.
TEST(Presets, ResolveSaysWhatWasMeant) {
  auto message = [](auto resolve, const std::string& arg) {
    try {
      resolve(arg);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  auto model = [](const std::string& a) { return ResolveModel(a, "--model"); };
  auto cluster = [](const std::string& a) { return ResolveCluster(a, "--cluster"); };
  EXPECT_EQ(message(model, "lama3-70b"),
            "--model: no model preset named \"lama3-70b\" (hint: did you mean llama3-70b? `ptdp "
            "models` lists them)");
  EXPECT_EQ(message(cluster, "dgx-h10"),
            "--cluster: no hardware profile named \"dgx-h10\" (hint: did you mean dgx-h100? `ptdp "
            "profiles` lists them)");
  EXPECT_EQ(message(model, "models/my-model.yaml"),
            "--model: no such file: models/my-model.yaml (hint: nor a model preset of that name; "
            "`ptdp models` lists them)");
  EXPECT_EQ(message(cluster, "my-cluster.yaml"),
            "--cluster: no such file: my-cluster.yaml (hint: nor a hardware profile of that name; "
            "`ptdp profiles` lists them)");
  const std::string folder = ::testing::TempDir();
  EXPECT_EQ(message(model, folder).rfind("--model: " + folder + " is a folder (hint:", 0), 0u);
  // A Hugging Face model folder reads as its config.json.
  const std::string hf = std::string(PTDP_TEST_FIXTURES) + "/tiny-llama";
  EXPECT_TRUE(ResolveModel(hf) == ResolveModel(hf + "/config.json"));
}

}  // namespace
}  // namespace ptdp
