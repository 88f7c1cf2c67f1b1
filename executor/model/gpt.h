// The model room (executor/model/): Megatron's GPT on one rank with its layers (moe.h,
// context_parallel.h, weight_grad.h), parameters (gpt_params.h) and random numbers (rng.h); it
// builds on comm/ and backend/.
//
// Megatron's GPT on one rank: the forward and backward of one model chunk for one micro-batch,
// with the tensor-parallel layers of megatron/core/tensor_parallel (column- and row-parallel
// linears, vocab-parallel embedding and cross entropy) and, when the plan says so, sequence
// parallelism (all-gather before a column-parallel linear, reduce-scatter after a row-parallel
// one), context parallelism (context_parallel.h: each CP rank holds two chunks of every
// sequence and the attention exchanges keys and values over the CP group) and activation
// recompute (full: keep each layer's input and re-run its forward in the backward; selective:
// drop the attention softmax, or with flash-style attention its log-sum-exp, and recompute core
// attention, exchanges included).
//
// Layer (pre-norm): x + proj(attn(N1(x))) -> y; y + fc2(act(fc1(N2(y)))), or in a mixture-of-
// experts layer y + routed experts(N2(y)) + shared experts(N2(y)) (moe.h), with N LayerNorm or
// RMSNorm, act GeLU or SwiGLU, attention multi-head or grouped-query, positions learned (added
// to the embedding) or rotary (applied to q and k), linears with or without biases, and the LM
// head tied to the word embedding or its own output layer, as the ModelSpec says. No dropout
// (the CPU path trains deterministically, so layouts can be compared bit for bit up to rounding).
//
// Precision: activations in the parameters' dtype (fp32, fp64 for gradient checks, or bf16/fp16
// under mixed precision, where the norms' statistics, the attention's log-sum-exp, the logits
// and the cross entropy are fp32 and weight gradients accumulate into fp32
// main_grad; executor/backend/backend.h).
//
// Activations are (S * B, h) with rows in (sequence, batch) order, Megatron's [s, b, h], where S
// is the rank's share of the sequence: seq_length / cp tokens (all of it when cp == 1), at the
// positions context_parallel.h's split gives them; under sequence parallelism a rank holds the
// contiguous rows of local sequence indices [tp_rank * S / tp, (tp_rank + 1) * S / tp).
//
// Backward is split the zero-bubble way (Qi et al. 2023): Backward computes input gradients
// and queues the weight-gradient work (dW = dY^T X and friends, holding X and dY); the caller
// runs the queue at once (plain backward) or later (a W operation of ZB-H1).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/parallel_config.h"
#include "executor/backend/backend.h"
#include "executor/backend/measure.h"
#include "executor/comm/comm.h"
#include "executor/comm/topology.h"
#include "executor/model/context_parallel.h"
#include "executor/model/gpt_params.h"
#include "executor/model/moe.h"
#include "executor/model/weight_grad.h"

