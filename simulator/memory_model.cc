#include "simulator/memory_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "simulator/layer_work.h"

namespace ptdp {
namespace {

// Per-GPU sizes of one layer, as in the header's formula.
struct ActDims {
  double s, b, h, e, x, t, a_t, g_t, d, f_t, fc1_t;
  double latents = 0;           // MLA: the q and kv latent widths (0: not MLA)
  double qkv_width, ctx_width;  // per GPU: Q, K, V together; the attention's output
  double mask;                  // bytes of a hidden-dropout mask element (0 without dropout)
  bool sp, flash, fp8, attention_dropout;
  LayerKind kind;
  // A MoE layer: its routed tokens R, an expert's width per GPU (and its fc1's), the experts,
  // the shared experts' width per GPU (and its fc1's).
  bool moe;
  double R, f_e, fc1_e, experts, f_s, fc1_s;
  // A Mamba layer: per GPU, d_inner, groups, in_proj's output width; the context-parallel size.
  double inner, groups, in_width, cp;
};

ActDims MakeActDims(const ModelSpec& m, const ParallelConfig& p, Precision precision, bool flash,
                    bool bf16_layer, LayerKind kind = LayerKind::kTransformer,
                    double imbalance = 1) {
  ActDims d{};
  // With context parallelism each GPU holds s / cp tokens of every sequence.
  d.s = static_cast<double>(m.seq_length) / p.cp, d.b = p.micro_batch_size, d.h = m.hidden_size;
  d.e = BytesPerElement(precision);
  d.fp8 = precision == Precision::kFp8 && !bf16_layer;
  d.x = d.fp8 ? 1 : d.e;
  d.t = p.tp;
  d.sp = p.sequence_parallel && p.tp > 1;
  d.a_t = static_cast<double>(m.num_attention_heads) / p.tp;
  d.g_t = std::max(1.0, static_cast<double>(m.num_query_groups) / p.tp);
  d.d = m.kv_channels;
  d.f_t = static_cast<double>(m.ffn_hidden_size) / p.tp;
  d.fc1_t = m.activation == Activation::kSwiglu ? 2 * d.f_t : d.f_t;
  d.flash = flash;
  d.mask = m.hidden_dropout > 0 ? 1 : 0;
  d.attention_dropout = m.attention_dropout > 0;
  d.kind = kind;
  d.qkv_width = (d.a_t + 2 * d.g_t) * d.d;
  d.ctx_width = d.a_t * d.d;
  if (m.multi_latent_attention) {
    // One query, key and value per head: Q and K of the nope and rope parts, V narrower.
    d.d = (m.qk_head_dim + m.qk_pos_emb_head_dim + m.v_head_dim) / 2.0;
    d.g_t = d.a_t;
    d.qkv_width = d.a_t * (2.0 * (m.qk_head_dim + m.qk_pos_emb_head_dim) + m.v_head_dim);
    d.ctx_width = d.a_t * m.v_head_dim;
    // The latents the up projections read (replicated over TP, split by sequence parallelism).
    d.latents = (m.q_lora_rank > 0 ? m.q_lora_rank : m.hidden_size) + m.kv_lora_rank +
                m.qk_pos_emb_head_dim;
  }
  d.moe = HasExperts(kind) && m.moe();
  if (d.moe) {
    const double swiglu = m.activation == Activation::kSwiglu ? 2 : 1;
    const double tokens = d.s * d.b / (d.sp ? d.t : 1);  // routed by this GPU
    const double cap = m.moe_expert_capacity_factor > 0
                           ? std::min(imbalance, m.moe_expert_capacity_factor)
                           : imbalance;
    d.R = tokens * m.moe_router_topk * p.expert_tp() * cap;
    d.f_e = static_cast<double>(m.moe_ffn_hidden_size) / p.expert_tp();
    d.fc1_e = swiglu * d.f_e;
    d.experts = m.num_experts;
    d.f_s = static_cast<double>(m.moe_shared_expert_intermediate_size) / p.tp;
    d.fc1_s = swiglu * d.f_s;
  }
  if (kind == LayerKind::kMamba) {
    const double heads = static_cast<double>(m.mamba_num_heads) / p.tp;
    d.inner = heads * m.mamba_head_dim;
    d.groups = static_cast<double>(m.mamba_num_groups) / p.tp;
    d.in_width = 2 * d.inner + 2 * d.groups * m.mamba_state_dim + heads;
    d.cp = p.cp;
  }
  return d;
}

// The parts of LayerActivationBytes: outside the tensor-parallel region (sharded only by
// sequence parallelism), inside it, and the attention part selective recompute drops.
struct LayerParts {
  double replicated = 0, sharded = 0, attention = 0;
  // Of replicated + sharded, what each selective recompute module drops (what recomputing it
  // holds again): the norms' outputs (the first linears' inputs), the experts' activation
  // output, the dense MLP's hidden tensors, the shared experts', the whole MoE layer's, MLA's
  // up-projected Q, K and V less the latents the checkpoint keeps instead.
  double norm_outputs = 0, moe_act = 0, mlp = 0, shared_experts = 0, moe = 0, mla_up = 0;
};

LayerParts Parts(const ActDims& d) {
  const double sb = d.s * d.b;
  const double per_token = 1 / (d.sp ? d.t : 1);  // of the replicated [s b, h] tensors
  LayerParts parts;
  // Each block: its norm's input (e bytes), the first linear's input (x bytes), the dropout
  // mask of its bias-dropout-add (1 byte, with dropout).
  const double block_inputs = sb * d.h * (d.e + d.x + d.mask) * per_token;
  const double norm_output = sb * d.h * d.x * per_token;  // what the layernorm module drops
  if (HasAttention(d.kind)) {
    parts.replicated += block_inputs;
    parts.norm_outputs += norm_output;
    const double projection_input = d.flash ? d.e + (d.fp8 ? d.x : 0) : d.x;
    const double qkv = d.e * sb * d.qkv_width;                   // Q, K, V
    parts.sharded += qkv + projection_input * sb * d.ctx_width;  // and the projection's input
    if (d.latents > 0) parts.mla_up = std::max(0.0, qkv - d.e * sb * d.latents * per_token);
    if (d.flash) {
      parts.attention = 4 * d.a_t * d.s * d.b;  // fp32 log-sum-exp per query and head
    } else {
      parts.sharded += d.e * sb * d.d * 2 * (d.a_t - d.g_t);  // K, V repeated per head (GQA)
      // The softmax output, and with dropout its mask and output.
      parts.attention = (d.attention_dropout ? 2 * d.e + 1 : d.e) * d.a_t * d.s * d.s * d.b;
    }
  }
  if (d.moe) {
    parts.replicated += block_inputs;
    parts.norm_outputs += norm_output;
    parts.shared_experts = d.e * sb * d.fc1_s + d.x * sb * d.f_s;
    parts.moe_act = d.R * d.x * d.f_e;
    // The experts keep their fc1 input, fc1 output and fc2 input; the routing probabilities
    // multiply the activation's output inside the experts (moe/experts.py bias_act_func with
    // permuted_probs) and the combine's unpermute runs without them, so no expert output is
    // kept for the probabilities' gradient.
    parts.moe = 4 * sb * per_token * d.experts                     // router scores
                + d.R * (d.x * d.h + d.e * d.fc1_e + d.x * d.f_e)  // experts
                + parts.shared_experts;
    parts.sharded += parts.moe;
  } else if (HasDenseMlp(d.kind)) {
    parts.replicated += block_inputs;
    parts.norm_outputs += norm_output;
    parts.mlp = d.e * sb * d.fc1_t + d.x * sb * d.f_t;  // the activation's input, output
    parts.sharded += parts.mlp;
  }
  if (d.kind == LayerKind::kMamba) {
    // mamba_split_conv1d_scan_combined keeps its input z x B C dt and its ungated output; the
    // grouped RMSNorm its input and fp32 1/rms per group; out_proj its input. (With context
    // parallelism the kernel's tensors are s tokens of 1/cp the width: the same bytes.)
    parts.replicated += block_inputs;
    parts.sharded += d.e * sb * d.in_width + d.e * sb * d.inner  // the scan's input, output
                     + d.e * sb * d.inner + 4 * sb * d.groups    // the gated norm's
                     + d.x * sb * d.inner;                       // out_proj's input
  }
  return parts;
}

// What selective recompute's modules drop from a layer's activations (the moe module covers
// its moe_act and shared_experts parts), and the largest of them (recomputed one at a time).
double SelectiveDropped(const LayerParts& parts, const ParallelConfig& p) {
  const uint8_t m = p.recompute_modules;
  double dropped = (m & kRecomputeCoreAttn ? parts.attention : 0) +
                   (m & kRecomputeLayernorm ? parts.norm_outputs : 0) +
                   (m & kRecomputeMlp ? parts.mlp : 0) +
                   (m & kRecomputeMlaUpProj ? parts.mla_up : 0);
  if (m & kRecomputeMoe) {
    dropped += parts.moe;
  } else {
    dropped += (m & kRecomputeMoeAct ? parts.moe_act : 0) +
               (m & kRecomputeSharedExperts ? parts.shared_experts : 0);
  }
  return dropped;
}

double SelectiveLargest(const LayerParts& parts, const ParallelConfig& p) {
  const uint8_t m = p.recompute_modules;
  double largest = 0;
  for (auto [bit, bytes] : {std::pair{kRecomputeCoreAttn, parts.attention},
                            {kRecomputeLayernorm, parts.norm_outputs},
                            {kRecomputeMlp, parts.mlp},
                            {kRecomputeMlaUpProj, parts.mla_up},
                            {kRecomputeMoe, parts.moe},
                            {kRecomputeMoeAct, parts.moe_act},
                            {kRecomputeSharedExperts, parts.shared_experts}}) {
    if (m & bit) largest = std::max(largest, bytes);
  }
  return largest;
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

double LayerActivationBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                            const CostOptions& options, bool bf16_layer, LayerKind kind) {
  const ActDims d = MakeActDims(m, p, precision, FlashAttention(precision, options, p), bf16_layer,
                                kind, options.moe_load_imbalance);
  if (p.recompute == Recompute::kFull) {
    return d.e * d.s * d.b * d.h / (d.sp ? d.t : 1);
  }
  const LayerParts parts = Parts(d);
  if (p.recompute != Recompute::kSelective) {
    return parts.replicated + parts.sharded + parts.attention;
  }
  return parts.replicated + parts.sharded + parts.attention - SelectiveDropped(parts, p);
}

double LayerWeightGradActivationBytes(const ModelSpec& m, const ParallelConfig& p,
                                      Precision precision, bool bf16_layer, LayerKind kind) {
  const ActDims d = MakeActDims(m, p, precision, false, bf16_layer, kind);
  const double sb = d.s * d.b;
  const double block_input = d.h / (d.sp ? d.t : 1);  // a norm output, gathered again for W
  // Inputs of QKV and fc1 (the norm outputs; sharded with sequence parallelism and gathered
  // again for W), of the projection (the context) and of fc2 (the activation's output); in a
  // MoE layer the experts' fc1 and fc2 inputs and the shared experts' fc2 input instead; in a
  // Mamba layer in_proj's and out_proj's inputs.
  double per_token = 0;
  if (HasAttention(kind)) per_token += block_input + d.ctx_width;
  if (d.moe) {
    per_token += block_input + d.R * (d.h + d.f_e) / sb + d.f_s;
  } else if (HasDenseMlp(kind)) {
    per_token += block_input + d.f_t;
  }
  if (kind == LayerKind::kMamba) per_token += block_input + d.inner;
  return d.x * sb * per_token;
}

double LayerRecomputeTransientBytes(const ModelSpec& m, const ParallelConfig& p,
                                    Precision precision, const CostOptions& options,
                                    bool bf16_layer, LayerKind kind) {
  const LayerParts parts = Parts(MakeActDims(m, p, precision, FlashAttention(precision, options, p),
                                             bf16_layer, kind, options.moe_load_imbalance));
  switch (p.recompute) {
    case Recompute::kFull:
      return parts.replicated + parts.sharded + parts.attention;
    case Recompute::kSelective:
      return SelectiveLargest(parts, p);
    case Recompute::kNone:
      break;
  }
  return 0;
}

double EmbeddingActivationBytes(const ModelSpec& m, const ParallelConfig& p) {
  if (m.hidden_dropout <= 0) return 0;
  const bool sp = p.sequence_parallel && p.tp > 1;
  return static_cast<double>(m.seq_length) / p.cp * p.micro_batch_size * m.hidden_size /
         (sp ? p.tp : 1);
}

namespace {
// One micro-batch's tokens on this GPU (s / cp x b) and its logits there (x V / t).
double MicroBatchTokens(const ModelSpec& m, const ParallelConfig& p) {
  return static_cast<double>(m.seq_length) / p.cp * p.micro_batch_size;
}
double MicroBatchLogits(const ModelSpec& m, const ParallelConfig& p) {
  return MicroBatchTokens(m, p) * (static_cast<double>(PaddedVocabSize(m, p.tp)) / p.tp);
}
// One micro-batch's hidden states on this GPU in `precision` (e s b h, over t with sequence
// parallelism): the final norm's or the output layer's input.
double MicroBatchHiddenBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision) {
  const bool sp = p.sequence_parallel && p.tp > 1;
  return BytesPerElement(precision) * MicroBatchTokens(m, p) * m.hidden_size / (sp ? p.tp : 1);
}
}  // namespace

double OutputActivationBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision) {
  return 2 * MicroBatchHiddenBytes(m, p, precision) + 4 * MicroBatchLogits(m, p);
}

double DeferredEmbeddingWgradBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                                   const CostOptions& options, int64_t microbatches) {
  if (!options.defer_embedding_wgrad_compute || microbatches < 2) return 0;
  const int64_t done = microbatches - 1;
  const int64_t deferred = options.wgrad_deferral_limit > 0
                               ? std::min<int64_t>(options.wgrad_deferral_limit, done)
                               : done;
  return static_cast<double>(deferred) * (BytesPerElement(precision) * MicroBatchLogits(m, p) +
                                          MicroBatchHiddenBytes(m, p, precision));
}

double OutputTransientBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                            const CostOptions& options) {
  const double fused = options.cross_entropy_loss_fusion ? 4 : 0;
  return (precision == Precision::kFp32 ? 0 : 2 + fused) * MicroBatchLogits(m, p);
}

double WorkspaceBytes(double cc, const CostOptions& options) {
  constexpr double kMiB = 1024.0 * 1024;
  const bool hopper_on = cc >= 9;
  const double torch = options.cublas_workspace_bytes >= 0
                           ? static_cast<double>(options.cublas_workspace_bytes)
                           : (hopper_on ? 32 * kMiB : 8 * kMiB + 128 * 1024);
  const double te = hopper_on ? 32 * kMiB : 4 * kMiB;
  return torch + te;
}

