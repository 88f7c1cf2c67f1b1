#include "simulator/memory_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "simulator/layer_work.h"

namespace ptdp {
namespace {

// Per-GPU sizes of one layer, as in the header's formula.
struct ActDims {
  double s, b, h, e, t, a_t, g_t, d, f_t, fc1_t;
  bool sp;
};

ActDims MakeActDims(const ModelSpec& m, const ParallelConfig& p, Precision precision) {
  ActDims d{};
  d.s = m.seq_length, d.b = p.micro_batch_size, d.h = m.hidden_size;
  d.e = BytesPerElement(precision);
  d.t = p.tp;
  d.sp = p.sequence_parallel && p.tp > 1;
  d.a_t = static_cast<double>(m.num_attention_heads) / p.tp;
  d.g_t = std::max(1.0, static_cast<double>(m.num_query_groups) / p.tp);
  d.d = m.kv_channels;
  d.f_t = static_cast<double>(m.ffn_hidden_size) / p.tp;
  d.fc1_t = m.activation == Activation::kSwiglu ? 2 * d.f_t : d.f_t;
  return d;
}

// The parts of LayerActivationBytes: outside the tensor-parallel region (sharded only by
// sequence parallelism), inside it, and the s^2 attention part.
struct LayerParts {
  double replicated, sharded, attention_s2;
};

LayerParts Parts(const ActDims& d) {
  const double sb = d.s * d.b;
  LayerParts parts;
  // Two norm inputs, the QKV and fc1 inputs (e bytes each), two dropout masks (1 byte each).
  parts.replicated = sb * d.h * (4 * d.e + 2) / (d.sp ? d.t : 1);
  parts.sharded = d.e * sb * d.d * (d.a_t + 2 * d.g_t)     // Q, K, V
                  + d.e * sb * d.d * d.a_t                 // the projection's input
                  + d.e * sb * (d.fc1_t + d.f_t)           // the activation's input and output
                  + d.e * sb * d.d * 2 * (d.a_t - d.g_t);  // K, V repeated per head (GQA)
  parts.attention_s2 = (2 * d.e + 1) * d.a_t * d.s * d.s * d.b;
  return parts;
}

}  // namespace

double KorthikantiTable2Bytes(double s, double b, double h, double a, double t,
                              bool sequence_parallel, Recompute recompute) {
  const double sbh = s * b * h;
  switch (recompute) {
    case Recompute::kFull:
      return 2 * sbh;
    case Recompute::kSelective:
      return sequence_parallel ? 34 * sbh / t : sbh * (10 + 24 / t);
    case Recompute::kNone:
      return sequence_parallel ? sbh / t * (34 + 5 * a * s / h)
                               : sbh * (10 + 24 / t + 5 * a * s / (h * t));
  }
  return 0;
}

double LayerActivationBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision) {
  const ActDims d = MakeActDims(m, p, precision);
  if (p.recompute == Recompute::kFull) {
    return d.e * d.s * d.b * d.h / (d.sp ? d.t : 1);
  }
  const LayerParts parts = Parts(d);
  return parts.replicated + parts.sharded +
         (p.recompute == Recompute::kSelective ? 0 : parts.attention_s2);
}

double LayerWeightGradActivationBytes(const ModelSpec& m, const ParallelConfig& p,
                                      Precision precision) {
  const ActDims d = MakeActDims(m, p, precision);
  const double sb = d.s * d.b;
  // Inputs of QKV and fc1 (the norm outputs; sharded with sequence parallelism and gathered
  // again for W), of the projection (the context) and of fc2 (the activation's output).
  return d.e * sb * (2 * d.h / (d.sp ? d.t : 1) + d.d * d.a_t + d.f_t);
}

double EmbeddingActivationBytes(const ModelSpec& m, const ParallelConfig& p) {
  const bool sp = p.sequence_parallel && p.tp > 1;
  return static_cast<double>(m.seq_length) * p.micro_batch_size * m.hidden_size / (sp ? p.tp : 1);
}

double OutputActivationBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision) {
  const bool sp = p.sequence_parallel && p.tp > 1;
  const double sb = static_cast<double>(m.seq_length) * p.micro_batch_size;
  const double vocab_t = static_cast<double>(PaddedVocabSize(m, p.tp)) / p.tp;
  return 2.0 * BytesPerElement(precision) * sb * m.hidden_size / (sp ? p.tp : 1) + 4 * sb * vocab_t;
}

BytesPerParameter BytesPerParam(const TrainingSpec& training, const ParallelConfig& parallel,
                                const CostOptions& options) {
  BytesPerParameter b;
  const bool fp32 = training.precision == Precision::kFp32;
  b.weights = BytesPerElement(training.precision);
  b.gradients = GradientBytes(training.precision, options);
  const double moments = training.optimizer == Optimizer::kAdam ? 8 : 4;  // m, v | momentum
  const double master = fp32 ? 0 : 4;  // fp32 copy of 16-bit weights
  b.optimizer = (moments + master) / (parallel.distributed_optimizer ? parallel.dp : 1);
  return b;
}

