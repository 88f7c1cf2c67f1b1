// ModelSpec: the architecture of a GPT-style decoder, named as Megatron-LM names its arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/enum_names.h"

namespace ptdp {

// --squared-relu: relu(x)^2, not gated (Nemotron-H's MLPs and experts).
enum class Activation { kGelu, kSwiglu, kSquaredRelu };
enum class Normalization { kLayerNorm, kRmsNorm };
// --position-embedding-type: learned_absolute, rope, or none (Nemotron-H: the Mamba layers carry
// the positions).
enum class PositionEmbedding { kLearned, kRope, kNone };
// --moe-router-load-balancing-type: how the router is kept balanced (its cost is the router's
// small extra work; the balance itself is CostOptions::moe_load_imbalance).
enum class MoeLoadBalancing { kAuxLoss, kSeqAuxLoss, kSinkhorn, kNone };

inline constexpr EnumName<Activation> kActivationNames[] = {
    {"gelu", Activation::kGelu},
    {"swiglu", Activation::kSwiglu},
    {"squared_relu", Activation::kSquaredRelu}};
inline constexpr EnumName<Normalization> kNormalizationNames[] = {
    {"layernorm", Normalization::kLayerNorm}, {"rmsnorm", Normalization::kRmsNorm}};
inline constexpr EnumName<PositionEmbedding> kPositionEmbeddingNames[] = {
    {"learned", PositionEmbedding::kLearned},
    {"rope", PositionEmbedding::kRope},
    {"none", PositionEmbedding::kNone}};

inline constexpr EnumName<MoeLoadBalancing> kMoeLoadBalancingNames[] = {
    {"aux_loss", MoeLoadBalancing::kAuxLoss},
    {"seq_aux_loss", MoeLoadBalancing::kSeqAuxLoss},
    {"sinkhorn", MoeLoadBalancing::kSinkhorn},
    {"none", MoeLoadBalancing::kNone}};

inline std::string_view Name(Activation a) { return NameOf<Activation>(kActivationNames, a); }
inline std::string_view Name(Normalization n) {
  return NameOf<Normalization>(kNormalizationNames, n);
}
inline std::string_view Name(PositionEmbedding p) {
  return NameOf<PositionEmbedding>(kPositionEmbeddingNames, p);
}
inline std::string_view Name(MoeLoadBalancing b) {
  return NameOf<MoeLoadBalancing>(kMoeLoadBalancingNames, b);
}

// What one layer of the decoder stack is. A transformer has one kind of layer, attention and
// MLP (the MLP a MoE one in a MoE model's MoE layers). A hybrid model (Megatron's MambaModel,
// --hybrid-override-pattern) has one character per layer, each layer one block with its norm:
// 'M' a Mamba-2 mixer, '*' self-attention, '-' a dense MLP, 'E' a MoE MLP
// (megatron/core/ssm/mamba_hybrid_layer_allocation.py Symbols; mamba_layer_specs.py).
enum class LayerKind : uint8_t {
  kTransformer,     // attention + dense MLP
  kMoeTransformer,  // attention + MoE MLP
  kMamba,           // 'M'
  kAttention,       // '*'
  kMlp,             // '-'
  kMoe,             // 'E'
};
inline constexpr int kNumLayerKinds = 6;
inline constexpr EnumName<LayerKind> kLayerKindNames[] = {
    {"transformer", LayerKind::kTransformer},
    {"moe transformer", LayerKind::kMoeTransformer},
    {"mamba", LayerKind::kMamba},
    {"attention", LayerKind::kAttention},
    {"mlp", LayerKind::kMlp},
    {"moe", LayerKind::kMoe}};
inline std::string_view Name(LayerKind k) { return NameOf<LayerKind>(kLayerKindNames, k); }
// What each kind holds.
constexpr bool HasAttention(LayerKind k) {
  return k == LayerKind::kTransformer || k == LayerKind::kMoeTransformer ||
         k == LayerKind::kAttention;
}
constexpr bool HasDenseMlp(LayerKind k) {
  return k == LayerKind::kTransformer || k == LayerKind::kMlp;
}
constexpr bool HasExperts(LayerKind k) {
  return k == LayerKind::kMoeTransformer || k == LayerKind::kMoe;
}

// One decoder-only transformer. Every field is resolved (no "default" markers): parsers fill
// Megatron's defaults, so two specs that describe the same model compare equal.
struct ModelSpec {
  std::string name;
  int num_layers = 0;
  int hidden_size = 0;
  int num_attention_heads = 0;
  int num_query_groups = 0;  // == num_attention_heads without grouped-query attention
  int kv_channels = 0;       // per-head size; Megatron default hidden_size / num_attention_heads
  int ffn_hidden_size = 0;   // Megatron default 4h (gelu) or int(8h/3 / 64) * 64 (swiglu)
  int vocab_size = 0;        // tokenizer vocabulary, before padding
  int make_vocab_size_divisible_by = 128;
  int seq_length = 0;
  int max_position_embeddings = 0;  // Megatron default seq_length
  Activation activation = Activation::kGelu;
  Normalization normalization = Normalization::kLayerNorm;
  PositionEmbedding position_embedding = PositionEmbedding::kLearned;
  bool tied_embeddings = true;  // output layer shares the word-embedding matrix
  bool add_bias_linear = true;  // biases in QKV, projection and MLP linears (false for Llama)
  // --hidden-dropout (after the attention projection, the MLP and the embedding) and
  // --attention-dropout (on the attention probabilities); Megatron's default 0.1 each, 0 for
  // Llama. At 0 PyTorch's dropout returns its input: no kernel, no mask kept.
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  // --qk-layernorm: a norm on each head's query and key (Qwen3, DeepSeek's latents).
  bool qk_layernorm = false;

