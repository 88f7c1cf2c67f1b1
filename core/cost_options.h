// Software behaviour that changes costs but is not part of the parallel layout: the Megatron-LM
// flags that ParallelConfig does not carry, the attention kernels, and the implementation
// choices that changed between Megatron versions and forks. A plan file carries them (its
// `options` section), so that what is simulated, written as flags and executed is one thing.
//
// The defaults are today's Megatron-Core (megatron/training/arguments.py at the 2026-08 head)
// with Transformer Engine's fused (flash-style) attention; the other software stacks are named
// presets (CostOptionsFor), for the published runs of 2021 and 2022 and for Megatron-DeepSpeed.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/enum_names.h"
#include "core/training_spec.h"

namespace ptdp {

// The training code whose behaviour is modelled (`--megatron-version`, plan key
// options.megatron_version): each name is a preset of the fields below.
enum class SoftwareStack { kCore, k2022, k2021, kMegatronDeepSpeed };

// How the core attention (softmax(Q K^T / sqrt(d)) V) runs (Megatron's --attention-backend):
//  - flash: a flash-style kernel (FlashAttention via Transformer Engine): tiles of Q, K, V in
//    on-chip memory with an online softmax, the s x s scores never written to HBM; its backward
//    recomputes them. Keeps Q, K, V, the output and the softmax statistics.
//  - fused: the same algorithm in cuDNN's fused attention (Transformer Engine's FusedAttention);
//    its own throughput table in the profile.
//  - unfused: Megatron's local core attention: Q K^T as a batched GEMM into HBM, the fused
//    scale-mask-softmax kernel where it applies (fused_softmax_max_seq_length) or an fp32
//    PyTorch softmax, dropout, x V; keeps the s x s probabilities for the backward.
// Megatron's `auto` lets Transformer Engine pick between the two flash-style kernels; `local`
// is unfused here.
enum class AttentionBackend { kFlash, kFused, kUnfused };

// How a MoE layer moves tokens to their experts' ranks and back (--moe-token-dispatcher-type,
// megatron/core/transformer/moe/token_dispatcher.py):
//  - allgather: every rank of the expert tensor x expert parallel group all-gathers all their
//    tokens, keeps those routed to its experts, and reduce-scatters the outputs back;
//  - alltoall: each token's hidden state goes to the ranks of its top-k experts in one
//    all-to-all over the EP group (all-gathered over the expert TP group when etp > 1), and
//    comes back in another;
//  - flex: DeepEP's fused dispatch and combine kernels, timed here as the all-to-all.
enum class MoeDispatcher { kAllGather, kAllToAll, kFlex };

inline constexpr EnumName<SoftwareStack> kSoftwareStackNames[] = {
    {"core", SoftwareStack::kCore},
    {"2022", SoftwareStack::k2022},
    {"2021", SoftwareStack::k2021},
    {"megatron-deepspeed", SoftwareStack::kMegatronDeepSpeed}};
inline constexpr EnumName<AttentionBackend> kAttentionBackendNames[] = {
    {"flash", AttentionBackend::kFlash},
    {"fused", AttentionBackend::kFused},
    {"unfused", AttentionBackend::kUnfused}};

inline constexpr EnumName<MoeDispatcher> kMoeDispatcherNames[] = {
    {"allgather", MoeDispatcher::kAllGather},
    {"alltoall", MoeDispatcher::kAllToAll},
    {"flex", MoeDispatcher::kFlex}};

inline std::string_view Name(MoeDispatcher d) {
  return NameOf<MoeDispatcher>(kMoeDispatcherNames, d);
}
inline std::string_view Name(SoftwareStack s) {
  return NameOf<SoftwareStack>(kSoftwareStackNames, s);
}
inline std::string_view Name(AttentionBackend a) {
  return NameOf<AttentionBackend>(kAttentionBackendNames, a);
}

struct CostOptions {
  // The preset the other fields started from (they may have been changed since).
  SoftwareStack stack = SoftwareStack::kCore;
  // --attention-backend.
  AttentionBackend attention = AttentionBackend::kFlash;
  // --overlap-grad-reduce: the data-parallel gradient reduction runs bucket by bucket during the
  // backward (each bucket once its gradients are complete) instead of after it.
  bool overlap_grad_reduce = false;
  // --overlap-param-gather (needs the distributed optimizer and --overlap-grad-reduce): the
  // updated parameters are all-gathered bucket by bucket during the next step's forward instead
  // of after the optimizer step.
  bool overlap_param_gather = false;
  // --ddp-bucket-size, in parameters; 0: Megatron's default, max(40,000,000, 1,000,000 x dp).
  int64_t ddp_bucket_size = 0;
  // --tp-comm-overlap (needs sequence parallelism): Transformer Engine's userbuffers split each
  // tensor-parallel all-gather / reduce-scatter into chunks pipelined with the GEMM that
  // consumes or produces it.
  bool tp_comm_overlap = false;
  // --overlap-p2p-communication: pipeline sends and receives run beside compute. Without it
  // (the default) Megatron's p2p calls wait for completion, so a send occupies the sender's
  // compute stream.
  bool overlap_p2p_communication = false;
  // --accumulate-allreduce-grads-in-fp32: main gradients (and their reduction) in fp32. Megatron
  // forces it for bf16; fp32 training has fp32 gradients anyway.
  bool accumulate_allreduce_grads_in_fp32 = false;
  // --grad-reduce-in-bf16: with bf16 (and FP8) training, the main gradients are bf16, kept and
  // reduced in 2 bytes; without it Megatron accumulates and reduces them in fp32
  // (megatron/training/arguments.py: `if args.grad_reduce_in_bf16:
  // args.accumulate_allreduce_grads_in_fp32 = False`). Megatron-Bridge's performance recipes
  // set it (grad_reduce_in_fp32 = False).
  bool grad_reduce_in_bf16 = false;
  // --cross-entropy-loss-fusion with --cross-entropy-fusion-impl native (the default): Megatron-
  // Core's jit-fused vocabulary-parallel cross entropy (megatron/core/fusions/
  // fused_cross_entropy.py), whose fused functions return new fp32 tensors (the fp32 logits,
  // then their exponentials) where the unfused loss works in place: one more fp32 copy of the
  // last stage's logits at the loss's peak (memory_model.h OutputTransientBytes).
  bool cross_entropy_loss_fusion = false;
  // --defer-embedding-wgrad-compute (--wgrad-deferral-limit N; 0: no limit): the output layer's
  // weight-gradient GEMMs wait for the pipeline flush, so the last stage keeps each deferred
  // micro-batch's logits gradient and the layer's input (megatron/core/tensor_parallel/layers.py:
  // grad_output_buffer, embedding_activation_buffer) until then: memory_model.h
  // DeferredEmbeddingWgradBytes. The move of those GEMMs into the flush is not timed.
  bool defer_embedding_wgrad_compute = false;
  int wgrad_deferral_limit = 0;
  // Weight-gradient GEMMs accumulate into the fp32 main gradient in their epilogue (Megatron's
  // gradient_accumulation_fusion, on by default since 2022); without it the GEMM writes a
  // temporary gradient that a separate kernel adds to the main gradient.
  bool gradient_accumulation_fusion = true;
  // Megatron 2021's "scatter-gather" pipeline optimisation (--no-scatter-gather-tensors-in-
  // pipeline to disable; removed in Megatron core): each tensor-parallel rank sends 1/tp of the
  // activation to the next stage, which all-gathers it over NVLink.
  bool scatter_gather_tensors_in_pipeline = false;
  // Longest key sequence Megatron's fused scale-mask-softmax kernel takes (FusedScaleMaskSoftmax.
  // is_kernel_available, megatron/core/fusions/fused_softmax.py: 16 < sk <= 4096; 2048 in
  // Megatron-LM v2/v3 and Megatron-DeepSpeed). Beyond it, or when b x heads per GPU is not a
  // multiple of 4, Megatron falls back to an unfused fp32 PyTorch softmax. Unfused attention
  // only.
  int fused_softmax_max_seq_length = 4096;
  // Megatron's asynchronous input-gradient reduction (LinearWithGradAccumulationAndAsync-
  // Communication, megatron/core/tensor_parallel/layers.py; on unless
  // --no-async-tensor-model-parallel-allreduce in Megatron-LM and Megatron-DeepSpeed): a
  // column-parallel linear's input-gradient all-reduce (reduce-scatter with sequence parallelism)
  // runs beside its weight-gradient GEMM (layer_work.h AsyncOverlap).
  bool async_tensor_parallel_allreduce = true;
  // --moe-token-dispatcher-type (Megatron's default: allgather).
  MoeDispatcher moe_token_dispatcher = MoeDispatcher::kAllGather;
  // The experts' load balance, an assumption rather than a setting: the tokens of the busiest
  // expert-parallel rank over the mean. The step waits for the busiest rank in every MoE layer,
  // so its experts' GEMMs (and its share of the dispatch) are stretched by this factor. 1: the
  // router balances perfectly (as with Megatron's --moe-router-force-load-balancing, or a
  // well-converged auxiliary loss); measured runs early in training see 1.1-1.5.
  double moe_load_imbalance = 1.0;
  // PyTorch's cuBLAS workspace per stream (CUBLAS_WORKSPACE_CONFIG at launch, its :SIZE:COUNT
  // pairs in KiB summed); -1: PyTorch's default for the GPU (memory_model.h WorkspaceBytes).
  int64_t cublas_workspace_bytes = -1;

