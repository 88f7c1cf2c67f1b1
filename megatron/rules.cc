#include "megatron/rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

namespace ptdp {

std::string_view RuleId(Rule rule) {
  switch (rule) {
    case Rule::kWorldSize:
      return "world-size";
    case Rule::kGlobalBatchDivisible:
      return "global-batch-divisible";
    case Rule::kHeadsDivisibleByTp:
      return "heads-divisible-by-tp";
    case Rule::kQueryGroupsVsTp:
      return "query-groups-vs-tp";
    case Rule::kLayersDivisibleByPp:
      return "layers-divisible-by-pp";
    case Rule::kUnevenStages:
      return "uneven-stages";
    case Rule::kVirtualStagesDivideLayers:
      return "virtual-stages-divide-layers";
    case Rule::kInterleavedNeedsPp:
      return "interleaved-needs-pp";
    case Rule::kInterleavedMicrobatches:
      return "interleaved-microbatches";
    case Rule::kSequenceParallelNeedsTp:
      return "sequence-parallel-needs-tp";
    case Rule::kContextParallel:
      return "context-parallel";
    case Rule::kSequenceSplitByTp:
      return "sequence-split-by-tp";
    case Rule::kExpertParallel:
      return "expert-parallel";
    case Rule::kRecomputeNumLayers:
      return "recompute-num-layers";
    case Rule::kRecomputeModules:
      return "recompute-modules";
    case Rule::kFsdpNeedsDistributedOptimizer:
      return "fsdp-needs-distributed-optimizer";
    case Rule::kFp8Options:
      return "fp8-options";
    case Rule::kHybridModel:
      return "hybrid-model";
    case Rule::kScheduleVirtualStages:
      return "schedule-virtual-stages";
  }
  return "?";
}

namespace {

int LayoutTotal(const ParallelConfig& p) {
  int total = 0;
  for (int n : p.layout) total += n;
  return total;
}

// The layers left to the middle stages of an uneven split, and how many middle stages there are
// (transformer_config.py __post_init__).
std::pair<int, int> MiddleOfUnevenSplit(const ModelSpec& model, const ParallelConfig& p) {
  int rest = model.num_layers, middle = p.pp;
  if (p.first_stage_layers > 0) rest -= p.first_stage_layers, --middle;
  if (p.last_stage_layers > 0) rest -= p.last_stage_layers, --middle;
  return {rest, middle};
}

// Internal (and so inlined into the planner's hot path; MakeRuleInput is its public name).
RuleInput Derive(const ModelSpec& model, const TrainingSpec& training,
                 const ParallelConfig& parallel, int64_t num_gpus, const CostOptions& options) {
  const int64_t per_step = int64_t{parallel.micro_batch_size} * parallel.dp;
  const auto [middle_layers, middle_stages] = MiddleOfUnevenSplit(model, parallel);
  return {
      .model = model,
      .training = training,
      .p = parallel,
      .num_gpus = num_gpus,
      .options = options,
      .model_size = int64_t{parallel.tp} * parallel.pp * parallel.cp,
      .per_step = per_step,
      .batch_ok = training.global_batch_size % per_step == 0,
      .interleaved = parallel.schedule == Schedule::kInterleaved,
      .uneven = parallel.first_stage_layers > 0 || parallel.last_stage_layers > 0,
      .accounted = (parallel.account_for_embedding ? 1 : 0) + (parallel.account_for_loss ? 1 : 0),
      .layout_total = LayoutTotal(parallel),
      .middle_layers = middle_layers,
      .middle_stages = middle_stages,
      // A hybrid model's Mamba mixers split their heads and groups over TP (mamba_mixer.py
      // MambaMixer.__init__), and over TP x CP with context parallelism
      // (gdp_context_parallel.py).
      .mamba = model.hybrid() && model.mamba_num_heads > 0 &&
               model.hybrid_layer_pattern.find('M') != std::string::npos,
      .etp = parallel.expert_tp(),
  };
}

}  // namespace

RuleInput MakeRuleInput(const ModelSpec& model, const TrainingSpec& training,
                        const ParallelConfig& parallel, int64_t num_gpus,
                        const CostOptions& options) {
  return Derive(model, training, parallel, num_gpus, options);
}

namespace {

using In = const RuleInput&;

// The layer counts of an uneven, interleaved split, each of which the virtual stages divide.
int MiddleStageLayers(In in) {
  return in.middle_stages > 0 ? in.middle_layers / in.middle_stages : 0;
}

std::string_view UnevenKey(In in) {
  return in.p.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers";
}

std::string Bf16LayersMessage(std::string_view megatron_name, int n, int most) {
  return fmt::format("{} ({}) must be between 0 and number of layers per pipeline stage ({}).",
                     megatron_name, n, most);
}

// The checks, in Megatron's order. Each entry: the rule, the Megatron-LM code it mirrors, when it
// is broken, the key at fault, Megatron's words and ptdp's hint; a chain for Megatron's elifs.
constexpr RuleCheck kChecks[] = {
    // ---- Leading: the sizes alone (FirstBrokenLeadingRule) ----------------------------------
    {.rule = Rule::kWorldSize,
     .megatron = "arguments.py validate_args: total_model_size = tp * pp * cp; assert "
                 "args.world_size % total_model_size == 0",
     .broken =
         [](In in) { return in.p.world_size() != in.num_gpus && in.num_gpus % in.model_size != 0; },
     .key = "tp",
     .message =
         [](In in) {
           return fmt::format(
               "world size ({}) is not divisible by total_model_size (tp {} x pp {}{} = {})",
               in.num_gpus, in.p.tp, in.p.pp, in.p.cp > 1 ? fmt::format(" x cp {}", in.p.cp) : "",
               in.model_size);
         },
     .hint =
         [](In in) {
           return std::string(in.p.cp > 1
                                  ? "choose tp, pp and cp whose product divides the number of GPUs"
                                  : "choose tp and pp whose product divides the number of GPUs");
         },
     .leading = true},
    {.rule = Rule::kWorldSize,
     .megatron = "arguments.py validate_args: args.data_parallel_size = args.world_size // "
                 "total_model_size",
     .broken =
         [](In in) { return in.p.world_size() != in.num_gpus && in.num_gpus % in.model_size == 0; },
     .key = "dp",
     .message =
         [](In in) {
           return fmt::format(
               "data-parallel size must be world size / (tp x pp{}) = {} / {} = {}, got {}",
               in.p.cp > 1 ? " x cp" : "", in.num_gpus, in.model_size, in.num_gpus / in.model_size,
               in.p.dp);
         },
     .hint = [](In in) { return fmt::format("set dp to {}", in.num_gpus / in.model_size); },
     .leading = true},
    {.rule = Rule::kGlobalBatchDivisible,
     .megatron = "num_microbatches_calculator.py ConstantNumMicroBatchesCalculator: assert "
                 "global_batch_size % (micro_batch_size * data_parallel_size) == 0",
     .broken = [](In in) { return !in.batch_ok; },
     .key = "global_batch_size",
     .message =
         [](In in) {
           return fmt::format(
               "global batch size ({}) is not divisible by micro batch size ({}) times data "
               "parallel size ({})",
               in.training.global_batch_size, in.p.micro_batch_size, in.p.dp);
         },
     .hint =
         [](In) {
           return std::string(
               "pick a micro-batch size and data-parallel size whose product divides the global "
               "batch");
         },
     .leading = true},
    {.rule = Rule::kHeadsDivisibleByTp,
     .megatron = "transformer_config.py __post_init__: num_attention_heads % "
                 "tensor_model_parallel_size != 0 raises",
     .broken = [](In in) { return in.model.num_attention_heads % in.p.tp != 0; },
     .key = "tp",
     .message =
         [](In in) {
           return fmt::format(
               "num_attention_heads ({}) must be a multiple of tensor_model_parallel_size ({})",
               in.model.num_attention_heads, in.p.tp);
         },
     .hint =
         [](In) {
           return std::string(
               "use a tensor-parallel size that divides the number of attention heads");
         },
     .leading = true},
    {.rule = Rule::kQueryGroupsVsTp,
     .megatron = "transformer_config.py __post_init__: num_query_groups % tp != 0 and tp % "
                 "num_query_groups != 0 raises",
     .broken =
         [](In in) {
           return in.model.num_query_groups % in.p.tp != 0 &&
                  in.p.tp % in.model.num_query_groups != 0;
         },
     .key = "tp",
     .message =
         [](In in) {
           return fmt::format(
               "num_query_groups ({}) must be a multiple of tensor_model_parallel_size ({}), "
               "or tensor_model_parallel_size a multiple of num_query_groups",
               in.model.num_query_groups, in.p.tp);
         },
     .hint =
         [](In) {
           return std::string(
               "use a tensor-parallel size that divides, or is a multiple of, the query groups");
         },
     .leading = true},

    // ---- A hybrid model's Mamba mixers over TP and CP ----------------------------------------
    {.rule = Rule::kHybridModel,
     .megatron = "mamba_mixer.py MambaMixer.__init__: assert self.nheads % tp_size == 0",
     .broken = [](In in) { return in.mamba && in.model.mamba_num_heads % in.p.tp != 0; },
     .key = "tp",
     .message =
         [](In in) {
           return fmt::format("nheads must be evenly divisble by tp_size ({} Mamba heads, tp {})",
                              in.model.mamba_num_heads, in.p.tp);
         },
     .hint = [](In) { return std::string("use a tensor-parallel size dividing the Mamba heads"); },
     .chain = RuleChain::kMambaSizes},
    {.rule = Rule::kHybridModel,
     .megatron = "mamba_mixer.py MambaMixer.__init__: assert self.ngroups % tp_size == 0",
     .broken = [](In in) { return in.mamba && in.model.mamba_num_groups % in.p.tp != 0; },
     .key = "tp",
     .message =
         [](In in) {
           return fmt::format(
               "ngroups must be evenly divisible by tp_size ({} Mamba groups, tp {})",
               in.model.mamba_num_groups, in.p.tp);
         },
     .hint = [](In) { return std::string("use a tensor-parallel size dividing the Mamba groups"); },
     .chain = RuleChain::kMambaSizes},
    {.rule = Rule::kHybridModel,
     .megatron = "gdp_context_parallel.py: assert nheads_local_tp % cp_size == 0",
     .broken =
         [](In in) {
           return in.mamba && in.p.cp > 1 && (in.model.mamba_num_heads / in.p.tp) % in.p.cp != 0;
         },
     .key = "cp",
     .message =
         [](In in) {
           return fmt::format(
               "nheads must be evenly divisible by tp_size * cp_size ({} Mamba heads, tp {}, "
               "cp {})",
               in.model.mamba_num_heads, in.p.tp, in.p.cp);
         },
     .hint = [](In) { return std::string("use tp x cp dividing the Mamba heads"); },
     .chain = RuleChain::kMambaSizes},
    {.rule = Rule::kHybridModel,
     .megatron = "gdp_context_parallel.py: ngroups_local_tp < cp_size: assert cp_size % "
                 "ngroups_local_tp == 0",
     .broken =
         [](In in) {
           const int groups = in.model.mamba_num_groups / in.p.tp;
           return in.mamba && in.p.cp > 1 && groups < in.p.cp && in.p.cp % groups != 0;
         },
     .key = "cp",
     .message =
         [](In in) {
           return fmt::format(
               "cp_size must be evenly divisible by ngroups/tp_size ({} Mamba groups, tp {}, cp "
               "{})",
               in.model.mamba_num_groups, in.p.tp, in.p.cp);
         },
     .hint =
         [](In) {
           return std::string("use a context-parallel size that the groups per TP rank divide");
         },
     .chain = RuleChain::kMambaSizes},
    {.rule = Rule::kHybridModel,
     .megatron = "gdp_context_parallel.py: ngroups_local_tp >= cp_size: assert ngroups_local_tp "
                 "% cp_size == 0",
     .broken =
         [](In in) {
           const int groups = in.model.mamba_num_groups / in.p.tp;
           return in.mamba && in.p.cp > 1 && groups >= in.p.cp && groups % in.p.cp != 0;
         },
     .key = "cp",
     .message =
         [](In in) {
           return fmt::format(
               "ngroups must be evenly divisible by tp_size * cp_size ({} Mamba groups, tp {}, "
               "cp {})",
               in.model.mamba_num_groups, in.p.tp, in.p.cp);
         },
     .hint = [](In) { return std::string("use tp x cp dividing the Mamba groups"); },
     .chain = RuleChain::kMambaSizes},

    // ---- A hybrid model's layer split --------------------------------------------------------
    // Megatron's hybrid stack takes its pipeline stages from the pattern's '|' separators (here
    // the layout), or splits its layers evenly (or by the first / last stage counts) over pp ranks
    // without virtual stages (hybrid_layer_allocation.py select_pipeline_segment; mamba_block.py
    // before: no virtual pipeline at all). It does not count the embedding or the loss as layers.
    {.rule = Rule::kHybridModel,
     .megatron = "hybrid_layer_allocation.py: vp_stage is not None without '|' in "
                 "hybrid_layer_pattern raises",
     .broken =
         [](In in) { return in.model.hybrid() && in.p.virtual_stages > 1 && in.p.layout.empty(); },
     .key = "virtual_stages",
     .message =
         [](In) {
           return std::string(
               "Virtual pipeline parallelism (vp_stage != None) is not supported when "
               "hybrid_layer_pattern has no pipe ('|') separators.");
         },
     .hint =
         [](In) {
           return std::string(
               "give the stages as a layout (Megatron: '|' separators in the pattern), or use "
               "one model chunk per pipeline rank");
         },
     .chain = RuleChain::kHybridSplit},
    {.rule = Rule::kHybridModel,
     .megatron = "hybrid_layer_allocation.py select_pipeline_segment: the hybrid stack splits "
                 "its own layers (no account-for options)",
     .broken = [](In in) { return in.model.hybrid() && in.accounted > 0; },
     .key_of = [](In in) -> std::string_view {
       return in.p.account_for_embedding ? "account_for_embedding" : "account_for_loss";
     },
     .message =
         [](In) {
           return std::string(
               "the hybrid model splits its layers alone: Megatron's hybrid stack does not "
               "count the embedding or the loss as layers");
         },
     .hint =
         [](In) {
           return std::string(
               "drop account_for_embedding / account_for_loss; use first_stage_layers / "
               "last_stage_layers or a layout");
         },
     .chain = RuleChain::kHybridSplit},

    // ---- The layer split (arguments.py validate_args; TransformerConfig.__post_init__;
    // transformer_block.py get_num_layers_to_build). A layout names every stage's layers
    // (pipeline_parallel_layer_layout.py); the other split options must be left unset. --------
    {.rule = Rule::kUnevenStages,
     .megatron = "arguments.py validate_args: pipeline_model_parallel_layout excludes the "
                 "first / last stage and account-for options",
     .broken = [](In in) { return !in.p.layout.empty() && (in.uneven || in.accounted > 0); },
     .key = "layout",
     .message =
         [](In) {
           return std::string(
               "pipeline_model_parallel_layout cannot be combined with the first / last stage "
               "layer counts or the account-for-embedding / loss options");
         },
     .hint = [](In) { return std::string("give the layout alone"); },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "arguments.py validate_args: assert num_stages % pipeline_model_parallel_size "
                 "== 0 (virtual stages = num_stages // pp)",
     .broken =
         [](In in) {
           return !in.p.layout.empty() && static_cast<int64_t>(in.p.layout.size()) !=
                                              int64_t{in.p.pp} * in.p.virtual_stages;
         },
     .key = "layout",
     .message =
         [](In in) {
           return fmt::format(
               "the layout has {} stages, pipeline_model_parallel_size {} x virtual stages {} "
               "= {} expected",
               in.p.layout.size(), in.p.pp, in.p.virtual_stages,
               int64_t{in.p.pp} * in.p.virtual_stages);
         },
     .hint =
         [](In) {
           return std::string("give pp x v stages, or set virtual stages to their number / pp");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "pipeline_parallel_layer_layout.py: the decoder layers of the layout must "
                 "match num_layers",
     .broken = [](In in) { return !in.p.layout.empty() && in.layout_total != in.model.num_layers; },
     .key = "layout",
     .message =
         [](In in) {
           return fmt::format("Number of decoder layers {} must match num_layers {}",
                              in.layout_total, in.model.num_layers);
         },
     .hint = [](In) { return std::string("place every transformer layer (t) once"); },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "transformer_config.py __post_init__: first / last stage layers exclude "
                 "account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split",
     .broken = [](In in) { return in.p.layout.empty() && in.uneven && in.accounted > 0; },
     .key = "first_stage_layers",
     .message =
         [](In) {
           return std::string(
               "num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage "
               "cannot be set at the same time with account_for_embedding_in_pipeline_split "
               "and account_for_loss_in_pipeline_split");
         },
     .hint =
         [](In) {
           return std::string(
               "use either the first/last stage layer counts or the account-for options");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "transformer_config.py __post_init__: uneven pipeline stages need "
                 "pipeline_model_parallel_size > 1",
     .broken = [](In in) { return in.p.layout.empty() && in.uneven && in.p.pp == 1; },
     .key = "first_stage_layers",
     .message =
         [](In) {
           return std::string(
               "first / last pipeline stage layer counts need pipeline parallelism (pp is 1)");
         },
     .hint =
         [](In) {
           return std::string("drop first_stage_layers and last_stage_layers, or use pp > 1");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "transformer_config.py __post_init__: 'Mismatch: {num_layers} middle layers "
                 "remaining but {pipeline_parallel_size} middle PP stages available'",
     .broken =
         [](In in) {
           return in.p.layout.empty() && in.uneven &&
                  ((in.middle_layers != 0) != (in.middle_stages != 0) || in.middle_layers < 0);
         },
     .key_of = UnevenKey,
     .message =
         [](In in) {
           return fmt::format(
               "Mismatch: {} middle layers remaining but {} middle PP stages available.",
               in.middle_layers, in.middle_stages);
         },
     .hint =
         [](In) {
           return std::string(
               "the first and last stage layers must leave at least one layer per middle "
               "stage (or none when there is no middle stage)");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "transformer_config.py __post_init__: number of layers at middle stage must be "
                 "divisible by the middle pipeline model parallel size",
     .broken =
         [](In in) {
           return in.p.layout.empty() && in.uneven && in.middle_stages > 0 &&
                  in.middle_layers % in.middle_stages != 0;
         },
     .key_of = UnevenKey,
     .message =
         [](In in) {
           return fmt::format(
               "number of layers at middle stage: {} must be divisible by the middle pipeline "
               "model parallel size {}",
               in.middle_layers, in.middle_stages);
         },
     .hint =
         [](In) {
           return std::string(
               "choose first and last stage layer counts that leave a multiple of the middle "
               "stages");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "transformer_config.py __post_init__: number of layers at first stage must be "
                 "divisible by virtual pipeline parallel degree",
     .broken =
         [](In in) {
           const int n = in.p.first_stage_layers;
           return in.p.layout.empty() && in.uneven && in.interleaved && n > 0 &&
                  n % in.p.virtual_stages != 0;
         },
     .key = "first_stage_layers",
     .message =
         [](In in) {
           return fmt::format(
               "number of layers at first stage: {} must be divisible by virtual pipeline "
               "parallel degree {}",
               in.p.first_stage_layers, in.p.virtual_stages);
         },
     .hint =
         [](In) {
           return std::string("make each stage's layer count a multiple of virtual_stages");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "transformer_config.py __post_init__: number of layers at last stage must be "
                 "divisible by virtual pipeline parallel degree",
     .broken =
         [](In in) {
           const int n = in.p.last_stage_layers;
           return in.p.layout.empty() && in.uneven && in.interleaved && n > 0 &&
                  n % in.p.virtual_stages != 0;
         },
     .key = "last_stage_layers",
     .message =
         [](In in) {
           return fmt::format(
               "number of layers at last stage: {} must be divisible by virtual pipeline "
               "parallel degree {}",
               in.p.last_stage_layers, in.p.virtual_stages);
         },
     .hint =
         [](In) {
           return std::string("make each stage's layer count a multiple of virtual_stages");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kUnevenStages,
     .megatron = "transformer_config.py __post_init__: number of layers at middle stage must be "
                 "divisible by virtual pipeline parallel degree",
     .broken =
         [](In in) {
           const int n = MiddleStageLayers(in);
           return in.p.layout.empty() && in.uneven && in.interleaved && n > 0 &&
                  n % in.p.virtual_stages != 0;
         },
     .key = "virtual_stages",
     .message =
         [](In in) {
           return fmt::format(
               "number of layers at middle stage: {} must be divisible by virtual pipeline "
               "parallel degree {}",
               MiddleStageLayers(in), in.p.virtual_stages);
         },
     .hint =
         [](In) {
           return std::string("make each stage's layer count a multiple of virtual_stages");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kLayersDivisibleByPp,
     .megatron = "arguments.py validate_args: num_layers (+ 1 per account-for option); assert "
                 "num_layers % transformer_pipeline_model_parallel_size == 0",
     .broken =
         [](In in) {
           return in.p.layout.empty() && !in.uneven &&
                  (in.model.num_layers + in.accounted) % in.p.pp != 0;
         },
     .key = "pp",
     .message =
         [](In in) {
           return in.accounted > 0
                      ? fmt::format(
                            "number of layers ({} + {} for the embedding / loss) should be "
                            "divisible by the pipeline-model-parallel size ({})",
                            in.model.num_layers, in.accounted, in.p.pp)
                      : fmt::format(
                            "number of layers ({}) should be divisible by the "
                            "pipeline-model-parallel size ({})",
                            in.model.num_layers, in.p.pp);
         },
     .hint =
         [](In) {
           return std::string(
               "use a pipeline size that divides the number of layers, or an uneven split "
               "(first_stage_layers / last_stage_layers, or the account-for options)");
         },
     .chain = RuleChain::kLayerSplit},
    {.rule = Rule::kVirtualStagesDivideLayers,
     .megatron = "arguments.py validate_args: assert num_layers_per_pipeline_stage % "
                 "num_layers_per_virtual_pipeline_stage == 0",
     .broken =
         [](In in) {
           const int total = in.model.num_layers + in.accounted;
           return in.p.layout.empty() && !in.uneven && in.interleaved &&
                  (total / in.p.pp) % in.p.virtual_stages != 0;
         },
     .key = "virtual_stages",
     .message =
         [](In in) {
           return fmt::format(
               "number of layers per pipeline stage ({}) must be divisible by the number of "
               "virtual stages per pipeline rank ({})",
               (in.model.num_layers + in.accounted) / in.p.pp, in.p.virtual_stages);
         },
     .hint = [](In) { return std::string("choose virtual_stages dividing num_layers / pp"); },
     .chain = RuleChain::kLayerSplit},

    // ---- The schedule ------------------------------------------------------------------------
    {.rule = Rule::kScheduleVirtualStages,
     .megatron = "ptdp: the interleaved schedule is virtual_pipeline_model_parallel_size > 1",
     .broken = [](In in) { return in.interleaved != (in.p.virtual_stages > 1); },
     .key = "virtual_stages",
     .message =
         [](In in) {
           return in.interleaved
                      ? fmt::format("the interleaved schedule needs virtual_stages > 1, got {}",
                                    in.p.virtual_stages)
                      : fmt::format("virtual_stages {} needs the interleaved schedule, not {}",
                                    in.p.virtual_stages, Name(in.p.schedule));
         },
     .hint =
         [](In in) {
           return std::string(in.interleaved
                                  ? "use schedule 1f1b for one model chunk per pipeline rank"
                                  : "set schedule to interleaved, or virtual_stages to 1");
         }},
    {.rule = Rule::kInterleavedNeedsPp,
     .megatron = "arguments.py validate_args: with virtual stages, assert "
                 "pipeline_model_parallel_size > 1 (overlap_p2p_comm), else > 2",
     .broken =
         [](In in) {
           return in.interleaved &&
                  (in.options.overlap_p2p_communication ? in.p.pp <= 1 : in.p.pp <= 2);
         },
     .key = "pp",
     .message =
         [](In in) {
           return in.options.overlap_p2p_communication
                      ? fmt::format(
                            "When interleaved schedule is used, pipeline-model-parallel "
                            "size should be greater than 1, got {}",
                            in.p.pp)
                      : fmt::format(
                            "pipeline-model-parallel size should be greater than 2 with "
                            "interleaved schedule (without p2p communication overlap), "
                            "got {}",
                            in.p.pp);
         },
     .hint =
         [](In in) {
           return std::string(in.options.overlap_p2p_communication
                                  ? "use pp >= 2, or the 1f1b schedule"
                                  : "use pp >= 3, --overlap-p2p-communication, or the 1f1b "
                                    "schedule");
         }},
    {.rule = Rule::kInterleavedMicrobatches,
     .megatron = "pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving: "
                 "microbatch_group_size_per_vp_stage (default pp) in [pp, m], m % it 0 or >= pp",
     .broken =
         [](In in) {
           if (!in.interleaved || !in.batch_ok) return false;
           const int64_t m = in.training.global_batch_size / in.per_step;
           return m < in.p.pp || m % in.p.pp != 0;
         },
     .key = "global_batch_size",
     .message =
         [](In in) {
           return fmt::format(
               "number of microbatches ({}) must be at least, and a multiple of, the "
               "pipeline-model-parallel size ({}) with the interleaved schedule",
               in.training.global_batch_size / in.per_step, in.p.pp);
         },
     .hint =
         [](In) {
           return std::string(
               "change the global batch or micro-batch size so that m = GBS / (MBS x DP) is a "
               "multiple of pp");
         }},

    // ---- Sequence and context parallelism ----------------------------------------------------
    {.rule = Rule::kSequenceParallelNeedsTp,
     .megatron = "model_parallel_config.py __post_init__: 'Cannot use sequence parallelism "
                 "without tensor parallelism'",
     .broken = [](In in) { return in.p.sequence_parallel && in.p.tp == 1; },
     .key = "sequence_parallel",
     .message =
         [](In) {
           return std::string(
               "Cannot use sequence parallelism without tensor parallelism (tp is 1)");
         },
     .hint = [](In) { return std::string("drop sequence_parallel or use tp > 1"); }},
    {.rule = Rule::kContextParallel,
     .megatron = "arguments.py validate_args: assert args.seq_length % "
                 "(args.context_parallel_size * 2) == 0",
     .broken =
         [](In in) {
           return in.p.cp > 1 && int64_t{in.model.seq_length} % (2 * int64_t{in.p.cp}) != 0;
         },
     .key = "cp",
     .message =
         [](In in) {
           return fmt::format(
               "seq-length should be a multiple of 2 * context-parallel-size if "
               "context-parallel-size > 1 (seq-length {}, context-parallel-size {})",
               in.model.seq_length, in.p.cp);
         },
     .hint =
         [](In) {
           return std::string(
               "use a context-parallel size whose double divides the sequence length");
         },
     .chain = RuleChain::kContextParallel},
    {.rule = Rule::kContextParallel,
     .megatron = "dot_product_attention.py DotProductAttention.__init__: 'Context parallelism "
                 "is only supported by TEDotProductAttention!'",
     .broken =
         [](In in) {
           return in.p.cp > 1 && !FlashStyleAttention(in.training.precision, in.options);
         },
     .key = "cp",
     .message =
         [](In in) {
           return std::string(
               in.training.precision == Precision::kFp32
                   ? "Context parallelism needs Transformer Engine's flash-style attention, which "
                     "takes 16-bit inputs (fp32 training)"
                   : "Context parallelism is only supported by TEDotProductAttention!");
         },
     .hint =
         [](In in) {
           return std::string(
               in.training.precision == Precision::kFp32
                   ? "train in bf16 or fp16, or drop context parallelism"
                   : "use the flash or fused attention backend, or drop context parallelism");
         },
     .chain = RuleChain::kContextParallel},
    {.rule = Rule::kContextParallel,
     .megatron = "Transformer Engine's a2a exchange: the heads and query groups of each TP rank "
                 "split over the CP ranks",
     .broken =
         [](In in) {
           return in.p.cp > 1 && in.p.cp_comm == CpComm::kA2a &&
                  ((in.model.num_attention_heads / in.p.tp) % in.p.cp != 0 ||
                   (std::max(1, in.model.num_query_groups / in.p.tp)) % in.p.cp != 0);
         },
     .key = "cp_comm",
     .message =
         [](In in) {
           return fmt::format(
               "The number of attention heads and gqa groups per TP rank ({} and {}) needs "
               "to be divisible by CP size ({}) with the a2a exchange",
               in.model.num_attention_heads / in.p.tp,
               std::max(1, in.model.num_query_groups / in.p.tp), in.p.cp);
         },
     .hint =
         [](In) {
           return std::string(
               "use cp_comm p2p, or a context-parallel size dividing the heads per TP rank");
         },
     .chain = RuleChain::kContextParallel},
    {.rule = Rule::kSequenceSplitByTp,
     .megatron = "tensor_parallel/mappings.py _split_along_first_dim: 'First dimension of the "
                 "tensor should be divisible by tensor parallel size'",
     .broken =
         [](In in) {
           // scatter_to_sequence_parallel_region splits each rank's s / cp tokens over TP.
           return in.p.sequence_parallel && in.p.tp > 1 && in.model.seq_length % in.p.cp == 0 &&
                  (in.model.seq_length / in.p.cp) % in.p.tp != 0;
         },
     .key = "sequence_parallel",
     .message =
         [](In in) {
           return fmt::format(
               "First dimension of the tensor should be divisible by tensor parallel size: "
               "sequence parallelism splits the {} tokens of {} over tp {}",
               in.model.seq_length / in.p.cp,
               in.p.cp > 1 ? "each context-parallel rank" : "the sequence", in.p.tp);
         },
     .hint =
         [](In) {
           return std::string(
               "use a tensor-parallel size dividing the tokens per rank, or drop "
               "sequence_parallel");
         }},

    // ---- Expert parallelism (arguments.py validate_args; parallel_state.py
    // initialize_model_parallel builds the expert grid etp x ep x edp x pp;
    // ColumnParallelLinear's ensure_divisibility) ----------------------------------------------
    {.rule = Rule::kExpertParallel,
     .megatron = "arguments.py validate_args: expert_model_parallel_size > 1: assert "
                 "args.num_experts is not None",
     .broken = [](In in) { return in.p.ep > 1 && !in.model.moe(); },
     .key = "ep",
     .message =
         [](In) {
           return std::string("num_experts must be non None to use expert model parallelism");
         },
     .hint = [](In) { return std::string("use ep 1 for a dense model"); },
     .chain = RuleChain::kExpertParallel},
    {.rule = Rule::kExpertParallel,
     .megatron = "arguments.py validate_args: assert args.num_experts % "
                 "args.expert_model_parallel_size == 0",
     .broken = [](In in) { return in.model.moe() && in.model.num_experts % in.p.ep != 0; },
     .key = "ep",
     .message =
         [](In in) {
           return fmt::format(
               "Number of experts should be a multiple of expert model parallel_size ({} experts, "
               "ep {})",
               in.model.num_experts, in.p.ep);
         },
     .hint = [](In) { return std::string("use an expert-parallel size dividing the experts"); },
     .chain = RuleChain::kExpertParallel},
    {.rule = Rule::kExpertParallel,
     .megatron = "parallel_state.py initialize_model_parallel: world_size % "
                 "expert_tensor_model_pipeline_parallel_size != 0 raises",
     .broken =
         [](In in) {
           return in.model.moe() && in.num_gpus % (int64_t{in.etp} * in.p.ep * in.p.pp) != 0;
         },
     .key = "ep",
     .message =
         [](In in) {
           return fmt::format(
               "world_size ({}) is not divisible by expert_tensor_model_pipeline_parallel size "
               "({} = etp {} x ep {} x pp {})",
               in.num_gpus, int64_t{in.etp} * in.p.ep * in.p.pp, in.etp, in.p.ep, in.p.pp);
         },
     .hint =
         [](In) { return std::string("choose etp x ep dividing the GPUs of a pipeline stage"); },
     .chain = RuleChain::kExpertParallel},
    {.rule = Rule::kExpertParallel,
     .megatron = "tensor_parallel/layers.py ColumnParallelLinear: ensure_divisibility("
                 "moe_ffn_hidden_size, expert_tensor_parallel_size)",
     .broken = [](In in) { return in.model.moe() && in.model.moe_ffn_hidden_size % in.etp != 0; },
     .key = "etp",
     .message =
         [](In in) {
           return fmt::format(
               "{} is not divisible by {} (moe_ffn_hidden_size over "
               "expert_tensor_parallel_size)",
               in.model.moe_ffn_hidden_size, in.etp);
         },
     .hint =
         [](In) {
           return std::string("use an expert tensor-parallel size dividing the expert width");
         },
     .chain = RuleChain::kExpertParallel},

    // ---- Recompute and sharding --------------------------------------------------------------
    {.rule = Rule::kRecomputeNumLayers,
     .megatron = "arguments.py validate_args: recompute_granularity == 'selective': assert "
                 "args.recompute_method is None",
     .broken =
         [](In in) { return in.p.recompute_num_layers > 0 && in.p.recompute != Recompute::kFull; },
     .key = "recompute_num_layers",
     .message =
         [](In in) {
           return fmt::format(
               "recompute method is not yet supported for {} recomputing granularity",
               Name(in.p.recompute));
         },
     .hint =
         [](In) {
           return std::string("recompute_num_layers (the block method) needs recompute: full");
         }},
    {.rule = Rule::kRecomputeModules,
     .megatron = "transformer_config.py __post_init__: 'mla_up_proj in recompute_modules is only "
                 "supported with multi_latent_attention'",
     .broken =
         [](In in) {
           return in.p.recompute == Recompute::kSelective &&
                  (in.p.recompute_modules & kRecomputeMlaUpProj) &&
                  !in.model.multi_latent_attention;
         },
     .key = "recompute_modules",
     .message =
         [](In) {
           return std::string(
               "mla_up_proj in recompute_modules is only supported with multi_latent_attention.");
         },
     .hint = [](In) { return std::string("drop mla_up_proj (the model has no MLA)"); },
     .chain = RuleChain::kRecomputeModules},
    {.rule = Rule::kRecomputeModules,
     .megatron = "transformer_config.py __post_init__: 'Delayed scaling does not support moe_act "
                 "and layernorm recompute for fp8'",
     .broken =
         [](In in) {
           return in.p.recompute == Recompute::kSelective &&
                  (in.p.recompute_modules & (kRecomputeMoeAct | kRecomputeLayernorm)) &&
                  in.training.precision == Precision::kFp8 &&
                  in.training.fp8_recipe == Fp8Recipe::kDelayed;
         },
     .key = "recompute_modules",
     .message =
         [](In) {
           return std::string(
               "Delayed scaling does not support moe_act and layernorm recompute for fp8.");
         },
     .hint =
         [](In) {
           return std::string("use fp8_recipe: tensorwise, or drop moe_act and layernorm");
         },
     .chain = RuleChain::kRecomputeModules},
    {.rule = Rule::kFsdpNeedsDistributedOptimizer,
     .megatron = "arguments.py validate_args: use_megatron_fsdp: 'Megatron-FSDP v1 is only "
                 "compatible with --use-distributed-optimizer'",
     .broken = [](In in) { return in.p.fsdp != Fsdp::kNone && !in.p.distributed_optimizer; },
     .key = "distributed_optimizer",
     .message =
         [](In) {
           return std::string(
               "Megatron-FSDP v1 is only compatible with --use-distributed-optimizer");
         },
     .hint =
         [](In) {
           return std::string("set distributed_optimizer (Megatron turns it on for Megatron-FSDP)");
         }},

    // ---- FP8 ---------------------------------------------------------------------------------
    {.rule = Rule::kFp8Options,
     .megatron = "transformer_config.py __post_init__: num_layers_at_start_in_bf16 in [0, "
                 "layers per pipeline stage]",
     .broken =
         [](In in) {
           return in.training.precision == Precision::kFp8 &&
                  in.training.fp8_bf16_layers_at_start > in.model.num_layers / in.p.pp;
         },
     .key = "fp8_bf16_layers_at_start",
     .message =
         [](In in) {
           return Bf16LayersMessage("num_layers_at_start_in_bf16",
                                    in.training.fp8_bf16_layers_at_start,
                                    in.model.num_layers / in.p.pp);
         },
     .hint =
         [](In) { return std::string("keep at most num_layers / pp layers in bf16 at each end"); }},
    {.rule = Rule::kFp8Options,
     .megatron = "transformer_config.py __post_init__: num_layers_at_end_in_bf16 in [0, layers "
                 "per pipeline stage]",
     .broken =
         [](In in) {
           return in.training.precision == Precision::kFp8 &&
                  in.training.fp8_bf16_layers_at_end > in.model.num_layers / in.p.pp;
         },
     .key = "fp8_bf16_layers_at_end",
     .message =
         [](In in) {
           return Bf16LayersMessage("num_layers_at_end_in_bf16", in.training.fp8_bf16_layers_at_end,
                                    in.model.num_layers / in.p.pp);
         },
     .hint =
         [](In) { return std::string("keep at most num_layers / pp layers in bf16 at each end"); }},
    {.rule = Rule::kFp8Options,
     .megatron = "mamba_mixer.py MambaMixer.__init__: for FP8, the in_proj output's innermost "
                 "dimension % 16 == 0",
     .broken =
         [](In in) {
           const ModelSpec& m = in.model;
           return in.training.precision == Precision::kFp8 && in.mamba &&
                  (2 * m.MambaInnerSize() + 2 * int64_t{m.mamba_num_groups} * m.mamba_state_dim +
                   m.mamba_num_heads) %
                          16 !=
                      0;
         },
     .key = "precision",
     .message =
         [](In) {
           return std::string(
               "For FP8, the innermost dimension of the Mamba layer input projection output "
               "tensor must be a multiple of 16.");
         },
     .hint =
         [](In) { return std::string("train in bf16, or choose Mamba sizes that satisfy it"); }},
    {.rule = Rule::kFp8Options,
     .megatron = "arguments.py validate_args: fp8_param_gather: assert "
                 "args.use_distributed_optimizer or args.use_torch_fsdp2 or args.use_megatron_fsdp",
     .broken =
         [](In in) {
           return in.training.precision == Precision::kFp8 && in.training.fp8_param_gather &&
                  !in.p.distributed_optimizer;
         },
     .key = "fp8_param_gather",
     .message =
         [](In) {
           return std::string(
               "--fp8-param-gather only supported with distributed optimizer, torch fsdp2, "
               "megatron "
               "fsdp, or inference mode");
         },
     .hint =
         [](In) { return std::string("use the distributed optimizer, or drop fp8_param_gather"); }},
};

constexpr size_t kNumChecks = std::size(kChecks);

constexpr size_t CountLeading() {
  size_t n = 0;
  while (n < kNumChecks && kChecks[n].leading) ++n;
  for (size_t i = n; i < kNumChecks; ++i) {
    if (kChecks[i].leading) return kNumChecks + 1;  // not a prefix: refused below
  }
  return n;
}
constexpr size_t kNumLeading = CountLeading();
static_assert(kNumLeading <= kNumChecks, "the leading checks come first in the table");

// The first broken check among the first N, each predicate called directly (the table is a
// constant: the planner's hot path pays no indirect call and formats nothing).
template <size_t... I>
std::optional<Rule> FirstBroken(const RuleInput& in, std::index_sequence<I...>) {
  std::optional<Rule> first;
  (void)((kChecks[I].broken(in) ? (first = kChecks[I].rule, true) : false) || ...);
  return first;
}

}  // namespace

std::span<const RuleCheck> MegatronRuleChecks() { return kChecks; }

std::vector<Violation> CheckParallelConfig(const ModelSpec& model, const TrainingSpec& training,
                                           const ParallelConfig& p, int64_t num_gpus,
                                           const CostOptions& options) {
  const RuleInput in = Derive(model, training, p, num_gpus, options);
  std::vector<Violation> out;
  std::array<bool, kNumRuleChains> chain_broken{};
  for (const RuleCheck& check : kChecks) {
    const auto chain = static_cast<size_t>(check.chain);
    if (check.chain != RuleChain::kNone && chain_broken[chain]) continue;
    if (!check.broken(in)) continue;
    chain_broken[chain] = true;
    out.push_back({check.rule, std::string(check.key_of != nullptr ? check.key_of(in) : check.key),
                   check.message(in), check.hint(in)});
  }
  return out;
}

std::optional<Rule> FirstBrokenLeadingRule(const ModelSpec& model, const TrainingSpec& training,
                                           const ParallelConfig& p, int64_t num_gpus) {
  const CostOptions options;
  return FirstBroken(Derive(model, training, p, num_gpus, options),
                     std::make_index_sequence<kNumLeading>());
}

// Flattened: the input's fields and every predicate inlined into one function (the planner calls
// it for every candidate).
[[gnu::flatten]] std::optional<Rule> FirstBrokenRule(const ModelSpec& model,
                                                     const TrainingSpec& training,
                                                     const ParallelConfig& p, int64_t num_gpus,
                                                     const CostOptions& options) {
  return FirstBroken(Derive(model, training, p, num_gpus, options),
                     std::make_index_sequence<kNumChecks>());
}

}  // namespace ptdp
