// The work of one micro-batch through a transformer layer, the embedding and the output layer,
// kernel by kernel, on one GPU of a tensor-parallel group: FLOPs and HBM bytes of every GEMM and
// memory-bound kernel, and the tensor-parallel collectives, for the forward (F), the input
// gradient (B) and the weight gradient (W) separately, plus what a recomputing backward redoes.
//
// The kernels are Megatron-LM's for a GPT layer: LayerNorm/RMSNorm, QKV projection (grouped-query
// attention: a query heads, g key/value groups of kv_channels d), the core attention, output
// projection, bias-dropout-add, the second norm, the first MLP linear (SwiGLU: gate and up
// fused, 2f wide), GeLU or SwiGLU, the second MLP linear, bias-dropout-add. The core attention
// is what options.attention names (core/cost_options.h):
//  - flash / fused: one flash-style kernel forward and one backward that recomputes the scores
//    (Dao et al. 2022; Shah et al. 2024), timed from the profile's attention throughput table;
//    the causal mask halves the work;
//  - unfused: Megatron's local core attention, which materialises the s x s scores (the
//    implementation Korthikanti et al. 2022's activation formulas describe): Q K^T as a batched
//    GEMM, fused scale-mask-softmax (or the fp32 PyTorch softmax beyond its limit), attention
//    dropout, probabilities x V; grouped-query K and V are repeated per head first.
// Flash-style kernels take 16-bit inputs: fp32 training runs the unfused path whatever is named.
// Tensor parallelism (Shoeybi et al. 2019) splits the heads and the FFN width t ways; sequence
// parallelism (Korthikanti et al. 2022) splits the norm and dropout regions along the sequence.
//
// FP8 training (precision fp8, Transformer Engine): the four linears of a layer run their GEMMs
// on the FP8 units (E4M3 inputs and weights forward, E5M2 output gradients backward), unless the
// layer is one of the first / last kept in bf16. Each FP8 GEMM operand is cast first: the
// input of each linear with its transpose (the transpose kept for the weight gradient), the
// output gradient likewise in the backward; with delayed scaling the norm writes QKV's and
// fc1's FP8 input itself, with current (tensorwise) or blockwise scaling each cast reads its
// tensor twice (amax, then cast). Sequence-parallel all-gathers of those inputs move FP8 bytes.
// The weights' FP8 copies are cast once per step (cost_model.h, with the optimizer).
//
// Context parallelism (cp > 1; Megatron-Core with Transformer Engine's attention, which the
// rules require): each GPU holds s / cp tokens of every sequence, so everything outside the core
// attention works on s b / cp tokens; the core attention's work is the causal total over cp,
// balanced by the split into 2 cp chunks, and its exchange (core/parallel_config.h CpComm) runs
// over the CP group:
//  - p2p (ring): cp kernels per pass, each of the local s / cp queries against one key/value
//    block (2 (s/cp)^2 d FLOPs per head forward, causal or half-masked), with the block for
//    the next step passed around the ring meanwhile: cp - 1 send/recv steps of the local K and
//    V (backward: K, V and their gradients), each hidden behind one kernel when it is shorter;
//    the partial outputs are rescaled and summed in fp32 after each step;
//  - a2a: all-to-alls of Q, K, V before the kernel and of the output after it (backward: the
//    output gradient before, dQ, dK, dV after), the kernel on all s tokens of a_t / cp heads;
//  - allgather: K and V all-gathered before the kernel (again in the backward) and their
//    gradients reduce-scattered after its backward; the kernel on the local queries.
//
// Hybrid models (ModelSpec::hybrid_layer_pattern) have one block per layer, each with its norm
// and residual add: an attention layer is the attention half above, an MLP or MoE layer the MLP
// half, and a Mamba layer is Megatron's MambaLayer (megatron/core/ssm/mamba_layer.py,
// mamba_mixer.py with the memory-efficient path, mamba_ssm's mamba_split_conv1d_scan_combined):
// the norm, in_proj (a column-parallel linear h -> 2 d_inner + 2 g N + heads: z, x, B, C, dt),
// the depthwise causal conv1d with SiLU over x, B and C (memory-bound), the SSD chunked scan
// (SsdScanWork below; the output gated by silu(z)), the grouped RMSNorm over d_inner
// (memory-bound), out_proj (row-parallel d_inner -> h), bias-dropout-add. Tensor parallelism
// splits the heads and groups (d_inner / t, g / t per GPU); with context parallelism each GPU
// scans all s tokens of heads / cp heads after an all-to-all of z x B C dt, and an all-to-all
// returns the output (mamba_context_parallel.py). Its backward recomputes the convolution and
// the scan's chunk states (the combined kernel saves only its input and ungated output).
//
// Sizes (per GPU, one micro-batch): s sequence (s / cp with context parallelism), b micro-batch,
// h hidden, T = s b tokens, T_n = T / t in the sequence-parallel regions (T without sequence
// parallelism), e bytes per element of the training precision (2 for fp8 training), masks 1
// byte per element.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "core/cost_options.h"
#include "core/error.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"
#include "simulator/collectives.h"
#include "simulator/op_time.h"

