// Text for people: how `simulate`, `plan` and `check` print a simulated configuration.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/plan.h"
#include "core/text.h"  // Seconds, Memory
#include "megatron/read_command.h"
#include "simulator/comm_groups.h"
#include "simulator/simulate.h"
#include "simulator/timeline.h"

namespace ptdp::cli {

// The SVG/trace title: "<model> on N x <cluster>: <layout>" and the figures.
// Memory in `unit` (--memory-unit).
TimelineTitle SimulationTitle(const Plan& plan, const SimulationReport& report, MemoryUnit unit);

// "Note: <note>" wrapped at 100 columns between words, later lines indented under the text.
std::string NoteText(std::string_view note);

// Megatron-LM's default --ckpt-format.
inline constexpr std::string_view kDefaultCheckpointFormat = "torch_dist";

// When `recommended`'s flags set a --ckpt-format other than `current` (the user's command's, or
// Megatron-LM's default): that checkpoints of one format do not load into a run of the other
// (Megatron-FSDP writes fsdp_dtensor); "" otherwise. `keep` says how to keep the format ("" for
// nothing).
std::string CheckpointFormatNote(const Plan& recommended, std::string_view current,
                                 std::string_view keep);

// The --ckpt-format a Megatron-LM command gives (its last valid one), or Megatron's default.
std::string GivenCheckpointFormat(const MegatronCommand& command);

// The peak allocated memory's mean error out of sample (Megatron-LM's functional tests on H100,
// results/validation/megatron-functional-tests/README.md: 5.3%): a plan that leaves less free
// may not fit.
inline constexpr double kMemoryModelError = 0.053;

// When `recommended` leaves less of the GPU's memory free than kMemoryModelError: how much it
// leaves, and that --memory-headroom keeps a margin; "" otherwise.
std::string LowHeadroomNote(const Plan& recommended, const SimulationReport& report,
                            MemoryUnit unit);

// The full `ptdp simulate` table: headline figures, per-stage rows, breakdown, memory verdict;
// `notes` (how the inputs were read: Workload::notes), each a "Note:" line under the heading.
std::string SimulationText(const Plan& plan, const SimulationReport& report, MemoryUnit unit,
                           const std::vector<std::string>& notes = {});

// `--explain`'s table of the communication groups (simulator/comm_groups.h) under `heading`,
// with what its figures mean.
std::string CommGroupsText(const std::vector<CommGroupRow>& rows,
                           std::string_view heading = "Communication groups");

}  // namespace ptdp::cli
