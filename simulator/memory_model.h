// Device memory of one GPU per pipeline stage: weights, gradients, optimizer state, activations
// of the micro-batches the schedule keeps in flight, and an allowance for what the allocator and
// the libraries take.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/schedule.h"
#include "core/text.h"
#include "core/training_spec.h"

namespace ptdp {

// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
// Table 2: activation bytes of one transformer layer for one micro-batch in 16-bit training,
// exactly as published (4h GeLU MLP, a heads, no grouped-query attention):
//   no recompute:  sbh (10 + 24/t + 5as/(ht))   (t = 1: sbh (34 + 5as/h))
//   + sequence parallel:  sbh/t (34 + 5as/h)
//   selective recompute:  sbh (10 + 24/t);  with sequence parallel 34 sbh/t
//   full recompute:  2 sbh (the layer's input)
double KorthikantiTable2Bytes(double s, double b, double h, double a, double t,
                              bool sequence_parallel, Recompute recompute);

// The same quantity for any model this project describes, from its parts (per GPU):
//   e sbh x {2 norm inputs} + x sbh {QKV input, fc1 input} + sbh x {2 dropout masks, with
//     hidden dropout}
//     (divided by t with sequence parallelism, replicated without)
//   + e sb d (a_t + 2 g_t) (Q, K, V) + (e | x | e + x) sb d a_t (the projection's input: kept
//     in 16 bits for a flash-style attention's backward, in FP8 for the projection's)
//   + e sb fc1_t (the activation's input) + x sb f_t (its output, fc2's input)
//   + attention: unfused (2e + 1) a_t s^2 b (softmax output, dropout mask and output; e a_t s^2 b
//     without attention dropout) and
//     e sb d 2 (a_t - g_t) (K, V repeated per head); flash-style 4 a_t s b (the fp32 softmax
//     statistics); selective recompute drops the former, and the statistics of the latter
// with a_t = a/t heads, g_t = max(g/t, 1) key/value groups, f_t = f/t, fc1_t = 2 f_t with
// SwiGLU, e bytes per element, x the linears' saved inputs (e, or 1 in an FP8 layer).
// Full recompute keeps only the layer's input, e sbh (divided by t with sequence parallelism).
// With context parallelism s is each GPU's s / cp tokens (ring attention keeps only the local
// keys and values: the others' blocks are passed around again in the backward).
// For 16-bit GPT with unfused attention it equals KorthikantiTable2Bytes. `bf16_layer`: a layer
// kept in bf16 in fp8 training. `kind` (ModelSpec::KindOfLayer): a MoE layer's MLP part is
// instead the router's fp32 scores 4 s b E (s b / t tokens with sequence parallelism), for the
// R tokens its experts take (layer_work.h) their fc1 input x R h, fc1 output e R fc1_e and
// activation output x R f_e (the probabilities multiply inside the experts, so the combine keeps
// nothing), and the shared experts' as a dense MLP of their width. A hybrid model's attention,
// MLP and MoE layers hold their block's part (its norm input, first linear's input and mask, and
// what follows); a Mamba layer its norm's input, in_proj's input and the mask, plus (d_i =
// d_inner / t, g_t = g / t Mamba groups, w_t = 2 d_i + 2 g_t N + heads / t in_proj's output
// width):
//   e sb w_t (the combined conv + scan kernel's input z x B C dt) + e sb d_i (its ungated
//   output) + e sb d_i + 4 sb g_t (the gated RMSNorm's input and 1/rms) + x sb d_i (out_proj's
//   input) (mamba_ssm MambaSplitConv1dScanCombinedFn saves zxbcdt and out_x; the conv output
//   and the chunk states are recomputed in its backward).
// Selective recompute drops what its modules name (ParallelConfig::recompute_modules): core_attn
// the attention part above; layernorm the norms' outputs (the first linears' inputs); mlp the
// dense MLP's fc1 output and fc2 input; moe_act the experts' x R f_e; shared_experts theirs; moe
// the whole MoE part; mla_up_proj MLA's Q, K, V less the latents it keeps.
double LayerActivationBytes(const ModelSpec& model, const ParallelConfig& parallel,
                            Precision precision, const CostOptions& options,
                            bool bf16_layer = false, LayerKind kind = LayerKind::kTransformer);

// What the weight-gradient pass (W) still needs once the input gradient (B) is done: the inputs
// of the linears of a layer (Qi et al. 2023's split of the backward).
double LayerWeightGradActivationBytes(const ModelSpec& model, const ParallelConfig& parallel,
                                      Precision precision, bool bf16_layer = false,
                                      LayerKind kind = LayerKind::kTransformer);

// What one layer's recomputation holds while its backward runs (one micro-batch): the whole
// layer's activations with full recompute, the attention's with selective, 0 without.
double LayerRecomputeTransientBytes(const ModelSpec& model, const ParallelConfig& parallel,
                                    Precision precision, const CostOptions& options,
                                    bool bf16_layer = false,
                                    LayerKind kind = LayerKind::kTransformer);

// Stage 0, per micro-batch: the embedding dropout's mask (Korthikanti et al. 2022, section 4.3),
// sbh bytes (divided by t with sequence parallelism); 0 without hidden dropout.
double EmbeddingActivationBytes(const ModelSpec& model, const ParallelConfig& parallel);
// Last stage, per micro-batch: the final norm's and the LM head's inputs (e sbh each, divided by
// t with sequence parallelism) and the fp32 softmax the vocabulary-parallel cross entropy keeps
// for its backward (4 s b V/t).
double OutputActivationBytes(const ModelSpec& model, const ParallelConfig& parallel,
                             Precision precision);
// Last stage, per micro-batch, for a moment: the 16-bit logits (2 s b V/t) beside their fp32 copy.
// Megatron-Core's vocabulary-parallel cross entropy (megatron/core/tensor_parallel/
// cross_entropy.py) takes the output layer's 16-bit logits, makes the fp32 copy it works on in
// place (`.float()`, then `-=` max, exp, /= sum: the copy becomes the softmax it keeps) while the
// caller still holds the 16-bit logits; its backward turns the fp32 gradient back into 16 bits
// beside it. 0 in fp32 training (no copy). With the jit-fused loss (CostOptions::
// cross_entropy_loss_fusion) one more fp32 copy, 4 s b V/t: its fused functions return new
// tensors where the unfused loss works in place; measured on Megatron-LM's functional tests on
// H100, gpt3_mcore_te_tp2_pp2 with it peaks 0.38 GiB (4.0 bytes per logit) above without it.
double OutputTransientBytes(const ModelSpec& model, const ParallelConfig& parallel,
                            Precision precision, const CostOptions& options = {});
// Last stage, with --defer-embedding-wgrad-compute: the output layer's weight gradients wait for
// the pipeline flush, so each deferred micro-batch's logits gradient (e s b V/t) and the layer's
// input (e s b h, over t with sequence parallelism) stay (megatron/core/tensor_parallel/
// layers.py: grad_output_buffer, embedding_activation_buffer, at most --wgrad-deferral-limit of
// them, all when 0). At the stage's peak, a micro-batch's forward, the buffers hold the
// micro-batches already through their backward: min(limit, m - 1). Measured on the H100
// functional test gpt3_mcore_te_tp2_pp2 with a limit of 2: 0.43 GiB above the same case without.
// 0 without the flag.
double DeferredEmbeddingWgradBytes(const ModelSpec& model, const ParallelConfig& parallel,
                                   Precision precision, const CostOptions& options,
                                   int64_t microbatches);

// Bytes per parameter held by this GPU for weights, gradients and optimizer state
// (Megatron-LM's theoretical_memory_usage.py; Rajbhandari et al. 2020 for the sharding):
//   mixed precision Adam: 2 (16-bit weight) + 4 (fp32 main gradient) + 12 (fp32 master weight,
//   Adam m and v) = 18; distributed optimizer (and Megatron-FSDP optim): 6 + 12/dp; Megatron-
//   FSDP optim_grads: 2 + 16/dp; optim_grads_params: 18/dp.
//   fp16 without --accumulate-allreduce-grads-in-fp32 keeps 2-byte main gradients: 16 and 4 +
//   12/dp. fp32 training: 4 (weight) + 4 (gradient) + 8 (m, v; no master copy) = 16; 8 + 8/dp. SGD
//   with momentum holds one state (4 bytes) instead of Adam's two.
struct BytesPerParameter {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double total() const { return weights + gradients + optimizer; }
};
// `shard_group`: the ranks the sharded states divide over; 0: dp x cp (the dense parameters'
// group); a MoE model's experts pass the expert data-parallel size.
BytesPerParameter BytesPerParam(const TrainingSpec& training, const ParallelConfig& parallel,
                                const CostOptions& options, int64_t shard_group = 0);

// The cuBLAS workspaces every rank allocates through PyTorch's caching allocator (so they count
// in torch.cuda.memory_allocated), for the GPU of compute capability `cc` (0: not known, taken as
// before Hopper):
//   - PyTorch's, per stream that runs a cuBLAS call (one: the compute stream): CUBLAS_WORKSPACE_
//     CONFIG's total when the launch sets it (options.cublas_workspace_bytes), else 32 MiB from
//     compute capability 9 on and 8 MiB + 128 KiB (":4096:2:16:8") before (aten/src/ATen/cuda/
//     CublasHandlePool.cpp, parseChosenWorkspaceSize);
//   - Transformer Engine's, one for its GEMMs: 32 MiB from compute capability 9 on, 4 MiB before
//     (transformer_engine/pytorch get_cublas_workspace_size_bytes; cuBLAS's documented
//     recommendation, cublasSetWorkspace).
double WorkspaceBytes(double compute_capability, const CostOptions& options);

struct StageMemory {
  double parameters = 0;     // on this GPU
  double weights_bytes = 0;  // with FP8 training's FP8 weight copies (and their transposes)
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;  // peak: the in-flight micro-batches plus the transient
  // Megatron-FSDP optim_grads_params: the unsharded parameters of the layers gathered at once
  // (the running one and the prefetched one) and one layer's unsharded gradients; else 0.
  double fsdp_buffer_bytes = 0;
  int in_flight = 0;               // micro-batch chunks held at once (from the schedule)
  double workspace_bytes = 0;      // cuBLAS workspaces (WorkspaceBytes)
  double reserved_bytes = 0;       // profile: outside PyTorch's allocator (CUDA context, NCCL)
  double fragmentation_bytes = 0;  // what PyTorch's caching allocator reserves beyond the above
  double peak_bytes = 0;           // everything above: what the fit verdict reads
  // What torch.cuda.max_memory_allocated would count: the peak less the allocator's and the
  // libraries' allowance.
  double allocated_bytes() const { return peak_bytes - reserved_bytes - fragmentation_bytes; }

