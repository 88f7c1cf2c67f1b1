#include "planner/check.h"

#include <fmt/format.h>

namespace ptdp {

bool CheckReport::failed() const { return command.has_errors() || !violations.empty(); }

bool CheckReport::simulatable() const {
  return command.model_complete && violations.empty() && microbatches > 0;
}

CheckReport CheckMegatronCommand(std::string_view text, const std::string& source,
                                 std::optional<int64_t> gpus) {
  CheckReport report;
  report.command = ReadMegatronCommand(text, source);
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
    report.gpus = int64_t{c.parallel.tp} * c.parallel.pp * c.parallel.cp;
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
  }
  return report;
}

}  // namespace ptdp
