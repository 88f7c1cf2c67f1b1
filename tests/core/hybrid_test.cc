// Hybrid (Mamba) models: the layer pattern and Mamba mixer in the model file, Hugging Face's
// nemotron_h config; parameter counts by hand and against Nemotron-3-Nano's published size.
// Megatron's flags and checks for hybrid layouts: tests/megatron/hybrid_flags_test.cc.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/hf_config.h"
#include "core/model_spec.h"
#include "core/presets.h"
#include "core/spec_yaml.h"

namespace ptdp {
namespace {

// Four layers, one of each of M * - M: h 16; attention 2 heads of 8, one key/value group; MLP
// 64 wide; Mamba 4 heads of 8 (d_inner 32), state 4 in 2 groups.
const std::string kTinyHybrid =
    "num_layers: 4\nhidden_size: 16\nnum_attention_heads: 2\nnum_query_groups: 1\n"
    "ffn_hidden_size: 64\nvocab_size: 256\nseq_length: 256\nactivation: squared_relu\n"
    "normalization: rmsnorm\nposition_embedding: none\ntied_embeddings: false\n"
    "add_bias_linear: false\nhidden_dropout: 0\nattention_dropout: 0\n"
    "hybrid_layer_pattern: \"M*-M\"\nmamba_num_heads: 4\nmamba_head_dim: 8\n"
    "mamba_state_dim: 4\nmamba_num_groups: 2\n";

std::string ModelError(const std::string& text) {
  try {
    ParseModelYaml(text, "m.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Hybrid, LayerKindsFollowThePattern) {
  const ModelSpec m = ParseModelYaml(kTinyHybrid);
  EXPECT_TRUE(m.hybrid());
  EXPECT_EQ(m.KindOfLayer(0), LayerKind::kMamba);
  EXPECT_EQ(m.KindOfLayer(1), LayerKind::kAttention);
  EXPECT_EQ(m.KindOfLayer(2), LayerKind::kMlp);
  EXPECT_EQ(m.CountLayers(LayerKind::kMamba, 0, 4), 2);
  EXPECT_EQ(m.CountLayers(LayerKind::kMamba, 1, 3), 0);
  EXPECT_EQ(m.NumMoeLayers(), 0);
  const ModelSpec nano = ModelPreset("nemotron-3-nano");
  EXPECT_EQ(nano.NumMoeLayers(), 23);
  EXPECT_EQ(nano.CountLayers(LayerKind::kMamba, 0, 52), 23);
  EXPECT_EQ(nano.CountLayers(LayerKind::kAttention, 0, 52), 6);
  EXPECT_TRUE(nano.IsMoeLayer(1));
  EXPECT_FALSE(nano.IsMoeLayer(0));
  // A transformer's layers.
  const ModelSpec ds = ModelPreset("deepseek-v3");
  EXPECT_EQ(ds.KindOfLayer(0), LayerKind::kTransformer);
  EXPECT_EQ(ds.KindOfLayer(3), LayerKind::kMoeTransformer);
}

TEST(Hybrid, ParametersCountedByHand) {
  const ModelSpec m = ParseModelYaml(kTinyHybrid);
  // in_proj 16 x (2 x 32 + 2 x 2 x 4 + 4) = 1344; conv1d (32 + 16) x (4 + 1) = 240; dt_bias,
  // A_log, D 3 x 4; gated norm 32; out_proj 32 x 16 = 512.
  EXPECT_EQ(MambaMixerParameters(m), 1344 + 240 + 12 + 32 + 512);
  EXPECT_EQ(LayerKindParameters(m, LayerKind::kMamba), 2140 + 16);
  // QKV 16 x (16 + 2 x 8), projection 16 x 16, norm.
  EXPECT_EQ(LayerKindParameters(m, LayerKind::kAttention), 512 + 256 + 16);
  // fc1 16 x 64 (squared ReLU: not gated), fc2 64 x 16, norm.
  EXPECT_EQ(LayerKindParameters(m, LayerKind::kMlp), 1024 + 1024 + 16);
  const ParameterCounts c = CountParameters(m);
  EXPECT_EQ(c.per_mamba_layer, 2156);
  EXPECT_EQ(c.transformer, 2 * 2156 + 784 + 2064);
  EXPECT_EQ(c.position_embedding, 0);   // none
  EXPECT_EQ(c.output_layer, 256 * 16);  // untied
  EXPECT_EQ(c.total, 4312 + 784 + 2064 + 2 * 4096 + 16);
  EXPECT_EQ(c.active, c.total);
}

// NVIDIA's model card: 31.6B parameters, about 3.2B active (3.6B with the embeddings: the
// 3.2B count the LM head, a matrix product every token goes through, but not the input
// embedding's lookup table).
TEST(Hybrid, NemotronThreeNanoHasItsPublishedSize) {
  const ParameterCounts c = CountParameters(ModelPreset("nemotron-3-nano"));
  EXPECT_NEAR(static_cast<double>(c.total), 31.6e9, 0.1e9);
  EXPECT_NEAR(static_cast<double>(c.active), 3.6e9, 0.1e9);
  EXPECT_NEAR(static_cast<double>(c.active - c.word_embedding), 3.2e9, 0.1e9);
  // The pieces: 23 Mamba layers of 38.7M, 23 MoE layers of 1.30B (128 experts of 2 x 2688 x
  // 1856), 6 attention layers.
  EXPECT_EQ(c.per_mamba_layer, 38'744'896);
  EXPECT_EQ(c.per_moe_layer, 2688 * 128 + 128LL * 2 * 2688 * 1856 + 2 * 2688 * 3712 + 2688);
}

TEST(Hybrid, ModelFileRoundTripsAndRefusesWhatMegatronRefuses) {
  const ModelSpec m = ParseModelYaml(kTinyHybrid);
  EXPECT_EQ(ParseModelYaml(WriteModelYaml(m)), m);
  // Megatron's default head count: d_inner = 2 h, heads = d_inner / head_dim.
  std::string text = kTinyHybrid;
  text.replace(text.find("mamba_num_heads: 4\n"), 19, "");
  EXPECT_EQ(ParseModelYaml(text).mamba_num_heads, 4);
  EXPECT_EQ(ModelError(kTinyHybrid + "num_experts: 0\n"), "");
  std::string wrong = kTinyHybrid;
  wrong.replace(wrong.find("\"M*-M\""), 6, "\"M*-\"");
  EXPECT_EQ(ModelError(wrong),
            "m.yaml:15: hybrid_layer_pattern: The hybrid override pattern is the wrong length: got "
            "3, expected 4");
  wrong = kTinyHybrid;
  wrong.replace(wrong.find("\"M*-M\""), 6, "\"M*xM\"");
  EXPECT_EQ(ModelError(wrong),
            "m.yaml:15: hybrid_layer_pattern: In hybrid override pattern, 'x' is not one of {'M', "
            "'*', '-', 'E'}");
  wrong = kTinyHybrid;
  wrong.replace(wrong.find("\"M*-M\""), 6, "\"ME-M\"");
  EXPECT_EQ(ModelError(wrong),
            "m.yaml:15: hybrid_layer_pattern: the pattern's MoE layers ('E') need num_experts "
            "(--num-experts)");
  wrong = kTinyHybrid;
  wrong.replace(wrong.find("mamba_num_groups: 2"), 19, "mamba_num_groups: 3");
  EXPECT_EQ(ModelError(wrong),
            "m.yaml:16: mamba_num_heads: nheads must be evenly divisible by ngroups (4 heads, 3 "
            "groups)");
  EXPECT_EQ(ModelError("num_layers: 2\nhidden_size: 16\nnum_attention_heads: 2\nvocab_size: 9\n"
                       "seq_length: 8\nmamba_state_dim: 4\n"),
            "m.yaml:6: mamba_state_dim: applies to hybrid models only (hint: give "
            "hybrid_layer_pattern)");
}

TEST(Hybrid, PatternFromRatiosIsMegatrons) {
  // megatron/core/ssm/mamba_hybrid_layer_allocation.py _allocate_auto, run for these cases.
  EXPECT_EQ(HybridPatternFromRatios(10, 0.2, 0), "MMM*MM*MMM");
  EXPECT_EQ(HybridPatternFromRatios(10, 0.2, 0.2), "MMM*-M*MM-");
  EXPECT_EQ(HybridPatternFromRatios(9, 1.0 / 3, 1.0 / 3), "M-*M*-M*-");
  EXPECT_EQ(HybridPatternFromRatios(48, 0.25, 0.25),
            "MM-*MM-*MM*-MM*-MM*-MM*-M*M-M*M-M*M-M*M-*MM-*MM-");
  EXPECT_EQ(HybridPatternFromRatios(5, 0.5, 0), "M*M*M");  // round(2.5) = 2, as Python's
  EXPECT_EQ(HybridPatternFromRatios(6, 0, 0), "MMMMMM");
}

TEST(Hybrid, HuggingFaceNemotronHConfigIsThePreset) {
  // The keys of nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16's config.json that describe it.
  const ModelSpec m = ParseHfConfig(
      R"({"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
          "hidden_size": 2688, "num_hidden_layers": 52,
          "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
          "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 2,
          "intermediate_size": 1856, "mlp_hidden_act": "relu2", "mamba_num_heads": 64,
          "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
          "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
          "moe_shared_expert_intermediate_size": 3712, "n_shared_experts": 1,
          "vocab_size": 131072, "tie_word_embeddings": false, "max_position_embeddings": 262144,
          "use_bias": false, "mlp_bias": false, "attention_bias": false,
          "hidden_dropout": 0.0, "attention_dropout": 0.0, "chunk_size": 128})",
      "config.json");
  ModelSpec preset = ModelPreset("nemotron-3-nano");
  preset.name = "config";
  preset.seq_length = kHfTrainingSeqLength;  // not its 262,144 positions
  preset.max_position_embeddings = 262144;
  EXPECT_EQ(m, preset);
  try {
    ParseHfConfig(R"({"model_type": "nemotron_h", "hidden_size": 16, "num_hidden_layers": 2,
                      "hybrid_override_pattern": "M*", "num_attention_heads": 2,
                      "intermediate_size": 64, "mlp_hidden_act": "silu", "vocab_size": 10,
                      "max_position_embeddings": 8})",
                  "config.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "config.json:3: mlp_hidden_act: unsupported activation \"silu\" for Nemotron-H "
              "(expected relu2)");
  }
}

}  // namespace
}  // namespace ptdp
