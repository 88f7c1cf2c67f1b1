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

double LayerForwardFlops(const ModelSpec& m) {
  const double s = m.seq_length, h = m.hidden_size, d = m.kv_channels;
  const double a = m.num_attention_heads, g = m.num_query_groups;
  const double fc1 =
      m.activation == Activation::kSwiglu ? 2.0 * m.ffn_hidden_size : m.ffn_hidden_size;
  return 2 * s * h * (a + 2 * g) * d                         // QKV
         + 2 * CoreAttentionForwardFlops(m)                  // Q K^T and x V
         + 2 * s * a * d * h                                 // projection
         + 2 * s * h * fc1 + 2 * s * m.ffn_hidden_size * h;  // fc1, fc2
}

double CoreAttentionForwardFlops(const ModelSpec& m) {
  const double s = m.seq_length;
  return 2.0 * s * s * m.kv_channels * m.num_attention_heads;  // one of the two batched GEMMs
}

double OutputForwardFlops(const ModelSpec& m) {
  return 2.0 * m.seq_length * m.hidden_size * static_cast<double>(PaddedVocabSize(m));
}

bool CausalHalving(const CostOptions& options) { return options.stack == SoftwareStack::kCore; }

double ModelFlopsPerStep(const ModelSpec& m, const TrainingSpec& training,
                         const CostOptions& options) {
  const double attention = CausalHalving(options) ? CoreAttentionForwardFlops(m) : 0;
  const double forward = m.num_layers * (LayerForwardFlops(m) - attention) + OutputForwardFlops(m);
  return 3 * forward * static_cast<double>(training.global_batch_size);
}

double HardwareFlopsPerStep(const ModelSpec& m, const TrainingSpec& training,
                            const ParallelConfig& parallel, const CostOptions& options) {
  // The recomputed forward products of one layer: all of them (full), or the two s x s ones
  // (selective), with the s x s ones halved as the model FLOPs count them.
  const double attention = (CausalHalving(options) ? 1 : 2) * CoreAttentionForwardFlops(m);
  const double per_layer = parallel.recompute == Recompute::kFull
                               ? LayerForwardFlops(m) - 2 * CoreAttentionForwardFlops(m) + attention
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
