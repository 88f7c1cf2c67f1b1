// The work of one micro-batch through a transformer layer, the embedding and the output layer,
// kernel by kernel, on one GPU of a tensor-parallel group: FLOPs and HBM bytes of every GEMM and
// memory-bound kernel, and the tensor-parallel collectives, for the forward (F), the input
// gradient (B) and the weight gradient (W) separately, plus what a recomputing backward redoes.
//
// The kernels are Megatron-LM's for a GPT layer with its "local" (unfused) core attention, which
// materialises the s x s scores (the implementation that Korthikanti et al. 2022's activation
// formulas describe): LayerNorm/RMSNorm, QKV projection (grouped-query attention: a query heads,
// g key/value groups of kv_channels d), Q K^T as a batched GEMM, fused scale-mask-softmax,
// attention dropout, probabilities x V as a batched GEMM, output projection, bias-dropout-add,
// the second norm, the first MLP linear (SwiGLU: gate and up fused, 2f wide), GeLU or SwiGLU,
// the second MLP linear, bias-dropout-add. Tensor parallelism (Shoeybi et al. 2019) splits the
// heads and the FFN width t ways; sequence parallelism (Korthikanti et al. 2022) splits the norm
// and dropout regions along the sequence.
//
// Sizes (per GPU, one micro-batch): s sequence, b micro-batch, h hidden, T = s b tokens,
// T_n = T / t in the sequence-parallel regions (T without sequence parallelism), e bytes per
// element of the training precision, masks 1 byte per element.
#pragma once

#include <array>
#include <cstdint>

#include "core/error.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"
#include "simulator/collectives.h"
#include "simulator/cost_options.h"
#include "simulator/op_time.h"

namespace ptdp {

enum class WorkKind : uint8_t { kGemm, kMemory };

// One kernel. (No default member initializers: PassWork's unused slots stay uninitialised, so
// building a pass costs only what it holds; every field is set when a kernel is added.)
struct Work {
  const char* name;
  WorkKind kind;
  GemmShape gemm;  // kGemm only
  double flops;    // kGemm: gemm.flops(); memory-bound kernels: 0 (not timed by FLOPs)
  double bytes;    // HBM bytes read plus written
};

// One tensor-parallel collective; bytes is the full (gathered) size, the nccl-tests S.
struct CommWork {
  const char* name;
  Collective collective;
  double bytes;
};

// The kernels and collectives of one pass, in order: work[0, num_work), comm[0, num_comm).
// Fixed capacity, no allocation.
struct PassWork {
  static constexpr int kMaxWork = 24;
  static constexpr int kMaxComm = 6;
  std::array<Work, kMaxWork> work;
  std::array<CommWork, kMaxComm> comm;
  std::array<int8_t, kMaxComm> comm_position;  // kernels of the pass issued before comm[i]
  int num_work = 0;
  int num_comm = 0;

  void Add(const Work& w) {
    PTDP_CHECK(num_work < kMaxWork);
    work[num_work++] = w;
  }
  void Add(const CommWork& c) {
    PTDP_CHECK(num_comm < kMaxComm);
    comm_position[num_comm] = static_cast<int8_t>(num_work);
    comm[num_comm++] = c;
  }
  void Append(const PassWork& other);
  double flops() const;  // sum of the GEMM FLOPs
  double bytes() const;  // sum of the HBM bytes
};

// Megatron's asynchronous tensor-parallel reduction of a column-parallel linear's input gradient
// (LinearWithGradAccumulationAndAsyncCommunication, --async-tensor-model-parallel-allreduce; the
// reduce-scatter with sequence parallelism): issued right after the input-gradient GEMM and
// waited for after the linear's weight-gradient GEMM, so the two run at once when B and W are
// one backward (not with a split backward that defers W).
struct AsyncOverlap {
  int comm = 0;        // index in backward_input.comm
  int work_begin = 0;  // the weight-gradient kernels it runs beside: backward_weight.work[begin,
  int work_end = 0;    // end)
};

struct LayerWork {
  PassWork forward;          // F
  PassWork backward_input;   // B, without any recomputation
  PassWork backward_weight;  // W
  PassWork recompute;        // the forward work B redoes first (empty without recomputation)
  double parameters = 0;     // parameters this GPU holds for the part
  std::array<AsyncOverlap, 2> async_overlap{};  // [0, num_async_overlap)
  int num_async_overlap = 0;
};

// One transformer layer. Recompute: full redoes the whole forward (with its collectives);
// selective redoes the core attention (Q K^T, softmax, dropout, x V; Korthikanti et al. 2022).
LayerWork TransformerLayerWork(const ModelSpec& model, const ParallelConfig& parallel,
                               Precision precision, const CostOptions& options);

// Before the first layer (virtual stage 0): vocabulary-parallel word-embedding lookup with its
// tensor-parallel reduction, learned position embedding, embedding dropout; the backward
// accumulates the embedding gradients (W). Never recomputed.
LayerWork EmbeddingWork(const ModelSpec& model, const ParallelConfig& parallel, Precision precision,
                        const CostOptions& options);

// After the last layer (last virtual stage): final norm, the output layer (the tied or untied
// vocabulary-parallel LM head over the padded vocabulary) and Megatron's vocabulary-parallel
// cross entropy on fp32 logits (3 all-reduces of T floats). Never recomputed.
LayerWork OutputWork(const ModelSpec& model, const ParallelConfig& parallel, Precision precision,
                     const CostOptions& options);

// Parameters one GPU of the tensor-parallel group holds: a transformer layer (sharded linears,
// replicated norms and row-parallel biases), the embedding part (the word-embedding shard and
// learned positions), the output part (final norm, plus the LM head's weight shard when the
// embedding is untied or pp > 1: Megatron keeps a copy of a tied embedding on the last stage).
double LayerParameters(const ModelSpec& model, int tp);
double EmbeddingParameters(const ModelSpec& model, int tp);
double OutputParameters(const ModelSpec& model, const ParallelConfig& parallel);

// Time of a pass on one GPU: its kernels (op_time.h) plus its tensor-parallel collectives over
// `tp_group`, one after the other (Megatron does not overlap them without TE's comm overlap).
double PassComputeTime(const ClusterSpec& cluster, Precision precision, const PassWork& pass);
double PassComputeTime(const GemmTable& table, const ClusterSpec& cluster, Precision precision,
                       const PassWork& pass);
double PassCommTime(const ClusterSpec& cluster, const PassWork& pass,
                    const GroupPlacement& tp_group);
double PassTime(const ClusterSpec& cluster, Precision precision, const PassWork& pass,
                const GroupPlacement& tp_group);

}  // namespace ptdp
