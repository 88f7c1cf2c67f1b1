// Import of Hugging Face config.json files: the two fixtures (tests/fixtures), the released
// configs of Qwen3-8B and of four mixture-of-experts models (inline, as published on the
// Hugging Face hub) against the presets, and bad input.
#include "core/hf_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/limits.h"
#include "core/presets.h"
#include "core/spec_yaml.h"

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

// A config gives the longest context the model serves (Llama 3.1: 131,072 positions): the
// training length is the smaller of that and 4,096, for every family.
TEST(HfConfig, TheTrainingLengthIsAtMostAPretrainingLength) {
  const std::string llama31 =
      R"({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
          "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
          "vocab_size": 128256, "max_position_embeddings": 131072, "hidden_act": "silu"})";
  const ModelSpec m = ParseHfConfig(llama31, "Llama-3.1-8B/config.json");
  EXPECT_EQ(kHfTrainingSeqLength, 4096);
  EXPECT_EQ(m.seq_length, 4096);
  EXPECT_EQ(m.max_position_embeddings, 131072);
  // Shorter positions are the length.
  std::string short_positions = llama31;
  short_positions.replace(short_positions.find("131072"), 6, "2048");
  EXPECT_EQ(ParseHfConfig(short_positions).seq_length, 2048);
  const ModelSpec gpt2 = ParseHfConfig(
      R"({"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 10, "n_positions": 8192})");
  EXPECT_EQ(gpt2.seq_length, 4096);
  EXPECT_EQ(gpt2.max_position_embeddings, 8192);
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
  EXPECT_EQ(
      HfError("{\"model_type\": \"bert\"}"),
      "config.json:1: model_type: unsupported model_type \"bert\" (hint: supported: llama, "
      "mistral, qwen3, mixtral, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, nemotron_h, gpt2)");
  EXPECT_EQ(HfError("{\"vocab_size\": 10}"),
            "config.json:1: model_type: missing: cannot tell the model family (hint: a Hugging "
            "Face config.json names its model_type (llama, mistral, qwen3, mixtral, qwen3_moe, "
            "deepseek_v2, deepseek_v3, gpt_oss, nemotron_h, gpt2))");
  EXPECT_EQ(HfError("{\"model_type\": \"llama\", \"num_local_experts\": 8}"),
            "config.json:1: num_local_experts: a mixture-of-experts key in a \"llama\" config "
            "(hint: the mixture-of-experts model types: mixtral, qwen3_moe, deepseek_v2, "
            "deepseek_v3, gpt_oss)");
  EXPECT_EQ(
      HfError("{\"model_type\": \"qwen2\"}"),
      "config.json:1: model_type: unsupported model_type \"qwen2\" (hint: Qwen2 has biases on "
      "the query, key and value projections only, which ptdp does not model)");
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

// The released config.json files (Hugging Face hub, main branch), whitespace as published.
constexpr const char* kMixtral8x7b = R"json({
  "architectures": [
    "MixtralForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "output_router_logits": false,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.02,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})json";

constexpr const char* kQwen3_30bA3b = R"json({
  "architectures": [
    "Qwen3MoeForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "decoder_sparse_step": 1,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 6144,
  "max_position_embeddings": 40960,
  "max_window_layers": 48,
  "mlp_only_layers": [],
  "model_type": "qwen3_moe",
  "moe_intermediate_size": 768,
  "norm_topk_prob": true,
  "num_attention_heads": 32,
  "num_experts": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 48,
  "num_key_value_heads": 4,
  "output_router_logits": false,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})json";