BytesPerParameter BytesPerParam(const TrainingSpec& training, const ParallelConfig& parallel,
                                const CostOptions& options, int64_t shard_group) {
  BytesPerParameter b;
  const bool fp32 = training.precision == Precision::kFp32;
  const double dp = static_cast<double>(shard_group > 0 ? shard_group : parallel.dp_cp());
  const bool shard_grads =
      parallel.fsdp == Fsdp::kOptimGrads || parallel.fsdp == Fsdp::kOptimGradsParams;
  const bool shard_params = parallel.fsdp == Fsdp::kOptimGradsParams;
  const bool shard_optimizer = parallel.distributed_optimizer || parallel.fsdp != Fsdp::kNone;
  b.weights = BytesPerElement(training.precision) / (shard_params ? dp : 1);
  b.gradients = GradientBytes(training.precision, options) / (shard_grads ? dp : 1);
  const double moments = training.optimizer == Optimizer::kAdam ? 8 : 4;  // m, v | momentum
  const double master = fp32 ? 0 : 4;  // fp32 copy of 16-bit weights
  b.optimizer = (moments + master) / (shard_optimizer ? dp : 1);
  return b;
}

std::vector<int> InFlightPerStage(const PipelineSchedule& schedule) {
  std::vector<int> in_flight(schedule.stages);
  for (int r = 0; r < schedule.stages; ++r) in_flight[r] = MaxInFlight(schedule, r);
  return in_flight;
}

