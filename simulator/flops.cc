#include "simulator/flops.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "simulator/layer_work.h"

namespace ptdp {
double KorthikantiModelFlops(const ModelSpec& m, int64_t batch) {
  const double B = static_cast<double>(batch), s = m.seq_length, L = m.num_layers,
               h = m.hidden_size, V = static_cast<double>(PaddedVocabSize(m));
  return 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
}

double NarayananEq3Flops(const ModelSpec& m, int64_t batch) {
  const double B = static_cast<double>(batch), s = m.seq_length, L = m.num_layers,
               h = m.hidden_size, V = static_cast<double>(PaddedVocabSize(m));
  return 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
}

namespace {

// An MLP of `width` on s tokens: fc1 (twice as wide with SwiGLU) and fc2.
double MlpForwardFlops(const ModelSpec& m, double width) {
  const double s = m.seq_length, h = m.hidden_size;
  const double fc1 = m.activation == Activation::kSwiglu ? 2.0 * width : width;
  return 2 * s * h * fc1 + 2 * s * width * h;
}

}  // namespace

double AttentionForwardFlops(const ModelSpec& m) {
  const double s = m.seq_length, h = m.hidden_size, a = m.num_attention_heads;
  if (m.multi_latent_attention) {
    // The projections of MLASelfAttention (their parameters, AttentionParameters, each
    // multiplying s tokens), plus the core attention.
    const double qk = m.qk_head_dim + m.qk_pos_emb_head_dim;
    const double q = m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank * a * qk : h * a * qk;
    const double kv = h * (m.kv_lora_rank + m.qk_pos_emb_head_dim) +
                      m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim);
    return 2 * s * (q + kv + a * m.v_head_dim * h) + 2 * CoreAttentionForwardFlops(m);
  }
  const double d = m.kv_channels, g = m.num_query_groups;
  return 2 * s * h * (a + 2 * g) * d         // QKV
         + 2 * CoreAttentionForwardFlops(m)  // Q K^T and x V
         + 2 * s * a * d * h;                // projection
}

double LayerForwardFlops(const ModelSpec& m, bool moe_layer) {
  return LayerKindForwardFlops(
      m, moe_layer && m.moe() ? LayerKind::kMoeTransformer : LayerKind::kTransformer);
}

double MambaForwardFlops(const ModelSpec& m) {
  const double s = m.seq_length, h = m.hidden_size;
  const double heads = m.mamba_num_heads, inner = static_cast<double>(m.MambaInnerSize());
  const double in_width = 2 * inner + 2.0 * m.mamba_num_groups * m.mamba_state_dim + heads;
  const double chunks = std::ceil(s / kMambaChunkSize);
  const SsdScan scan =
      SsdScanWork(s, chunks, heads, m.mamba_head_dim, m.mamba_state_dim, m.mamba_num_groups, 2);
  return 2 * s * h * in_width + scan.forward_flops + 2 * s * inner * h;
}

double LayerKindForwardFlops(const ModelSpec& m, LayerKind kind) {
  const double s = m.seq_length, h = m.hidden_size;
  double flops = 0;
  if (HasAttention(kind)) flops += AttentionForwardFlops(m);
  if (HasDenseMlp(kind)) flops += MlpForwardFlops(m, m.ffn_hidden_size);
  if (HasExperts(kind) && m.moe()) {
    flops += 2 * s * h * m.num_experts  // router
             + m.moe_router_topk * MlpForwardFlops(m, m.moe_ffn_hidden_size) +
             MlpForwardFlops(m, m.moe_shared_expert_intermediate_size);
  }
  if (kind == LayerKind::kMamba) flops += MambaForwardFlops(m);
  return flops;
}

double CoreAttentionForwardFlops(const ModelSpec& m) {
  const double s = m.seq_length;
  // One of the two batched GEMMs (their mean with MLA's head sizes for Q K^T and for x V).
  const double d = m.multi_latent_attention
                       ? (m.qk_head_dim + m.qk_pos_emb_head_dim + m.v_head_dim) / 2.0
                       : m.kv_channels;
  return 2.0 * s * s * d * m.num_attention_heads;
}

double OutputForwardFlops(const ModelSpec& m) {
  return 2.0 * m.seq_length * m.hidden_size * static_cast<double>(PaddedVocabSize(m));
}