constexpr const char* kDeepSeekV3 = R"json({
  "architectures": [
    "DeepseekV3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "auto_map": {
    "AutoConfig": "configuration_deepseek.DeepseekV3Config",
    "AutoModel": "modeling_deepseek.DeepseekV3Model",
    "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"
  },
  "aux_loss_alpha": 0.001,
  "bos_token_id": 0,
  "eos_token_id": 1,
  "ep_size": 1,
  "first_k_dense_replace": 3,
  "hidden_act": "silu",
  "hidden_size": 7168,
  "initializer_range": 0.02,
  "intermediate_size": 18432,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v3",
  "moe_intermediate_size": 2048,
  "moe_layer_freq": 1,
  "n_group": 8,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 61,
  "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "quantization_config": {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [
      128,
      128
    ]
  },
  "rms_norm_eps": 1e-06,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid",
  "seq_aux": true,
  "tie_word_embeddings": false,
  "topk_group": 4,
  "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16",
  "transformers_version": "4.33.1",
  "use_cache": true,
  "v_head_dim": 128,
  "vocab_size": 129280
})json";

constexpr const char* kGptOss120b = R"json({
  "architectures": [
    "GptOssForCausalLM"
  ],
  "attention_bias": true,
  "attention_dropout": 0.0,
  "eos_token_id": 200002,
  "experts_per_token": 4,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2880,
  "initial_context_length": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 2880,
  "layer_types": [
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention"
  ],
  "max_position_embeddings": 131072,
  "model_type": "gpt_oss",
  "num_attention_heads": 64,
  "num_experts_per_tok": 4,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "num_local_experts": 128,
  "output_router_logits": false,
  "pad_token_id": 199999,
  "quantization_config": {
    "modules_to_not_convert": [
      "model.layers.*.self_attn",
      "model.layers.*.mlp.router",
      "model.embed_tokens",
      "lm_head"
    ],
    "quant_method": "mxfp4"
  },
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_type": "yarn",
    "truncate": false
  },
  "rope_theta": 150000,
  "router_aux_loss_coef": 0.9,
  "sliding_window": 128,
  "swiglu_limit": 7.0,
  "tie_word_embeddings": false,
  "transformers_version": "4.55.0.dev0",
  "use_cache": true,
  "vocab_size": 201088
})json";

