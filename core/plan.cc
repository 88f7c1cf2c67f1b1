#include "core/plan.h"

#include <fmt/format.h>

namespace ptdp {

std::string UnevenSplitText(const std::vector<int>& per_stage) {
  // "7+8x14+7": runs of equal counts.
  std::string text;
  for (size_t i = 0; i < per_stage.size();) {
    size_t j = i;
    while (j < per_stage.size() && per_stage[j] == per_stage[i]) ++j;
    text += (text.empty() ? "" : "+") +
            (j - i > 1 ? fmt::format("{}x{}", per_stage[i], j - i) : std::to_string(per_stage[i]));
    i = j;
  }
  return text;
}

std::string LayoutLine(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  std::string text = p.cp > 1 ? fmt::format("TP {} x CP {} ({}) x PP {} x DP {}", p.tp, p.cp,
                                            Name(p.cp_comm), p.pp, p.dp)
                              : fmt::format("TP {} x PP {} x DP {}", p.tp, p.pp, p.dp);
  if (plan.model.moe()) text += ExpertGridText(p);
  // A layout given to be checked may not divide the batch: then it has no m to say.
  const int64_t per_step = int64_t{p.micro_batch_size} * p.dp;
  const bool whole = per_step > 0 && plan.training.global_batch_size % per_step == 0;
  text += whole ? fmt::format(", micro-batch {} (m = {}), {}", p.micro_batch_size,
                              NumMicrobatches(plan.training, p), Name(p.schedule))
                : fmt::format(", micro-batch {}, {}", p.micro_batch_size, Name(p.schedule));
  if (p.schedule == Schedule::kInterleaved) text += fmt::format(" v={}", p.virtual_stages);
  if (!p.layout.empty()) {
    text += fmt::format(", layout {}", PipelineLayoutText(p.layout, plan.model.mtp_num_layers));
  } else if (p.first_stage_layers > 0 || p.last_stage_layers > 0) {
    const LayerSplit split = SplitLayers(plan.model.num_layers, p);
    std::vector<int> per_stage(p.pp, 0);
    for (size_t vs = 0; vs < split.layers.size(); ++vs) per_stage[vs % p.pp] += split.layers[vs];
    text += fmt::format(", layers {}", UnevenSplitText(per_stage));
  }
  if (p.account_for_embedding || p.account_for_loss) {
    text += p.account_for_embedding && p.account_for_loss ? ", embedding and loss in the split"
            : p.account_for_embedding                     ? ", embedding in the split"
                                                          : ", loss in the split";
  }
  if (p.sequence_parallel) text += ", SP";
  if (p.recompute != Recompute::kNone) {
    text += p.recompute_num_layers > 0 ? fmt::format(", {} recompute of {} layers per chunk",
                                                     Name(p.recompute), p.recompute_num_layers)
                                       : fmt::format(", {} recompute", Name(p.recompute));
    if (p.recompute == Recompute::kSelective && p.recompute_modules != kRecomputeCoreAttn) {
      text += fmt::format(" ({})", RecomputeModulesText(p.recompute_modules, ' '));
    }
  }
  if (p.fsdp != Fsdp::kNone) {
    text += fmt::format(", FSDP {}", Name(p.fsdp));
  } else if (p.distributed_optimizer) {
    text += ", dist-opt";
  }
  return text;
}

}  // namespace ptdp