namespace ptdp {

enum class WorkKind : uint8_t {
  kGemm,
  kGroupedGemm,  // MoE experts: `gemm.batch` groups of m rows each (op_time.h GroupedGemmTime)
  kMemory,
  kAttentionForward,
  kAttentionBackward,
  // The Mamba-2 SSD chunked scan: batched chunk-sized matrix products, `gemm` the chunk shape
  // (chunk x head_dim x state, batch = chunks x heads); timed by roofline, max(flops / (16-bit
  // peak x the GEMM table's efficiency at that shape), bytes / achieved HBM bandwidth).
  kScan
};

// One kernel. (No default member initializers: PassWork's unused slots stay uninitialised, so
// building a pass costs only what it holds; every field is set when a kernel is added.)
struct Work {
  const char* name;
  WorkKind kind;
  bool fp8;  // kGemm on the FP8 units
  // Part of the core attention (its flash-style kernels, or every kernel of the unfused path:
  // the batched GEMMs, softmax, dropout, the grouped-query expansion); for reports by class.
  bool core_attention;
  GemmShape gemm;  // kGemm; kAttention*: m = n = s, k = d, batch = b x heads per GPU
  double flops;    // kGemm: gemm.flops(); kAttention*: the kernel's own count; memory-bound: 0
  double bytes;    // HBM bytes read plus written
};

// The group a collective runs over: tensor parallel, context parallel (the keys and values of
// the attention), expert parallel (the MoE token dispatch), expert tensor parallel, or both
// expert groups together (the all-gather dispatcher).
enum class CommGroup : uint8_t { kTp, kCp, kEp, kEtp, kEpEtp };
constexpr int kCommGroups = 5;

// Where the groups of one configuration sit (collectives.h).
struct GroupPlacements {
  GroupPlacement tp, cp, ep, etp, ep_etp;
  const GroupPlacement& operator[](CommGroup g) const {
    switch (g) {
      case CommGroup::kCp:
        return cp;
      case CommGroup::kEp:
        return ep;
      case CommGroup::kEtp:
        return etp;
      case CommGroup::kEpEtp:
        return ep_etp;
      case CommGroup::kTp:
        break;
    }
    return tp;
  }
};

// One collective; bytes is the full (gathered) size, the nccl-tests S (all-to-all: what each
// rank holds); `repeat` times one after the other (the steps of ring attention).
struct CommWork {
  const char* name;
  Collective collective;
  double bytes;
  CommGroup group = CommGroup::kTp;
  int repeat = 1;
  // The flex dispatcher's dispatch or combine (experts > 0): bytes is then one copy of the
  // rank's tokens, sent once per node and GPU its experts touch (FlexDispatchTime).
  ExpertSpread spread{};
};

// How a collective runs beside the GEMM it is paired with (PassWork::overlap_with). kPaired: the
// two simply run at once (the ring attention's exchanges). The others are Transformer Engine's
// userbuffers methods for --tp-comm-overlap (transformer_engine/pytorch/module/base.py
// initialize_ub; the per-GEMM choice and SM counts of Megatron-Bridge's H100 configurations,
// src/megatron/bridge/training/comm_overlap.py userbuffers_{bf16,fp8}_h100_h8192_tp4_mbs1_
// seqlen8192):
//  - kRing: ring exchange, point-to-point copies on the copy engines: the GEMM is split into tp
//    chunks, each waiting for its chunk of the exchange (the first is local);
//  - kPipeline: the GEMM in `parts` chunks on the SMs the reduce-scatter kernels (`sms` of them)
//    leave, each chunk's reduce-scatter beside the next chunk's GEMM, the last one's exposed;
//  - kBulk: the whole collective beside an independent GEMM, taking `sms` of its SMs.
enum class TpOverlap : uint8_t { kPaired, kRing, kPipeline, kBulk };

// The kernels and collectives of one pass, in order: work[0, num_work), comm[0, num_comm).
// Fixed capacity, no allocation.
struct PassWork {
  static constexpr int kMaxWork = 48;
  static constexpr int kMaxComm = 12;
  std::array<Work, kMaxWork> work;
  std::array<CommWork, kMaxComm> comm;
  std::array<int8_t, kMaxComm> comm_position;  // kernels of the pass issued before comm[i]
  // With --tp-comm-overlap: the kernel comm[i] is pipelined with (-1: none), how, in how many
  // chunks (kRing, kPipeline) and with how many of the GPU's SMs (kPipeline, kBulk).
  std::array<int8_t, kMaxComm> overlap_with;
  std::array<TpOverlap, kMaxComm> overlap_kind;
  std::array<int8_t, kMaxComm> overlap_parts;
  std::array<int8_t, kMaxComm> overlap_sms;
  int num_work = 0;
  int num_comm = 0;
  // A mixture-of-experts layer's forward or backward (the host's extra time per MoE layer:
  // HostSpec::moe_layer_s); in its forward, the work item before which the host waits for the
  // GPU (the dispatcher's tokens-per-expert copy to the host), -1 where it does not wait.
  bool moe_host = false;
  int8_t host_sync_at = -1;