  // Mixture of experts (--num-experts, --moe-*): 0 experts is a dense model. A MoE layer's MLP
  // is a router choosing moe_router_topk of num_experts experts (SwiGLU or GeLU MLPs of
  // moe_ffn_hidden_size each) for every token, plus shared experts every token goes through
  // (moe_shared_expert_intermediate_size wide in all; 0: none). Layers 0 .. first_dense - 1 are
  // dense (ffn_hidden_size), and of the rest every moe_layer_freq-th (counted from layer 0, as
  // Megatron's --moe-layer-freq N) is MoE; Megatron's list form ([0]*3+[1]*58) is the same pair.
  int num_experts = 0;
  int moe_router_topk = 2;
  int moe_ffn_hidden_size = 0;
  int moe_shared_expert_intermediate_size = 0;
  int moe_layer_freq = 1;
  int moe_first_dense_layers = 0;
  // Group-limited routing (--moe-router-num-groups, --moe-router-group-topk; DeepSeek-V3's
  // n_group 8, topk_group 4): the experts in moe_router_num_groups equal groups of consecutive
  // experts, each token choosing its moe_router_topk experts inside moe_router_group_topk groups.
  // 0, 0: no limit. Megatron-Core's node-limited routing sets the groups to the nodes.
  int moe_router_num_groups = 0;
  int moe_router_group_topk = 0;
  MoeLoadBalancing moe_router_load_balancing_type = MoeLoadBalancing::kAuxLoss;
  // --moe-expert-capacity-factor: each expert takes at most this times its even share of the
  // tokens (the rest dropped); 0: dropless (Megatron's default, None).
  double moe_expert_capacity_factor = 0;

  // Multi-head latent attention (DeepSeek-V2/V3, --multi-latent-attention): queries through a
  // q_lora_rank-wide latent (0: projected directly), keys and values through a kv_lora_rank-wide
  // latent; per head qk_head_dim + qk_pos_emb_head_dim for queries and keys (the second part
  // rotary, its key shared by all heads), v_head_dim for values.
  // --mtp-num-layers: multi-token prediction (DeepSeek-V3): after the last layer, each MTP layer
  // predicts one more token ahead with its own transformer layer (of the last layer's kind), a
  // 2h -> h projection of the embedding and the hidden state with their norms, and the shared
  // LM head and loss; Megatron places them with the loss, in the last pipeline stage.
  int mtp_num_layers = 0;
  bool multi_latent_attention = false;
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_head_dim = 0;
  int qk_pos_emb_head_dim = 0;
  int v_head_dim = 0;

  // A hybrid model (--hybrid-override-pattern): one character of "M*-E" per layer, num_layers of
  // them (LayerKind); "": a transformer. Its MoE layers are the 'E's (moe_layer_freq 1,
  // moe_first_dense_layers 0); its MLP layers are ffn_hidden_size wide.
  std::string hybrid_layer_pattern;
  // The Mamba-2 mixer of the 'M' layers (megatron/core/ssm/mamba_mixer.py; Dao and Gu 2024):
  // mamba_num_heads heads of mamba_head_dim channels (d_inner = heads x head_dim), the input-
  // dependent B and C of mamba_state_dim in mamba_num_groups groups shared by the heads, a
  // depthwise causal convolution of mamba_conv_kernel taps. Megatron's defaults (--mamba-*):
  // head_dim 64, state 128, 8 groups, heads 2 h / head_dim, kernel 4 (MambaMixer d_conv). The
  // heads are 0 in a model without Mamba layers.
  int mamba_num_heads = 0;
  int mamba_head_dim = 64;
  int mamba_state_dim = 128;
  int mamba_num_groups = 8;
  int mamba_conv_kernel = 4;

  bool operator==(const ModelSpec&) const = default;