namespace {

// ---- StageMemories, in phases: what every stage's memory reads (StageMemoryModel: the bytes per
// parameter, the ends' and MTP layers' activations), each layer kind's parameters and each
// slot's activations once met (LayerFigures), a stage's chunks (FillStageChunks), what it holds
// but its in-flight activations (StaticMemory), then with them (AddActivations). A search runs
// EstimatePeakMemory per candidate: the phases are inline functions, as the lambdas of the
// single function they were, and the figures and the chunks' layers (ChunkKinds), which the
// functions they call see, are kept apart from the model's numbers, which the compiler then
// keeps at hand across the stages.

// What every stage's memory reads.
struct StageMemoryModel {
  StageMemoryModel(const ModelSpec& model, const ClusterSpec& cluster, const TrainingSpec& train,
                   const ParallelConfig& parallel, const CostOptions& opts)
      : m(model),
        training(train),
        p(parallel),
        per_param(BytesPerParam(train, parallel, opts)),
        layer_params(LayerParameters(model, parallel.tp)),
        expert_per_param(model.moe() ? BytesPerParam(train, parallel, opts, parallel.expert_dp())
                                     : BytesPerParameter{}),
        mtp_kind(model.IsMoeLayer(model.num_layers - 1) ? LayerKind::kMoeTransformer
                                                        : LayerKind::kTransformer),
        embedding_act(EmbeddingActivationBytes(model, parallel)),
        output_act(OutputActivationBytes(model, parallel, train.precision)),
        output_transient(OutputTransientBytes(model, parallel, train.precision, opts)),
        deferred_wgrad(DeferredEmbeddingWgradBytes(model, parallel, train.precision, opts,
                                                   NumMicrobatches(train, parallel))),
        reserved(static_cast<double>(cluster.gpu.reserved_bytes)),
        workspace(WorkspaceBytes(cluster.gpu.compute_capability, opts)),
        fragmentation(cluster.gpu.fragmentation / (1 - cluster.gpu.fragmentation)),
        ebytes(BytesPerElement(train.precision)),
        grad_bytes(GradientBytes(train.precision, opts)),
        uniform(UniformChunks(model, train, parallel)),
        microbatches(NumMicrobatches(train, parallel)),
        kind_end(LayerKindEnd(model)) {
    if (m.mtp_num_layers > 0) {
      const Precision precision = training.precision;
      const int fp8_end =
          training.precision == Precision::kFp8 && training.fp8_bf16_layers_at_end == 0 ? 1 : 0;
      ParallelConfig q = p;
      q.recompute = Recompute::kNone;
      mtp_act =
          m.mtp_num_layers * (LayerActivationBytes(m, q, precision, opts, fp8_end == 0, mtp_kind) +
                              OutputActivationBytes(m, p, precision));
    }
  }