  void Add(const Work& w) {
    PTDP_CHECK(num_work < kMaxWork);
    work[num_work++] = w;
  }
  void Add(const CommWork& c) {
    PTDP_CHECK(num_comm < kMaxComm);
    comm_position[num_comm] = static_cast<int8_t>(num_work);
    overlap_with[num_comm] = -1;
    overlap_kind[num_comm] = TpOverlap::kPaired;
    overlap_parts[num_comm] = 1;
    overlap_sms[num_comm] = 0;
    comm[num_comm++] = c;
  }
  void Append(const PassWork& other);
  double flops() const;  // sum of the GEMM and attention kernels' FLOPs
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
  PassWork forward;           // F
  PassWork backward_input;    // B, without any recomputation
  PassWork backward_weight;   // W
  PassWork recompute;         // the forward work B redoes first (empty without recomputation)
  double parameters = 0;      // parameters this GPU holds for the part
  double fp8_parameters = 0;  // of which in FP8 linears (their weights have FP8 copies)
  std::array<AsyncOverlap, 2> async_overlap{};  // [0, num_async_overlap)
  int num_async_overlap = 0;
};

// Whether the core attention runs as a flash-style kernel: the backend is flash or fused and
// the precision 16-bit (fp32 has no flash kernels); or context parallelism, whose attention is
// always flash-style (Transformer Engine's, the only one Megatron allows with cp > 1; the CPU
// executor's blocks merged by their log-sum-exp, in fp32).
bool FlashAttention(Precision precision, const CostOptions& options,
                    const ParallelConfig& parallel);

// One transformer layer. Recompute: full redoes the whole forward (with its collectives);
// selective redoes the core attention (Korthikanti et al. 2022; with a flash-style kernel, its
// forward). In fp8 training, `bf16_layer` says the layer is one Megatron keeps in bf16
// (--first-last-layers-bf16) and `fp8_recipe` how its FP8 tensors are scaled.
// `moe_layer`: the layer is one of a MoE model's MoE layers (ModelSpec::IsMoeLayer), its MLP the
// routed experts (and shared experts) instead of the dense one.
LayerWork TransformerLayerWork(const ModelSpec& model, const ParallelConfig& parallel,
                               Precision precision, const CostOptions& options,
                               bool bf16_layer = false, Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed,
                               bool moe_layer = false);

// One layer of `kind` (ModelSpec::KindOfLayer): a transformer layer (TransformerLayerWork), or
// a hybrid model's Mamba, attention-only, MLP-only or MoE-only layer. Recompute: full redoes
// the layer's forward; selective the core attention of the layers that have one.
LayerWork LayerKindWork(const ModelSpec& model, const ParallelConfig& parallel, Precision precision,
                        const CostOptions& options, LayerKind kind, bool bf16_layer = false,
                        Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed);

// The SSD chunked scan of Mamba-2 (Dao and Gu 2024, "Transformers are SSMs", section 6: the
// chunked algorithm; mamba_ssm ops/triton/ssd_combined.py _mamba_chunk_scan_combined_fwd/_bwd)
// over `tokens` tokens in `chunks` chunks of Q (the last of each sequence possibly partial), for
// `heads` heads of P channels, states of N, `groups` groups of B and C; e bytes per element. Per
// token, forward: C B^T inside the chunk (2 Q N per group, _bmm_chunk_fwd), the chunk states
// B^T x (2 N P per head, _chunk_state_fwd), the outputs C states (2 N P per head) and the
// causal intra-chunk product (CB) x (Q P per head: half of 2 Q P, _chunk_scan_fwd):
//   flops_f = T (2 Q N g + Q P h + 4 N P h).
// Backward: the recomputed CB and chunk states (2 Q N g + 2 N P h), then dstates, dx (its
// state and intra-chunk parts), dB, dC (2 N P h each, dx's intra-chunk Q P h), dCB and the
// stable ddA (Q P h each), the two bmm backwards (4 Q N g):
//   flops_b = T (6 Q N g + 3 Q P h + 10 N P h).
// Bytes, kernel by kernel (S = chunks h P N state elements, written in fp32 by the chunk-state
// kernel and read back by state passing, which writes them in 16 bits; CB in fp32; dt and its
// cumulative sums in fp32):
//   bytes_f = e T (5 h P + 4 g N) + S (8 + 2 e) + 8 T g Q + T h (e + 24)
//   bytes_b = e T (16 h P + 15 g N) + S (24 + 5 e) + 24 T g Q + 64 T h.
struct SsdScan {
  double forward_flops = 0, forward_bytes = 0, backward_flops = 0, backward_bytes = 0;
};
inline constexpr int kMambaChunkSize = 128;  // MambaMixer's chunk_size
SsdScan SsdScanWork(double tokens, double chunks, double heads, double head_dim, double state,
                    double groups, double bytes_per_element, double chunk = kMambaChunkSize);

// Before the first layer (virtual stage 0): vocabulary-parallel word-embedding lookup with its
// tensor-parallel reduction, learned position embedding, embedding dropout; the backward
// accumulates the embedding gradients (W). Never recomputed; bf16 in fp8 training.
LayerWork EmbeddingWork(const ModelSpec& model, const ParallelConfig& parallel, Precision precision,
                        const CostOptions& options);

// After the last layer (last virtual stage): final norm, the output layer (the tied or untied
// vocabulary-parallel LM head over the padded vocabulary) and Megatron's vocabulary-parallel
// cross entropy on fp32 logits (3 all-reduces of T floats). Never recomputed; bf16 in fp8
// training (Megatron's output layer is not a Transformer Engine module).
LayerWork OutputWork(const ModelSpec& model, const ParallelConfig& parallel, Precision precision,
                     const CostOptions& options);

// The layers of each virtual stage (core SplitLayers) by kind, count[kind][fp8][recompute]:
// the layer's LayerKind (a transformer layer, dense or MoE; a hybrid model's Mamba, attention,
// MLP or MoE layer), whether its linears run in FP8 (fp8 training, outside the first / last
// layers kept in bf16) and whether it recomputes (the configuration's recompute granularity;
// with the block method, only the first recompute_num_layers of each chunk).
struct ChunkLayers {
  static constexpr int kSlots = kNumLayerKinds * 4;
  int16_t count[kNumLayerKinds][2][2] = {};  // 16 bits: 48 bytes, zeroed without rep stos
  int Slot(int slot) const { return (&count[0][0][0])[slot]; }  // slot = 4 kind + 2 fp8 + rc
  int total() const {
    int n = 0;
    for (int k = 0; k < kSlots; ++k) n += (&count[0][0][0])[k];
    return n;
  }
  int OfKind(LayerKind kind) const {
    const int k = static_cast<int>(kind);
    return count[k][0][0] + count[k][0][1] + count[k][1][0] + count[k][1][1];
  }
  int fp8() const {
    int n = 0;
    for (int k = 0; k < kNumLayerKinds; ++k) n += count[k][1][0] + count[k][1][1];
    return n;
  }
  // Layers with experts (MoE transformer layers and hybrid MoE layers).
  int moe() const { return OfKind(LayerKind::kMoeTransformer) + OfKind(LayerKind::kMoe); }
  // Byte for byte (the counts have no padding): one wide compare instead of 24.
  bool operator==(const ChunkLayers& o) const {
    static_assert(sizeof(count) == kSlots * sizeof(int16_t));
    return std::memcmp(count, o.count, sizeof(count)) == 0;
  }
};
// The kinds a model's layers can have are [0, LayerKindEnd): a transformer's are the first two
// (dense and MoE transformer layers), a hybrid model's any.
static_assert(static_cast<int>(LayerKind::kTransformer) == 0 &&
              static_cast<int>(LayerKind::kMoeTransformer) == 1);
inline int LayerKindEnd(const ModelSpec& model) { return model.hybrid() ? kNumLayerKinds : 2; }
std::vector<ChunkLayers> ChunkLayerKinds(const ModelSpec& model, const TrainingSpec& training,
                                         const ParallelConfig& parallel);
// One virtual stage's, without allocating; the configuration's figures worked out once.
class ChunkKinds {
 public:
  ChunkKinds(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& parallel);
  ChunkKinds(const ChunkKinds&) = delete;  // prefix_ may point into the object
  ChunkKinds& operator=(const ChunkKinds&) = delete;
  ChunkLayers operator()(int virtual_stage) const;