std::vector<int> InFlightPerStage(const PipelineSchedule& schedule) {
  std::vector<int> in_flight(schedule.stages);
  for (int r = 0; r < schedule.stages; ++r) in_flight[r] = MaxInFlight(schedule, r);
  return in_flight;
}

MemoryEstimate EstimateMemory(const ModelSpec& m, const ClusterSpec& cluster,
                              const TrainingSpec& training, const ParallelConfig& p,
                              std::span<const int> in_flight, const CostOptions& options) {
  PTDP_CHECK(static_cast<int>(in_flight.size()) == p.pp);
  PTDP_CHECK(m.num_layers % (p.pp * p.virtual_stages) == 0);
  const ActDims d = MakeActDims(m, p, training.precision);
  const double layers_per_stage = m.num_layers / p.pp;
  const double layers_per_chunk = layers_per_stage / p.virtual_stages;
  const BytesPerParameter per_param = BytesPerParam(training, p, options);
  const double layer_params = LayerParameters(m, p.tp);
  const double layer_act = LayerActivationBytes(m, p, training.precision);
  // Transient: during a layer's backward its recomputed activations exist for one micro-batch.
  const LayerParts parts = Parts(d);
  const double transient = p.recompute == Recompute::kFull
                               ? parts.replicated + parts.sharded + parts.attention_s2
                           : p.recompute == Recompute::kSelective ? parts.attention_s2
                                                                  : 0;
  const double embedding_act = EmbeddingActivationBytes(m, p);
  const double output_act = OutputActivationBytes(m, p, training.precision);

  const double per_chunk = layers_per_chunk * layer_act;
  const double reserved = static_cast<double>(cluster.gpu.reserved_bytes);
  const double fragmentation = cluster.gpu.fragmentation / (1 - cluster.gpu.fragmentation);
  const auto stage_memory = [&](int r) {
    StageMemory st;
    st.parameters = layers_per_stage * layer_params + (r == 0 ? EmbeddingParameters(m, p.tp) : 0) +
                    (r == p.pp - 1 ? OutputParameters(m, p) : 0);
    st.weights_bytes = st.parameters * per_param.weights;
    st.gradients_bytes = st.parameters * per_param.gradients;
    st.optimizer_bytes = st.parameters * per_param.optimizer;
    st.reserved_bytes = reserved;
    return st;
  };
  // Weights, gradients and optimizer state are alike on the stages between first and last.
  const StageMemory middle = stage_memory(p.pp > 2 ? 1 : 0);

  MemoryEstimate est;
  est.stages.resize(p.pp);
  for (int r = 0; r < p.pp; ++r) {
    StageMemory& st = est.stages[r];
    st = r == 0 || r == p.pp - 1 ? stage_memory(r) : middle;
    st.in_flight = in_flight[r];
    // Every in-flight chunk holds its layers; stage 0's chunk 0 adds the embedding's mask
    // (counted for every in-flight chunk: a bound, off by the few non-first chunks' masks).
    st.activations_bytes = in_flight[r] * (per_chunk + (r == 0 ? embedding_act : 0)) +
                           (r == p.pp - 1 ? output_act : 0) + transient;
    const double used =
        st.weights_bytes + st.gradients_bytes + st.optimizer_bytes + st.activations_bytes;
    st.fragmentation_bytes = used * fragmentation;
    st.peak_bytes = used + st.fragmentation_bytes + st.reserved_bytes;
    if (st.peak_bytes > est.stages[est.largest_stage].peak_bytes) est.largest_stage = r;
  }
  return est;
}

std::string MemoryProblem(const MemoryEstimate& est, const ClusterSpec& cluster) {
  if (est.stages.empty()) return "";
  const StageMemory& s = est.stages[est.largest_stage];
  const double capacity = static_cast<double>(cluster.gpu.hbm_bytes);
  if (s.peak_bytes <= capacity) return "";
  const auto gb = [](double bytes) { return bytes / 1e9; };
  return fmt::format(
      "pipeline stage {} needs {:.1f} GB per GPU but {} has {:.1f} GB: weights {:.1f}, "
      "gradients {:.1f}, optimizer {:.1f}, activations {:.1f} ({} micro-batch chunks in "
      "flight), reserved {:.1f}, fragmentation {:.1f}",
      est.largest_stage, gb(s.peak_bytes), cluster.gpu.name, gb(capacity), gb(s.weights_bytes),
      gb(s.gradients_bytes), gb(s.optimizer_bytes), gb(s.activations_bytes), s.in_flight,
      gb(s.reserved_bytes), gb(s.fragmentation_bytes));
}

}  // namespace ptdp
