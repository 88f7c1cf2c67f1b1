// FLOPs of a training step and utilisation figures.
//
// Model FLOPs count the matrix products the model needs once per step (forward, input gradient,
// weight gradient: 3 x the forward), independent of how it is run; hardware FLOPs add what the
// layout recomputes. For GPT (4h GeLU MLP, tied embeddings) and one step of B sequences:
//   model:     72 B s L h^2 (1 + s/(6h) + V/(12 h L))      Korthikanti et al. 2022, appendix A
//   full recompute: 96 B s L h^2 (1 + s/(6h) + V/(16 L h))  Narayanan et al. 2021, equation 3
// Both count the s x s attention products in full and leave out element-wise work (and a
// Mamba layer's convolution; its scan's chunk products count). Megatron-
// Core's logging (since 2025-03) and Megatron-Bridge's tables halve the two s x s products for
// the causal mask; the model FLOPs of the core stack (CostOptions) are counted so.
#pragma once

#include <cstdint>

#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"

namespace ptdp {

// The published closed forms above, V = the padded vocabulary (tp = 1), s = seq_length.
double KorthikantiModelFlops(const ModelSpec& model, int64_t global_batch_size);
double NarayananEq3Flops(const ModelSpec& model, int64_t global_batch_size);

// Forward matrix-product FLOPs of one sequence (micro-batch 1, unsharded): a transformer layer
// (QKV with grouped-query attention 2 s h (a + 2g) d, Q K^T and x V 2 x 2 s^2 a d, projection
// 2 s a d h, MLP 2 s h f x (3 with SwiGLU, else 2)), one of its two core-attention GEMMs
// (2 s^2 a d), the LM head 2 s h V. They equal the sums of the GEMMs in layer_work.h at tp = 1
// (a test checks it).
// `moe_layer`: one of a MoE model's MoE layers (router, top-k experts, shared experts).
double LayerForwardFlops(const ModelSpec& model, bool moe_layer = false);
// One layer of `kind`: its blocks' products (attention, dense MLP, router and top-k and shared
// experts), or a Mamba layer's (MambaForwardFlops).
double LayerKindForwardFlops(const ModelSpec& model, LayerKind kind);
// A Mamba-2 layer: in_proj 2 s h (2 d_inner + 2 g N + heads), out_proj 2 s d_inner h, and the
// SSD scan's chunk products (layer_work.h SsdScanWork, chunks of 128).
double AttentionForwardFlops(const ModelSpec& model);  // projections and core attention
double CoreAttentionForwardFlops(const ModelSpec& model);
double MambaForwardFlops(const ModelSpec& model);
double OutputForwardFlops(const ModelSpec& model);

// The model and hardware FLOPs for any model: 3 x the forward matrix-product FLOPs of the whole
// model per sequence x B; hardware FLOPs add the recomputed forward products (full: the layers'
// forward; selective: the core attention's two GEMMs).
// With `options` of the core stack the s x s products count half (CausalHalving).
double ModelFlopsPerStep(const ModelSpec& model, const TrainingSpec& training,
                         const CostOptions& options = Megatron2022Options());
double HardwareFlopsPerStep(const ModelSpec& model, const TrainingSpec& training,
                            const ParallelConfig& parallel,
                            const CostOptions& options = Megatron2022Options());
// The recomputed part of the hardware FLOPs alone (0 without recomputation).
double RecomputedFlopsPerStep(const ModelSpec& model, const TrainingSpec& training,
                              const ParallelConfig& parallel,
                              const CostOptions& options = Megatron2022Options());

// Whether a stack's FLOP count halves the causal attention products (core: yes).
bool CausalHalving(const CostOptions& options);

// Model FLOPs utilisation: model FLOPs / (step time x GPUs x peak FLOP/s per GPU).
double Mfu(double model_flops, double step_time_s, int64_t num_gpus, double peak_flops);

}  // namespace ptdp