  bool operator==(const CostOptions&) const = default;
};

// Today's Megatron-Core: the defaults above.
inline CostOptions MegatronCoreOptions() { return {}; }

// The code of Narayanan et al. 2021 (Megatron-LM v2, as in the paper's runs and NVIDIA's
// examples/academic_paper_scripts/sc21): unfused attention with the 2048-token fused softmax,
// gradient all-reduce after the backward, blocking p2p, fp16 main gradients by default, no
// gradient-accumulation fusion, scatter-gather p2p.
inline CostOptions Megatron2021Options() {
  return {.stack = SoftwareStack::k2021,
          .attention = AttentionBackend::kUnfused,
          .overlap_grad_reduce = false,
          .overlap_p2p_communication = false,
          .accumulate_allreduce_grads_in_fp32 = false,
          .gradient_accumulation_fusion = false,
          .scatter_gather_tensors_in_pipeline = true,
          .fused_softmax_max_seq_length = 2048,
          .async_tensor_parallel_allreduce = false};
}

// Megatron-LM v3.0 (2022), the code of Korthikanti et al. 2022: as 2021 but with the weight-
// gradient GEMMs accumulating into the main gradients (gradient_accumulation_fusion, default on
// since then). The async input-gradient reduction stays off here: dgx-a100-80gb's efficiency
// levels were calibrated on these runs without it.
inline CostOptions Megatron2022Options() {
  CostOptions o = Megatron2021Options();
  o.stack = SoftwareStack::k2022;
  o.gradient_accumulation_fusion = true;
  return o;
}

// Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed with DeepSpeed's engine, as vTrain's measured
// runs used it): unfused attention; DeepSpeed reduces the fp16 gradients after the backward (no
// bucketing, no overlap); its pipeline engine sends blocking and, with tensor parallelism, each
// TP rank sends 1/t of the activation and the receiver all-gathers it
// (PipelineEngine.is_pipe_partitioned); autograd accumulates fp16 gradients in .grad (the fused
// accumulation is commented out in LinearWithGradAccumulationAndAsyncCommunication); the
// input-gradient all-reduce is async; the fused softmax takes sk <= 2048
// (megatron/model/fused_softmax.py).
inline CostOptions MegatronDeepSpeedOptions() {
  CostOptions o = Megatron2021Options();
  o.stack = SoftwareStack::kMegatronDeepSpeed;
  o.async_tensor_parallel_allreduce = true;
  return o;
}

// The preset of a stack.
inline CostOptions CostOptionsFor(SoftwareStack stack) {
  switch (stack) {
    case SoftwareStack::k2021:
      return Megatron2021Options();
    case SoftwareStack::k2022:
      return Megatron2022Options();
    case SoftwareStack::kMegatronDeepSpeed:
      return MegatronDeepSpeedOptions();
    case SoftwareStack::kCore:
      break;
  }
  return MegatronCoreOptions();
}

// Bytes of one main-gradient element: 4 when gradients are accumulated in fp32 (forced for bf16
// by Megatron's validate_args, and for fp32 training), else 2.
// Parameters per DDP gradient bucket (--overlap-grad-reduce): --ddp-bucket-size, or Megatron's
// default max(40,000,000, 1,000,000 x dp x cp) (megatron/core/distributed/
// distributed_data_parallel_config.py, training.py). The simulator and the executor split each
// model chunk's parameters into ceil(n / this) buckets.
inline int64_t DdpBucketParameters(const CostOptions& options, int64_t dp_cp) {
  if (options.ddp_bucket_size > 0) return options.ddp_bucket_size;
  return dp_cp * 1'000'000 > 40'000'000 ? dp_cp * 1'000'000 : 40'000'000;
}

inline int GradientBytes(Precision precision, const CostOptions& options) {
  switch (precision) {
    case Precision::kFp16:
      return options.accumulate_allreduce_grads_in_fp32 ? 4 : 2;
    case Precision::kBf16:
    case Precision::kFp8:
      return options.grad_reduce_in_bf16 ? 2 : 4;
    case Precision::kFp32:
      break;
  }
  return 4;
}

// Whether the core attention runs as a flash-style kernel: the backend is flash or fused and
// the precision 16-bit (fp32 has no flash kernels; Megatron's auto backend falls back).
inline bool FlashStyleAttention(Precision precision, const CostOptions& options) {
  return options.attention != AttentionBackend::kUnfused && precision != Precision::kFp32;
}

}  // namespace ptdp
