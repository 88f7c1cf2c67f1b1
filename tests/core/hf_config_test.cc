// Import of Hugging Face config.json files: the two fixtures (tests/fixtures) and bad input.
#include "core/hf_config.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/presets.h"

namespace ptdp {
namespace {

const std::string kFixtures = PTDP_TEST_FIXTURES;

std::string HfError(const std::string& text) {
  try {
    ParseHfConfig(text, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, LlamaStyleWithGroupedQueryAttention) {
  const ModelSpec m = ResolveModel(kFixtures + "/tiny-llama/config.json");
  EXPECT_EQ(m.name, "tiny-llama");  // named after its folder
  EXPECT_EQ(m.num_layers, 4);
  EXPECT_EQ(m.hidden_size, 256);
  EXPECT_EQ(m.num_attention_heads, 8);
  EXPECT_EQ(m.num_query_groups, 2);
  EXPECT_EQ(m.kv_channels, 32);
  EXPECT_EQ(m.ffn_hidden_size, 688);
  EXPECT_EQ(m.vocab_size, 1000);
  EXPECT_EQ(m.seq_length, 512);
  EXPECT_EQ(m.activation, Activation::kSwiglu);
  EXPECT_EQ(m.normalization, Normalization::kRmsNorm);
  EXPECT_EQ(m.position_embedding, PositionEmbedding::kRope);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.add_bias_linear);
  EXPECT_EQ(CountParameters(m).total, 3295488);  // hand count in model_spec_test.cc
}

TEST(HfConfig, Gpt2StyleIndentedWithTabs) {
  const ModelSpec m = ResolveModel(kFixtures + "/tiny-gpt2/config.json");
  EXPECT_EQ(m.name, "tiny-gpt2");
  EXPECT_EQ(m.num_layers, 3);
  EXPECT_EQ(m.hidden_size, 96);
  EXPECT_EQ(m.num_attention_heads, 4);
  EXPECT_EQ(m.ffn_hidden_size, 384);  // n_inner null -> 4h
  EXPECT_EQ(m.vocab_size, 300);
  EXPECT_EQ(m.seq_length, 128);
  EXPECT_EQ(m.activation, Activation::kGelu);
  EXPECT_EQ(m.position_embedding, PositionEmbedding::kLearned);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_TRUE(m.add_bias_linear);
  EXPECT_EQ(CountParameters(m).total, 384864);
}

TEST(HfConfig, FamilyIsInferredWithoutModelType) {
  EXPECT_EQ(ParseHfConfig("{\"n_layer\": 2, \"n_embd\": 64, \"n_head\": 2, \"vocab_size\": 10,"
                          " \"n_positions\": 16}")
                .activation,
            Activation::kGelu);
}

TEST(HfConfig, BadInputNamesTheKey) {
  EXPECT_EQ(HfError("{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64,\n"
                    " \"num_attention_heads\": 4, \"vocab_size\": 10,\n"
                    " \"max_position_embeddings\": 16}"),
            "config.json:1: intermediate_size: missing required key");
  EXPECT_EQ(HfError("{\"model_type\": \"llama\",\n \"num_hidden_layers\": \"2\"}"),
            "config.json:2: num_hidden_layers: expected an integer, got the quoted string \"2\"");
  EXPECT_EQ(HfError("{\"model_type\": \"bert\"}"),
            "config.json:1: model_type: unsupported model_type \"bert\" (hint: supported: llama, "
            "mistral, gpt2)");
  EXPECT_EQ(HfError("{\"vocab_size\": 10}"),
            "config.json:1: model_type: missing: cannot tell the model family (hint: a Hugging "
            "Face config.json names its model_type (llama, mistral or gpt2))");
  EXPECT_EQ(HfError("{\"model_type\": \"llama\", \"num_local_experts\": 8}"),
            "config.json:1: num_local_experts: mixture-of-experts models are not supported");
  EXPECT_EQ(HfError("{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
                    " \"num_attention_heads\": 4, \"num_key_value_heads\": 3,"
                    " \"intermediate_size\": 128, \"vocab_size\": 10,"
                    " \"max_position_embeddings\": 16}"),
            "config.json:1: num_attention_heads: num_attention_heads (4) must be a multiple of "
            "num_key_value_heads (3)");
  EXPECT_EQ(HfError("{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
                    " \"num_attention_heads\": 4, \"intermediate_size\": 128,"
                    " \"vocab_size\": 10, \"max_position_embeddings\": 16,"
                    " \"hidden_act\": \"gelu\"}"),
            "config.json:1: hidden_act: unsupported activation \"gelu\" for a Llama-style model "
            "(expected silu)");
  EXPECT_EQ(HfError("{\"model_type\": \"llama\", \"num_hidden_layers\": 2"),
            "config.json:1: invalid JSON: end of map flow not found");
}

}  // namespace
}  // namespace ptdp
