#include "core/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/limits.h"
#include "core/yaml_io.h"

namespace ptdp {
namespace {

constexpr std::string_view kMoeFamilies = "mixtral, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss";

// Every size is bounded as the model YAML reader bounds the field it fills (core/limits.h): a
// layer count by kMaxLayers, every width, count and length by kMaxModelDimension. A deeper model
// than that once planned with negative times and memory (per-stage layer counts overflowed).
int Positive(const YamlMap& map, std::string_view key, int64_t max = kMaxModelDimension) {
  const int64_t value = map.PositiveInt(key);
  if (value > max) map.Fail(key, fmt::format("at most {}, got {}", max, value));
  return static_cast<int>(value);
}

// A count that may be zero; absent or null: `default_value`.
int Count(const YamlMap& map, std::string_view key, int default_value,
          int64_t max = kMaxModelDimension) {
  if (!map.Has(key)) return default_value;
  const int64_t value = map.Int(key);
  if (value < 0) map.Fail(key, fmt::format("must not be negative, got {}", value));
  if (value > max) map.Fail(key, fmt::format("at most {}, got {}", max, value));
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

// The name, depth, width, vocabulary and positions every config names alike (the training
// sequence at most kHfTrainingSeqLength).
ModelSpec ReadSizes(const YamlMap& map) {
  ModelSpec m;
  m.name = NameOf(map);
  m.num_layers = Positive(map, "num_hidden_layers", kMaxLayers);
  m.hidden_size = Positive(map, "hidden_size");
  m.vocab_size = Positive(map, "vocab_size");
  m.max_position_embeddings = Positive(map, "max_position_embeddings");
  m.seq_length = std::min(m.max_position_embeddings, kHfTrainingSeqLength);
  return m;
}

// What every family descended from Llama shares: depth, width, vocabulary, positions, a SiLU
// gate (SwiGLU), RMSNorm, RoPE, untied embeddings unless tie_word_embeddings, and no dropout
// but the attention_dropout the config names (Megatron-Bridge builds them with hidden_dropout
// 0).
ModelSpec ReadDecoder(const YamlMap& map) {
  ModelSpec m = ReadSizes(map);
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
  m.attention_dropout = map.NonNegativeNumber("attention_dropout", 0);
  m.hidden_dropout = 0;
  return m;
}

// Grouped-query attention: heads, key/value heads (default: as many as heads) and head_dim,
// which Qwen3 and GPT-OSS must give (their heads are not hidden_size / heads wide).
void ReadGroupedAttention(const YamlMap& map, ModelSpec& m, bool head_dim_required) {
  m.num_attention_heads = Positive(map, "num_attention_heads");
  m.num_query_groups =
      map.Has("num_key_value_heads") ? Positive(map, "num_key_value_heads") : m.num_attention_heads;
  CheckDivisible(map, "num_attention_heads", m.num_attention_heads, "num_key_value_heads",
                 m.num_query_groups);
  if (head_dim_required || map.Has("head_dim")) {
    m.kv_channels = Positive(map, "head_dim");
  } else {
    CheckDivisible(map, "hidden_size", m.hidden_size, "num_attention_heads", m.num_attention_heads);
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
}

// attention_bias covers the four attention projections, mlp_bias the MLP's; ptdp's
// add_bias_linear is one switch for both.
void ReadLlamaBiases(const YamlMap& map, ModelSpec& m) {
  const bool attention_bias = map.Bool("attention_bias", false);
  const bool mlp_bias = map.Bool("mlp_bias", false);
  if (attention_bias != mlp_bias) {
    map.Fail("attention_bias", "attention_bias and mlp_bias must agree",
             "ptdp models biases on all linear layers or on none");
  }
  m.add_bias_linear = attention_bias;
}

int ReadTopk(const YamlMap& map, std::string_view key, const ModelSpec& m,
             std::string_view experts_key) {
  const int topk = Positive(map, key);
  if (topk > m.num_experts) {
    map.Fail(key, fmt::format("{} ({}) exceeds {} ({})", key, topk, experts_key, m.num_experts));
  }
  return topk;
}

void CheckSomeMoeLayer(const YamlMap& map, std::string_view key, const ModelSpec& m) {
  if (m.NumMoeLayers() == 0) {
    map.Fail(key, fmt::format("leaves no MoE layer among the {} layers", m.num_layers));
  }
}

ModelSpec ReadLlama(const YamlMap& map) {
  ModelSpec m = ReadDecoder(map);
  ReadGroupedAttention(map, m, /*head_dim_required=*/false);
  m.ffn_hidden_size = Positive(map, "intermediate_size");
  ReadLlamaBiases(map, m);
  return m;
}

// Mistral's layers with every MLP replaced by num_local_experts experts of the same width.
ModelSpec ReadMixtral(const YamlMap& map) {
  ModelSpec m = ReadLlama(map);
  m.num_experts = Positive(map, "num_local_experts");
  m.moe_router_topk = ReadTopk(map, "num_experts_per_tok", m, "num_local_experts");
  m.moe_ffn_hidden_size = m.ffn_hidden_size;
  return m;
}

// Llama's layers plus an RMSNorm on each head's query and key (Qwen3Attention q_norm, k_norm).
ModelSpec ReadQwen3(const YamlMap& map) {
  ModelSpec m = ReadDecoder(map);
  ReadGroupedAttention(map, m, /*head_dim_required=*/true);
  m.ffn_hidden_size = Positive(map, "intermediate_size");
  ReadLlamaBiases(map, m);
  m.qk_layernorm = true;
  return m;
}

ModelSpec ReadQwen3Moe(const YamlMap& map) {
  ModelSpec m = ReadQwen3(map);
  m.num_experts = Positive(map, "num_experts");
  m.moe_router_topk = ReadTopk(map, "num_experts_per_tok", m, "num_experts");
  m.moe_ffn_hidden_size = Positive(map, "moe_intermediate_size");
  if (map.Has("mlp_only_layers")) {
    // Qwen keeps a dense MLP in any listed layer; ptdp (as Megatron) only in a first block.
    std::vector<int64_t> dense = map.IntList("mlp_only_layers");
    std::ranges::sort(dense);
    dense.erase(std::unique(dense.begin(), dense.end()), dense.end());
    for (size_t i = 0; i < dense.size(); ++i) {
      if (dense[i] != static_cast<int64_t>(i)) {
        map.Fail("mlp_only_layers",
                 fmt::format("dense layers [{}] are not the first layers 0..k-1",
                             fmt::join(dense, ", ")),
                 "ptdp models the dense layers first, then every n-th layer as MoE");
      }
    }
    m.moe_first_dense_layers = static_cast<int>(std::min<size_t>(dense.size(), m.num_layers));
    CheckSomeMoeLayer(map, "mlp_only_layers", m);
  }
  // Qwen makes layer i MoE when (i + 1) % step == 0, Megatron when i % freq == 0: the same
  // layers for step 1, one layer earlier for a larger step, accepted when that keeps the count.
  const int step = map.Has("decoder_sparse_step") ? Positive(map, "decoder_sparse_step") : 1;
  m.moe_layer_freq = step;
  int qwen_moe_layers = 0;
  for (int i = m.moe_first_dense_layers; i < m.num_layers; ++i) {
    qwen_moe_layers += (i + 1) % step == 0;
  }
  if (qwen_moe_layers != m.NumMoeLayers()) {
    map.Fail("decoder_sparse_step",
             fmt::format("decoder_sparse_step {} makes {} layers MoE ((layer + 1) % {} == 0), "
                         "ptdp's moe_layer_freq {} would make {} (layer % {} == 0)",
                         step, qwen_moe_layers, step, step, m.NumMoeLayers(), step),
             "ptdp models the dense layers first, then every n-th layer as MoE");
  }
  CheckSomeMoeLayer(map, "decoder_sparse_step", m);
  return m;
}

// Group-limited routing: n_group groups of experts, topk_group of them chosen per token
// (Megatron-Bridge maps them to moe_router_num_groups and moe_router_group_topk); one group, or
// all chosen, is no limit.
void ReadRouterGroups(const YamlMap& map, ModelSpec& m) {
  const int groups = Count(map, "n_group", 1), chosen = Count(map, "topk_group", groups);
  if (groups <= 1 || chosen >= groups) return;
  if (m.num_experts % groups != 0) {
    map.Fail("n_group", fmt::format("n_routed_experts ({}) is not divisible by n_group ({})",
                                    m.num_experts, groups));
  }
  if (chosen < 1) map.Fail("topk_group", "must be at least 1");
  m.moe_router_num_groups = groups;
  m.moe_router_group_topk = chosen;
}

// Multi-head latent attention and fine-grained experts with shared ones (HF's
// DeepseekV3DecoderLayer: layer i is MoE when i >= first_k_dense_replace and
// i % moe_layer_freq == 0, Megatron's rule).
ModelSpec ReadDeepSeek(const YamlMap& map, const YAML::Node& root) {
  ModelSpec m = ReadDecoder(map);
  m.num_attention_heads = Positive(map, "num_attention_heads");
  m.num_query_groups = m.num_attention_heads;  // MLA has no groups: num_key_value_heads unused
  m.multi_latent_attention = true;
  if (!root["q_lora_rank"].IsDefined()) {
    map.Fail("q_lora_rank", "missing required key", "null when queries are projected directly");
  }
  m.q_lora_rank = map.Has("q_lora_rank") ? Positive(map, "q_lora_rank") : 0;
  m.kv_lora_rank = Positive(map, "kv_lora_rank");
  m.qk_head_dim = Positive(map, "qk_nope_head_dim");
  m.qk_pos_emb_head_dim = Positive(map, "qk_rope_head_dim");
  m.v_head_dim = Positive(map, "v_head_dim");
  m.kv_channels = m.v_head_dim;  // as Megatron-Bridge's DeepSeek providers set it
  m.ffn_hidden_size = Positive(map, "intermediate_size");
  if (map.Bool("attention_bias", false)) {
    map.Fail("attention_bias", "biases on the attention projections only are not modelled",
             "ptdp models biases on all linear layers or on none");
  }
  m.add_bias_linear = false;

  m.num_experts = Positive(map, "n_routed_experts");
  m.moe_router_topk = ReadTopk(map, "num_experts_per_tok", m, "n_routed_experts");
  m.moe_ffn_hidden_size = Positive(map, "moe_intermediate_size");
  // The shared experts are one MLP n_shared_experts * moe_intermediate_size wide.
  // Bounded as the YAML reader's moe_shared_expert_intermediate_size.
  const int64_t shared = int64_t{Count(map, "n_shared_experts", 0)} * m.moe_ffn_hidden_size;
  if (shared > kMaxModelDimension) {
    map.Fail("n_shared_experts", fmt::format("{} shared experts of {} are {} wide, at most {}",
                                             shared / m.moe_ffn_hidden_size, m.moe_ffn_hidden_size,
                                             shared, kMaxModelDimension));
  }
  m.moe_shared_expert_intermediate_size = static_cast<int>(shared);
  m.moe_first_dense_layers = Count(map, "first_k_dense_replace", 0, kMaxLayers);
  m.moe_layer_freq = map.Has("moe_layer_freq") ? Positive(map, "moe_layer_freq") : 1;
  CheckSomeMoeLayer(map, "first_k_dense_replace", m);
  // DeepSeek's configuration code defaults seq_aux to true (a per-sequence balance loss).
  m.moe_router_load_balancing_type =
      map.Bool("seq_aux", true) ? MoeLoadBalancing::kSeqAuxLoss : MoeLoadBalancing::kAuxLoss;
  ReadRouterGroups(map, m);
  return m;
}

// Every MLP is num_local_experts experts of intermediate_size; biases everywhere.
ModelSpec ReadGptOss(const YamlMap& map) {
  ModelSpec m = ReadDecoder(map);
  ReadGroupedAttention(map, m, /*head_dim_required=*/true);
  m.ffn_hidden_size = Positive(map, "intermediate_size");
  m.num_experts = Positive(map, "num_local_experts");
  // OpenAI's name and transformers' alias; released configs carry both.
  const bool openai_key = map.Has("experts_per_token");
  m.moe_router_topk = ReadTopk(map, openai_key ? "experts_per_token" : "num_experts_per_tok", m,
                               "num_local_experts");
  if (openai_key && map.Has("num_experts_per_tok") &&
      Positive(map, "num_experts_per_tok") != m.moe_router_topk) {
    map.Fail("num_experts_per_tok",
             fmt::format("num_experts_per_tok ({}) and experts_per_token ({}) disagree",
                         Positive(map, "num_experts_per_tok"), m.moe_router_topk));
  }
  m.moe_ffn_hidden_size = m.ffn_hidden_size;
  // The experts carry biases whatever attention_bias says (GptOssExperts).
  if (!map.Bool("attention_bias", true)) {
    map.Fail("attention_bias", "attention without biases beside experts with biases",
             "ptdp models biases on all linear layers or on none");
  }
  m.add_bias_linear = true;
  return m;
}

// Nemotron-H (NemotronHForCausalLM; Megatron-Bridge's NemotronHBridge maps it to Megatron's
// hybrid model): one block per layer after hybrid_override_pattern, squared-ReLU MLPs and
// experts, RMSNorm, no position embedding, no biases.
ModelSpec ReadNemotronH(const YamlMap& map) {
  ModelSpec m = ReadSizes(map);
  m.hybrid_layer_pattern = map.String("hybrid_override_pattern");
  m.num_attention_heads = Positive(map, "num_attention_heads");
  m.num_query_groups =
      map.Has("num_key_value_heads") ? Positive(map, "num_key_value_heads") : m.num_attention_heads;
  CheckDivisible(map, "num_attention_heads", m.num_attention_heads, "num_key_value_heads",
                 m.num_query_groups);
  if (map.Has("head_dim")) {
    m.kv_channels = Positive(map, "head_dim");
  } else if (map.Has("attention_head_dim")) {
    m.kv_channels = Positive(map, "attention_head_dim");
  } else {
    CheckDivisible(map, "hidden_size", m.hidden_size, "num_attention_heads", m.num_attention_heads);
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  m.ffn_hidden_size = Positive(map, "intermediate_size");
  const std::string act = map.Has("mlp_hidden_act") ? map.String("mlp_hidden_act") : "relu2";
  if (act != "relu2") {
    map.Fail("mlp_hidden_act",
             fmt::format("unsupported activation \"{}\" for Nemotron-H (expected relu2)", act));
  }
  m.activation = Activation::kSquaredRelu;
  m.normalization = Normalization::kRmsNorm;
  m.position_embedding = PositionEmbedding::kNone;
  m.tied_embeddings = map.Bool("tie_word_embeddings", false);
  for (const char* key : {"use_bias", "attention_bias", "mlp_bias"}) {
    if (map.Bool(key, false)) {
      map.Fail(key, "biases in a Nemotron-H model are not modelled",
               "Megatron's Mamba mixer has none; ptdp models a hybrid model without biases");
    }
  }
  m.add_bias_linear = false;
  m.hidden_dropout = map.NonNegativeNumber("hidden_dropout", 0);
  m.attention_dropout = map.NonNegativeNumber("attention_dropout", 0);
  // The Mamba mixer (the Bridge's names first: n_groups, conv_kernel; then transformers').
  m.mamba_num_heads = Positive(map, "mamba_num_heads");
  m.mamba_head_dim = Positive(map, "mamba_head_dim");
  m.mamba_state_dim = Positive(map, "ssm_state_size");
  m.mamba_num_groups = map.Has("n_groups")         ? Positive(map, "n_groups")
                       : map.Has("mamba_n_groups") ? Positive(map, "mamba_n_groups")
                                                   : 8;
  m.mamba_conv_kernel = map.Has("conv_kernel")    ? Positive(map, "conv_kernel")
                        : map.Has("mamba_d_conv") ? Positive(map, "mamba_d_conv")
                                                  : 4;
  if (Count(map, "num_nextn_predict_layers", 0, kMaxLayers) > 0) {
    map.Fail("num_nextn_predict_layers",
             "multi-token prediction in a hybrid model is not modelled");
  }
  if (m.hybrid_layer_pattern.find('E') != std::string::npos) {
    m.num_experts = Positive(map, "n_routed_experts");
    m.moe_router_topk = ReadTopk(map, "num_experts_per_tok", m, "n_routed_experts");
    m.moe_ffn_hidden_size = Positive(map, "moe_intermediate_size");
    const int64_t shared = int64_t{Count(map, "moe_shared_expert_intermediate_size", 0)} *
                           Count(map, "n_shared_experts", 1);
    if (shared > kMaxModelDimension) {
      map.Fail(
          "moe_shared_expert_intermediate_size",
          fmt::format("shared experts {} wide in all, at most {}", shared, kMaxModelDimension));
    }
    m.moe_shared_expert_intermediate_size = static_cast<int>(shared);
    // NemotronHBridge: a sigmoid router with expert bias and a per-sequence balance loss.
    m.moe_router_load_balancing_type = MoeLoadBalancing::kSeqAuxLoss;
  }
  const std::string problem = HybridModelProblem(m);
  if (!problem.empty()) {
    const bool mixer = problem.starts_with("nheads") || problem.starts_with("mamba_");
    map.Fail(mixer ? "mamba_num_heads" : "hybrid_override_pattern", problem);
  }
  return m;
}

ModelSpec ReadGpt2(const YamlMap& map) {
  ModelSpec m;
  m.name = NameOf(map);
  m.num_layers = Positive(map, "n_layer", kMaxLayers);
  m.hidden_size = Positive(map, "n_embd");
  m.num_attention_heads = Positive(map, "n_head");
  CheckDivisible(map, "n_embd", m.hidden_size, "n_head", m.num_attention_heads);
  m.num_query_groups = m.num_attention_heads;
  m.kv_channels = m.hidden_size / m.num_attention_heads;
  m.ffn_hidden_size = map.Has("n_inner") ? Positive(map, "n_inner") : 4 * m.hidden_size;
  m.vocab_size = Positive(map, "vocab_size");
  m.max_position_embeddings =
      map.Has("n_positions") ? Positive(map, "n_positions") : Positive(map, "n_ctx");
  m.seq_length = std::min(m.max_position_embeddings, kHfTrainingSeqLength);
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
  const YAML::Node root = ParseYamlDocument(text, source);
  const YamlMap map(root, source, "", 1);
  const std::string supported =
      fmt::format("llama, mistral, qwen3, {}, nemotron_h, gpt2", kMoeFamilies);
  std::string type;
  if (map.Has("model_type")) {
    type = map.String("model_type");
  } else if (map.Has("n_layer")) {
    type = "gpt2";
  } else if (map.Has("num_hidden_layers")) {
    type = "llama";
  } else {
    map.Fail("model_type", "missing: cannot tell the model family",
             fmt::format("a Hugging Face config.json names its model_type ({})", supported));
  }
  if (type == "llama" || type == "mistral" || type == "qwen3") {
    for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"}) {
      if (map.Has(key)) {
        map.Fail(key, fmt::format("a mixture-of-experts key in a \"{}\" config", type),
                 fmt::format("the mixture-of-experts model types: {}", kMoeFamilies));
      }
    }
    return type == "qwen3" ? ReadQwen3(map) : ReadLlama(map);
  }
  if (type == "mixtral") return ReadMixtral(map);
  if (type == "qwen3_moe") return ReadQwen3Moe(map);
  if (type == "deepseek_v3" || type == "deepseek_v2") return ReadDeepSeek(map, root);
  if (type == "gpt_oss") return ReadGptOss(map);
  if (type == "nemotron_h") return ReadNemotronH(map);
  if (type == "gpt2") return ReadGpt2(map);
  if (type == "qwen2") {
    map.Fail("model_type", "unsupported model_type \"qwen2\"",
             "Qwen2 has biases on the query, key and value projections only, which ptdp does "
             "not model");
  }
  map.Fail("model_type", fmt::format("unsupported model_type \"{}\"", type),
           fmt::format("supported: {}", supported));
}

}  // namespace ptdp