namespace ptdp {

// One micro-batch's tokens, (S * B) int32 each in (sequence, batch) order: this CP rank's share
// of each sequence (context_parallel.h), the whole of it when cp == 1.
struct MicroBatch {
  std::shared_ptr<Tensor> inputs;
  std::shared_ptr<Tensor> targets;
};

// Saved tensors of one transformer layer for one micro-batch (T = S * B rows, T_loc = T / tp
// under sequence parallelism, else T).
struct LayerActs {
  std::shared_ptr<Tensor> ln1_mean, ln1_rstd;  // (T_loc); mean unused under RMSNorm
  std::shared_ptr<Tensor> ln1_full;            // (T, h): QKV's input
  std::shared_ptr<Tensor> qkv;                 // (T, (H_loc + 2 G_loc) d), after rotary
  // The softmax (B, H_loc, S, S) of unfused attention, or the log-sum-exp of flash-style
  // attention (always with cp > 1, context_parallel.h); empty with selective recompute.
  std::shared_ptr<Tensor> probs, lse;
  std::shared_ptr<Tensor> ctx;  // (T, H_loc d): the projection's input
  std::shared_ptr<Tensor> mid;  // (T_loc, h): residual after attention, N2 input
  std::shared_ptr<Tensor> ln2_mean = {}, ln2_rstd = {};  // (T_loc)
  // The MLP's (in a MoE layer the shared experts'; empty without them):
  std::shared_ptr<Tensor> ln2_full = {};  // (T, h): fc1's input
  std::shared_ptr<Tensor> fc1 = {};       // (T, f_loc) or (T, 2 f_loc) [gate | up]: act input
  std::shared_ptr<Tensor> gelu = {};      // (T, f_loc): the activation's output, fc2's input
  MoeActs moe = {};                       // a MoE layer's routed experts (on N2's T_loc rows)
};

// Everything one (micro-batch, chunk) keeps between its forward and backward.
struct ChunkActs {
  std::vector<std::shared_ptr<Tensor>> layer_inputs;  // (T_loc, h), one per layer
  std::vector<LayerActs> layers;                      // empty under full recompute
  // Head (last virtual stage): final LayerNorm input and statistics, its gathered output and
  // the softmax over the local vocabulary.
  std::shared_ptr<Tensor> head_x, head_mean, head_rstd, head_ln_full, head_probs;
};

struct GptOptions {
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  // With full recompute: only the first N layers of each chunk recompute (Megatron's block
  // method); 0: all.
  int recompute_num_layers = 0;
  double layernorm_eps = 1e-5;    // Megatron's --layernorm-epsilon default
  CpComm cp_comm = CpComm::kP2p;  // the attention's exchange when the CP group has cp > 1 ranks
  // With cp == 1: the attention the flash way (FlashAttentionForward: the log-sum-exp kept, the
  // softmax recomputed in the backward), as Transformer Engine's flash and fused kernels run it,
  // instead of keeping the (B, H, S, S) softmax (Megatron's unfused local attention). With
  // cp > 1 the attention is always flash-style (context_parallel.h).
  bool flash_attention = false;
  // Megatron's asynchronous input-gradient reduction (CostOptions::
  // async_tensor_parallel_allreduce): the input gradient of QKV and of fc1 (column-parallel) is
  // all-reduced, or reduce-scattered under sequence parallelism, beside that linear's
  // weight-gradient GEMM, which then runs at once instead of after the layer. Not when the
  // schedule defers the weight gradients to W operations.
  bool async_input_grad = false;
};

class GptModel {
 public:
  // Uses the tensor-, context-, expert- and expert tensor-parallel groups of `groups`;
  // `recorder` receives "tp-comm", "cp-comm" and "ep-comm" intervals. A model with experts and
  // tp > 1 needs sequence parallelism (Megatron's MoELayer refuses to train without it).
  GptModel(GptParams& params, Backend& backend, ProcessGroups& groups, GptOptions options,
           Recorder& recorder);

  int64_t rows() const { return seq_ * batch_; }           // T (this CP rank's tokens)
  int64_t local_rows() const { return rows() / sp_div_; }  // T_loc
  int64_t hidden() const { return d_.hidden; }
  DType dtype() const { return dtype_; }
  void set_micro_batch_size(int64_t batch) { batch_ = batch; }

  // Forward of `chunk` for one micro-batch. `input` is the previous virtual stage's output
  // (T_loc, h) (empty on virtual stage 0, which embeds mb.inputs). Returns the output to send on
  // (T_loc, h), or, on the last virtual stage, an empty tensor with *loss_sum set to the sum of
  // the T per-token losses (identical on every TP rank).
  Tensor Forward(int chunk, Tensor input, const MicroBatch& mb, ChunkActs* acts, double* loss_sum);

  // Backward of `chunk`: `grad_output` (T_loc, h) is the next virtual stage's input gradient
  // (empty on the last virtual stage, which starts from the loss, scaled by `loss_scale`: the
  // weight of one token's loss in the step's objective). Returns the input gradient (T_loc, h),
  // empty on virtual stage 0. Consumes `acts`. Weight gradients go to `queue`; unless `defer`,
  // the queue is run after each layer (so its inputs are freed as early as possible), else
  // it is left for a later W operation. Without `defer`, `part_done` (when given) hears each
  // part (gpt_params.h kHeadPart, ...) as its weight gradients are complete.
  Tensor Backward(int chunk, ChunkActs& acts, Tensor grad_output, const MicroBatch& mb,
                  double loss_scale, WeightGradQueue& queue, bool defer,
                  const std::function<void(int part)>& part_done = {});

