// Import of a Hugging Face transformers config.json as a ModelSpec.
#pragma once

#include <string>
#include <string_view>

#include "core/model_spec.h"

namespace ptdp {

// Two families are understood, chosen by "model_type" (or, without it, by the key names):
//  - Llama style (llama, mistral): num_hidden_layers, hidden_size, num_attention_heads,
//    num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings, hidden_act
//    "silu" (SwiGLU), RMSNorm, RoPE, tie_word_embeddings (default false), attention_bias and
//    mlp_bias (default false), head_dim.
//  - GPT-2 style (gpt2): n_layer, n_embd, n_head, n_inner (default 4h), vocab_size, n_positions,
//    a GeLU activation_function, LayerNorm, learned positions, biases, tied embeddings.
// The training sequence length is taken as max_position_embeddings (n_positions); callers may
// override it. Keys that do not describe the architecture are ignored; missing or mistyped
// ones are an InputError naming the file, line and key.
ModelSpec ParseHfConfig(std::string_view text, const std::string& source = "<string>");

}  // namespace ptdp
