#include "planner/check.h"

#include <fmt/format.h>

#include <numeric>

namespace ptdp {

bool CheckReport::failed() const { return command.has_errors() || !violations.empty(); }

bool CheckReport::simulatable() const {
  return command.model_complete && violations.empty() && microbatches > 0 && not_simulated.empty();
}

namespace {

// The interleaved schedule's micro-batch rule with --microbatch-group-size-per-virtual-pipeline-
// stage g (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_
// interleaving): pp <= g <= m, and m % g is 0 or at least pp. With g = pp (the default) that is
// CheckParallelConfig's m % pp == 0; another g replaces that rule.
void ApplyMicrobatchGroupSize(CheckReport& report) {
  const MegatronCommand& c = report.command;
  const int pp = c.parallel.pp;
  if (!c.microbatch_group_size || c.parallel.virtual_stages <= 1 || report.microbatches <= 0 ||
      *c.microbatch_group_size == pp) {
    return;
  }
  const int64_t g = *c.microbatch_group_size, m = report.microbatches;
  std::erase_if(report.violations,
                [](const Violation& v) { return v.rule == Rule::kInterleavedMicrobatches; });
  const int64_t remainder = m % g;
  if (g > m || g < pp) {
    report.violations.push_back(
        {Rule::kInterleavedMicrobatches, "global_batch_size",
         fmt::format("The number of contiguous micro-batches in a virtual pipeline stage should "
                     "range in [PP={} , M={}] (got {})",
                     pp, m, g),
         "set --microbatch-group-size-per-virtual-pipeline-stage between pp and m"});
  } else if (remainder > 0 && remainder < pp) {
    report.violations.push_back(
        {Rule::kInterleavedMicrobatches, "global_batch_size",
         fmt::format("The remainder of M (the total micro-batches) divided by N (number of "
                     "contiguous micro-batches in a virtual pipeline stage) should be 0, or larger "
                     "than or equal to the pipeline-parallel size, but it is {}.",
                     remainder),
         "change the global batch or the group size"});
  } else {
    report.not_simulated = fmt::format(
        "ptdp's interleaved schedule runs micro-batches in groups of pp ({}); this command's "
        "groups of {} are not simulated",
        pp, g);
  }
}

}  // namespace

CheckReport CheckMegatronCommand(std::string_view text, const std::string& source,
                                 std::optional<int64_t> gpus, const MegatronReadOptions& options) {
  CheckReport report;
  report.command = ReadMegatronCommand(text, source, options);
  MegatronCommand& c = report.command;
  if (gpus) {
    if (c.world_size && *c.world_size != *gpus) {
      c.findings.push_back({MegatronFinding::Severity::kWarning, "--nproc-per-node", 0,
                            fmt::format("the launcher starts {} processes but --gpus says {}; "
                                        "checking with {}",
                                        *c.world_size, *gpus, *gpus),
                            ""});
    }
    report.gpus = *gpus;
  } else if (c.world_size) {
    report.gpus = *c.world_size;
  } else {
    // The fewest GPUs the layout runs on: the dense model's tp x pp x cp and, with experts, the
    // expert layers' etp x ep x pp (Megatron's two decompositions of the world).
    const ParallelConfig& p = c.parallel;
    report.gpus = std::lcm(int64_t{p.tp} * p.pp * p.cp, int64_t{p.expert_tp()} * p.ep * p.pp);
    report.gpus_assumed = true;
  }
  ResolveWorldSize(c, report.gpus);
  if (c.model_complete && c.training.global_batch_size > 0) {
    report.violations =
        CheckParallelConfig(c.model, c.training, c.parallel, report.gpus, c.options);
    const int64_t per_step = int64_t{c.parallel.micro_batch_size} * c.parallel.dp;
    if (c.parallel.dp > 0 && c.training.global_batch_size % per_step == 0) {
      report.microbatches = c.training.global_batch_size / per_step;
    }
    ApplyMicrobatchGroupSize(report);
  }
  return report;
}

}  // namespace ptdp
