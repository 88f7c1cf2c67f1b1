#include "core/megatron_rules.h"

#include <fmt/format.h>

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
    case Rule::kVirtualStagesDivideLayers:
      return "virtual-stages-divide-layers";
    case Rule::kInterleavedNeedsPp:
      return "interleaved-needs-pp";
    case Rule::kInterleavedMicrobatches:
      return "interleaved-microbatches";
    case Rule::kSequenceParallelNeedsTp:
      return "sequence-parallel-needs-tp";
    case Rule::kScheduleVirtualStages:
      return "schedule-virtual-stages";
  }
  return "?";
}

std::vector<Violation> CheckParallelConfig(const ModelSpec& model, const TrainingSpec& training,
                                           const ParallelConfig& p, int64_t num_gpus) {
  std::vector<Violation> out;
  auto add = [&](Rule rule, std::string key, std::string message, std::string hint) {
    out.push_back({rule, std::move(key), std::move(message), std::move(hint)});
  };

  if (p.world_size() != num_gpus) {
    const int64_t model_size = int64_t{p.tp} * p.pp;
    if (num_gpus % model_size != 0) {
      add(Rule::kWorldSize, "tp",
          fmt::format("world size ({}) is not divisible by total model size (tp {} x pp {} = {})",
                      num_gpus, p.tp, p.pp, model_size),
          "choose tp and pp whose product divides the number of GPUs");
    } else {
      add(Rule::kWorldSize, "dp",
          fmt::format("data-parallel size must be world size / (tp x pp) = {} / {} = {}, got {}",
                      num_gpus, model_size, num_gpus / model_size, p.dp),
          fmt::format("set dp to {}", num_gpus / model_size));
    }
  }

  const int64_t per_step = int64_t{p.micro_batch_size} * p.dp;
  const bool batch_ok = training.global_batch_size % per_step == 0;
  if (!batch_ok) {
    add(Rule::kGlobalBatchDivisible, "global_batch_size",
        fmt::format("global batch size ({}) is not divisible by micro batch size ({}) times data "
                    "parallel size ({})",
                    training.global_batch_size, p.micro_batch_size, p.dp),
        "pick a micro-batch size and data-parallel size whose product divides the global batch");
  }

  if (model.num_attention_heads % p.tp != 0) {
    add(Rule::kHeadsDivisibleByTp, "tp",
        fmt::format(
            "num_attention_heads ({}) must be a multiple of tensor_model_parallel_size ({})",
            model.num_attention_heads, p.tp),
        "use a tensor-parallel size that divides the number of attention heads");
  }
  if (model.num_query_groups % p.tp != 0 && p.tp % model.num_query_groups != 0) {
    add(Rule::kQueryGroupsVsTp, "tp",
        fmt::format("num_query_groups ({}) must be a multiple of tensor_model_parallel_size ({}), "
                    "or tensor_model_parallel_size a multiple of num_query_groups",
                    model.num_query_groups, p.tp),
        "use a tensor-parallel size that divides, or is a multiple of, the query groups");
  }

  const bool layers_ok = model.num_layers % p.pp == 0;
  if (!layers_ok) {
    add(Rule::kLayersDivisibleByPp, "pp",
        fmt::format("number of layers ({}) should be divisible by the pipeline-model-parallel size "
                    "({})",
                    model.num_layers, p.pp),
        "use a pipeline size that divides the number of layers");
  }

  const bool interleaved = p.schedule == Schedule::kInterleaved;
  if (interleaved != (p.virtual_stages > 1)) {
    add(Rule::kScheduleVirtualStages, "virtual_stages",
        interleaved ? fmt::format("the interleaved schedule needs virtual_stages > 1, got {}",
                                  p.virtual_stages)
                    : fmt::format("virtual_stages {} needs the interleaved schedule, not {}",
                                  p.virtual_stages, Name(p.schedule)),
        interleaved ? "use schedule 1f1b for one model chunk per pipeline rank"
                    : "set schedule to interleaved, or virtual_stages to 1");
  }
  if (interleaved) {
    if (layers_ok && (model.num_layers / p.pp) % p.virtual_stages != 0) {
      add(Rule::kVirtualStagesDivideLayers, "virtual_stages",
          fmt::format("number of layers per pipeline stage ({}) must be divisible by the number of "
                      "virtual stages per pipeline rank ({})",
                      model.num_layers / p.pp, p.virtual_stages),
          "choose virtual_stages dividing num_layers / pp");
    }
    if (p.pp <= 2) {
      add(Rule::kInterleavedNeedsPp, "pp",
          fmt::format("pipeline-model-parallel size should be greater than 2 with interleaved "
                      "schedule, got {}",
                      p.pp),
          "use pp >= 3, or the 1f1b schedule");
    }
    if (batch_ok) {
      const int64_t m = training.global_batch_size / per_step;
      if (m < p.pp || m % p.pp != 0) {
        add(Rule::kInterleavedMicrobatches, "global_batch_size",
            fmt::format("number of microbatches ({}) must be at least, and a multiple of, the "
                        "pipeline-model-parallel size ({}) with the interleaved schedule",
                        m, p.pp),
            "change the global batch or micro-batch size so that m = GBS / (MBS x DP) is a "
            "multiple of pp");
      }
    }
  }

  if (p.sequence_parallel && p.tp == 1) {
    add(Rule::kSequenceParallelNeedsTp, "sequence_parallel",
        "Cannot use sequence parallelism without tensor parallelism (tp is 1)",
        "drop sequence_parallel or use tp > 1");
  }
  return out;
}

}  // namespace ptdp
