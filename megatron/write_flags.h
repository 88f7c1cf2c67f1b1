// A plan as Megatron-LM flags: the command-line way out of ptdp (the way in is
// megatron/read_command.h; `ptdp check` reads what this writes back to the same plan).
#pragma once

#include <string>
#include <vector>

#include "core/plan.h"

namespace ptdp {

// The flags that give Megatron-LM this plan's model, batch and layout, in a stable order, e.g.
// {"--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "8", ...}. Flags for
// things Megatron-LM lacks (the zb-h1 and gpipe schedules) are left out; see the schedule note.
std::vector<std::string> MegatronArgs(const Plan& plan);

// The same, as one shell-ready line: "--tensor-model-parallel-size 8 --pipeline-...".
std::string MegatronArgsLine(const Plan& plan);

}  // namespace ptdp
