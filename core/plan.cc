#include "core/plan.h"

#include <fmt/format.h>

namespace ptdp {

std::string LayoutLine(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  std::string text =
      fmt::format("TP {} x PP {} x DP {}, micro-batch {} (m = {}), {}", p.tp, p.pp, p.dp,
                  p.micro_batch_size, NumMicrobatches(plan.training, p), Name(p.schedule));
  if (p.schedule == Schedule::kInterleaved) text += fmt::format(" v={}", p.virtual_stages);
  if (p.sequence_parallel) text += ", SP";
  if (p.recompute != Recompute::kNone) text += fmt::format(", {} recompute", Name(p.recompute));
  if (p.distributed_optimizer) text += ", dist-opt";
  return text;
}

}  // namespace ptdp
