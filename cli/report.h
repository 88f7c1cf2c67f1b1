// Text for people: how `simulate`, `plan` and `check` print a simulated configuration.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/plan.h"
#include "core/text.h"  // Seconds, Memory
#include "megatron/read_command.h"
#include "planner/planner.h"  // CheckpointFormatNote, LowHeadroomNote
#include "simulator/comm_groups.h"
#include "simulator/simulate.h"
#include "simulator/timeline.h"

namespace ptdp::cli {

// The SVG/trace title: "<model> on N x <cluster>: <layout>" and the figures.
// Memory in `unit` (--memory-unit).
TimelineTitle SimulationTitle(const Plan& plan, const SimulationReport& report, MemoryUnit unit);

// `, "cluster_overrides": ["nic_gb_per_s=x2", ...]` (`--cluster-set`, ClusterSpec::overrides)
// to append to a JSON object's members; "" when the cluster has none.
std::string ClusterOverridesJsonMember(const ClusterSpec& cluster);

// "Note: <note>" wrapped at 100 columns between words, later lines indented under the text.
std::string NoteText(std::string_view note);

// A plan's layout as JSON members, without braces: "tp", "cp", "cp_comm", "ep", "etp", "pp",
// "dp", "micro_batch", "schedule", "virtual_stages", "sequence_parallel", "recompute",
// "distributed_optimizer", "fsdp", the split, "megatron_args" and "in_megatron" (plan and sweep
// write the same).
std::string LayoutJsonMembers(const Plan& plan);

// The --ckpt-format a Megatron-LM command gives (its last valid one), or Megatron's default
// (kDefaultCheckpointFormat), for CheckpointFormatNote.
std::string GivenCheckpointFormat(const MegatronCommand& command);

// The full `ptdp simulate` table: headline figures, per-stage rows, breakdown, memory verdict;
// `notes` (how the inputs were read: Workload::notes), each a "Note:" line under the heading.
std::string SimulationText(const Plan& plan, const SimulationReport& report, MemoryUnit unit,
                           const std::vector<std::string>& notes = {});

// `--explain`'s table of the communication groups (simulator/comm_groups.h) under `heading`,
// with what its figures mean.
std::string CommGroupsText(const std::vector<CommGroupRow>& rows,
                           std::string_view heading = "Communication groups");

}  // namespace ptdp::cli
