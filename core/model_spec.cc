#include "core/model_spec.h"

#include "core/error.h"

namespace ptdp {

ModelSpec ClassicGpt(std::string name, int num_layers, int hidden_size, int num_attention_heads,
                     int vocab_size, int seq_length) {
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
  if (activation == Activation::kSwiglu) {
    // Megatron: int((4 * hidden_size * 2 / 3) / 64) * 64, computed in floating point.
    return static_cast<int>((4.0 * hidden_size * 2.0 / 3.0) / 64.0) * 64;
  }
  return 4 * hidden_size;
}

int64_t PaddedVocabSize(const ModelSpec& model, int tensor_parallel) {
  PTDP_CHECK(tensor_parallel > 0 && model.make_vocab_size_divisible_by > 0);
  const int64_t multiple = int64_t{model.make_vocab_size_divisible_by} * tensor_parallel;
  return (model.vocab_size + multiple - 1) / multiple * multiple;
}

int ModelSpec::NumMoeLayers() const {
  int n = 0;
  for (int i = 0; i < num_layers; ++i) n += IsMoeLayer(i);
  return n;
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

ParameterCounts CountParameters(const ModelSpec& m, int tensor_parallel) {
  const int64_t h = m.hidden_size;
  const int64_t norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;
  const int64_t attention = AttentionParameters(m);
  const int64_t mlp = MlpParameters(m, m.ffn_hidden_size);

  ParameterCounts c;
  const int64_t vocab = PaddedVocabSize(m, tensor_parallel);
  c.word_embedding = vocab * h;
  c.position_embedding = m.position_embedding == PositionEmbedding::kLearned
                             ? int64_t{m.max_position_embeddings} * h
                             : 0;
  c.per_layer = attention + mlp + 2 * norm;
  const int moe_layers = m.NumMoeLayers();
  if (moe_layers > 0) {
    // The router (h x E, no bias), the experts, the shared experts.
    const int64_t expert = MlpParameters(m, m.moe_ffn_hidden_size);
    const int64_t shared = m.moe_shared_expert_intermediate_size > 0
                               ? MlpParameters(m, m.moe_shared_expert_intermediate_size)
                               : 0;
    const int64_t common = attention + 2 * norm + h * m.num_experts + shared;
    c.per_moe_layer = common + int64_t{m.num_experts} * expert;
    c.per_moe_layer_active = common + int64_t{m.moe_router_topk} * expert;
  }
  c.transformer = c.per_layer * (m.num_layers - moe_layers) + c.per_moe_layer * moe_layers;
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