  const ModelSpec& m;
  const TrainingSpec& training;
  const ParallelConfig& p;
  const BytesPerParameter per_param;
  const double layer_params;  // a transformer layer's (LayerParameters)
  const BytesPerParameter expert_per_param;
  const LayerKind mtp_kind;  // an MTP layer's: the last layer's kind
  double mtp_act = 0;        // the MTP layers' activations, with their output layers'
  const double embedding_act, output_act, output_transient, deferred_wgrad;
  const double reserved, workspace, fragmentation;  // fragmentation: of what is used
  const double ebytes, grad_bytes;                  // a weight's and a gradient's bytes
  const bool uniform;  // every chunk's layers are the first's (UniformChunks)
  const int64_t microbatches;
  const int kind_end;  // the layer kinds are [0, kind_end)
};

// Per layer kind its parameters on this GPU; and per [kind][fp8][recompute] the activations
// kept and what recomputing one holds; each computed when a chunk first has such layers.
class LayerFigures {
 public:
  LayerFigures(const ModelSpec& m, const ParallelConfig& p, Precision precision,
               const CostOptions& options)
      : m_(m), p_(p), precision_(precision), options_(options) {}

  const LayerParams& Params(int kind) {
    if (!have_params_[kind]) {
      params_[kind] = LayerKindParams(m_, p_, static_cast<LayerKind>(kind));
      have_params_[kind] = true;
    }
    return params_[kind];
  }
  // As far as met: zero before Params(kind).
  const LayerParams& Met(int kind) const { return params_[kind]; }

  // Works out act(e, f, r) and transient(e, f, r), once.
  void Slot(int e, int f, int r) {
    if (!have_[e][f][r]) {
      ParallelConfig q = p_;
      if (r == 0) q.recompute = Recompute::kNone;
      const LayerKind lk = static_cast<LayerKind>(e);
      act_[e][f][r] = LayerActivationBytes(m_, q, precision_, options_, f == 0, lk);
      transient_[e][f][r] =
          r == 0 ? 0 : LayerRecomputeTransientBytes(m_, q, precision_, options_, f == 0, lk);
      have_[e][f][r] = true;
    }
  }
  double act(int e, int f, int r) const { return act_[e][f][r]; }
  double transient(int e, int f, int r) const { return transient_[e][f][r]; }

