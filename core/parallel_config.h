// ParallelConfig: one PTD-P layout, the knobs Megatron-LM exposes as flags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.h"

namespace ptdp {

struct TrainingSpec;

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1 };
enum class Recompute { kNone, kSelective, kFull };
// Megatron FSDP (--use-megatron-fsdp --data-parallel-sharding-strategy): what is sharded over
// the data-parallel group beyond replicated DDP. optim: the optimizer state (as the distributed
// optimizer); optim_grads: and the gradients (reduce-scattered per layer during the backward);
// optim_grads_params: and the parameters (all-gathered per layer before its forward and again
// before its backward, ZeRO-3 / FSDP style).
enum class Fsdp { kNone, kOptim, kOptimGrads, kOptimGradsParams };
// Context parallelism's exchange (--cp-comm-type, Transformer Engine's attention with context
// parallelism): each of the cp ranks holds s / cp tokens of every sequence (two of the 2 cp
// chunks, i and 2 cp - 1 - i, so that the causal work is balanced), and the attention needs the
// others' keys and values:
//  - p2p: ring attention; cp steps, in each the local queries attend to one key/value block
//    while the next block is passed on around the ring (the backward passes the blocks and
//    their gradients);
//  - a2a: all-to-alls over the heads (DeepSpeed-Ulysses): before the attention each rank
//    trades its tokens of all heads for all tokens of a 1/cp of the heads, and back after;
//  - allgather: the keys and values are all-gathered before the attention, their gradients
//    reduce-scattered after its backward.
enum class CpComm { kP2p, kA2a, kAllGather };

inline constexpr EnumName<Schedule> kScheduleNames[] = {{"gpipe", Schedule::kGpipe},
                                                        {"1f1b", Schedule::k1F1B},
                                                        {"interleaved", Schedule::kInterleaved},
                                                        {"zb-h1", Schedule::kZbH1}};
inline constexpr EnumName<Recompute> kRecomputeNames[] = {
    {"none", Recompute::kNone}, {"selective", Recompute::kSelective}, {"full", Recompute::kFull}};
inline constexpr EnumName<Fsdp> kFsdpNames[] = {{"none", Fsdp::kNone},
                                                {"optim", Fsdp::kOptim},
                                                {"optim_grads", Fsdp::kOptimGrads},
                                                {"optim_grads_params", Fsdp::kOptimGradsParams}};

inline constexpr EnumName<CpComm> kCpCommNames[] = {
    {"p2p", CpComm::kP2p}, {"a2a", CpComm::kA2a}, {"allgather", CpComm::kAllGather}};

// --recompute-modules with --recompute-granularity selective: the parts of a layer recomputed in
// its backward instead of kept (megatron/core/transformer/transformer_config.py
// recompute_modules; Megatron's default is core_attn alone). "mlp" is the dense MLP only (a MoE
// layer's is "moe"); "moe_act" the experts' activation function; "layernorm" the two norms
// (their outputs, the linears' inputs, are dropped); "mla_up_proj" MLA's up projections.
enum RecomputeModule : uint8_t {
  kRecomputeCoreAttn = 1,
  kRecomputeMoeAct = 2,
  kRecomputeLayernorm = 4,
  kRecomputeMlaUpProj = 8,
  kRecomputeMlp = 16,
  kRecomputeMoe = 32,
  kRecomputeSharedExperts = 64,
};
inline constexpr EnumName<uint8_t> kRecomputeModuleNames[] = {
    {"core_attn", kRecomputeCoreAttn},
    {"moe_act", kRecomputeMoeAct},
    {"layernorm", kRecomputeLayernorm},
    {"mla_up_proj", kRecomputeMlaUpProj},
    {"mlp", kRecomputeMlp},
    {"moe", kRecomputeMoe},
    {"shared_experts", kRecomputeSharedExperts}};
// "core_attn,moe_act" (Megatron's order of the choices); "" for none.
std::string RecomputeModulesText(uint8_t modules, char separator = ',');
// Parses names separated by commas, spaces or '+'; "" in `error` or what is wrong.
uint8_t ParseRecomputeModules(std::string_view text, std::string* error);

inline std::string_view Name(Schedule s) { return NameOf<Schedule>(kScheduleNames, s); }
inline std::string_view Name(Recompute r) { return NameOf<Recompute>(kRecomputeNames, r); }
inline std::string_view Name(Fsdp f) { return NameOf<Fsdp>(kFsdpNames, f); }
inline std::string_view Name(CpComm c) { return NameOf<CpComm>(kCpCommNames, c); }