  bool moe() const { return num_experts > 0; }
  bool hybrid() const { return !hybrid_layer_pattern.empty(); }
  // Whether layer `layer` (0-based, in model order) has MoE experts.
  bool IsMoeLayer(int layer) const {
    if (hybrid()) {
      return layer < static_cast<int>(hybrid_layer_pattern.size()) &&
             hybrid_layer_pattern[layer] == 'E';
    }
    return num_experts > 0 && layer >= moe_first_dense_layers && layer % moe_layer_freq == 0;
  }
  int NumMoeLayers() const;
  LayerKind KindOfLayer(int layer) const;
  // Layers of `kind` in [begin, end).
  int CountLayers(LayerKind kind, int begin, int end) const;
  int64_t MambaInnerSize() const { return int64_t{mamba_num_heads} * mamba_head_dim; }
};

// The LayerKind of a hybrid pattern character; nullopt for anything else.
std::optional<LayerKind> HybridSymbolKind(char symbol);

// Megatron's hybrid-model checks on a model (mamba_hybrid_layer_allocation.py _allocate_override;
// mamba_mixer.py MambaMixer.__init__), in Megatron's words where it has them: "" when `model`
// is a transformer or a hybrid model ptdp can simulate, else what is wrong (the first problem).
std::string HybridModelProblem(const ModelSpec& model);

// Megatron's pattern from --hybrid-attention-ratio and --hybrid-mlp-ratio (mamba_hybrid_layer_
// allocation.py _allocate_auto): attention layers evenly spaced, starting and ending with Mamba,
// then MLP layers evenly among the Mamba ones.
std::string HybridPatternFromRatios(int num_layers, double attention_ratio, double mlp_ratio);

// A GPT as Megatron builds it by default (and as GPT-2/3 and Narayanan et al. 2021 define it):
// a 4h GeLU MLP, LayerNorm, learned positions up to `seq_length`, tied embeddings, biases,
// one key/value group per head, kv_channels = hidden / heads.
ModelSpec ClassicGpt(std::string name, int num_layers, int hidden_size, int num_attention_heads,
                     int vocab_size, int seq_length);

// Megatron's ffn_hidden_size default: 4h, or int((4h * 2/3) / 64) * 64 with SwiGLU
// (megatron/training/arguments.py).
int DefaultFfnHiddenSize(int hidden_size, Activation activation);

// Vocabulary after Megatron's padding: ceil(V / (divisible_by * tp)) * divisible_by * tp
// (megatron/training/tokenizer _vocab_size_with_padding).
int64_t PaddedVocabSize(const ModelSpec& model, int tensor_parallel = 1);

// Parameters of one full model replica (all stages, unsharded), counted tensor by tensor as
// Megatron builds them. The vocabulary is padded for `tensor_parallel`.
struct ParameterCounts {
  int64_t word_embedding = 0;      // V_padded * h
  int64_t position_embedding = 0;  // max_position_embeddings * h with learned positions, else 0
  int64_t per_layer = 0;           // one dense transformer layer, weights and biases and norms
  int64_t per_moe_layer = 0;       // one MoE layer (all its experts); 0 for a dense model
  // Of a MoE layer, the parameters one token goes through: attention, router, top-k experts,
  // shared experts, norms.
  int64_t per_moe_layer_active = 0;
  int64_t per_mamba_layer = 0;  // one hybrid 'M' layer (norm and mixer); 0 without them
  // Every layer (dense per_layer, MoE per_moe_layer; in a hybrid model each layer's block).
  int64_t transformer = 0;
  int64_t mtp = 0;  // the MTP layers: each a layer of the last layer's kind, projection
  int64_t final_norm = 0;
  int64_t output_layer = 0;  // V_padded * h when embeddings are untied, else 0
  int64_t total = 0;
  int64_t active = 0;  // what one token goes through (total for a dense model)
};
ParameterCounts CountParameters(const ModelSpec& model, int tensor_parallel = 1);
// One layer's attention (QKV or MLA projections, output projection, their biases, qk norms) and
// one MLP (or expert) of `width`, unsharded.
int64_t AttentionParameters(const ModelSpec& model);
int64_t MlpParameters(const ModelSpec& model, int64_t width);
// One Mamba-2 mixer, unsharded (MambaMixer): in_proj h x (2 d_inner + 2 groups state + heads),
// the depthwise conv1d over d_inner + 2 groups state channels (kernel taps and a bias each),
// dt_bias, A_log and D per head, the gated RMSNorm's d_inner weights, out_proj d_inner x h; no
// linear biases (MambaMixer asserts none).
int64_t MambaMixerParameters(const ModelSpec& model);
// One layer of `kind`, all its parameters (`active`: of a MoE layer, those one token goes
// through: router, top-k experts, shared experts, norm).
int64_t LayerKindParameters(const ModelSpec& model, LayerKind kind, bool active = false);

// Narayanan et al. 2021 (SC'21), Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), for
// GPT with a 4h GeLU MLP, biases, LayerNorm, tied embeddings and learned positions. It leaves
// out the final LayerNorm (2h). Here V is the padded vocabulary and s max_position_embeddings.
double NarayananEq2Parameters(const ModelSpec& model);

}  // namespace ptdp