 private:
  const ModelSpec& m_;
  const ParallelConfig& p_;
  const Precision precision_;
  const CostOptions& options_;
  LayerParams params_[kNumLayerKinds];
  bool have_params_[kNumLayerKinds] = {};
  double act_[kNumLayerKinds][2][2], transient_[kNumLayerKinds][2][2];
  bool have_[kNumLayerKinds][2][2] = {};
};

// A stage's chunks: their layers' parameters (dense and experts), FP8 linear weights, the
// largest chunk's activations, the largest recomputation transient, the largest layer (a
// hybrid model's; a transformer's FSDP unit is its dense layer). With uniform chunks every
// stage's are alike.
struct StageChunks {
  double layers = 0, dense = 0, experts = 0, fp8_weights = 0, largest = 0, transient = 0;
  double fp8_experts = 0;  // of fp8_weights, the experts' (sharded over expert data parallel)
  double largest_layer = 0;
  std::vector<double> bytes;  // each chunk's activations (kept when the chunks differ)
};

// Stage r's chunks into `s` (its bytes' storage kept: one allocation for all stages).
inline void FillStageChunks(const StageMemoryModel& mm, LayerFigures& layers,
                            const ChunkKinds& chunk_kinds, int r, StageChunks& s) {
  const ModelSpec& m = mm.m;
  const ParallelConfig& p = mm.p;
  std::vector<double> bytes = std::move(s.bytes);
  bytes.clear();
  s = StageChunks{.bytes = std::move(bytes)};
  for (int c = 0; c < p.virtual_stages; ++c) {
    const ChunkLayers k = chunk_kinds(c * p.pp + r);
    double bytes = 0;
    for (int e = 0; e < mm.kind_end; ++e) {
      if (k.OfKind(static_cast<LayerKind>(e)) == 0) continue;
      const LayerParams& lp = layers.Params(e);
      s.largest_layer = std::max(s.largest_layer, m.hybrid() ? lp.total() : mm.layer_params);
      for (int f = 0; f < 2; ++f) {
        for (int rc = 0; rc < 2; ++rc) {
          const int n = k.count[e][f][rc];
          if (n == 0) continue;
          layers.Slot(e, f, rc);
          bytes += n * layers.act(e, f, rc);
          s.transient = std::max(s.transient, layers.transient(e, f, rc));
          s.dense += n * lp.dense;
          s.experts += n * lp.experts;
          if (f == 1) {
            s.fp8_weights += n * lp.linear_weights;
            s.fp8_experts += n * lp.experts;
          }
        }
      }
    }
    s.largest = std::max(s.largest, bytes);
    if (!mm.uniform) s.bytes.push_back(bytes);
    s.layers += k.total();
  }
}

// Everything of stage r (its chunks `k`) but what its in-flight count scales and the totals.
inline StageMemory StaticMemory(const StageMemoryModel& mm, LayerFigures& layers, int r,
                                const StageChunks& k) {
  const ModelSpec& m = mm.m;
  const ParallelConfig& p = mm.p;
  const BytesPerParameter &per_param = mm.per_param, &expert_per_param = mm.expert_per_param;
  StageMemory st;
  // Dense parameters (sharded over dp x cp) and experts (over the expert data-parallel group).
  // The last stage's MTP layers too (cost_model.cc counts them the same way).
  const double mtp = r == p.pp - 1 ? m.mtp_num_layers : 0;
  const double mtp_extra = 2.0 * m.hidden_size * m.hidden_size / p.tp + 3.0 * m.hidden_size;
  const LayerParams& mtp_params =
      mtp > 0 ? layers.Params(static_cast<int>(mm.mtp_kind)) : layers.Met(0);
  const double dense = k.dense + (r == 0 ? EmbeddingParameters(m, p.tp) : 0) +
                       (r == p.pp - 1 ? OutputParameters(m, p) : 0) +
                       mtp * (mtp_params.dense + mtp_extra);
  const double experts = k.experts + mtp * mtp_params.experts;
  st.parameters = dense + experts;
  st.weights_bytes = dense * per_param.weights + experts * expert_per_param.weights;
  if (k.fp8_weights > 0) {
    // Transformer Engine's FP8 copies of the linear weights and their transposes (Hopper's
    // FP8 GEMMs take one operand layout), 2 bytes per weight; with FP8 primary weights
    // (--fp8-param-gather) they replace the 16-bit weights. Megatron-FSDP sharding the
    // parameters shards the FP8 primary weights too (1 byte over the shard group) and drops
    // each module's transposes after its forward and its backward (megatron_fsdp.py
    // release_module_parameters; the gathered unit's are in the FSDP buffers), unless
    // --keep-fp8-transpose-cache keeps them all: "number of parameter x 1 Byte" (Megatron-FSDP
    // README, keep_fp8_transpose_cache).
    // The experts' primary weights are sharded over the expert data-parallel group, the rest
    // over data parallel (as cost_model.cc's parameter gather counts them): each replaces its
    // own 16-bit bytes (once the experts' took the dense shard's, and a MoE model's weights
    // came out negative).
    const auto fp8_bytes = [&](const BytesPerParameter& b) {
      double bytes = 2;
      if (mm.training.fp8_param_gather) {
        if (p.fsdp == Fsdp::kOptimGradsParams)
          bytes = b.weights / 2 + (mm.training.keep_fp8_transpose_cache ? 1 : 0);
        bytes -= b.weights;
      }
      return bytes;
    };
    st.weights_bytes += (k.fp8_weights - k.fp8_experts) * fp8_bytes(per_param) +
                        k.fp8_experts * fp8_bytes(expert_per_param);
  }
  st.gradients_bytes = dense * per_param.gradients + experts * expert_per_param.gradients;
  st.optimizer_bytes = dense * per_param.optimizer + experts * expert_per_param.optimizer;
  st.reserved_bytes = mm.reserved;
  st.workspace_bytes = mm.workspace;
  if (p.fsdp == Fsdp::kOptimGradsParams && k.layers > 0) {
    st.fsdp_buffer_bytes = 2 * k.largest_layer * mm.ebytes + k.largest_layer * mm.grad_bytes;
  } else if (p.fsdp == Fsdp::kOptimGrads && k.layers > 0) {
    st.fsdp_buffer_bytes = k.largest_layer * mm.grad_bytes;  // one layer's gradients before the RS
  }
  return st;
}

// Chunks of different sizes on an interleaved stage: which of them are in flight at the
// peak is worked out exactly (alike ones all count as the largest).
inline bool ExactInFlight(const StageMemoryModel& mm, int r, const StageChunks& k) {
  const ParallelConfig& p = mm.p;
  return !mm.uniform && p.schedule == Schedule::kInterleaved &&
         static_cast<int>(k.bytes.size()) == p.virtual_stages &&
         (r == 0 || std::any_of(k.bytes.begin(), k.bytes.end(),
                                [&](double b) { return b != k.bytes.front(); }));
}

// Stage r's activations (its chunks `k`, `in_flight` of them held at once) and the totals
// into `st`, which holds the rest.
inline void AddActivations(const StageMemoryModel& mm, int r, const StageChunks& k, int in_flight,
                           StageMemory& st) {
  const ParallelConfig& p = mm.p;
  st.in_flight = in_flight;
  // Every in-flight chunk holds its layers; stage 0's chunk 0 adds the embedding's mask
  // (counted for every in-flight chunk: a bound, off by the few non-first chunks' masks).
  double held = in_flight * (r == 0 ? k.largest + mm.embedding_act : k.largest);
  if (ExactInFlight(mm, r, k)) {
    std::vector<double> first;  // stage 0's chunk 0 with the embedding's mask
    if (r == 0 && mm.embedding_act > 0) (first = k.bytes)[0] += mm.embedding_act;
    held = PeakInFlightWeight(p.schedule, p.pp, static_cast<int>(mm.microbatches), p.virtual_stages,
                              r, first.empty() ? std::span<const double>(k.bytes) : first);
  }
  st.activations_bytes = r == p.pp - 1 ? held + (mm.output_act + mm.mtp_act) + mm.deferred_wgrad +
                                             std::max(k.transient, mm.output_transient)
                                       : held + k.transient;
  const double used = st.weights_bytes + st.gradients_bytes + st.optimizer_bytes +
                      st.activations_bytes + st.fsdp_buffer_bytes + st.workspace_bytes;
  st.fragmentation_bytes = used * mm.fragmentation;
  st.peak_bytes = used + st.fragmentation_bytes + st.reserved_bytes;
}

// EstimateMemory, and EstimatePeakMemory when `all` is null: then only the stages that can hold
// the peak are worked out and the largest goes to `peak`.
void StageMemories(const ModelSpec& m, const ClusterSpec& cluster, const TrainingSpec& training,
                   const ParallelConfig& p, std::span<const int> in_flight,
                   const CostOptions& options, MemoryEstimate* all, MemoryPeak* peak) {
  PTDP_CHECK(static_cast<int>(in_flight.size()) == p.pp);
  const StageMemoryModel mm(m, cluster, training, p, options);
  LayerFigures layers(m, p, training.precision, options);
  const ChunkKinds chunk_kinds(m, training, p);
  const bool uniform = mm.uniform;
  const auto chunks_of = [&](int r) {
    StageChunks s;
    FillStageChunks(mm, layers, chunk_kinds, r, s);
    return s;
  };
  const StageChunks same = uniform ? chunks_of(0) : StageChunks{};
  // The stages between the first and the last are alike when their layers are.
  const bool alike = MiddleStagesAlike(m, training, p);
  const StageChunks middle_chunks = alike && !uniform && p.pp > 2 ? chunks_of(1) : same;
  const StageMemory middle =
      alike && p.pp > 2 ? StaticMemory(mm, layers, 1, middle_chunks) : StageMemory{};

  // For the peak alone: of the alike stages between the first and the last, the one holding
  // the most (the first of them), unless their peak needs the exact walk; -1: every stage.
  int inner_peak = -1;
  if (all == nullptr && alike && p.pp > 2 && !ExactInFlight(mm, 1, middle_chunks)) {
    inner_peak = 1;
    for (int r = 2; r < p.pp - 1; ++r) {
      if (middle_chunks.largest > 0 && in_flight[r] > in_flight[inner_peak]) inner_peak = r;
    }
  }

  if (all != nullptr) all->stages.reserve(p.pp);
  double largest = -1;
  StageChunks own;
  StageMemory one;
  // Every stage, or with inner_peak the first, that one and the last.
  const auto next = [&](int r) {
    if (inner_peak < 0) return r + 1;
    return r == 0 ? inner_peak : r == inner_peak ? p.pp - 1 : p.pp;
  };
  for (int r = 0; r < p.pp; r = next(r)) {
    const bool inner = alike && r > 0 && r < p.pp - 1;
    if (!uniform && !inner) FillStageChunks(mm, layers, chunk_kinds, r, own);
    const StageChunks& k = uniform ? same : inner ? middle_chunks : own;
    StageMemory& st = all != nullptr ? all->stages.emplace_back() : one;
    st = inner ? middle : StaticMemory(mm, layers, r, k);
    AddActivations(mm, r, k, in_flight[r], st);
    if (st.peak_bytes > largest) {
      largest = st.peak_bytes;
      if (all != nullptr) all->largest_stage = r;
      if (peak != nullptr) *peak = MemoryPeak{.stage = r, .memory = st};
    }
  }
}

}  // namespace

