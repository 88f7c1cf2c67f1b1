// Software behaviour that changes costs but is not part of the parallel layout: Megatron-LM
// flags that ParallelConfig does not carry, and implementation choices that changed between
// Megatron versions. The defaults are Megatron-LM core's defaults (megatron/training/
// arguments.py); Megatron2021Options() describes the code of Narayanan et al. 2021.
#pragma once

#include "core/training_spec.h"

namespace ptdp {

struct CostOptions {
  // --overlap-grad-reduce: the data-parallel gradient reduction overlaps the backward.
  bool overlap_grad_reduce = false;
  // --overlap-p2p-communication: pipeline sends and receives run beside compute. Without it
  // (the default) Megatron's p2p calls wait for completion, so a send occupies the sender's
  // compute stream.
  bool overlap_p2p_communication = false;
  // --accumulate-allreduce-grads-in-fp32: main gradients (and their reduction) in fp32. Megatron
  // forces it for bf16; fp32 training has fp32 gradients anyway.
  bool accumulate_allreduce_grads_in_fp32 = false;
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
  // multiple of 4, Megatron falls back to an unfused fp32 PyTorch softmax.
  int fused_softmax_max_seq_length = 4096;
  // Megatron's asynchronous input-gradient reduction (LinearWithGradAccumulationAndAsync-
  // Communication, megatron/core/tensor_parallel/layers.py; on unless
  // --no-async-tensor-model-parallel-allreduce in Megatron-LM and Megatron-DeepSpeed): a
  // column-parallel linear's input-gradient all-reduce (reduce-scatter with sequence parallelism)
  // runs beside its weight-gradient GEMM (layer_work.h AsyncOverlap).
  bool async_tensor_parallel_allreduce = true;

  bool operator==(const CostOptions&) const = default;
};

// The code of Narayanan et al. 2021 (Megatron-LM v2, as in the paper's runs and NVIDIA's
// examples/academic_paper_scripts/sc21): gradient all-reduce after the backward, blocking p2p,
// fp16 main gradients by default, no gradient-accumulation fusion, scatter-gather p2p.
inline CostOptions Megatron2021Options() {
  return {.overlap_grad_reduce = false,
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
  o.gradient_accumulation_fusion = true;
  return o;
}

// Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed with DeepSpeed's engine, as vTrain's measured
// runs used it): DeepSpeed reduces the fp16 gradients after the backward (no bucketing, no
// overlap); its pipeline engine sends blocking and, with tensor parallelism, each TP rank sends
// 1/t of the activation and the receiver all-gathers it (PipelineEngine.is_pipe_partitioned);
// autograd accumulates fp16 gradients in .grad (the fused accumulation is commented out in
// LinearWithGradAccumulationAndAsyncCommunication); the input-gradient all-reduce is async; the
// fused softmax takes sk <= 2048 (megatron/model/fused_softmax.py).
inline CostOptions MegatronDeepSpeedOptions() {
  return {.overlap_grad_reduce = false,
          .overlap_p2p_communication = false,
          .accumulate_allreduce_grads_in_fp32 = false,
          .gradient_accumulation_fusion = false,
          .scatter_gather_tensors_in_pipeline = true,
          .fused_softmax_max_seq_length = 2048,
          .async_tensor_parallel_allreduce = true};
}

// Bytes of one main-gradient element: 4 when gradients are accumulated in fp32 (forced for bf16
// by Megatron's validate_args, and for fp32 training), else 2.
inline int GradientBytes(Precision precision, const CostOptions& options) {
  return precision != Precision::kFp16 || options.accumulate_allreduce_grads_in_fp32 ? 4 : 2;
}

}  // namespace ptdp