 private:
  // Whether a chunk's layer `layer` (its index in the chunk) keeps only its input and
  // recomputes the rest in the backward.
  bool Recomputes(size_t layer) const;
  Tensor Embed(const ChunkParams& cp, const MicroBatch& mb);
  void EmbedBackward(const ChunkParams& cp, Tensor dx, const MicroBatch& mb,
                     WeightGradQueue& queue);
  Tensor LayerForward(const LayerParams& lp, const Tensor& x, LayerActs* acts);
  Tensor LayerBackward(const LayerParams& lp, LayerActs& a, std::shared_ptr<Tensor> x, Tensor dout,
                       WeightGradQueue& queue);
  // The tensor-parallel MLP of local width f (fc1 column-parallel, fc2 row-parallel, with its
  // bias): the norm's output ln (T_loc, h) -> (T_loc, h), keeping its inputs in `acts`; and
  // its backward, dout (T_loc, h) -> the gradient of ln (T_loc, h).
  Tensor MlpForward(const LayerParams& lp, int64_t f, const std::shared_ptr<Tensor>& ln,
                    LayerActs& acts);
  std::shared_ptr<Tensor> MlpBackward(const LayerParams& lp, int64_t f, LayerActs& a,
                                      const std::shared_ptr<Tensor>& dout, WeightGradQueue& queue);
  void HeadForward(const ChunkParams& cp, std::shared_ptr<Tensor> x, const MicroBatch& mb,
                   ChunkActs& acts, double* loss_sum);
  Tensor HeadBackward(const ChunkParams& cp, ChunkActs& acts, const MicroBatch& mb,
                      double loss_scale, WeightGradQueue& queue);

  // Tensor-parallel communication, timed. Under sequence parallelism ToFull all-gathers
  // (T_loc, h) -> (T, h) and FromPartial reduce-scatters (T, h) -> (T_loc, h); otherwise ToFull
  // is a copy (the identity) and FromPartial an all-reduce.
  Tensor ToFull(const Tensor& local, MemCategory category);
  // The model's norm (LayerNorm or RMSNorm) over rows of h; its parameter-gradient task.
  void NormForward(Span out, Span mean, Span rstd, Span x, const ParamRef& w, const ParamRef& b,
                   int64_t rows);
  void NormBackwardInput(Span dx, Span dout, Span x, Span mean, Span rstd, const ParamRef& w,
                         int64_t rows);
  WeightGradTask NormTask(std::shared_ptr<Tensor> x, std::shared_ptr<Tensor> mean,
                          std::shared_ptr<Tensor> rstd, std::shared_ptr<Tensor> dy,
                          const ParamRef& w, const ParamRef& b, int64_t rows);
  void AddBias(Span out, const ParamRef& bias, int64_t rows, int64_t cols);
  Tensor FromPartial(Tensor partial);
  // A column-parallel linear's input gradient, `partial` (T, h), reduced as FromPartial does;
  // `wgrad` is that linear's weight-gradient task (and its bias's). With async_input_grad (and
  // the weight gradients not deferred) what `queue` holds runs first, then the reduction starts,
  // `wgrad` runs beside it, and the reduction is waited for; otherwise `wgrad` joins `queue`.
  Tensor ReduceInputGrad(Tensor partial, WeightGradQueue& queue, WeightGradTask wgrad);
  // Rotary embedding of qkv (T, qkv_local) at its tokens' positions in the full sequence.
  void RotaryAtPositions(Span qkv, bool inverse);
  AttentionShape attention_shape() const;
  void TpAllReduce(Span data, ReduceOp op, const char* what);
  Tensor New(std::vector<int64_t> shape, MemCategory category);
  std::shared_ptr<Tensor> Shared(std::vector<int64_t> shape, MemCategory category);
  bool weight_grads_deferred_ = false;  // the Backward being run defers them (a W op runs them)
  // In MainDType(dtype()): fp32 under mixed precision, for the norms' statistics, the attention's
  // log-sum-exp, the logits and the cross entropy (executor/backend/backend.h).
  Tensor NewF32(std::vector<int64_t> shape, MemCategory category);
  std::shared_ptr<Tensor> SharedF32(std::vector<int64_t> shape, MemCategory category);

  GptParams& params_;
  Backend& backend_;
  Comm& tp_;
  GptOptions options_;
  Recorder& recorder_;
  const GptDims& d_;
  DType dtype_;
  int64_t seq_;  // S: this CP rank's tokens of each sequence
  int64_t batch_ = 1;
  int64_t sp_div_;  // tp under sequence parallelism, else 1
  SequenceShard shard_;
  std::unique_ptr<ContextAttention> context_;  // cp > 1 only
  std::unique_ptr<MoeLayer> moe_;              // models with experts only
};

}  // namespace ptdp
