// Context parallelism (cp > 1) as Megatron-Core and Transformer Engine run it: each of the cp
// ranks of a CP group holds a share of every sequence's tokens; everything per token (norms,
// linears, MLP, embedding, LM head, cross entropy) runs on the local tokens, and only the
// attention exchanges keys and values over the CP group.
//
// The split (Megatron's get_batch_on_this_cp_rank, megatron/core/utils.py): a sequence of S
// tokens is cut into 2 cp chunks of S / (2 cp); CP rank i keeps chunks i and 2 cp - 1 - i, in
// that order, so that under the causal mask every rank has the same attention work. Inputs,
// targets and positions (learned or rotary) follow their tokens. Local rows stay in (local
// sequence, batch) order, Megatron's [s / cp, b, h].
//
// The attention (Transformer Engine's transformer_engine/pytorch/attention/dot_product_attention/
// context_parallel.py; attention.py before TE 2.0), one of --cp-comm-type:
//  - p2p (AttnFuncWithCPAndKVP2P): ring attention. cp steps; at step j rank i holds the keys
//    and values of rank i - j (mod cp) and passes them on to rank i + 1 while it computes. Step
//    0 is the causal attention of the local tokens; a block from an earlier rank (i - j < i) is
//    attended in full by every local query but only in its first chunk (its second chunk lies
//    after both of ours); a block from a later rank is attended in full by our second chunk
//    only. Partial results are merged with their log-sum-exp (executor/backend/backend.h
//    AttentionBlockForward). The backward passes the blocks around again, with the gradients of
//    each block travelling beside it and accumulated by every rank that attended it, until they
//    reach their owner.
//  - allgather (AttnFuncWithCPAndKVAllGather): keys and values are all-gathered (again in the
//    backward) and put in sequence order; each local chunk attends the prefix up to its end;
//    the key/value gradients are reduce-scattered back to their owners.
//  - a2a (AttnFuncWithCPAndQKVOA2A, DeepSpeed-Ulysses): all-to-alls trade this rank's tokens of
//    all heads for every token of 1/cp of the heads (query groups, with their query heads);
//    plain causal attention over the whole sequence; an all-to-all back. The backward redoes the
//    forward all-to-alls of q, k, v and the output rather than keeping them (it keeps only the
//    log-sum-exp), then exchanges the output gradient in and the q, k, v gradients back.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parallel_config.h"
#include "executor/backend/backend.h"
#include "executor/backend/measure.h"
#include "executor/comm/comm.h"

namespace ptdp {

// One CP rank's share of a sequence of `seq` tokens.
struct SequenceShard {
  int64_t seq = 0;
  int cp = 1;
  int rank = 0;

  int64_t local() const { return seq / cp; }        // tokens this rank holds
  int64_t chunk() const { return seq / (2 * cp); }  // tokens per chunk (cp > 1)
  int64_t Position(int64_t local_index) const;      // its position in the full sequence
};

// Local indices [local_begin, local_begin + length) hold positions [position_begin, ...).
struct PositionRun {
  int64_t local_begin = 0;
  int64_t position_begin = 0;
  int64_t length = 0;
  bool operator==(const PositionRun&) const = default;
};

// The positions of local indices [begin, begin + count) as runs of consecutive positions (at
// most two; one when cp == 1).
std::vector<PositionRun> PositionRuns(const SequenceShard& shard, int64_t begin, int64_t count);

// Sizes of one attention call on this rank: `seq` local tokens (S / cp) of `batch` sequences,
// `heads` query heads in `groups` query groups of `head_dim` (tensor-parallel local).
struct AttentionShape {
  int64_t seq = 0, batch = 0, heads = 0, groups = 0, head_dim = 0;
  int64_t rows() const { return seq * batch; }
  int64_t qkv_cols() const { return (heads + 2 * groups) * head_dim; }
};

// kv (T, 2 G D) <- the [k | v] columns of qkv (T, (H + 2 G) D), in `category`; and back,
// into dqkv's [k | v] columns (overwritten).
Tensor PackKv(Backend& backend, Span qkv, const AttentionShape& s, MemCategory category);
void UnpackKv(Backend& backend, Span dqkv, Span dkv, const AttentionShape& s);

// One rank's whole-sequence attention the flash way (cp == 1 with a flash-style or fused
// attention backend, as Transformer Engine runs it): one causal block of every query against
// every key, keeping ctx and the log-sum-exp lse (T, H) instead of the (B, H, S, S) softmax.
// The backward recomputes the softmax from them; dqkv is overwritten.
void FlashAttentionForward(Backend& backend, Span ctx, Span lse, Span qkv, const AttentionShape& s);
void FlashAttentionBackward(Backend& backend, Span dqkv, Span dctx, Span ctx, Span lse, Span qkv,
                            const AttentionShape& s);

class ContextAttention {
 public:
  // `cp` is the context-parallel group (rank == CP rank); `recorder` receives "cp-comm"
  // intervals.
  ContextAttention(Backend& backend, Comm& cp, CpComm exchange, int64_t full_seq,
                   Recorder& recorder);

  // Rows (of `shape`) of the tensor Forward's `lse` must have: this rank's tokens, or with a2a
  // every token of its heads.
  int64_t lse_rows(const AttentionShape& shape) const;
  int64_t lse_cols(const AttentionShape& shape) const;

  // qkv (T, (H + 2 G) D), T = shape.rows(), this rank's tokens after rotary -> ctx (T, H D),
  // the causal attention over the whole sequences; lse (lse_rows, lse_cols), saved for the
  // backward.
  void Forward(Span ctx, Span lse, Span qkv, const AttentionShape& shape);
  // dqkv (T, (H + 2 G) D) = the gradient of qkv given dctx (T, H D), with Forward's ctx and lse;
  // overwrites.
  void Backward(Span dqkv, Span dctx, Span ctx, Span lse, Span qkv, const AttentionShape& shape);

 private:
  void RingForward(Span ctx, Span lse, Span qkv, const AttentionShape& s);
  void RingBackward(Span dqkv, Span dctx, Span ctx, Span lse, Span qkv, const AttentionShape& s);
  void AllGatherForward(Span ctx, Span lse, Span qkv, const AttentionShape& s);
  void AllGatherBackward(Span dqkv, Span dctx, Span ctx, Span lse, Span qkv,
                         const AttentionShape& s);
  void AllToAllForward(Span ctx, Span lse, Span qkv, const AttentionShape& s);
  void AllToAllBackward(Span dqkv, Span dctx, Span ctx, Span lse, Span qkv,
                        const AttentionShape& s);

  // All-gathered keys and values (S * B, 2 G D), in sequence order.
  Tensor GatherKv(Span qkv, const AttentionShape& s);
  // a2a: local (T, C) -> (S * B, C / cp), every token of this rank's 1/cp of the columns, in
  // sequence order; and back.
  Tensor ToHeads(Span local, int64_t cols, int64_t rows_local, int64_t batch);
  Tensor FromHeads(Span heads, int64_t cols, int64_t rows_local, int64_t batch);
  Tensor AllToAll(const Tensor& send);  // timed
  // Copies the rows of CP rank r's tokens (T rows of C, in its local order) into their places
  // in `full`, (S * B, C) in sequence order (into_full), or back out of them.
  void SequenceOrderRows(Span full, Span local, int r, int64_t cols, int64_t batch, bool into_full);
  Tensor New(DType dtype, std::vector<int64_t> shape, MemCategory category);

  Backend& backend_;
  Comm& cp_;
  CpComm exchange_;
  int64_t full_seq_;
  Recorder& recorder_;
};

}  // namespace ptdp
