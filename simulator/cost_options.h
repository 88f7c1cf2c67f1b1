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
          .scatter_gather_tensors_in_pipeline = true};
}

// Megatron-LM v3.0 (2022), the code of Korthikanti et al. 2022: as 2021 but with the weight-
// gradient GEMMs accumulating into the main gradients (gradient_accumulation_fusion, default on
// since then).
inline CostOptions Megatron2022Options() {
  CostOptions o = Megatron2021Options();
  o.gradient_accumulation_fusion = true;
  return o;
}

// Bytes of one main-gradient element: 4 when gradients are accumulated in fp32 (forced for bf16
// by Megatron's validate_args, and for fp32 training), else 2.
inline int GradientBytes(Precision precision, const CostOptions& options) {
  return precision != Precision::kFp16 || options.accumulate_allreduce_grads_in_fp32 ? 4 : 2;
}

}  // namespace ptdp
