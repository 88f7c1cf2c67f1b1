#include "core/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/limits.h"

namespace ptdp {

ModelSpec ClassicGpt(std::string name, int num_layers, int hidden_size, int num_attention_heads,
                     int vocab_size, int seq_length) {
  // The callers' readers bound the sizes (core/limits.h): a hidden size of 10^9 from a vTrain
  // file once overflowed 4 x hidden below.
  PTDP_CHECK(num_layers >= 1 && num_layers <= kMaxLayers && hidden_size >= 1 &&
             hidden_size <= kMaxModelDimension && num_attention_heads >= 1 &&
             num_attention_heads <= kMaxModelDimension && seq_length >= 1 &&
             seq_length <= kMaxModelDimension);
  ModelSpec m;
  m.name = std::move(name);
  m.num_layers = num_layers;
  m.hidden_size = hidden_size;
  m.num_attention_heads = num_attention_heads;
  m.num_query_groups = num_attention_heads;
  m.kv_channels = hidden_size / num_attention_heads;
  m.ffn_hidden_size = 4 * hidden_size;
  m.vocab_size = vocab_size;
  m.seq_length = seq_length;
  m.max_position_embeddings = seq_length;
  return m;  // the remaining fields' defaults are GPT's: GeLU, LayerNorm, learned, tied, biases
}

int DefaultFfnHiddenSize(int hidden_size, Activation activation) {
  // Computed in 64 bits and clamped: a hidden size beyond ptdp's limits (core/limits.h) reaches
  // here before the readers report it (found by fuzzing).
  const int64_t ffn = activation == Activation::kSwiglu
                          // Megatron: int((4 * hidden_size * 2 / 3) / 64) * 64, in floating point.
                          ? static_cast<int64_t>((4.0 * hidden_size * 2.0 / 3.0) / 64.0) * 64
                          : int64_t{4} * hidden_size;
  return static_cast<int>(
      std::clamp<int64_t>(ffn, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
}

int64_t PaddedVocabSize(const ModelSpec& model, int tensor_parallel) {
  PTDP_CHECK(tensor_parallel > 0 && model.make_vocab_size_divisible_by > 0);
  const int64_t multiple = int64_t{model.make_vocab_size_divisible_by} * tensor_parallel;
  return (model.vocab_size + multiple - 1) / multiple * multiple;
}

int ModelSpec::NumMoeLayers() const {
  if (hybrid()) {
    return static_cast<int>(
        std::count(hybrid_layer_pattern.begin(), hybrid_layer_pattern.end(), 'E'));
  }
  if (num_experts <= 0 || moe_first_dense_layers >= num_layers) return 0;
  // Multiples of moe_layer_freq in [moe_first_dense_layers, num_layers).
  const int freq = std::max(1, moe_layer_freq);
  const auto below = [&](int x) { return (x + freq - 1) / freq; };  // multiples in [0, x)
  return below(num_layers) - below(moe_first_dense_layers);
}

std::optional<LayerKind> HybridSymbolKind(char symbol) {
  switch (symbol) {
    case 'M':
      return LayerKind::kMamba;
    case '*':
      return LayerKind::kAttention;
    case '-':
      return LayerKind::kMlp;
    case 'E':
      return LayerKind::kMoe;
    default:
      return std::nullopt;
  }
}

LayerKind ModelSpec::KindOfLayer(int layer) const {
  if (hybrid()) {
    PTDP_CHECK(layer >= 0 && layer < static_cast<int>(hybrid_layer_pattern.size()));
    const std::optional<LayerKind> kind = HybridSymbolKind(hybrid_layer_pattern[layer]);
    PTDP_CHECK(kind.has_value());
    return *kind;
  }
  return IsMoeLayer(layer) ? LayerKind::kMoeTransformer : LayerKind::kTransformer;
}

int ModelSpec::CountLayers(LayerKind kind, int begin, int end) const {
  int n = 0;
  for (int i = begin; i < end; ++i) n += KindOfLayer(i) == kind;
  return n;
}

std::string HybridModelProblem(const ModelSpec& m) {
  if (!m.hybrid()) return "";
  const std::string& pattern = m.hybrid_layer_pattern;
  if (static_cast<int64_t>(pattern.size()) != m.num_layers) {
    return fmt::format("The hybrid override pattern is the wrong length: got {}, expected {}",
                       pattern.size(), m.num_layers);
  }
  bool mamba = false, experts = false;
  for (char c : pattern) {
    if (c == 'G' || c == 'D' || c == '+') {
      return fmt::format(
          "'{}' layers ({}) are not modelled: ptdp models M (Mamba), * (attention), - (MLP) and E "
          "(MoE)",
          c,
          c == 'G'   ? "gated delta net"
          : c == 'D' ? "DeepSeek sparse attention"
                     : "MLA");
    }
    if (c == '|' || c == '/') {
      return fmt::format("'{}' in the pattern ({}) is not read here: give the layers only", c,
                         c == '|' ? "pipeline stage boundaries" : "multi-token prediction layers");
    }
    if (!HybridSymbolKind(c)) {
      return fmt::format("In hybrid override pattern, '{}' is not one of {{'M', '*', '-', 'E'}}",
                         c);
    }
    mamba |= c == 'M';
    experts |= c == 'E';
  }
  if (experts && !m.moe()) {
    return "the pattern's MoE layers ('E') need num_experts (--num-experts)";
  }
  if (m.moe() && (m.moe_layer_freq != 1 || m.moe_first_dense_layers != 0)) {
    return "in a hybrid model the pattern places the MoE layers ('E'): leave moe_layer_freq and "
           "moe_first_dense_layers out";
  }
  if (m.mtp_num_layers > 0) return "multi-token prediction in a hybrid model is not modelled";
  if (m.multi_latent_attention) return "multi-latent attention in a hybrid model is not modelled";
  if (mamba) {
    for (auto [name, value] : {std::pair{"mamba_num_heads", m.mamba_num_heads},
                               {"mamba_head_dim", m.mamba_head_dim},
                               {"mamba_state_dim", m.mamba_state_dim},
                               {"mamba_num_groups", m.mamba_num_groups},
                               {"mamba_conv_kernel", m.mamba_conv_kernel}}) {
      if (value <= 0) return fmt::format("{} must be positive, got {}", name, value);
    }
    if (m.mamba_num_heads % m.mamba_num_groups != 0) {
      return fmt::format("nheads must be evenly divisible by ngroups ({} heads, {} groups)",
                         m.mamba_num_heads, m.mamba_num_groups);
    }
  }
  return "";
}

std::string HybridPatternFromRatios(int num_layers, double attention_ratio, double mlp_ratio) {
  PTDP_CHECK(num_layers > 0 && attention_ratio >= 0 && mlp_ratio >= 0 &&
             attention_ratio + mlp_ratio <= 1);
  // Python's round() rounds halves to even, as std::nearbyint does in the default mode.
  const int attention = static_cast<int>(std::nearbyint(num_layers * attention_ratio));
  int mamba = num_layers - attention;
  const double section = static_cast<double>(mamba) / (attention + 1);
  std::string pattern(num_layers, 'M');
  double x = section;
  for (int l = 0; l < num_layers; ++l) {
    if (x < 0.5) {
      pattern[l] = '*';
      x += section;
    } else {
      x -= 1;
    }
  }
  const int mlp = static_cast<int>(std::nearbyint(num_layers * mlp_ratio));
  if (mlp > 0) {
    mamba -= mlp;
    const double ratio = static_cast<double>(mamba) / mlp;
    x = ratio;
    for (int l = 0; l < num_layers; ++l) {
      if (pattern[l] != 'M') continue;
      if (x < 0.5) {
        pattern[l] = '-';
        x += ratio;
      } else {
        x -= 1;
      }
    }
  }
  return pattern;
}

int64_t AttentionParameters(const ModelSpec& m) {
  const int64_t h = m.hidden_size, a = m.num_attention_heads;
  const int64_t bias = m.add_bias_linear ? 1 : 0;
  const int64_t norm = m.normalization == Normalization::kLayerNorm ? 2 : 1;  // per element
  if (m.multi_latent_attention) {
    // megatron/core/transformer/multi_latent_attention.py MLASelfAttention: q down / up (or one
    // q projection), kv down to the latent plus the shared rotary key, kv up, the latents' norms,
    // the output projection.
    const int64_t qk = m.qk_head_dim + m.qk_pos_emb_head_dim;
    const int64_t q = m.q_lora_rank > 0 ? h * m.q_lora_rank + int64_t{m.q_lora_rank} * a * qk +
                                              norm * m.q_lora_rank
                                        : h * a * qk;
    const int64_t kv = h * (int64_t{m.kv_lora_rank} + m.qk_pos_emb_head_dim) +
                       int64_t{m.kv_lora_rank} * a * (m.qk_head_dim + m.v_head_dim) +
                       norm * m.kv_lora_rank;
    return q + kv + a * m.v_head_dim * h + bias * h;
  }
  const int64_t query_width = a * m.kv_channels;
  const int64_t kv_width = int64_t{m.num_query_groups} * m.kv_channels;
  const int64_t qkv_out = query_width + 2 * kv_width;
  const int64_t qk_norms = m.qk_layernorm ? 2 * norm * m.kv_channels : 0;
  return h * qkv_out + bias * qkv_out + query_width * h + bias * h + qk_norms;
}

int64_t MlpParameters(const ModelSpec& m, int64_t width) {
  // SwiGLU's first linear produces both the gate and the up projection.
  const int64_t h = m.hidden_size, bias = m.add_bias_linear ? 1 : 0;
  const int64_t fc1_out = width * (m.activation == Activation::kSwiglu ? 2 : 1);
  return h * fc1_out + bias * fc1_out + width * h + bias * h;
}

int64_t MambaMixerParameters(const ModelSpec& m) {
  const int64_t h = m.hidden_size, heads = m.mamba_num_heads, inner = m.MambaInnerSize();
  const int64_t bc = 2 * int64_t{m.mamba_num_groups} * m.mamba_state_dim;  // B and C
  const int64_t conv_channels = inner + bc;
  return h * (2 * inner + bc + heads)                 // in_proj: z, x, B, C, dt
         + conv_channels * (m.mamba_conv_kernel + 1)  // conv1d weight and bias
         + 3 * heads                                  // dt_bias, A_log, D
         + inner                                      // gated RMSNorm
         + inner * h;                                 // out_proj
}

int64_t LayerKindParameters(const ModelSpec& m, LayerKind kind, bool active) {
  const int64_t h = m.hidden_size;
  const int64_t norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;
  const auto experts = [&] {
    // The router (h x E, no bias), the routed experts (all, or the top-k a token uses), the
    // shared experts.
    const int64_t expert = MlpParameters(m, m.moe_ffn_hidden_size);
    const int64_t shared = m.moe_shared_expert_intermediate_size > 0
                               ? MlpParameters(m, m.moe_shared_expert_intermediate_size)
                               : 0;
    return h * m.num_experts + shared +
           int64_t{active ? m.moe_router_topk : m.num_experts} * expert;
  };
  switch (kind) {
    case LayerKind::kTransformer:
      return AttentionParameters(m) + MlpParameters(m, m.ffn_hidden_size) + 2 * norm;
    case LayerKind::kMoeTransformer:
      return AttentionParameters(m) + 2 * norm + experts();
    case LayerKind::kMamba:
      return MambaMixerParameters(m) + norm;
    case LayerKind::kAttention:
      return AttentionParameters(m) + norm;
    case LayerKind::kMlp:
      return MlpParameters(m, m.ffn_hidden_size) + norm;
    case LayerKind::kMoe:
      return experts() + norm;
  }
  return 0;
}

ParameterCounts CountParameters(const ModelSpec& m, int tensor_parallel) {
  const int64_t h = m.hidden_size;
  const int64_t norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;

  ParameterCounts c;
  const int64_t vocab = PaddedVocabSize(m, tensor_parallel);
  c.word_embedding = vocab * h;
  c.position_embedding = m.position_embedding == PositionEmbedding::kLearned
                             ? int64_t{m.max_position_embeddings} * h
                             : 0;
  c.per_layer = LayerKindParameters(m, LayerKind::kTransformer);
  const int moe_layers = m.NumMoeLayers();
  if (moe_layers > 0) {
    const LayerKind moe_kind = m.hybrid() ? LayerKind::kMoe : LayerKind::kMoeTransformer;
    c.per_moe_layer = LayerKindParameters(m, moe_kind);
    c.per_moe_layer_active = LayerKindParameters(m, moe_kind, /*active=*/true);
  }
  if (m.hybrid()) {
    c.per_mamba_layer = m.mamba_num_heads > 0 ? LayerKindParameters(m, LayerKind::kMamba) : 0;
    for (int i = 0; i < m.num_layers; ++i) {
      c.transformer += LayerKindParameters(m, m.KindOfLayer(i));
    }
  } else {
    c.transformer = c.per_layer * (m.num_layers - moe_layers) + c.per_moe_layer * moe_layers;
  }
  c.final_norm = norm;
  c.output_layer = m.tied_embeddings ? 0 : vocab * h;
  // Megatron's MultiTokenPredictionLayer: enorm, hnorm, eh_proj (2h -> h), the transformer
  // layer, the final norm.
  const bool last_moe = m.IsMoeLayer(m.num_layers - 1);
  const int64_t mtp_layer = (last_moe ? c.per_moe_layer : c.per_layer) + 2 * h * h + 3 * norm;
  c.mtp = int64_t{m.mtp_num_layers} * mtp_layer;
  c.total = c.word_embedding + c.position_embedding + c.transformer + c.final_norm +
            c.output_layer + c.mtp;
  c.active =
      c.total - int64_t{moe_layers} * (c.per_moe_layer - c.per_moe_layer_active) -
      (last_moe ? int64_t{m.mtp_num_layers} * (c.per_moe_layer - c.per_moe_layer_active) : 0);
  return c;
}

double NarayananEq2Parameters(const ModelSpec& m) {
  const double l = m.num_layers, h = m.hidden_size;
  const double v = static_cast<double>(PaddedVocabSize(m)), s = m.max_position_embeddings;
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h));
}

}  // namespace ptdp
