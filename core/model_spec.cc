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

ParameterCounts CountParameters(const ModelSpec& m, int tensor_parallel) {
  const int64_t h = m.hidden_size;
  const int64_t query_width = int64_t{m.num_attention_heads} * m.kv_channels;
  const int64_t kv_width = int64_t{m.num_query_groups} * m.kv_channels;
  const int64_t qkv_out = query_width + 2 * kv_width;
  // SwiGLU's first linear produces both the gate and the up projection.
  const int64_t fc1_out =
      int64_t{m.ffn_hidden_size} * (m.activation == Activation::kSwiglu ? 2 : 1);
  const int64_t norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;
  const int64_t bias = m.add_bias_linear ? 1 : 0;

  const int64_t attention = h * qkv_out + bias * qkv_out + query_width * h + bias * h;
  const int64_t mlp = h * fc1_out + bias * fc1_out + int64_t{m.ffn_hidden_size} * h + bias * h;

  ParameterCounts c;
  const int64_t vocab = PaddedVocabSize(m, tensor_parallel);
  c.word_embedding = vocab * h;
  c.position_embedding = m.position_embedding == PositionEmbedding::kLearned
                             ? int64_t{m.max_position_embeddings} * h
                             : 0;
  c.per_layer = attention + mlp + 2 * norm;
  c.transformer = c.per_layer * m.num_layers;
  c.final_norm = norm;
  c.output_layer = m.tied_embeddings ? 0 : vocab * h;
  c.total = c.word_embedding + c.position_embedding + c.transformer + c.final_norm + c.output_layer;
  return c;
}

double NarayananEq2Parameters(const ModelSpec& m) {
  const double l = m.num_layers, h = m.hidden_size;
  const double v = static_cast<double>(PaddedVocabSize(m)), s = m.max_position_embeddings;
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h));
}

}  // namespace ptdp
