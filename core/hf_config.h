// Import of a Hugging Face transformers config.json as a ModelSpec.
#pragma once

#include <string>
#include <string_view>

#include "core/model_spec.h"

namespace ptdp {

// The family is chosen by "model_type" (or, without it, by the key names: Llama or GPT-2):
//  - Llama style (llama, mistral): num_hidden_layers, hidden_size, num_attention_heads,
//    num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings, hidden_act
//    "silu" (SwiGLU), RMSNorm, RoPE, tie_word_embeddings (default false), attention_bias and
//    mlp_bias (default false, and they must agree), head_dim, attention_dropout (default 0;
//    hidden dropout 0). The families below share these keys unless they say otherwise.
//  - qwen3: Llama's keys, head_dim required, and a norm on each head's query and key
//    (qk_layernorm).
//  - mixtral: Llama's keys plus num_local_experts and num_experts_per_tok; every layer is MoE
//    and each expert is intermediate_size wide (the dense width is the same).
//  - qwen3_moe: Qwen3's keys plus num_experts, num_experts_per_tok, moe_intermediate_size
//    (intermediate_size is the dense width), mlp_only_layers (dense layers; only a prefix
//    0..k-1 is accepted, as moe_first_dense_layers k) and decoder_sparse_step (moe_layer_freq;
//    Qwen's MoE layers are those with (layer + 1) % step == 0, Megatron's layer % step == 0:
//    a step above 1 is accepted, one layer earlier, when it gives the same number of MoE
//    layers). norm_topk_prob is ignored.
//  - deepseek_v3, deepseek_v2: multi-latent attention from q_lora_rank (required; null: queries
//    projected directly), kv_lora_rank, qk_nope_head_dim (qk_head_dim), qk_rope_head_dim
//    (qk_pos_emb_head_dim), v_head_dim (also kv_channels); num_key_value_heads is ignored (one
//    query group per head). Experts: n_routed_experts, num_experts_per_tok,
//    moe_intermediate_size, n_shared_experts (one shared MLP n_shared_experts *
//    moe_intermediate_size wide), first_k_dense_replace, moe_layer_freq; intermediate_size is
//    the dense layers' width. seq_aux (default true) picks the seq_aux_loss balancing.
//    Not modelled: the multi-token-prediction layers (num_nextn_predict_layers), group-limited
//    routing (n_group, topk_group), the expert-bias balancing (topk_method noaux_tc).
//  - gpt_oss: num_local_experts, experts_per_token (or num_experts_per_tok), intermediate_size
//    (the experts' and the dense width), head_dim (required), attention_bias (must be true:
//    the experts always have biases, so add_bias_linear is true). sliding_window and
//    layer_types are ignored: every layer is simulated with full causal attention, which
//    overstates the attention work of the sliding-window half; attention sinks are left out.
//  - nemotron_h (Nemotron-H, Nemotron-3): a hybrid model (ModelSpec::hybrid_layer_pattern) from
//    hybrid_override_pattern (M Mamba, * attention, - MLP, E MoE; num_hidden_layers long),
//    num_attention_heads, num_key_value_heads, head_dim (or attention_head_dim), intermediate_size
//    (the MLP layers' width), mlp_hidden_act relu2 (squared ReLU), the Mamba mixer's
//    mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups (or mamba_n_groups, default 8),
//    conv_kernel (or mamba_d_conv, default 4); with E layers n_routed_experts,
//    num_experts_per_tok, moe_intermediate_size and moe_shared_expert_intermediate_size (times
//    n_shared_experts, default 1), routed with seq_aux_loss as Megatron-Bridge sets it. RMSNorm,
//    no position embedding, no biases (use_bias, attention_bias, mlp_bias must be false),
//    untied unless tie_word_embeddings; multi-token prediction (num_nextn_predict_layers) is
//    refused; the sigmoid router and its expert bias are not modelled (router cost as softmax).
//  - GPT-2 style (gpt2): n_layer, n_embd, n_head, n_inner (default 4h), vocab_size, n_positions,
//    a GeLU activation_function, LayerNorm, learned positions, biases, tied embeddings.
// MoE routers balance with aux_loss unless stated; the expert capacity is dropless. Sliding
// windows (Mistral, Qwen) and RoPE scaling are ignored everywhere. Qwen2 (biases on the query,
// key and value projections only) is not understood.
// The training sequence length is the smaller of max_position_embeddings (n_positions) and
// kHfTrainingSeqLength; callers may override it. Keys that do not describe the architecture are
// ignored; missing or mistyped ones are an InputError naming the file, line and key.
ModelSpec ParseHfConfig(std::string_view text, const std::string& source = "<string>");

// A config.json gives the longest context the model serves (131,072 for Llama 3.1 8B), not the
// length it was pretrained at: planning that would train every sequence at 128k tokens (context
// parallelism 8, minutes per step). Pretraining runs at 4,096 or 8,192: the Megatron-Bridge
// recipes that ptdp replays pretrain DeepSeek-V3, Qwen3 and GPT-OSS at 4,096, Llama 3 and
// Nemotron-3-Nano at 8,192 (results/validation/megatron-bridge/h100_pretrain.csv), and Llama 2
// pretrained at 4,096 (Touvron et al. 2023). The smaller is the default, as the MoE presets
// (models/) have it; `--seq-length` says otherwise.
inline constexpr int kHfTrainingSeqLength = 4096;

}  // namespace ptdp
