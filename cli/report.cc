#include "cli/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/cluster_override.h"
#include "core/json.h"
#include "core/table.h"
#include "core/units.h"
#include "megatron/rules.h"
#include "megatron/write_flags.h"

namespace ptdp::cli {

TimelineTitle SimulationTitle(const Plan& plan, const SimulationReport& r, MemoryUnit unit) {
  std::vector<std::string> changes;
  for (const std::string& o : plan.cluster.overrides) changes.push_back(QuotedWord(o));
  return {fmt::format("{} on {} x {}{}: {}", plan.model.name, plan.num_gpus, plan.cluster.name,
                      changes.empty() ? "" : fmt::format(" with {}", fmt::join(changes, ", ")),
                      LayoutLine(plan)),
          fmt::format("step {}, bubble {:.1f}%, MFU {:.1f}%, peak memory {} of {}{}",
                      Seconds(r.step_time_s), 100 * r.bubble_fraction, 100 * r.mfu,
                      Memory(r.peak_memory_bytes, unit),
                      Memory(static_cast<double>(plan.cluster.gpu.hbm_bytes), unit),
                      r.memory_problem.empty() ? "" : " - DOES NOT FIT")};
}

std::string ClusterOverridesJsonMember(const ClusterSpec& cluster) {
  if (cluster.overrides.empty()) return "";
  std::vector<std::string> items;
  for (const std::string& o : cluster.overrides) items.push_back(JsonString(o));
  return fmt::format(", \"cluster_overrides\": [{}]", fmt::join(items, ", "));
}

std::string NoteText(std::string_view note) {
  std::string out = "Note: ";
  for (const char ch : WrapWords(note, 94))
    out += ch == '\n' ? std::string("\n      ") : std::string(1, ch);
  return out + "\n";
}

std::string GivenCheckpointFormat(const MegatronCommand& command) {
  std::string format(kDefaultCheckpointFormat);
  for (const MegatronCommand::Arg& a : command.args) {
    if (a.flag == "--ckpt-format" && a.valid && a.values.size() == 1) format = a.values.front();
  }
  return format;
}

std::string SimulationText(const Plan& plan, const SimulationReport& r, MemoryUnit unit,
                           const std::vector<std::string>& notes) {
  std::string out =
      fmt::format("ptdp simulate: {} on {} x {}, global batch {}, {}\n{}\n", plan.model.name,
                  plan.num_gpus, plan.cluster.name, plan.training.global_batch_size,
                  Name(plan.training.precision), LayoutLine(plan));
  if (const std::string changed = ClusterOverridesLine(plan.cluster); !changed.empty()) {
    out += changed + "\n";
  }
  for (const std::string& note : notes) out += NoteText(note);
  out += "\n";
  out += fmt::format("step time     {}   ({} tokens/s)\n", Seconds(r.step_time_s),
                     GroupThousands(static_cast<int64_t>(r.tokens_per_s)));
  out += fmt::format(
      "throughput    {:.1f} TFLOP/s per GPU (model), {:.1f} (hardware); MFU {:.1f}%{}\n",
      r.model_tflops_per_gpu, r.hardware_tflops_per_gpu, 100 * r.mfu,
      plan.training.precision == Precision::kFp8 ? " of the bf16 peak" : "");
  out += fmt::format("bubble        {:.1f}% of the pipeline phase ({} idle per stage)\n",
                     100 * r.bubble_fraction, Seconds(r.breakdown.bubble_s));
  const double hbm = static_cast<double>(plan.cluster.gpu.hbm_bytes);
  const StageMemory& largest = r.memory.stages[r.memory.largest_stage];
  out += fmt::format(
      "peak memory   {} of {} (stage {}){}: {} allocated (as torch.cuda.max_memory_allocated "
      "counts), {} the caching allocator holds beyond it, {} outside it\n\n",
      Memory(r.peak_memory_bytes, unit), Memory(hbm, unit), r.memory.largest_stage,
      r.memory_problem.empty() ? ", fits" : "", Memory(largest.allocated_bytes(), unit),
      Memory(largest.fragmentation_bytes, unit), Memory(largest.reserved_bytes, unit));
  if (!r.memory_problem.empty()) {
    out += "DOES NOT FIT: " + MemoryProblem(r.memory, plan.cluster, unit) + "\n\n";
  }
  const std::string u(MemoryUnitName(unit));

  Table t({{"stage"},
           {"forward", Table::Align::kRight},
           {"backward", Table::Align::kRight},
           {"busy", Table::Align::kRight},
           {"bubble", Table::Align::kRight},
           {"weights " + u, Table::Align::kRight},
           {"grads " + u, Table::Align::kRight},
           {"optimizer " + u, Table::Align::kRight},
           {"activations " + u, Table::Align::kRight},
           {"in flight", Table::Align::kRight},
           {"allocated " + u, Table::Align::kRight},
           {"peak " + u, Table::Align::kRight}});
  const PipelineSchedule& s = r.schedule;
  for (int st = 0; st < s.stages; ++st) {
    double forward = 0, backward = 0;
    for (int c = 0; c < s.chunks; ++c) {
      const ChunkCosts& ch = r.estimate.costs.chunks[s.VirtualStage(st, c)];
      forward += ch.forward_s;
      backward += ch.backward_input_s + ch.backward_weight_s;
    }
    const StageMemory& mem = r.memory.stages[st];
    t.AddRow({std::to_string(st), Seconds(forward), Seconds(backward),
              Seconds(r.sim.stages[st].busy_s),
              fmt::format("{:.1f}%", 100 * r.sim.stages[st].bubble_fraction),
              MemoryNumber(mem.weights_bytes, unit), MemoryNumber(mem.gradients_bytes, unit),
              MemoryNumber(mem.optimizer_bytes, unit), MemoryNumber(mem.activations_bytes, unit),
              std::to_string(mem.in_flight), MemoryNumber(mem.allocated_bytes(), unit),
              MemoryNumber(mem.peak_bytes, unit)});
  }
  out += "Per stage (forward and backward of one micro-batch through the stage's layers):\n";
  out += t.Render();
  const StepBreakdown& b = r.breakdown;
  out += fmt::format(
      "\nWhere the time goes (average stage): compute {}, TP comm {}{}{}{}, PP comm {}, DP comm "
      "{}{}, optimizer {}, bubble {}\n",
      Seconds(b.compute_s), Seconds(b.tp_comm_s),
      b.tp_comm_hidden_s > 0 ? fmt::format(" (and {} hidden behind the GEMMs by --tp-comm-overlap)",
                                           Seconds(b.tp_comm_hidden_s))
                             : "",
      plan.parallel.cp > 1
          ? fmt::format(", CP comm {}{}", Seconds(b.cp_comm_s),
                        b.cp_comm_hidden_s > 0
                            ? fmt::format(" (and {} hidden behind the ring's attention blocks)",
                                          Seconds(b.cp_comm_hidden_s))
                            : "")
          : "",
      plan.model.moe() ? fmt::format(", EP comm {}", Seconds(b.ep_comm_s)) : "",
      Seconds(b.pp_comm_s), Seconds(b.dp_comm_s),
      b.dp_comm_s > 0 && b.dp_exposed_s < 0.999 * b.dp_comm_s
          ? fmt::format(" ({} exposed, {} hidden behind the backward and the next forward)",
                        Seconds(b.dp_exposed_s), Seconds(b.dp_comm_s - b.dp_exposed_s))
          : "",
      Seconds(b.optimizer_s), Seconds(b.bubble_s));
  if (plan.training.precision == Precision::kFp8) {
    out +=
        "MFU is against the bf16 peak (the FP8 GEMMs' is twice it), so that bf16 and fp8 "
        "plans compare on one scale.\n";
  }
  return out;
}

namespace {

// "12.3 GB", "456 MB", "7.8 kB": the sizes of a step's collectives.
std::string DataSize(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.3g} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.3g} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.3g} kB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

}  // namespace

