// The model a Megatron-LM command describes (ReadModel, megatron/reader.h).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <tuple>

#include "core/limits.h"
#include "megatron/reader.h"

namespace ptdp::reading {
namespace {

// Megatron's --moe-layer-freq list form (moe_freq_type evaluates a Python expression such as
// "([0]*3+[1]*58)" or "[1,0,1,0]"): the terms "[a,b,...]" and "[a]*n" joined by '+'. Empty on
// anything else.
std::vector<int> LayerPattern(std::string_view text) {
  std::string t;
  for (char c : text) {
    if (c != ' ' && c != '(' && c != ')') t += c;
  }
  std::vector<int> out;
  size_t at = 0;
  while (at < t.size()) {
    if (t[at] != '[') return {};
    const size_t close = t.find(']', at);
    if (close == std::string::npos) return {};
    std::vector<int> items;
    for (size_t i = at + 1; i < close;) {
      const size_t comma = std::min(t.find(',', i), close);
      int v = 0;
      const auto [p, ec] = std::from_chars(t.data() + i, t.data() + comma, v);
      if (ec != std::errc() || p != t.data() + comma || (v != 0 && v != 1)) return {};
      items.push_back(v);
      i = comma + 1;
    }
    at = close + 1;
    int times = 1;
    if (at < t.size() && t[at] == '*') {
      const size_t end = std::min(t.find('+', at), t.size());
      const auto [p, ec] = std::from_chars(t.data() + at + 1, t.data() + end, times);
      if (ec != std::errc() || p != t.data() + end || times < 0) return {};
      at = end;
    }
    for (int k = 0; k < times; ++k) out.insert(out.end(), items.begin(), items.end());
    if (at < t.size()) {
      if (t[at] != '+') return {};
      ++at;
    }
  }
  return out;
}

// Query-key norms and multi-latent attention (arguments.py's mla group).
void ReadAttentionVariants(Reader& r, ModelSpec& m) {
  if (r.Has("--qk-layernorm")) m.qk_layernorm = true;
  if (r.Has("--multi-latent-attention")) {
    if (r.Has("--group-query-attention")) {
      r.Add(Severity::kError, "--group-query-attention",
            "Group query attention is mutually exclusive with multi latent attention.",
            "drop --group-query-attention");
    }
    m.multi_latent_attention = true;
    m.q_lora_rank = ToInt(r.Int("--q-lora-rank").value_or(0));
    m.kv_lora_rank = ToInt(r.Int("--kv-lora-rank").value_or(32));
    m.qk_head_dim = ToInt(r.Int("--qk-head-dim").value_or(128));
    m.qk_pos_emb_head_dim = ToInt(r.Int("--qk-pos-emb-head-dim").value_or(64));
    m.v_head_dim = ToInt(r.Int("--v-head-dim").value_or(128));
  } else {
    for (const char* flag : {"--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
                             "--qk-pos-emb-head-dim", "--v-head-dim"}) {
      if (r.Has(flag)) {
        r.Add(Severity::kWarning, flag, "has no effect without --multi-latent-attention",
              "add --multi-latent-attention");
      }
    }
  }
}

// --moe-layer-freq: every n-th layer, or Megatron's list form, which ptdp models when it is some
// dense layers first and then every n-th layer.
void ReadMoeLayerFreq(Reader& r, ModelSpec& m, const std::string& freq) {
  int n = 0;
  const auto [p, ec] = std::from_chars(freq.data(), freq.data() + freq.size(), n);
  if (ec == std::errc() && p == freq.data() + freq.size()) {
    if (n < 1) {
      r.Add(Severity::kError, "--moe-layer-freq", "the MoE layer frequency must be positive", "");
    } else {
      m.moe_layer_freq = n;
    }
    return;
  }
  const std::vector<int> pattern = LayerPattern(freq);
  const int first =
      static_cast<int>(std::find(pattern.begin(), pattern.end(), 1) - pattern.begin());
  bool found = false;
  for (int f = 1; f <= static_cast<int>(pattern.size()) && !found; ++f) {
    bool match = first < static_cast<int>(pattern.size());
    for (int i = 0; i < static_cast<int>(pattern.size()) && match; ++i) {
      match = pattern[i] == (i >= first && i % f == 0 ? 1 : 0);
    }
    if (match) m.moe_first_dense_layers = first, m.moe_layer_freq = f, found = true;
  }
  if (pattern.empty()) {
    r.Add(Severity::kError, "--moe-layer-freq",
          fmt::format("cannot read \"{}\": expected an integer or a list such as "
                      "([0]*3+[1]*58)",
                      freq),
          "");
  } else if (m.num_layers > 0 && static_cast<int>(pattern.size()) != m.num_layers) {
    r.Add(Severity::kError, "--moe-layer-freq",
          fmt::format("Invalid length of moe_layer_pattern: {}, expected {}, current moe layer "
                      "pattern: {}",
                      pattern.size(), m.num_layers, freq),
          "");
  } else if (!found) {
    r.Add(Severity::kWarning, "--moe-layer-freq",
          "ptdp models MoE layer patterns of some dense layers first, then every n-th layer: "
          "simulated with every layer an MoE layer",
          "");
  }
}

// The MoE flags (arguments.py's moe group; the rest of the MoE options in
// megatron/training/config).

// Group-limited routing as Megatron-Core takes it (TransformerConfig.__post_init__): on with
// --moe-router-group-topk, which needs --moe-router-num-groups dividing the experts and at least
// as many groups as are chosen; --moe-router-num-groups alone routes without a limit.
void ReadRouterGroups(Reader& r, ModelSpec& m) {
  const auto groups = r.Int("--moe-router-num-groups");
  const auto topk = r.Int("--moe-router-group-topk");
  if (!topk || *topk == 0) return;
  if (!groups || *groups == 0) {
    r.Add(Severity::kError, "--moe-router-group-topk",
          "When using group limited routing, moe_router_num_groups must be specified.",
          "add --moe-router-num-groups");
    return;
  }
  if (*groups < 0 || m.num_experts % *groups != 0) {
    r.Add(Severity::kError, "--moe-router-num-groups",
          fmt::format("num_moe_experts ({}) should be divisible by moe_router_num_groups ({}).",
                      m.num_experts, *groups),
          "");
    return;
  }
  if (*topk < 0 || *topk > *groups) {
    r.Add(Severity::kError, "--moe-router-group-topk",
          fmt::format("moe_router_group_topk ({}) should be smaller than moe_router_num_groups "
                      "({}).",
                      *topk, *groups),
          "");
    return;
  }
  m.moe_router_num_groups = ToInt(*groups);
  m.moe_router_group_topk = ToInt(*topk);
}
void ReadExperts(Reader& r, ModelSpec& m) {
  const auto experts = r.Int("--num-experts");
  if (!experts || *experts == 0) {
    if (r.Has("--moe-ffn-hidden-size")) {
      r.Add(Severity::kError, "--moe-ffn-hidden-size",
            "moe_ffn_hidden_size is set but num_moe_experts is None. Please set num_moe_experts "
            "or remove moe_ffn_hidden_size.",
            "add --num-experts, or drop --moe-ffn-hidden-size");
    }
    for (const char* flag : {"--moe-router-topk", "--moe-shared-expert-intermediate-size",
                             "--moe-layer-freq", "--moe-expert-capacity-factor"}) {
      if (r.Has(flag)) {
        r.Add(Severity::kWarning, flag, "has no effect without --num-experts", "");
      }
    }
    return;
  }
  if (*experts < 0) {
    r.Add(Severity::kError, "--num-experts", "num_moe_experts must be non-negative.", "");
    return;
  }
  m.num_experts = ToInt(*experts);
  m.moe_router_topk = ToInt(r.Int("--moe-router-topk").value_or(2));
  if (m.moe_router_topk < 1 || m.moe_router_topk > m.num_experts) {
    r.Add(Severity::kError, "--moe-router-topk",
          fmt::format("moe_router_topk ({}) must be between 1 and num_experts ({})",
                      m.moe_router_topk, m.num_experts),
          "");
    m.moe_router_topk = std::clamp(m.moe_router_topk, 1, m.num_experts);
  }
  if (auto f = r.Int("--moe-ffn-hidden-size")) {
    m.moe_ffn_hidden_size = ToInt(*f);
  } else {
    m.moe_ffn_hidden_size = m.ffn_hidden_size;
    r.Add(Severity::kWarning, "--num-experts",
          "moe_ffn_hidden_size is not set, using ffn_hidden_size for MoE instead.",
          "add --moe-ffn-hidden-size");
  }
  m.moe_shared_expert_intermediate_size =
      ToInt(r.Int("--moe-shared-expert-intermediate-size").value_or(0));
  if (auto freq = r.String("--moe-layer-freq")) ReadMoeLayerFreq(r, m, *freq);
  if (auto type = r.String("--moe-router-load-balancing-type")) {
    if (auto b = ValueOf<MoeLoadBalancing>(kMoeLoadBalancingNames, *type)) {
      m.moe_router_load_balancing_type = *b;
    } else {
      r.Add(Severity::kWarning, "--moe-router-load-balancing-type",
            fmt::format("ptdp does not model the {} router loss: simulated as aux_loss", *type),
            "");
    }
  }
  if (auto cf = r.Number("--moe-expert-capacity-factor")) {
    m.moe_expert_capacity_factor = std::max(0.0, *cf);
  }
  ReadRouterGroups(r, m);
}

// The hybrid layer pattern as given: --hybrid-layer-pattern, or its deprecated alias
// --hybrid-override-pattern (arguments.py), without the multi-token prediction part.
std::optional<std::string> HybridPatternFlag(Reader& r) {
  auto pattern = r.String("--hybrid-layer-pattern");
  if (auto old = r.String("--hybrid-override-pattern")) {
    if (pattern) {
      r.Add(Severity::kError, "--hybrid-override-pattern",
            "--hybrid-override-pattern and --hybrid-layer-pattern cannot both be specified. "
            "--hybrid-override-pattern is deprecated; use --hybrid-layer-pattern instead.",
            "keep --hybrid-layer-pattern");
    }
    pattern = old;
  }
  // The main pattern's layers give --num-layers; '/' parts after it are the multi-token
  // prediction depths, which ptdp does not simulate in a hybrid model.
  if (pattern && pattern->find('/') != std::string::npos) {
    r.Add(Severity::kWarning, "--hybrid-layer-pattern",
          "multi-token prediction in a hybrid model is not simulated: simulated without the MTP "
          "layers after '/'",
          "");
    pattern = pattern->substr(0, pattern->find('/'));
  }
  return pattern;
}

// The Mamba-2 mixer's sizes, with Megatron's defaults (heads: 2h / head_dim).
void ReadMambaMixer(Reader& r, ModelSpec& m) {
  m.mamba_head_dim = ToInt(r.Int("--mamba-head-dim").value_or(64));
  m.mamba_state_dim = ToInt(r.Int("--mamba-state-dim").value_or(128));
  m.mamba_num_groups = ToInt(r.Int("--mamba-num-groups").value_or(8));
  if (auto heads = r.Int("--mamba-num-heads")) {
    m.mamba_num_heads = ToInt(*heads);
  } else if (m.hybrid_layer_pattern.find('M') != std::string::npos && m.mamba_head_dim > 0) {
    if (2 * m.hidden_size % m.mamba_head_dim != 0) {
      r.Add(Severity::kError, "--mamba-head-dim", "d_inner must be evenly divisible by headdim",
            "give --mamba-num-heads");
    }
    m.mamba_num_heads = 2 * m.hidden_size / m.mamba_head_dim;
  }
}

// The hybrid (Mamba) model's flags (arguments.py; read by pretrain_mamba.py's MambaModel): the
// layer pattern, given or built from the ratios, and the Mamba mixer's sizes.
// Returns the layers of each pipeline segment when the pattern has '|' separators (Megatron's
// explicit stages: virtual stages = segments / pp), else nothing.
std::vector<int> ReadHybridFlags(Reader& r, ModelSpec& m, std::string_view script) {
  const std::optional<std::string> pattern = HybridPatternFlag(r);
  if (pattern) {
    m.num_layers = static_cast<int>(
        std::count_if(pattern->begin(), pattern->end(), [](char ch) { return ch != '|'; }));
  }
  const double attention_ratio = r.Number("--hybrid-attention-ratio").value_or(0);
  const double mlp_ratio = r.Number("--hybrid-mlp-ratio").value_or(0);
  const bool mamba_script = script.find("mamba") != std::string_view::npos ||
                            script.find("hybrid") != std::string_view::npos;
  constexpr const char* kMambaFlags[] = {"--mamba-num-heads", "--mamba-head-dim",
                                         "--mamba-state-dim", "--mamba-num-groups"};
  if (!mamba_script) {
    for (const char* flag :
         {"--hybrid-override-pattern", "--hybrid-attention-ratio", "--hybrid-mlp-ratio",
          kMambaFlags[0], kMambaFlags[1], kMambaFlags[2], kMambaFlags[3]}) {
      if (r.Has(flag)) {
        r.Add(
            Severity::kWarning, flag,
            fmt::format("{} builds a GPT model, which ignores the hybrid (Mamba) options", script),
            "run pretrain_mamba.py for a hybrid model");
      }
    }
    return {};
  }
  if (attention_ratio < 0 || attention_ratio > 1 || mlp_ratio < 0 || mlp_ratio > 1 ||
      attention_ratio + mlp_ratio > 1) {
    r.Add(Severity::kError, "--hybrid-attention-ratio",
          "assert target_attention_ratio + target_mlp_ratio <= 1.0 (each in [0, 1])", "");
    return {};
  }
  if (m.num_layers <= 0) return {};  // reported above
  std::vector<int> segments;
  const std::string auto_pattern =
      HybridPatternFromRatios(m.num_layers, attention_ratio, mlp_ratio);
  if (pattern) {
    m.hybrid_layer_pattern.clear();
    segments.push_back(0);
    for (char symbol : *pattern) {
      if (symbol == '|') {
        segments.push_back(0);
      } else {
        m.hybrid_layer_pattern += symbol;
        ++segments.back();
      }
    }
    if (segments.size() == 1) segments.clear();
    if ((attention_ratio > 0 || mlp_ratio > 0) &&
        static_cast<int>(m.hybrid_layer_pattern.size()) == m.num_layers) {
      const std::string& given = m.hybrid_layer_pattern;
      for (char symbol : {'M', '*', '-'}) {
        if (std::count(given.begin(), given.end(), symbol) !=
            std::count(auto_pattern.begin(), auto_pattern.end(), symbol)) {
          r.Add(Severity::kError, "--hybrid-override-pattern",
                "The number of each type of layer in the override pattern must match the number "
                "in the overridden pattern.",
                "drop --hybrid-attention-ratio and --hybrid-mlp-ratio, or match their counts");
          break;
        }
      }
    }
  } else {
    m.hybrid_layer_pattern = auto_pattern;  // all Mamba without ratios
  }
  ReadMambaMixer(r, m);
  if (m.mtp_num_layers > 0) {
    r.Add(Severity::kWarning, "--mtp-num-layers",
          "multi-token prediction in a hybrid model is not simulated: simulated without it", "");
    m.mtp_num_layers = 0;
  }
  const std::string problem = HybridModelProblem(m);
  if (!problem.empty()) {
    const bool mixer = problem.starts_with("nheads") || problem.starts_with("mamba_");
    r.Add(Severity::kError, mixer ? "--mamba-num-heads" : "--hybrid-override-pattern", problem, "");
  }
  return segments;
}

// The sizes Megatron-LM requires: layers, hidden size, heads, sequence and positions.
void ReadSizes(Reader& r, ModelSpec& m) {
  const auto layers = r.Int("--num-layers"), hidden = r.Int("--hidden-size"),
             heads = r.Int("--num-attention-heads"), max_pos = r.Int("--max-position-embeddings");
  // validate_args: without --seq-length, --encoder-seq-length is the sequence length; with
  // both, it asserts encoder_seq_length is None.
  auto seq = r.Int("--seq-length");
  const bool encoder = r.Has("--encoder-seq-length");
  if (encoder && r.Has("--seq-length")) {
    r.Add(Severity::kError, "--encoder-seq-length",
          "assert args.encoder_seq_length is None: give --seq-length or --encoder-seq-length, "
          "not both",
          "drop --encoder-seq-length");
  } else if (encoder) {
    seq = r.Int("--encoder-seq-length");
  }
  for (auto [flag, value] : {std::pair{"--num-layers", layers},
                             {"--hidden-size", hidden},
                             {"--num-attention-heads", heads},
                             {"--max-position-embeddings", max_pos}}) {
    const bool from_pattern =
        flag == std::string_view("--num-layers") &&
        (r.Has("--hybrid-layer-pattern") || r.Has("--hybrid-override-pattern"));
    if (!value && !r.Has(flag) && !from_pattern) {
      r.Add(
          Severity::kError, flag,
          fmt::format("{} argument is None: Megatron-LM requires it", std::string(flag).substr(2)),
          flag == std::string_view("--max-position-embeddings")
              ? "add --max-position-embeddings (at least --seq-length)"
              : fmt::format("add {}", flag));
    }
  }
  if (!seq && !r.Has("--seq-length") && !encoder) {
    r.Add(Severity::kError, "--seq-length", "seq-length argument is None", "add --seq-length");
  }
  m.name = "megatron-command";
  m.num_layers = ToInt(layers.value_or(0));
  m.hidden_size = ToInt(hidden.value_or(0));
  m.num_attention_heads = ToInt(heads.value_or(0));
  m.seq_length = ToInt(seq.value_or(0));
  // ptdp's model needs a size even where Megatron stops; the error above says so.
  m.max_position_embeddings = ToInt(max_pos.value_or(seq.value_or(0)));
}

// The layer's shape: activation, MLP width, query groups and key/value channels.
void ReadLayerShape(Reader& r, ModelSpec& m) {
  m.activation = r.Has("--swiglu")         ? Activation::kSwiglu
                 : r.Has("--squared-relu") ? Activation::kSquaredRelu
                                           : Activation::kGelu;
  if (r.Has("--swiglu") && r.Has("--squared-relu")) {
    r.Add(Severity::kError, "--squared-relu", "assert not (args.swiglu and args.squared_relu)",
          "keep one activation");
  }
  m.ffn_hidden_size = ToInt(
      r.Int("--ffn-hidden-size")
          .value_or(m.hidden_size > 0 ? DefaultFfnHiddenSize(m.hidden_size, m.activation) : 0));
  m.num_query_groups = m.num_attention_heads;
  if (auto groups = r.Int("--num-query-groups")) {
    if (r.Has("--group-query-attention")) {
      m.num_query_groups = ToInt(*groups);
    } else {
      r.Add(Severity::kWarning, "--num-query-groups",
            "--num-query-groups has no effect without --group-query-attention",
            "add --group-query-attention");
    }
  }
  if (auto kv = r.Int("--kv-channels")) {
    m.kv_channels = ToInt(*kv);
  } else if (m.num_attention_heads > 0 && m.hidden_size % m.num_attention_heads != 0) {
    r.Add(Severity::kError, "--hidden-size",
          fmt::format("hidden_size ({}) must be a multiple of num_attention_heads ({})",
                      m.hidden_size, m.num_attention_heads),
          "give --kv-channels");
  } else if (m.num_attention_heads > 0) {
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  if (m.num_query_groups > 0 && m.num_attention_heads % m.num_query_groups != 0) {
    r.Add(Severity::kError, "--num-query-groups",
          fmt::format("num_attention_heads ({}) must be a multiple of num_query_groups ({})",
                      m.num_attention_heads, m.num_query_groups),
          "");
  }
  const auto max_pos = r.Int("--max-position-embeddings");
  const auto seq = r.Has("--seq-length") ? r.Int("--seq-length") : r.Int("--encoder-seq-length");
  if (max_pos && seq && *max_pos < *seq) {
    r.Add(Severity::kError, "--max-position-embeddings",
          fmt::format("max_position_embeddings ({}) must be greater than or equal to seq_length "
                      "({}).",
                      *max_pos, *seq),
          "");
  }
}

// Norms, positions, embeddings, dropout and bias, and the vocabulary.
void ReadEmbeddingsAndNorms(Reader& r, ModelSpec& m) {
  if (auto norm = r.String("--normalization")) {
    if (*norm == "RMSNorm")
      m.normalization = Normalization::kRmsNorm;
    else if (*norm != "LayerNorm") {
      r.Add(Severity::kError, "--normalization",
            fmt::format("ptdp models LayerNorm and RMSNorm, not {}", *norm), "");
    }
  }
  const auto pos_type = r.String("--position-embedding-type");
  if (r.Has("--use-rotary-position-embeddings") || (pos_type && *pos_type == "rope")) {
    m.position_embedding = PositionEmbedding::kRope;
  } else if (pos_type && *pos_type == "none") {
    m.position_embedding = PositionEmbedding::kNone;
  } else if (pos_type && (*pos_type == "yarn" || *pos_type == "mrope")) {
    m.position_embedding = PositionEmbedding::kRope;  // rotary variants: the same costs
  } else if (pos_type && *pos_type != "learned_absolute") {
    m.position_embedding = PositionEmbedding::kNone;
    r.Add(Severity::kWarning, "--position-embedding-type",
          fmt::format("ptdp models learned_absolute, rope and none positions: {} is simulated "
                      "as none",
                      *pos_type),
          "");
  }
  m.tied_embeddings = !r.Has("--untie-embeddings-and-output-weights");
  for (auto [flag, field] : {std::pair{"--hidden-dropout", &m.hidden_dropout},
                             {"--attention-dropout", &m.attention_dropout}}) {
    if (auto v = r.Number(flag)) {
      if (*v < 0 || *v >= 1) {
        r.Add(Severity::kError, flag, fmt::format("{} must be in [0, 1), got {}", flag, *v), "");
      } else {
        *field = *v;
      }
    }
  }
  m.add_bias_linear = !r.Has("--disable-bias-linear");
  m.make_vocab_size_divisible_by = ToInt(r.Int("--make-vocab-size-divisible-by").value_or(128));
  if (auto vocab = r.Int("--vocab-size")) {
    m.vocab_size = ToInt(*vocab);
  } else {
    m.vocab_size = 50257;
    r.Add(Severity::kWarning, "",
          "the vocabulary size comes from the tokenizer, which ptdp cannot read: assuming GPT-2's "
          "50257 tokens",
          "pass --vocab-size to Megatron (or to this check) for exact figures");
  }
}

// Sizes ptdp can work with (core/limits.h): a given size out of range is an error, and no
// figures are computed from it. Whether the model is complete enough to simulate.
void CheckSizes(Reader& r, MegatronCommand& c) {
  const ModelSpec& m = c.model;
  bool sizes_in_range = true;
  for (auto [flag, value, max] :
       {std::tuple{"--num-layers", m.num_layers, kMaxLayers},
        {"--hidden-size", m.hidden_size, kMaxModelDimension},
        {"--num-attention-heads", m.num_attention_heads, kMaxModelDimension},
        {"--seq-length", m.seq_length, kMaxModelDimension},
        {"--max-position-embeddings", m.max_position_embeddings, kMaxModelDimension},
        {"--ffn-hidden-size", m.ffn_hidden_size, kMaxModelDimension},
        {"--kv-channels", m.kv_channels, kMaxModelDimension},
        {"--num-query-groups", m.num_query_groups, kMaxModelDimension},
        {"--vocab-size", m.vocab_size, kMaxModelDimension},
        {"--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by, kMaxModelDimension}}) {
    if (!r.Has(flag) || (value > 0 && value <= max)) continue;
    sizes_in_range = false;
    r.Add(Severity::kError, flag,
          value <= 0
              ? fmt::format("{} must be positive, got {}", flag, value)
              : fmt::format("{} is beyond what ptdp models (at most {}), got {}", flag, max, value),
          "");
  }
  c.model_complete = sizes_in_range && m.vocab_size > 0 && m.make_vocab_size_divisible_by > 0 &&
                     m.num_layers > 0 && m.hidden_size > 0 && m.num_attention_heads > 0 &&
                     m.seq_length > 0 && m.kv_channels > 0 && m.ffn_hidden_size > 0 &&
                     m.num_query_groups > 0 && m.num_attention_heads % m.num_query_groups == 0 &&
                     m.max_position_embeddings >= m.seq_length && HybridModelProblem(m).empty();
}

}  // namespace

std::vector<int> ReadModel(Reader& r, MegatronCommand& c) {
  ModelSpec& m = c.model;
  ReadSizes(r, m);
  ReadLayerShape(r, m);
  ReadEmbeddingsAndNorms(r, m);
  ReadAttentionVariants(r, m);
  ReadExperts(r, m);
  m.mtp_num_layers = ToInt(std::max<int64_t>(0, r.Int("--mtp-num-layers").value_or(0)));
  const std::vector<int> hybrid_segments = ReadHybridFlags(r, m, c.script);
  CheckSizes(r, c);
  return hybrid_segments;
}

}  // namespace ptdp::reading