  bool operator==(const StageMemory&) const = default;
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;  // by pipeline stage
  int largest_stage = 0;            // index of the largest peak_bytes
  double peak_bytes() const { return stages.empty() ? 0 : stages[largest_stage].peak_bytes; }
};

// Micro-batch chunks each stage holds at most under `schedule` (core/schedule.h MaxInFlight),
// computed once per (schedule, p, m, v) and passed to EstimateMemory.
std::vector<int> InFlightPerStage(const PipelineSchedule& schedule);

// Peak memory per stage. Stage r holds in_flight[r] micro-batch chunks, each counted as its
// largest chunk (the chunks of a stage differ only with an uneven split's account-for options
// or fp8's bf16 layers, by a layer at most: a bound), plus on stage 0 the embedding's dropout
// mask per micro-batch and on the last stage one micro-batch's output-layer buffers (final-norm
// and LM-head inputs, fp32 logits kept by the cross entropy); recomputation adds, transiently,
// one layer's recomputed activations. The sum is divided by (1 - fragmentation) and the
// profile's reserved bytes added.
MemoryEstimate EstimateMemory(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainingSpec& training, const ParallelConfig& parallel,
                              std::span<const int> in_flight, const CostOptions& options = {});

// What a search needs of EstimateMemory: its largest stage (largest_stage) and that stage's
// figures, the same numbers, without the other stages. The stages between the first and the
// last that differ only in their in-flight counts are worked out once, for the count that is
// largest (the first stage holding it).
struct MemoryPeak {
  int stage = 0;
  StageMemory memory;
  double peak_bytes() const { return memory.peak_bytes; }
};
MemoryPeak EstimatePeakMemory(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainingSpec& training, const ParallelConfig& parallel,
                              std::span<const int> in_flight, const CostOptions& options = {});

// For a stage that does not fit in `capacity_bytes` only because of the caching allocator's surplus
// (the profile's fragmentation: what PyTorch usually keeps cached beyond what it has allocated):
// what it needs without it, and that PyTorch frees its cache and retries before it fails
// (num_alloc_retries in torch.cuda.memory_stats), so the run may still go, slower. "" otherwise.
std::string AllocatorSurplusNote(const StageMemory& stage, double capacity_bytes, MemoryUnit unit);

// "" when every stage fits in the GPU's memory, else why not, with the numbers of the largest
// stage (for the planner's rejection reasons), in `unit`.
std::string MemoryProblem(const MemoryEstimate& estimate, const ClusterSpec& cluster,
                          MemoryUnit unit = MemoryUnit::kGiB);

}  // namespace ptdp
