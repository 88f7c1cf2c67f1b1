// Plan files as ptdp reads them: the specs of each section (core/spec_yaml.h ParsePlanSpecs),
// then Megatron-LM's rules on the layout (megatron/rules.h), so that a plan Megatron-LM would
// refuse is refused where it is read, naming the key at fault. Writing is core's
// (WritePlanYaml): a written plan reads back to an equal one.
#pragma once

#include <string>
#include <string_view>

#include "core/plan.h"

namespace ptdp {

// A plan file's text: every section's own checks, then CheckParallelConfig; its first violation
// is an InputError at the line of the key at fault (in `parallel`, or in `training` for the
// batch and FP8 keys), the number of further violations in the hint.
Plan ParsePlanYaml(std::string_view text, const std::string& source = "<string>");

// The plan file at `path` ("-": standard input).
Plan LoadPlanFile(const std::string& path);

}  // namespace ptdp
