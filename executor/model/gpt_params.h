// The parameters one rank holds of Megatron's GPT, and how each is a slice of the full model.
//
// The full model (every parameter unsharded) is defined once, by name and shape; a rank holds,
// for its tensor-parallel index and its model chunks, the matching slice of each full tensor:
//  - column-parallel linears (QKV, MLP fc1), the vocab-parallel word embedding and the untied
//    output layer are split by rows (output features / vocabulary entries), with their biases;
//  - row-parallel linears (attention projection, MLP fc2) are split by columns (input
//    features); their biases, the norms and the position embedding are replicated.
// QKV's full weight is (groups x [q of the group's heads | k | v] x head_dim, hidden)
// (Megatron's layout; one head per group without grouped-query attention), so a row split is a
// split by query groups. SwiGLU's fc1 is (2 x ffn, hidden): [gate; up], each split by rows, so
// a rank holds [gate slice; up slice] ("row groups"). Initialisation draws element (r, c) of a
// full tensor from a
// counter-based stream keyed by (seed, name) at index r * cols + c (rng.h), so every layout
// starts from the same model (Megatron-LM's init: normal(0, 0.02), output layers
// 0.02 / sqrt(2 L), biases 0, LayerNorm weights 1).
//
// A mixture-of-experts layer (ModelSpec::IsMoeLayer) replaces the MLP with a router (E x h,
// replicated like a norm), the experts (Megatron's expert grid, executor/comm/topology.h: expert e
// on the EP rank e / (E / ep), each expert's fc1 split by rows and fc2 by columns over the expert
// tensor-parallel group, one tensor per expert) and, when the model has them, shared experts (a
// dense MLP of moe_shared_expert_intermediate_size split over TP). Expert weights are initialised
// as the MLP's (megatron/core/transformer/moe/experts.py: init_method for fc1,
// output_layer_init_method for fc2), the router with init_method (router.py).
//
// Model chunk c on pipeline stage r holds virtual stage c * pp + r, which holds layers
// [vs * L / (pp v), (vs + 1) * L / (pp v)); virtual stage 0 adds the embeddings, the last one
// the final LayerNorm and the LM head, tied to the word embedding: on the last stage that is a
// second copy ("shared") whose gradient is all-reduced with the first stage's (Megatron's
// embedding group), or the same tensor when pp == 1.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "executor/backend/backend.h"
#include "executor/comm/topology.h"