std::string CommGroupsText(const std::vector<CommGroupRow>& rows, std::string_view heading) {
  Table t({{"group"},
           {"size", Table::Align::kRight},
           {"nodes", Table::Align::kRight},
           {"GPUs/node", Table::Align::kRight},
           {"link"},
           {"bandwidth", Table::Align::kRight},
           {"time/step", Table::Align::kRight},
           {"hidden", Table::Align::kRight},
           {"bytes/step", Table::Align::kRight},
           {"what travels"}});
  for (const CommGroupRow& r : rows) {
    const bool traffic = r.has_figures;
    t.AddRow(
        {r.name, std::to_string(r.placement.ranks), std::to_string(r.placement.nodes),
         std::to_string(r.placement.ranks_per_node),
         r.link == GroupLink::kNone ? "-" : std::string(Name(r.link)),
         r.bandwidth_bytes_per_s > 0 ? fmt::format("{:.0f} GB/s", r.bandwidth_bytes_per_s / 1e9)
                                     : "-",
         traffic ? Seconds(r.time_s) : "-", traffic && r.hidden_s > 0 ? Seconds(r.hidden_s) : "-",
         traffic ? DataSize(r.bytes) : "-", r.traffic.empty() ? "-" : r.traffic});
  }
  return fmt::format("{}:\n", heading) + t.Render() +
         "(The worst-placed group of each kind. Bandwidth: per GPU, as the cost model moves the "
         "bytes.\nTime per step on the average stage, DP, EDP and embedding on the slowest; TP "
         "and CP: what\nthe GPU waits for, hidden: what overlap hides behind the kernels. Bytes: "
         "per GPU and step.)\n";
}

std::string LayoutJsonMembers(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  return fmt::format(
      "\"tp\": {}, \"cp\": {}, \"cp_comm\": \"{}\", \"ep\": {}, \"etp\": {}, \"pp\": {}, "
      "\"dp\": {}, \"micro_batch\": {}, \"schedule\": \"{}\", \"virtual_stages\": {}, "
      "\"sequence_parallel\": {}, \"recompute\": \"{}\", \"distributed_optimizer\": {}, "
      "\"fsdp\": \"{}\", \"first_stage_layers\": {}, \"last_stage_layers\": {}, "
      "\"account_for_embedding\": {}, \"account_for_loss\": {}, \"megatron_args\": {}, "
      "\"in_megatron\": {}",
      p.tp, p.cp, Name(p.cp_comm), p.ep, p.expert_tp(), p.pp, p.dp, p.micro_batch_size,
      Name(p.schedule), p.virtual_stages, p.sequence_parallel, Name(p.recompute),
      p.distributed_optimizer, Name(p.fsdp), p.first_stage_layers, p.last_stage_layers,
      p.account_for_embedding, p.account_for_loss, JsonString(MegatronArgsLine(plan)),
      RunsInMegatron(p));
}

}  // namespace ptdp::cli
