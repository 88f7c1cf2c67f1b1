// `ptdp check`: what Megatron-LM would say about a pasted command line, in its own words, with
// the fix for each problem; the layout the command asks for, ready to be simulated and compared
// with the best plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/read_command.h"
#include "megatron/rules.h"

namespace ptdp {

struct CheckReport {
  MegatronCommand command;  // flags read, findings (errors and warnings) about them
  int64_t gpus = 0;
  bool gpus_assumed = false;          // neither --gpus nor the launcher said; tp x pp assumed
  std::vector<Violation> violations;  // Megatron's layout rules (megatron/rules.h)
  int64_t microbatches = 0;           // m = GBS / (MBS x DP), when that divides
  // Why ptdp cannot simulate a layout Megatron-LM accepts ("" when it can).
  std::string not_simulated;

  // The command cannot run as written: a finding is an error or a layout rule is broken.
  bool failed() const;
  // The layout is complete and valid, so it can be simulated (possibly after fixing flag
  // errors that do not change it, such as --num-microbatches or --learning-rate).
  bool simulatable() const;
};

// `gpus` (the user's --gpus) wins over the launcher's world size; with neither, the world is
// assumed to be tp x pp (one data-parallel replica) and the report says so.
CheckReport CheckMegatronCommand(std::string_view text, const std::string& source,
                                 std::optional<int64_t> gpus,
                                 const MegatronReadOptions& options = {});

}  // namespace ptdp