namespace ptdp {

enum class ShardDim : uint8_t { kReplicated, kRows, kCols };
enum class InitKind : uint8_t { kNormal, kZeros, kOnes };

struct ParamInfo {
  std::string name;  // "layers.3.attention.qkv.weight"
  int64_t full_rows = 0;
  int64_t full_cols = 1;   // 1 for vectors
  int64_t model_rows = 0;  // rows that are part of the model: full_rows, or the vocabulary size
                           // of the padded word embedding
  ShardDim shard = ShardDim::kReplicated;
  int64_t row_groups = 1;  // kRows: the full rows are this many blocks, each split over TP
  int64_t local_rows = 0;
  int64_t local_cols = 1;
  int64_t row_begin = 0;  // of this rank's slice in the full tensor
  int64_t col_begin = 0;
  int64_t offset = 0;  // in the rank's flat parameter and gradient buffers
  int64_t numel = 0;   // local_rows * local_cols
  int chunk = 0;
  int part = 0;  // the backward part that completes its gradient (kEmbeddingPart, ...)
  InitKind init = InitKind::kNormal;
  double init_std = 0;
  bool weight_decay = false;            // Megatron: none on biases and norms
  bool tp_duplicate = false;            // replicated across tensor-parallel ranks (count once)
  bool sequence_parallel_grad = false;  // under sequence parallelism each TP rank holds part of
                                        // the gradient (all-reduced over TP)
  bool tied_embedding = false;          // the word embedding (either copy)
  bool shared_copy = false;             // the last stage's copy (not counted in the norm)
  // An expert's weight: it lives in the flat buffers' expert range and its gradient is reduced
  // over the expert data-parallel group instead of dp x cp.
  bool expert = false;
};

// The parts of a chunk's backward (GptModel::Backward), in the order it completes their weight
// gradients: the head (final norm and output layer, or the last stage's copy of the tied word
// embedding), the layers from the last to the first (a layer's part is its global index), the
// embeddings (word, with the head's contribution when they share the tensor, and position).
inline constexpr int kHeadPart = 1 << 30;
inline constexpr int kEmbeddingPart = -1;

// Row of the full tensor that local row `local_row` of this rank's slice is.
int64_t FullRow(const ParamInfo& p, int64_t local_row);

struct ParamRef {
  Span value;  // the model's weights (GptParams::dtype())
  Span grad;   // their gradient (fp32 main_grad under mixed precision)
};

// One expert's MLP: this rank's slices (rows of fc1, columns of fc2 over the expert TP group).
struct ExpertParams {
  ParamRef fc1_w, fc2_w;
};

// Biases (and LayerNorm biases under RMSNorm) are empty ParamRefs (value.data == nullptr) when
// the model has none.
struct LayerParams {
  ParamRef ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
  // The MLP; in a MoE layer the shared experts' (empty when the model has none).
  ParamRef ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  bool moe = false;  // a MoE layer: the router and this rank's experts below
  ParamRef router_w = {};
  std::vector<ExpertParams> experts = {};  // experts [first_expert, first_expert + experts_local)
  int64_t first_expert = 0;
};

struct ChunkParams {
  int virtual_stage = 0;
  bool has_embedding = false;  // virtual stage 0
  bool has_head = false;       // last virtual stage
  int first_layer = 0;         // global index of layers[0]
  ParamRef word;               // word embedding shard: on vs 0, and on the last when tied
  ParamRef position;           // vs 0 with learned positions
  std::vector<LayerParams> layers;
  ParamRef final_ln_w, final_ln_b;  // last vs only
  ParamRef output;                  // last vs: the LM head (== word when tied)
};

// Sizes of one rank's share of the model (tensor-parallel local where it says so).
struct GptDims {
  int64_t layers = 0, hidden = 0, heads = 0, head_dim = 0, ffn = 0, seq = 0, max_positions = 0;
  int64_t groups = 0;  // query groups (== heads without grouped-query attention)
  bool swiglu = false, rmsnorm = false, rotary = false, tied = true, biases = true;
  int64_t vocab = 0;         // real vocabulary
  int64_t vocab_padded = 0;  // Megatron's padding for tp
  int64_t tp = 1;
  int64_t heads_local = 0, groups_local = 0, ffn_local = 0;
  int64_t vocab_local = 0, vocab_begin = 0, vocab_valid_local = 0;
  // Mixture of experts (0 experts: dense): E experts, top-k routing; the experts' width and this
  // rank's slice of it (over etp); the experts per EP rank; the shared experts' width and its
  // slice over TP (0: none).
  int64_t experts = 0, topk = 0, ep = 1, etp = 1, experts_local = 0;
  int64_t expert_ffn = 0, expert_ffn_local = 0, shared_ffn = 0, shared_ffn_local = 0;
  int64_t qkv_local() const { return (heads_local + 2 * groups_local) * head_dim; }
  int64_t fc1_local() const { return (swiglu ? 2 : 1) * ffn_local; }
  int64_t expert_fc1_local() const { return (swiglu ? 2 : 1) * expert_ffn_local; }
  // Megatron's layers per virtual stage (even, or uneven: core/parallel_config.h SplitLayers).
  LayerSplit split;
  int64_t virtual_stages = 1;  // pp * v
};
GptDims MakeGptDims(const ModelSpec& model, const ParallelConfig& parallel, int tp_rank);

// A range of elements of the flat buffers.
struct FlatRange {
  int64_t begin = 0;
  int64_t numel = 0;
};

class GptParams {
 public:
  // Lays out (and allocates, zeroed) the parameters and gradients of the rank at `coords`, in
  // two flat buffers (the parameters in `dtype`, the model's weights; the gradients in
  // MainDType(dtype): with bf16 or fp16 weights, Megatron's fp32 main_grad, into which every
  // micro-batch's weight gradients accumulate; the fp32 main weights are optimizer state,
  // executor/train/optimizer.h): first the dense parameters, their length rounded up to a multiple
  // of `pad_multiple` (the distributed optimizer shards them over the data- and context-parallel
  // ranks), then the experts', rounded up to a multiple of `expert_pad_multiple` (sharded over the
  // expert data-parallel ranks).
  GptParams(const ModelSpec& model, const ParallelConfig& parallel, RankCoords coords, DType dtype,
            Backend& backend, int64_t pad_multiple = 1, int64_t expert_pad_multiple = 1);

  // Fills every parameter with its slice of the full model drawn from `seed` (rounded to fp32,
  // then to 16 bits for bf16 or fp16).
  void Initialize(uint64_t seed);

  const GptDims& dims() const { return dims_; }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  const ChunkParams& chunk(int c) const { return chunks_.at(static_cast<size_t>(c)); }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  Span values() const { return values_.span(); }      // padded length
  int64_t used_numel() const { return used_numel_; }  // without the padding
  Span grads() const { return grads_.span(); }        // in MainDType(dtype())
  FlatRange dense_range() const { return dense_; }    // padded
  FlatRange expert_range() const { return expert_; }
  ParamRef Ref(const ParamInfo& info) const;
  DType dtype() const { return dtype_; }

 private:
  // The declared parameters' offsets in two flat buffers, then the buffers.
  void LayOut(int64_t pad_multiple, int64_t expert_pad_multiple);

  GptDims dims_;
  RankCoords coords_;
  DType dtype_;
  Backend& backend_;
  std::vector<ParamInfo> infos_;
  std::vector<ChunkParams> chunks_;
  int64_t used_numel_ = 0;
  FlatRange dense_, expert_;
  Tensor values_;
  Tensor grads_;
};

// The full model, assembled on world rank 0 from every rank's slices (data- and context-parallel
// rank 0's copies, expert data-parallel rank 0's of the experts; shared copies left out; padded
// vocabulary rows dropped): name -> row-major
// values. Other ranks get an empty map. Collective over groups.world.
std::map<std::string, std::vector<double>> GatherFullParameters(const GptParams& params,
                                                                ProcessGroups& groups,
                                                                Backend& backend);

}  // namespace ptdp