MemoryEstimate EstimateMemory(const ModelSpec& m, const ClusterSpec& cluster,
                              const TrainingSpec& training, const ParallelConfig& p,
                              std::span<const int> in_flight, const CostOptions& options) {
  MemoryEstimate est;
  StageMemories(m, cluster, training, p, in_flight, options, &est, nullptr);
  return est;
}

MemoryPeak EstimatePeakMemory(const ModelSpec& m, const ClusterSpec& cluster,
                              const TrainingSpec& training, const ParallelConfig& p,
                              std::span<const int> in_flight, const CostOptions& options) {
  MemoryPeak peak;
  StageMemories(m, cluster, training, p, in_flight, options, nullptr, &peak);
  return peak;
}

std::string AllocatorSurplusNote(const StageMemory& s, double capacity, MemoryUnit unit) {
  const double without = s.peak_bytes - s.fragmentation_bytes;
  if (s.peak_bytes <= capacity || without > capacity) return "";
  return fmt::format(
      "; without the caching allocator's usual surplus it needs {}: PyTorch frees its cache and "
      "retries before it fails, so it may run, slower (PYTORCH_CUDA_ALLOC_CONF="
      "expandable_segments:True keeps the surplus small)",
      Memory(without, unit));
}

std::string MemoryProblem(const MemoryEstimate& est, const ClusterSpec& cluster, MemoryUnit unit) {
  if (est.stages.empty()) return "";
  const StageMemory& s = est.stages[est.largest_stage];
  const double capacity = static_cast<double>(cluster.gpu.hbm_bytes);
  if (s.peak_bytes <= capacity) return "";
  const auto gb = [unit](double bytes) { return InMemoryUnit(bytes, unit); };
  const std::string_view u = MemoryUnitName(unit);
  return fmt::format(
      "pipeline stage {} needs {:.1f} {} per GPU but {} has {:.1f} {}: weights {:.1f}, "
      "gradients {:.1f}, optimizer {:.1f}, activations {:.1f} ({} micro-batch chunks in "
      "flight), workspaces {:.1f}, reserved {:.1f}, fragmentation {:.1f}{}",
      est.largest_stage, gb(s.peak_bytes), u, cluster.gpu.name, gb(capacity), u,
      gb(s.weights_bytes), gb(s.gradients_bytes), gb(s.optimizer_bytes), gb(s.activations_bytes),
      s.in_flight, gb(s.workspace_bytes), gb(s.reserved_bytes), gb(s.fragmentation_bytes),
      AllocatorSurplusNote(s, capacity, unit));
}

}  // namespace ptdp
