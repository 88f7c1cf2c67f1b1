#include "simulator/flops.h"

#include <algorithm>

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
  if (moe_layer && m.moe()) {
    const double s = m.seq_length, h = m.hidden_size;
    return AttentionForwardFlops(m) + 2 * s * h * m.num_experts  // router
           + m.moe_router_topk * MlpForwardFlops(m, m.moe_ffn_hidden_size) +
           MlpForwardFlops(m, m.moe_shared_expert_intermediate_size);
  }
  return AttentionForwardFlops(m) + MlpForwardFlops(m, m.ffn_hidden_size);
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

double ModelFlopsPerStep(const ModelSpec& m, const TrainingSpec& training,
                         const CostOptions& options) {
  const double attention = CausalHalving(options) ? CoreAttentionForwardFlops(m) : 0;
  const double moe = m.NumMoeLayers();
  // With multi-token prediction, each MTP layer: a layer of the last layer's kind, its 2h -> h
  // projection and the LM head again.
  const double mtp =
      m.mtp_num_layers *
      (LayerForwardFlops(m, m.IsMoeLayer(m.num_layers - 1)) - attention +
       2.0 * m.seq_length * 2 * m.hidden_size * m.hidden_size + OutputForwardFlops(m));
  const double forward = (m.num_layers - moe) * LayerForwardFlops(m) +
                         moe * LayerForwardFlops(m, true) - m.num_layers * attention +
                         OutputForwardFlops(m) + mtp;
  return 3 * forward * static_cast<double>(training.global_batch_size);
}

double HardwareFlopsPerStep(const ModelSpec& m, const TrainingSpec& training,
                            const ParallelConfig& parallel, const CostOptions& options) {
  // The recomputed forward products of one layer: all of them (full), or the two s x s ones
  // (selective), with the s x s ones halved as the model FLOPs count them.
  const double attention = (CausalHalving(options) ? 1 : 2) * CoreAttentionForwardFlops(m);
  // (A MoE model's full recompute: the mean layer's.)
  const double moe = m.NumMoeLayers();
  const double mean_layer =
      ((m.num_layers - moe) * LayerForwardFlops(m) + moe * LayerForwardFlops(m, true)) /
      m.num_layers;
  const double per_layer = parallel.recompute == Recompute::kFull
                               ? mean_layer - 2 * CoreAttentionForwardFlops(m) + attention
                           : parallel.recompute == Recompute::kSelective ? attention
                                                                         : 0;
  // The layers that recompute: all, or the first recompute_num_layers of each chunk.
  double recomputed = m.num_layers;
  if (parallel.recompute == Recompute::kFull && parallel.recompute_num_layers > 0) {
    recomputed = 0;
    for (int n : SplitLayers(m.num_layers, parallel).layers) {
      recomputed += std::min(n, parallel.recompute_num_layers);
    }
  }
  return ModelFlopsPerStep(m, training, options) +
         recomputed * per_layer * static_cast<double>(training.global_batch_size);
}

double Mfu(double model_flops, double step_time_s, int64_t num_gpus, double peak_flops) {
  return model_flops / (step_time_s * static_cast<double>(num_gpus) * peak_flops);
}

}  // namespace ptdp