 private:
  // Of the layers in [a, b), those with experts (a transformer).
  int MoeIn(int a, int b) const;
  std::string_view pattern_;  // a hybrid model's; empty: a transformer
  // A hybrid model's layers of each hybrid kind among the first i (prefix_[i], i <= layers),
  // 16 bits per kind in one word, so that an interval's counts are one subtraction.
  static constexpr int kInlineLayers = 128;
  std::array<uint64_t, kInlineLayers + 1> inline_prefix_;  // filled up to the pattern's length
  std::vector<uint64_t> long_prefix_;                      // for longer patterns
  const uint64_t* prefix_ = nullptr;
  VirtualStages stages_;
  bool fp8_;
  int start_, end_;  // the FP8 layers are [start_, end_)
  Recompute recompute_;
  int recompute_num_layers_;
  bool moe_;
  int moe_first_, moe_freq_;  // MoE layers: i >= moe_first_ with i % moe_freq_ == 0
};
// Whether every virtual stage has the same layers of the same kinds (an even split, no layers
// kept in bf16 by fp8 training, no block recompute, and in a MoE model every layer MoE): then
// virtual stage 0 speaks for all.
bool UniformChunks(const ModelSpec& model, const TrainingSpec& training,
                   const ParallelConfig& parallel);
// Whether the pipeline stages between the first and the last have the same layers of the same
// kinds: an uneven split and block recompute differ at the ends only; fp8's bf16 layers and a
// MoE model's first dense layers do unless they spill past the first or last stage; MoE layers
// every n-th layer (n > 1) are not taken to be alike.
bool MiddleStagesAlike(const ModelSpec& model, const TrainingSpec& training,
                       const ParallelConfig& parallel);

// Parameters one GPU of the tensor-parallel group holds: a transformer layer (sharded linears,
// replicated norms and row-parallel biases), the embedding part (the word-embedding shard and
// learned positions), the output part (final norm, plus the LM head's weight shard when the
// embedding is untied or pp > 1: Megatron keeps a copy of a tied embedding on the last stage).
double LayerParameters(const ModelSpec& model, int tp);
double LayerLinearWeights(const ModelSpec& model, int tp);  // the four linears' weights only
double EmbeddingParameters(const ModelSpec& model, int tp);
// A layer's parameters on one GPU: `dense` (attention, dense MLP, Mamba mixer, router, shared
// experts, norms: the tensor-parallel part, reduced over dp x cp), `experts` (a MoE layer's
// num_experts / ep experts, each split over etp: reduced over the expert data-parallel group),
// and the linears' weights (the FP8 ones in fp8 training).
struct LayerParams {
  double dense = 0, experts = 0, linear_weights = 0;
  double total() const { return dense + experts; }
};
using MoeLayerParams = LayerParams;
LayerParams LayerKindParams(const ModelSpec& model, const ParallelConfig& parallel, LayerKind kind);
// A MoE transformer layer's (LayerKind::kMoeTransformer).
MoeLayerParams MoeLayerParameters(const ModelSpec& model, const ParallelConfig& parallel);
double OutputParameters(const ModelSpec& model, const ParallelConfig& parallel);

// Times kernels on one GPU: GEMMs at the training precision's peak (16-bit for fp8 training)
// or, for FP8 GEMMs, the FP8 peak, each times its table's efficiency for the shape (op_time.h);
// memory-bound kernels at the achieved HBM bandwidth; attention kernels from the backend's
// throughput table. Keep the cluster alive.
class KernelTimer {
 public:
  KernelTimer(const ClusterSpec& cluster, Precision precision, const CostOptions& options);
  double operator()(const Work& w) const;

 private:
  const GpuSpec* gpu_;
  Precision gemm_precision_;  // of the 16-bit (or fp32) GEMMs
  GemmTable gemm_;
  std::optional<GemmTable> fp8_;
  AttentionTable attention_;
};

// Time of a pass on one GPU: its kernels plus its collectives over their groups, one after the
// other.
double PassComputeTime(const KernelTimer& timer, const PassWork& pass);
// One collective (all its repeats) over its group.
double CommTime(const ClusterSpec& cluster, const CommWork& comm, const GroupPlacements& groups);
double PassCommTime(const ClusterSpec& cluster, const PassWork& pass,
                    const GroupPlacements& groups);
double PassTime(const ClusterSpec& cluster, Precision precision, const CostOptions& options,
                const PassWork& pass, const GroupPlacements& groups);

}  // namespace ptdp
