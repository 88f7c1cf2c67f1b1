#include "core/hf_config.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"
#include "core/yaml_io.h"

namespace ptdp {
namespace {

int Positive(const YamlMap& map, std::string_view key) {
  const int64_t value = map.PositiveInt(key);
  if (value > 1'000'000'000) map.Fail(key, fmt::format("{} is implausibly large", value));
  return static_cast<int>(value);
}

std::string NameOf(const YamlMap& map) {
  if (auto name = map.OptionalString("_name_or_path"); name && !name->empty()) return *name;
  std::filesystem::path path(map.source());
  // ".../Llama-2-7b-hf/config.json" is named after its folder.
  if (path.stem() == "config" && path.has_parent_path()) return path.parent_path().filename();
  const std::string stem = path.stem().string();
  return stem.empty() || stem[0] == '<' ? "hf-model" : stem;
}

void CheckDivisible(const YamlMap& map, std::string_view key, int value, std::string_view by_key,
                    int by) {
  if (value % by != 0) {
    map.Fail(key, fmt::format("{} ({}) must be a multiple of {} ({})", key, value, by_key, by));
  }
}

ModelSpec ReadLlama(const YamlMap& map) {
  ModelSpec m;
  m.name = NameOf(map);
  m.num_layers = Positive(map, "num_hidden_layers");
  m.hidden_size = Positive(map, "hidden_size");
  m.num_attention_heads = Positive(map, "num_attention_heads");
  m.num_query_groups =
      map.Has("num_key_value_heads") ? Positive(map, "num_key_value_heads") : m.num_attention_heads;
  CheckDivisible(map, "num_attention_heads", m.num_attention_heads, "num_key_value_heads",
                 m.num_query_groups);
  if (map.Has("head_dim")) {
    m.kv_channels = Positive(map, "head_dim");
  } else {
    CheckDivisible(map, "hidden_size", m.hidden_size, "num_attention_heads", m.num_attention_heads);
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  m.ffn_hidden_size = Positive(map, "intermediate_size");
  m.vocab_size = Positive(map, "vocab_size");
  m.max_position_embeddings = Positive(map, "max_position_embeddings");
  m.seq_length = m.max_position_embeddings;
  const std::string act = map.Has("hidden_act") ? map.String("hidden_act") : "silu";
  if (act != "silu" && act != "swish") {
    map.Fail(
        "hidden_act",
        fmt::format("unsupported activation \"{}\" for a Llama-style model (expected silu)", act));
  }
  m.activation = Activation::kSwiglu;
  m.normalization = Normalization::kRmsNorm;
  m.position_embedding = PositionEmbedding::kRope;
  m.tied_embeddings = map.Bool("tie_word_embeddings", false);
  const bool attention_bias = map.Bool("attention_bias", false);
  const bool mlp_bias = map.Bool("mlp_bias", false);
  if (attention_bias != mlp_bias) {
    map.Fail("attention_bias", "attention_bias and mlp_bias must agree",
             "ptdp models biases on all linear layers or on none");
  }
  m.add_bias_linear = attention_bias;
  // Llama-style configs name the attention dropout (0.0 in Meta's and Mistral's) and no
  // residual dropout; Megatron-Bridge builds them with hidden_dropout 0.
  m.attention_dropout =
      map.Has("attention_dropout") ? map.NonNegativeNumber("attention_dropout") : 0;
  m.hidden_dropout = 0;
  return m;
}

ModelSpec ReadGpt2(const YamlMap& map) {
  ModelSpec m;
  m.name = NameOf(map);
  m.num_layers = Positive(map, "n_layer");
  m.hidden_size = Positive(map, "n_embd");
  m.num_attention_heads = Positive(map, "n_head");
  CheckDivisible(map, "n_embd", m.hidden_size, "n_head", m.num_attention_heads);
  m.num_query_groups = m.num_attention_heads;
  m.kv_channels = m.hidden_size / m.num_attention_heads;
  m.ffn_hidden_size = map.Has("n_inner") ? Positive(map, "n_inner") : 4 * m.hidden_size;
  m.vocab_size = Positive(map, "vocab_size");
  m.max_position_embeddings =
      map.Has("n_positions") ? Positive(map, "n_positions") : Positive(map, "n_ctx");
  m.seq_length = m.max_position_embeddings;
  const std::string act =
      map.Has("activation_function") ? map.String("activation_function") : "gelu_new";
  if (act.rfind("gelu", 0) != 0) {
    map.Fail("activation_function",
             fmt::format("unsupported activation \"{}\" for a GPT-2-style model (expected a GeLU)",
                         act));
  }
  m.activation = Activation::kGelu;
  m.normalization = Normalization::kLayerNorm;
  m.position_embedding = PositionEmbedding::kLearned;
  m.tied_embeddings = map.Bool("tie_word_embeddings", true);
  m.add_bias_linear = true;
  m.hidden_dropout = map.Has("resid_pdrop") ? map.NonNegativeNumber("resid_pdrop") : 0.1;
  m.attention_dropout = map.Has("attn_pdrop") ? map.NonNegativeNumber("attn_pdrop") : 0.1;
  return m;
}

}  // namespace

ModelSpec ParseHfConfig(std::string_view text, const std::string& source) {
  const YamlMap map(ParseYamlDocument(text, source), source, "", 1);
  std::string type;
  if (map.Has("model_type")) {
    type = map.String("model_type");
  } else if (map.Has("n_layer")) {
    type = "gpt2";
  } else if (map.Has("num_hidden_layers")) {
    type = "llama";
  } else {
    map.Fail("model_type", "missing: cannot tell the model family",
             "a Hugging Face config.json names its model_type (llama, mistral or gpt2)");
  }
  if (map.Has("num_local_experts") || map.Has("num_experts")) {
    map.Fail(map.Has("num_local_experts") ? "num_local_experts" : "num_experts",
             "mixture-of-experts models are not supported");
  }
  if (type == "llama" || type == "mistral") return ReadLlama(map);
  if (type == "gpt2") return ReadGpt2(map);
  map.Fail("model_type", fmt::format("unsupported model_type \"{}\"", type),
           "supported: llama, mistral, gpt2");
}

}  // namespace ptdp
