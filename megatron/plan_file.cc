#include "megatron/plan_file.h"

#include <fmt/format.h>

#include <vector>

#include "core/schedule.h"
#include "core/spec_yaml.h"
#include "core/yaml_io.h"
#include "megatron/rules.h"

namespace ptdp {

Plan ParsePlanYaml(std::string_view text, const std::string& source) {
  Plan plan = ParsePlanSpecs(text, source);
  const std::vector<Violation> violations =
      CheckParallelConfig(plan.model, plan.training, plan.parallel, plan.num_gpus, plan.options);
  if (violations.empty()) {
    // A step too long to build operation by operation (core/limits.h kMaxPipelineOps).
    const std::string problem =
        ScheduleSizeProblem(plan.parallel.pp, NumMicrobatches(plan.training, plan.parallel),
                            plan.parallel.virtual_stages);
    if (problem.empty()) return plan;
    const YamlMap map(ParseYamlDocument(text, source), source, "", 1);
    map.Map("training")
        .Fail("global_batch_size", problem, "a smaller global batch, or a larger micro_batch_size");
  }
  // The text is read again to find the key's line: only a refused plan pays for it.
  const Violation& v = violations.front();
  const bool in_training = v.key == "global_batch_size" || v.key.starts_with("fp8_");
  const YamlMap map(ParseYamlDocument(text, source), source, "", 1);
  std::string hint = v.hint;
  if (violations.size() > 1) {
    hint += fmt::format("; {} more problem{} after this one", violations.size() - 1,
                        violations.size() > 2 ? "s" : "");
  }
  map.Map(in_training ? "training" : "parallel").Fail(v.key, v.message, hint);
}

Plan LoadPlanFile(const std::string& path) {
  return ParsePlanYaml(ReadTextFile(path), path == "-" ? "<stdin>" : path);
}

}  // namespace ptdp