constexpr const char* kQwen3_8b = R"json({
  "architectures": [
    "Qwen3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})json";

// `text` with its one occurrence of `from` replaced by `to`.
std::string Edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The imported config describes the preset's architecture field by field; only the name and
// the run length (the presets train at 4096 as Megatron-Bridge does) are the preset's own.
void ExpectPresetArchitecture(ModelSpec imported, std::string_view preset_name) {
  const ModelSpec preset = ModelPreset(preset_name);
  EXPECT_EQ(CountParameters(imported).total, CountParameters(preset).total);
  EXPECT_EQ(CountParameters(imported).active, CountParameters(preset).active);
  imported.name = preset.name;
  imported.seq_length = preset.seq_length;
  imported.max_position_embeddings = preset.max_position_embeddings;
  EXPECT_EQ(WriteModelYaml(imported), WriteModelYaml(preset));  // a readable difference
  EXPECT_TRUE(imported == preset);
}

TEST(HfConfig, MixtralMatchesItsPreset) {
  const ModelSpec m = ParseHfConfig(kMixtral8x7b, "Mixtral-8x7B-v0.1/config.json");
  EXPECT_EQ(m.name, "Mixtral-8x7B-v0.1");
  // Trained at 4,096 (kHfTrainingSeqLength), not at the 32,768 positions it serves.
  EXPECT_EQ(m.seq_length, 4096);
  EXPECT_EQ(m.max_position_embeddings, 32768);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.moe_ffn_hidden_size, 14336);
  EXPECT_EQ(m.NumMoeLayers(), 32);
  // Hand count (attention 41,943,040 + router 32,768 + experts 8 x 176,160,768 + norms 8,192
  // per layer, two 32000 x 4096 embeddings): the 46,702,792,704 of the released weights.
  EXPECT_EQ(CountParameters(m).total, 46'702'792'704);
  EXPECT_EQ(CountParameters(m).active, 12'879'925'248);
  ExpectPresetArchitecture(m, "mixtral-8x7b");
}

TEST(HfConfig, Qwen3MoeMatchesItsPreset) {
  const ModelSpec m = ParseHfConfig(kQwen3_30bA3b, "config.json");
  EXPECT_TRUE(m.qk_layernorm);
  EXPECT_EQ(m.kv_channels, 128);  // head_dim, not 2048 / 32
  EXPECT_EQ(m.ffn_hidden_size, 6144);
  EXPECT_EQ(m.moe_ffn_hidden_size, 768);
  EXPECT_EQ(m.moe_first_dense_layers, 0);
  EXPECT_EQ(m.moe_router_load_balancing_type, MoeLoadBalancing::kAuxLoss);
  // Hand count: attention 18,874,624 (with the two 128-wide norms) + router 262,144 + experts
  // 128 x 4,718,592 + norms 4,096 per layer, two 151936 x 2048 embeddings.
  EXPECT_EQ(CountParameters(m).total, 30'532'122'624);
  EXPECT_EQ(CountParameters(m).active, 3'353'032'704);
  ExpectPresetArchitecture(m, "qwen3-30b-a3b");
}

TEST(HfConfig, DeepSeekV3MatchesItsPreset) {
  const ModelSpec m = ParseHfConfig(kDeepSeekV3, "config.json");
  EXPECT_TRUE(m.multi_latent_attention);
  EXPECT_EQ(m.num_query_groups, 128);
  EXPECT_EQ(m.kv_channels, 128);
  EXPECT_EQ(m.moe_shared_expert_intermediate_size, 2048);
  EXPECT_EQ(m.NumMoeLayers(), 58);
  EXPECT_EQ(m.moe_router_load_balancing_type, MoeLoadBalancing::kSeqAuxLoss);
  // Counted from the shapes of modeling_deepseek.py's modules: 671,026,419,200 without the
  // MTP layer; ptdp leaves out the routers' expert-score correction bias (256 in each of the
  // 58 MoE layers).
  EXPECT_EQ(CountParameters(m).total, 671'026'419'200 - 58 * 256);
  EXPECT_EQ(CountParameters(m).active, 37'552'297'472 - 58 * 256);
  ExpectPresetArchitecture(m, "deepseek-v3");
}

TEST(HfConfig, GptOssMatchesItsPreset) {
  const ModelSpec m = ParseHfConfig(kGptOss120b, "config.json");
  EXPECT_EQ(m.kv_channels, 64);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.moe_router_topk, 4);
  EXPECT_TRUE(m.add_bias_linear);
  // Counted from the shapes of modeling_gpt_oss.py's modules: 116,829,156,672; ptdp leaves out
  // the 64 attention sinks and the router's 128 biases of each layer.
  EXPECT_EQ(CountParameters(m).total, 116'829'156'672 - 36 * (64 + 128));
  EXPECT_EQ(CountParameters(m).active, 5'711'982'912 - 36 * (64 + 128));
  ExpectPresetArchitecture(m, "gpt-oss-120b");
}

TEST(HfConfig, Qwen3DenseHasQueryKeyNorms) {
  const ModelSpec m = ParseHfConfig(kQwen3_8b, "Qwen3-8B/config.json");
  EXPECT_EQ(m.name, "Qwen3-8B");
  EXPECT_FALSE(m.moe());
  EXPECT_TRUE(m.qk_layernorm);
  EXPECT_EQ(m.num_query_groups, 8);
  EXPECT_EQ(m.kv_channels, 128);
  EXPECT_EQ(m.ffn_hidden_size, 12288);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.add_bias_linear);
  // Per layer: attention 41,943,040 + norms 256, MLP 150,994,944, norms 8,192; two
  // 151936 x 4096 embeddings and the final norm.
  EXPECT_EQ(CountParameters(m).total, 8'190'735'360);
}

TEST(HfConfig, MoeLayerPlacement) {
  // Dense layers given as a prefix become moe_first_dense_layers, in any order.
  const ModelSpec prefix =
      ParseHfConfig(Edit(kQwen3_30bA3b, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [1, 0]"));
  EXPECT_EQ(prefix.moe_first_dense_layers, 2);
  EXPECT_EQ(prefix.NumMoeLayers(), 46);
  // Qwen's step 2 makes layers 1, 3, ..., 47 MoE; ptdp's layers 0, 2, ..., 46: the same 24.
  const ModelSpec step = ParseHfConfig(
      Edit(kQwen3_30bA3b, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2"));
  EXPECT_EQ(step.moe_layer_freq, 2);
  EXPECT_EQ(step.NumMoeLayers(), 24);
  EXPECT_EQ(CountParameters(step).total,
            CountParameters(ModelPreset("qwen3-30b-a3b")).total -
                24 * (CountParameters(step).per_moe_layer - CountParameters(step).per_layer));
  // DeepSeek: no shared expert, no query latent, the plain auxiliary loss.
  std::string lite = Edit(kDeepSeekV3, "\"n_shared_experts\": 1", "\"n_shared_experts\": null");
  lite = Edit(lite, "\"q_lora_rank\": 1536", "\"q_lora_rank\": null");
  lite = Edit(lite, "\"seq_aux\": true", "\"seq_aux\": false");
  const ModelSpec ds = ParseHfConfig(lite);
  EXPECT_EQ(ds.moe_shared_expert_intermediate_size, 0);
  EXPECT_EQ(ds.q_lora_rank, 0);
  EXPECT_EQ(ds.moe_router_load_balancing_type, MoeLoadBalancing::kAuxLoss);
  EXPECT_EQ(ParseHfConfig(Edit(kDeepSeekV3, "deepseek_v3", "deepseek_v2")),
            ParseHfConfig(kDeepSeekV3));
}

TEST(HfConfig, BadMoeInputNamesTheKey) {
  EXPECT_EQ(HfError(Edit(kQwen3_30bA3b, "\"num_experts\": 128", "\"num_experts\": \"128\"")),
            "config.json:22: num_experts: expected an integer, got the quoted string \"128\"");
  EXPECT_EQ(HfError(Edit(kDeepSeekV3, "\"kv_lora_rank\": 512,", "")),
            "config.json:1: kv_lora_rank: missing required key");
  EXPECT_EQ(HfError(Edit(kDeepSeekV3, "\"q_lora_rank\": 1536,", "")),
            "config.json:1: q_lora_rank: missing required key (hint: null when queries are "
            "projected directly)");
  EXPECT_EQ(HfError(Edit(kQwen3_30bA3b, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 2]")),
            "config.json:17: mlp_only_layers: dense layers [0, 2] are not the first layers 0..k-1 "
            "(hint: ptdp models the dense layers first, then every n-th layer as MoE)");
  EXPECT_EQ(
      HfError(Edit(kQwen3_30bA3b, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, \"1\"]")),
      "config.json:17: mlp_only_layers[1]: expected an integer, got the quoted string \"1\"");
  EXPECT_EQ(
      HfError(Edit(Edit(kQwen3_30bA3b, "\"num_hidden_layers\": 48", "\"num_hidden_layers\": 47"),
                   "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2")),
      "config.json:8: decoder_sparse_step: decoder_sparse_step 2 makes 23 layers MoE "
      "((layer + 1) % 2 == 0), ptdp's moe_layer_freq 2 would make 24 (layer % 2 == 0) "
      "(hint: ptdp models the dense layers first, then every n-th layer as MoE)");
  EXPECT_EQ(
      HfError(Edit(kDeepSeekV3, "\"first_k_dense_replace\": 3", "\"first_k_dense_replace\": 61")),
      "config.json:16: first_k_dense_replace: leaves no MoE layer among the 61 layers");
  EXPECT_EQ(HfError(Edit(kMixtral8x7b, "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9")),
            "config.json:15: num_experts_per_tok: num_experts_per_tok (9) exceeds "
            "num_local_experts (8)");
  EXPECT_EQ(HfError(Edit(kGptOss120b, "\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 2")),
            "config.json:29: num_experts_per_tok: num_experts_per_tok (2) and experts_per_token "
            "(4) disagree");
  EXPECT_EQ(HfError(Edit(kGptOss120b, "\"attention_bias\": true", "\"attention_bias\": false")),
            "config.json:5: attention_bias: attention without biases beside experts with biases "
            "(hint: ptdp models biases on all linear layers or on none)");
  EXPECT_EQ(HfError(Edit(kGptOss120b, "\"head_dim\": 64,", "")),
            "config.json:1: head_dim: missing required key");
}

// Every size a config gives has the bound of the model YAML field it fills (core/limits.h): a
// layer count kMaxLayers, every width, count and length kMaxModelDimension. GPT-2's n_layer
// once had the width's bound, and 100,000 layers planned with negative times and memory.
TEST(HfConfig, EverySizeHasTheModelYamlBound) {
  const std::string gpt2 =
      R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": 3072,
          "vocab_size": 50257, "n_positions": 1024})";
  struct Case {
    std::string config;
    std::vector<std::string> keys;
  };
  const std::vector<Case> cases = {
      {gpt2, {"n_layer", "n_embd", "n_head", "n_inner", "vocab_size", "n_positions"}},
      {kDeepSeekV3,
       {"num_hidden_layers", "first_k_dense_replace", "hidden_size", "intermediate_size",
        "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "max_position_embeddings", "moe_intermediate_size", "n_routed_experts",
        "num_attention_heads", "num_experts_per_tok", "moe_layer_freq", "vocab_size"}},
      {kQwen3_30bA3b,
       {"num_experts", "moe_intermediate_size", "decoder_sparse_step", "head_dim",
        "num_key_value_heads"}},
      {kMixtral8x7b, {"num_local_experts"}},
      {kGptOss120b, {"experts_per_token"}},
  };
  const std::set<std::string> layer_keys = {"n_layer", "num_hidden_layers",
                                            "first_k_dense_replace"};
  for (const Case& c : cases) {
    for (const std::string& key : c.keys) {
      const int64_t bound = layer_keys.count(key) ? kMaxLayers : kMaxModelDimension;
      // The key's first value (digits), replaced by one past its bound.
      const std::string name = "\"" + key + "\": ";
      const size_t at = c.config.find(name);
      ASSERT_NE(at, std::string::npos) << key;
      const size_t digits = at + name.size();
      const size_t end = c.config.find_first_not_of("0123456789", digits);
      ASSERT_GT(end, digits) << key;
      const std::string over =
          c.config.substr(0, digits) + std::to_string(bound + 1) + c.config.substr(end);
      EXPECT_NE(HfError(over).find(fmt::format("{}: at most {}, got {}", key, bound, bound + 1)),
                std::string::npos)
          << key << ": " << HfError(over);
    }
  }
  EXPECT_EQ(HfError(Edit(gpt2, "\"n_layer\": 12", "\"n_layer\": 100000")),
            "config.json:1: n_layer: at most 16384, got 100000");
  // The deepest model accepted is read whole.
  EXPECT_EQ(ParseHfConfig(Edit(gpt2, "\"n_layer\": 12", "\"n_layer\": 16384")).num_layers, 16384);
  // Shared experts: the width of all of them, as the YAML's moe_shared_expert_intermediate_size.
  EXPECT_EQ(HfError(Edit(kDeepSeekV3, "\"n_shared_experts\": 1", "\"n_shared_experts\": 8193")),
            "config.json:28: n_shared_experts: 8193 shared experts of 2048 are 16779264 wide, at "
            "most 16777216");
}

}  // namespace
}  // namespace ptdp
