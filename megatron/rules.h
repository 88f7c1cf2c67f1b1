// Megatron-LM's validity rules for a parallel configuration, in Megatron's words
// (shared/reference/megatron-rules.md, read from megatron/training/arguments.py validate_args,
// model_parallel_config.py, transformer_config.py, num_microbatches_calculator.py and
// pipeline_parallel/schedules.py), plus the few consistency rules ptdp's own schedule field adds.
//
// The rules are a table (MegatronRuleChecks): each check names the rule it belongs to, the
// Megatron-LM code it mirrors, when it is broken, and what Megatron says. A rule from a new
// Megatron-LM release is one more entry. A configuration is valid exactly when
// CheckParallelConfig returns no violation. The planner counts violations by Rule; `check` and
// the plan-file reader print their messages.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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

// What a check reads: the configuration, and what several checks derive from it (worked out
// once per configuration by MakeRuleInput).
struct RuleInput {
  const ModelSpec& model;
  const TrainingSpec& training;
  const ParallelConfig& p;
  int64_t num_gpus;
  const CostOptions& options;

  int64_t model_size;  // tp x pp x cp (arguments.py total_model_size)
  int64_t per_step;    // micro-batch x dp: the samples of one micro-batch over the replicas
  bool batch_ok;       // the global batch divides into micro-batches
  bool interleaved;    // the interleaved schedule
  bool uneven;         // first or last stage layers given
  int accounted;       // layers the embedding and the loss count for (0, 1 or 2)
  int layout_total;    // the transformer layers a layout places (0 without a layout)
  int middle_layers;   // uneven split: the layers left to the middle stages
  int middle_stages;   // uneven split: the middle stages
  bool mamba;          // a hybrid model with Mamba-2 mixers
  int etp;             // the expert tensor-parallel size
};

// The input of the checks for one configuration; it refers to its arguments, which must outlive
// it.
RuleInput MakeRuleInput(const ModelSpec& model, const TrainingSpec& training,
                        const ParallelConfig& parallel, int64_t num_gpus,
                        const CostOptions& options);
// A temporary CostOptions would be gone before the input is read.
RuleInput MakeRuleInput(const ModelSpec&, const TrainingSpec&, const ParallelConfig&, int64_t,
                        CostOptions&&) = delete;

// Megatron's if / elif chains: of the checks of one chain, only the first broken one is reported
// (the checks after it in Megatron's code are not reached).
enum class RuleChain : uint8_t {
  kNone,  // reported whenever broken
  kMambaSizes,
  kHybridSplit,
  kLayerSplit,
  kContextParallel,
  kExpertParallel,
  kRecomputeModules,
};
inline constexpr int kNumRuleChains = static_cast<int>(RuleChain::kRecomputeModules) + 1;

// One check Megatron-LM makes of a layout. `broken` is the predicate; the words are formatted
// only for a broken check.
struct RuleCheck {
  Rule rule;
  std::string_view megatron;  // the Megatron-LM code it mirrors: "arguments.py validate_args: ..."
  bool (*broken)(const RuleInput&);
  std::string_view key = "";                               // the field at fault, or:
  std::string_view (*key_of)(const RuleInput&) = nullptr;  // when it depends on the input
  std::string (*message)(const RuleInput&) = nullptr;      // Megatron's words, numbers filled in
  std::string (*hint)(const RuleInput&) = nullptr;         // how to fix it
  RuleChain chain = RuleChain::kNone;
  // Checked before all others; depends on tp, pp, cp, dp and the micro-batch size alone.
  bool leading = false;
};

// Every check, in the order Megatron makes them; the leading ones first.
std::span<const RuleCheck> MegatronRuleChecks();

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