bool CausalHalving(const CostOptions& options) { return options.stack == SoftwareStack::kCore; }

namespace {

// The layers of each kind.
std::array<int, kNumLayerKinds> LayerKindCounts(const ModelSpec& m) {
  std::array<int, kNumLayerKinds> counts{};
  if (m.hybrid()) {
    for (int i = 0; i < m.num_layers; ++i) ++counts[static_cast<int>(m.KindOfLayer(i))];
  } else {
    const int moe = m.NumMoeLayers();
    counts[static_cast<int>(LayerKind::kMoeTransformer)] = moe;
    counts[static_cast<int>(LayerKind::kTransformer)] = m.num_layers - moe;
  }
  return counts;
}

// The forward products of all layers (the s x s ones halved with `halving`) and the layers
// with attention.
struct LayersForward {
  double flops = 0;
  int attention_layers = 0;
};
LayersForward LayersForwardFlops(const ModelSpec& m, bool halving) {
  const std::array<int, kNumLayerKinds> counts = LayerKindCounts(m);
  LayersForward out;
  for (int k = 0; k < kNumLayerKinds; ++k) {
    if (counts[k] == 0) continue;
    const LayerKind kind = static_cast<LayerKind>(k);
    out.flops += counts[k] * LayerKindForwardFlops(m, kind);
    if (HasAttention(kind)) out.attention_layers += counts[k];
  }
  if (halving) out.flops -= out.attention_layers * CoreAttentionForwardFlops(m);
  return out;
}

}  // namespace

double ModelFlopsPerStep(const ModelSpec& m, const TrainingSpec& training,
                         const CostOptions& options) {
  const double attention = CausalHalving(options) ? CoreAttentionForwardFlops(m) : 0;
  // With multi-token prediction, each MTP layer: a layer of the last layer's kind, its 2h -> h
  // projection and the LM head again.
  const double mtp =
      m.mtp_num_layers > 0
          ? m.mtp_num_layers *
                (LayerForwardFlops(m, m.IsMoeLayer(m.num_layers - 1)) - attention +
                 2.0 * m.seq_length * 2 * m.hidden_size * m.hidden_size + OutputForwardFlops(m))
          : 0;
  const double forward =
      LayersForwardFlops(m, CausalHalving(options)).flops + OutputForwardFlops(m) + mtp;
  return 3 * forward * static_cast<double>(training.global_batch_size);
}

double RecomputedFlopsPerStep(const ModelSpec& m, const TrainingSpec& training,
                              const ParallelConfig& parallel, const CostOptions& options) {
  if (parallel.recompute == Recompute::kNone) return 0;
  // The recomputed forward products: a layer's all (full), with the s x s ones halved as the
  // model FLOPs count them (a hybrid or MoE model's full recompute: the mean layer's); or the
  // two s x s ones of each layer with attention (selective).
  const double attention = (CausalHalving(options) ? 1 : 2) * CoreAttentionForwardFlops(m);
  const LayersForward layers = LayersForwardFlops(m, CausalHalving(options));
  double recomputed_flops = 0;
  if (parallel.recompute == Recompute::kFull) {
    // The layers that recompute: all, or the first recompute_num_layers of each chunk.
    double recomputed = m.num_layers;
    if (parallel.recompute_num_layers > 0) {
      recomputed = 0;
      for (int n : SplitLayers(m.num_layers, parallel).layers) {
        recomputed += std::min(n, parallel.recompute_num_layers);
      }
    }
    recomputed_flops = recomputed * layers.flops / m.num_layers;
  } else if (parallel.recompute == Recompute::kSelective) {
    recomputed_flops = layers.attention_layers * attention;
  }
  return recomputed_flops * static_cast<double>(training.global_batch_size);
}

double HardwareFlopsPerStep(const ModelSpec& m, const TrainingSpec& training,
                            const ParallelConfig& parallel, const CostOptions& options) {
  return ModelFlopsPerStep(m, training, options) +
         RecomputedFlopsPerStep(m, training, parallel, options);
}

double Mfu(double model_flops, double step_time_s, int64_t num_gpus, double peak_flops) {
  return model_flops / (step_time_s * static_cast<double>(num_gpus) * peak_flops);
}

}  // namespace ptdp