struct ParallelConfig {
  int tp = 1;                     // --tensor-model-parallel-size
  int pp = 1;                     // --pipeline-model-parallel-size
  int dp = 1;                     // derived by Megatron as world / (tp * cp * pp)
  int cp = 1;                     // --context-parallel-size
  CpComm cp_comm = CpComm::kP2p;  // --cp-comm-type (matters only with cp > 1)
  // Expert parallelism (MoE models): the experts of a MoE layer split over ep ranks
  // (--expert-model-parallel-size), each expert's linears over etp ranks
  // (--expert-tensor-parallel-size; 0: tp, Megatron's default). Megatron lays the experts out
  // on their own grid, etp-ep-edp-pp (parallel_state.py expert_decoder_rank_generator): the
  // expert data-parallel size edp = world / (etp x ep x pp).
  int ep = 1;
  int etp = 0;
  int micro_batch_size = 1;  // --micro-batch-size
  int virtual_stages = 1;    // model chunks per pipeline rank (v); > 1 only when interleaved
  Schedule schedule = Schedule::k1F1B;
  bool sequence_parallel = false;          // --sequence-parallel
  Recompute recompute = Recompute::kNone;  // --recompute-granularity
  // --recompute-modules (RecomputeModule bits), with selective recompute only.
  uint8_t recompute_modules = kRecomputeCoreAttn;
  bool distributed_optimizer = false;  // --use-distributed-optimizer
  // Uneven pipeline split (--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-
  // layers): the transformer layers of the first / last pipeline stage, over all its model
  // chunks; 0: not set (that stage takes the even share of what is left).
  int first_stage_layers = 0;
  int last_stage_layers = 0;
  // --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the
  // embedding (the loss) takes one layer's place in the first (last) virtual stage's share.
  bool account_for_embedding = false;
  bool account_for_loss = false;
  // With full recompute: --recompute-method block --recompute-num-layers N, only the first N
  // layers of each model chunk recompute, the others keep their activations; 0: every layer
  // (--recompute-method uniform --recompute-num-layers 1).
  int recompute_num_layers = 0;
  Fsdp fsdp = Fsdp::kNone;  // --use-megatron-fsdp --data-parallel-sharding-strategy
  // --pipeline-model-parallel-layout: the transformer layers of each virtual stage, in virtual
  // stage order (vs = c * pp + r), pp * virtual_stages of them; empty: not given. The embedding
  // is in virtual stage 0 and the loss (and a model's MTP layers) in the last, as Megatron's
  // layout strings must put them ("Et|(tt|)*30mL").
  std::vector<int> layout = {};

  bool operator==(const ParallelConfig&) const = default;

  int64_t world_size() const { return int64_t{tp} * cp * pp * dp; }
  // The group the gradients are reduced over and the distributed optimizer (or Megatron-FSDP)
  // shards over: data parallel together with context parallel (each CP rank computes the
  // gradients of its share of the tokens).
  int64_t dp_cp() const { return int64_t{dp} * cp; }
  int expert_tp() const { return etp > 0 ? etp : tp; }
  // The expert data-parallel size: the group the experts' gradients are reduced over (and the
  // distributed optimizer shards their state over).
  int64_t expert_dp() const { return int64_t{tp} * cp * dp / (int64_t{expert_tp()} * ep); }
};

// The experts' layout, " (experts: ETP 1 x EP 4 x EDP 16)": the ranks of a pipeline stage
// (TP x CP x DP) regrouped for the expert layers, so that both products are the stage's ranks
// and "TP 1 x PP 1 x DP 64 (experts: ETP 1 x EP 4 x EDP 16)" reads as 64 GPUs (EP is a split of
// them, not a factor beside DP). EDP is "?" where ETP x EP does not divide the stage's ranks (a
// layout being refused). Lower case ("experts: etp 1 x ep 4 x edp 16") with `lower`.
std::string ExpertGridText(const ParallelConfig& p, bool lower = false);

// Micro-batches per pipeline per step, m = GBS / (MBS * DP) (Megatron derives it; there is no
// --num-microbatches). Requires the division to be exact (see CheckParallelConfig).
int64_t NumMicrobatches(const TrainingSpec& training, const ParallelConfig& parallel);

// Whether the layers are split unevenly (first/last stage layers, an account-for option or a
// layout).
bool UnevenSplit(const ParallelConfig& parallel);

// Megatron's layout string (megatron/core/transformer/pipeline_parallel_layer_layout.py
// parse_str_to_list): '|' separates virtual stages, E the embedding, t a transformer layer, m an
// MTP layer, L the loss, "x*n" and "(...)*n" repeat, commas are cosmetic. Returns the
// transformer layers per virtual stage and, in `mtp`, the MTP layers; "" in `error` or why the
// string is not one Megatron takes (E first, L last, once each; MTP after every decoder layer,
// in the last virtual stage: ptdp places it there).
struct PipelineLayout {
  std::vector<int> layers;
  int mtp = 0;
  std::string error;
};
PipelineLayout ParsePipelineLayout(std::string_view text);
// The string for a layout (runs of equal stages written "(t..|)*n"), `mtp` MTP layers last.
std::string PipelineLayoutText(const std::vector<int>& layers, int mtp);

// Megatron's assignment of transformer layers to the virtual stages vs = c * pp + r (chunk c of
// pipeline rank r), in model order (megatron/core/transformer/transformer_block.py
// get_num_layers_to_build): the first / last stage's given counts split evenly over its chunks
// and the rest evenly over the middle stages; or, with the account-for options, the layers plus
// one for the embedding and one for the loss split evenly, the first (last) virtual stage
// building one layer fewer. Requires a configuration that passes CheckParallelConfig.
struct LayerSplit {
  std::vector<int> layers;       // transformer layers of each virtual stage
  std::vector<int> first_layer;  // index in the model of its first layer
};
LayerSplit SplitLayers(int num_layers, const ParallelConfig& parallel);

// The same for one virtual stage, without allocating (the cost model's hot path): its layers
// and the model index of its first layer.
struct StageSlice {
  int layers = 0;
  int first_layer = 0;
};
StageSlice VirtualStageLayers(int num_layers, const ParallelConfig& parallel, int virtual_stage);

// VirtualStageLayers for many virtual stages of one configuration: the per-rank counts worked
// out once.
class VirtualStages {
 public:
  VirtualStages(int num_layers, const ParallelConfig& parallel);
  StageSlice operator()(int virtual_stage) const;

 private:
  std::vector<int> prefix_;  // with a layout: layers before each virtual stage (empty: none)
  int pp_ = 1, last_vs_ = 0;
  int first_ = 0, middle_ = 0, last_ = 0;  // layers per chunk of rank 0, the middle, the last
  int row_ = 0;                            // layers of one chunk on every rank
  bool embedding_ = false, loss_ = false;
};

}  // namespace ptdp
