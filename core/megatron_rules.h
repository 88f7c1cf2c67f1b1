// Megatron-LM's validity rules for a parallel configuration (shared/reference/megatron-rules.md,
// read from megatron/training/arguments.py validate_args, model_parallel_config.py,
// transformer_config.py, num_microbatches_calculator.py and pipeline_parallel/schedules.py),
// plus the few consistency rules ptdp's own schedule field adds.
//
// A configuration is valid exactly when CheckParallelConfig returns no violation. The planner
// counts violations by Rule; `check` and the plan-file reader print their messages.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"

namespace ptdp {

enum class Rule {
  kWorldSize,                      // tp * cp * pp * dp == number of GPUs
  kGlobalBatchDivisible,           // GBS % (MBS * DP) == 0
  kHeadsDivisibleByTp,             // num_attention_heads % TP == 0
  kQueryGroupsVsTp,                // num_query_groups % TP == 0 or TP % num_query_groups == 0
  kLayersDivisibleByPp,            // num_layers (+1 per account-for option) % PP == 0
  kUnevenStages,                   // first / last stage layers: the middle stages divide the rest
  kVirtualStagesDivideLayers,      // each pipeline rank's layers % virtual stages == 0
  kInterleavedNeedsPp,             // interleaved needs PP > 2
  kInterleavedMicrobatches,        // interleaved needs m >= PP and m % PP == 0
  kSequenceParallelNeedsTp,        // --sequence-parallel needs TP > 1
  kContextParallel,                // CP > 1: seq % (2 CP), TE attention, a2a's heads % CP
  kSequenceSplitByTp,              // sequence parallel: (seq / CP) % TP == 0
  kExpertParallel,                 // EP needs experts dividing it; the expert grid fits the world
  kRecomputeNumLayers,             // --recompute-num-layers (block method) needs full recompute
  kRecomputeModules,               // --recompute-modules: mla_up_proj needs MLA; FP8's recipes
  kFsdpNeedsDistributedOptimizer,  // Megatron-FSDP v1 runs the distributed optimizer
  kFp8Options,                     // --first-last-layers-bf16 counts, --fp8-param-gather
  kHybridModel,                    // Mamba heads / groups vs TP and CP; the hybrid layer split
  kScheduleVirtualStages,          // ptdp: interleaved <=> virtual_stages > 1
};
inline constexpr int kNumRules = static_cast<int>(Rule::kScheduleVirtualStages) + 1;

// Whether Megatron-LM has the configuration's schedule: zero-bubble schedules (zb-h1) are
// modelled and ranked, but Megatron-LM cannot run them.
inline bool RunsInMegatron(const ParallelConfig& p) { return p.schedule != Schedule::kZbH1; }

// Short stable identifier ("heads-divisible-by-tp"), for JSON output and rejection counts.
std::string_view RuleId(Rule rule);

struct Violation {
  Rule rule;
  std::string key;      // the parallel or training field at fault: "tp", "global_batch_size"
  std::string message;  // Megatron's words with the numbers filled in
  std::string hint;     // how to fix it
};

// All rules the configuration breaks, in the order Megatron checks them. Sizes must already be
// positive (the parsers guarantee it). `options` matters for context parallelism only (it
// needs a flash-style attention backend).
std::vector<Violation> CheckParallelConfig(const ModelSpec& model, const TrainingSpec& training,
                                           const ParallelConfig& parallel, int64_t num_gpus,
                                           const CostOptions& options = {});

// The first rule CheckParallelConfig would report, without formatting any message (the
// planner's hot path); nullopt when the configuration is valid.
std::optional<Rule> FirstBrokenRule(const ModelSpec& model, const TrainingSpec& training,
                                    const ParallelConfig& parallel, int64_t num_gpus,
                                    const CostOptions& options = {});
// The first of the leading rules broken, which Megatron checks before all others and which depend
// on tp, pp, cp, dp and the micro-batch size alone (world size, batch divisibility, heads and
// query groups over tp): when one is broken, it is FirstBrokenRule's answer for every setting of
// the other fields.
std::optional<Rule> FirstBrokenLeadingRule(const ModelSpec& model, const TrainingSpec& training,
                                           const ParallelConfig& parallel, int64_t num_gpus);

}  // namespace ptdp
