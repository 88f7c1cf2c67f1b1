// `ptdp plan`: every valid configuration, ranked by simulated step time.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <optional>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/progress.h"
#include "cli/report.h"
#include "cli/search_flags.h"
#include "cli/workload.h"
#include "core/cluster_override.h"
#include "core/error.h"
#include "core/json.h"
#include "core/spec_yaml.h"
#include "core/table.h"
#include "megatron/rules.h"
#include "megatron/write_flags.h"
#include "planner/planner.h"
#include "planner/report_html.h"
#include "simulator/comm_groups.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

enum class Format { kTable, kJson };
constexpr EnumName<Format> kFormats[] = {{"table", Format::kTable}, {"json", Format::kJson}};

// The founding document's hand-picked layout for its example (shared/seed/).
const ParallelConfig kSeedLayout{.tp = 2, .pp = 4, .dp = 1, .micro_batch_size = 4};

void AddPlanOptions(po::options_description& o) {
  AddWorkloadOptions(o, /*example_defaults=*/true);
  o.add_options()("top", po::value<std::string>()->default_value("10")->value_name("K"),
                  "show the best K plans")(
      "format", po::value<std::string>()->default_value("table")->value_name("F"), "table | json")(
      "out", po::value<std::string>()->value_name("FILE"), "write the best plan as a plan file")(
      "out-dir", po::value<std::string>()->value_name("DIR"),
      "write every plan shown (the best K) as a plan file, DIR/plan-<rank>.yaml (DIR must exist)")(
      "html", po::value<std::string>()->value_name("FILE"),
      "write a self-contained HTML report (table, chart, timeline, rejections)")(
      "explain", po::bool_switch(),
      "count the rejections per rule, with an example each, and show the best plan's "
      "communication groups (size, nodes, link, bandwidth, what travels, time and bytes)");
  AddSearchConstraintOptions(o);
  o.add_options()(
      "compare", po::value<std::string>()->value_name("LAYOUT"),
      "place a layout in the ranking, e.g. tp=2,pp=4,mbs=4 (keys as --fix); default for the "
      "example: the founding document's TP 2 x PP 4");
  AddCostOptions(o);
  AddMemoryUnitOption(o);
  AddThreadsOption(o);
}

// `plan --tp 3` (or Megatron's --tensor-model-parallel-size 3): plan searches what simulate
// takes as a flag, and --fix fixes it.
std::string FixHint(std::string_view name, std::string_view value) {
  struct FixKey {
    std::string_view flag, key, placeholder;  // placeholder: the value when none was given
  };
  constexpr FixKey kKeys[] = {
      {"tp", "tp", "N"},
      {"pp", "pp", "N"},
      {"cp", "cp", "N"},
      {"ep", "ep", "N"},
      {"etp", "etp", "N"},
      {"dp", "dp", "N"},
      {"cp-comm", "cp-comm", "p2p"},
      {"micro-batch", "mbs", "N"},
      {"mbs", "mbs", "N"},
      {"virtual-stages", "v", "N"},
      {"v", "v", "N"},
      {"schedule", "schedule", "1f1b"},
      {"sequence-parallel", "sp", "on"},
      {"sp", "sp", "on"},
      {"recompute", "recompute", "selective"},
      {"recompute-modules", "recompute-modules", "core_attn"},
      {"distributed-optimizer", "dist-opt", "on"},
      {"dist-opt", "dist-opt", "on"},
      {"fsdp", "fsdp", "optim_grads_params"},
      {"pipeline-model-parallel-layout", "layout", "LAYOUT"},
      {"layout", "layout", "LAYOUT"},
      {"uneven", "uneven", "on"},
  };
  for (const FixKey& k : kKeys) {
    if (k.flag != name) continue;
    return fmt::format("`ptdp plan` searches this knob; fix it with --fix {}={}", k.key,
                       value.empty() ? k.placeholder : value);
  }
  return "";
}

// "tp=2,pp=4,mbs=4" -> a full layout (unset knobs at Megatron's defaults, dp from the GPUs).
ParallelConfig ReadLayout(const Flags& flags, const std::string& text, int64_t gpus) {
  SearchConstraints c;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    try {
      ApplyFix(std::string_view(text).substr(start, comma - start), c);
    } catch (const InputError& e) {
      flags.Fail("compare", e.message(), e.hint());
    }
    start = comma + 1;
  }
  if (!c.tp || !c.pp) flags.Fail("compare", "needs at least tp= and pp=");
  ParallelConfig p{.tp = *c.tp,
                   .pp = *c.pp,
                   .cp = c.cp.value_or(1),
                   .ep = c.ep.value_or(1),
                   .etp = c.etp.value_or(0)};
  if (c.cp_comms.size() == 1) p.cp_comm = c.cp_comms.front();
  if (c.layout) {
    if (c.layout->size() % static_cast<size_t>(p.pp) != 0) {
      flags.Fail("compare", fmt::format("the layout's {} stages do not divide over pp {}",
                                        c.layout->size(), p.pp));
    }
    p.layout = *c.layout;
  }
  const int64_t model = int64_t{p.tp} * p.pp * p.cp;
  if (gpus % model != 0) {
    flags.Fail("compare", fmt::format("tp x pp{} = {} does not divide the {} GPUs",
                                      p.cp > 1 ? " x cp" : "", model, gpus));
  }
  p.dp = static_cast<int>(gpus / model);
  p.micro_batch_size = c.micro_batch_size.value_or(1);
  p.virtual_stages =
      p.layout.empty() ? c.virtual_stages.value_or(1) : static_cast<int>(p.layout.size()) / p.pp;
  p.schedule = c.schedules.size() == 1
                   ? c.schedules.front()
                   : (p.virtual_stages > 1 ? Schedule::kInterleaved : Schedule::k1F1B);
  p.sequence_parallel = c.sequence_parallel.value_or(false);
  p.recompute = c.recomputes.size() == 1 ? c.recomputes.front() : Recompute::kNone;
  if (p.recompute == Recompute::kSelective && c.recompute_modules) {
    p.recompute_modules = *c.recompute_modules;
  }
  p.distributed_optimizer = c.distributed_optimizer.value_or(false);
  p.fsdp = c.fsdp.value_or(Fsdp::kNone);
  return p;
}

// The request the flags make; the reference layout's label into `reference_label`, the notes
// on how the inputs were read (Workload::notes) into `notes`.
PlanRequest ReadRequest(const Flags& flags, std::string& reference_label,
                        std::vector<std::string>& notes) {
  const Workload w = ReadWorkload(flags);
  notes = w.notes;
  PlanRequest req{.model = w.model, .cluster = w.cluster, .training = w.training, .gpus = w.gpus};
  req.constraints = ReadSearchConstraints(flags, req.model);
  req.top_k = static_cast<int>(flags.PositiveInt("top"));
  req.memory_headroom = ReadHeadroom(flags);
  req.options = ReadCostOptions(flags);
  req.recommend_overlap = !flags.Switch("no-overlap");
  req.memory_unit = ReadMemoryUnit(flags);
  req.threads = ReadThreads(flags);
  if (auto layout = flags.OptionalString("compare")) {
    req.reference = ReadLayout(flags, *layout, req.gpus);
    reference_label = "Your layout";
  } else if (req.model.name == "seed-example" && req.gpus == 8 &&
             req.training.global_batch_size == 128) {
    req.reference = kSeedLayout;
    reference_label = "The founding document's layout";
  }
  req.keep_points = flags.Has("html");
  return req;
}

// Megatron-LM has 1F1B, interleaved 1F1B and (for pp 1) no pipeline; zb-h1 is modelled only.

std::string PlanJsonEntry(const RankedPlan& r) {
  return fmt::format("{{{},\n   {}}}", LayoutJsonMembers(r.plan),
                     SimulationJsonMembers(r.report, 3));
}

// With `explain`, also the best plan's communication groups ("groups").
std::string PlanJson(const PlanRequest& req, const PlanSearchResult& res, bool explain) {
  std::string out = "{\"plans\": [";
  for (size_t i = 0; i < res.plans.size(); ++i) {
    out += (i ? ",\n  " : "\n  ") + PlanJsonEntry(res.plans[i]);
  }
  out += "\n], \"rejected\": {";
  bool first = true;
  for (const auto& [reason, count] : res.rejected.counts) {
    out += fmt::format("{}{}: {}", first ? "" : ", ", JsonString(reason), count);
    first = false;
  }
  out += fmt::format("}}, \"rejected_examples\": {{");
  first = true;
  for (const auto& [reason, example] : res.rejected.examples) {
    out += fmt::format("{}{}: {}", first ? "" : ", ", JsonString(reason), JsonString(example));
    first = false;
  }
  out += fmt::format("}},\n \"evaluated\": {}, \"valid\": {}, \"fits\": {}, \"simulated\": {}",
                     res.examined, res.valid, res.fits, res.simulated);
  out += ClusterOverridesJsonMember(req.cluster);
  if (res.reference) {
    out += fmt::format(", \"reference\": {{\"rank\": {}, \"problem\": {}", res.reference->rank,
                       JsonString(res.reference->problem));
    if (res.reference->simulated) out += ", \"plan\": " + PlanJsonEntry(*res.reference->simulated);
    out += "}";
  }
  if (explain && !res.plans.empty()) {
    const RankedPlan& top = res.plans.front();
    out += ",\n \"groups\": " + CommGroupsJson(CommGroupRows(top.plan, top.report), 1);
  }
  if (res.plans.empty()) {
    out += ", \"hints\": [";
    const std::vector<std::string> hints = UnblockHints(req, res);
    for (size_t i = 0; i < hints.size(); ++i) out += (i ? ", " : "") + JsonString(hints[i]);
    out += "]";
  }
  return out + "}\n";
}

std::string OnOff(bool b) { return b ? "yes" : "-"; }

std::string PlanTable(const PlanRequest& req, const PlanSearchResult& res) {
  Table t({{"#", Table::Align::kRight},
           {"layout"},
           {"mbs", Table::Align::kRight},
           {"schedule"},
           {"SP"},
           {"recompute"},
           {"sharding"},
           {"layers"},
           {"step", Table::Align::kRight},
           {"tokens/s", Table::Align::kRight},
           {"TFLOP/s", Table::Align::kRight},
           {"MFU", Table::Align::kRight},
           {"bubble", Table::Align::kRight},
           {"memory " + std::string(MemoryUnitName(req.memory_unit)), Table::Align::kRight},
           {"headroom", Table::Align::kRight}});
  const double hbm = static_cast<double>(req.cluster.gpu.hbm_bytes);
  for (size_t i = 0; i < res.plans.size(); ++i) {
    const ParallelConfig& p = res.plans[i].plan.parallel;
    const SimulationReport& r = res.plans[i].report;
    t.AddRow({std::to_string(i + 1), SizesText(p), std::to_string(p.micro_batch_size),
              p.schedule == Schedule::kInterleaved
                  ? fmt::format("interleaved v={}", p.virtual_stages)
              : RunsInMegatron(p) ? std::string(Name(p.schedule))
                                  : std::string(Name(p.schedule)) + " *",
              OnOff(p.sequence_parallel),
              p.recompute == Recompute::kNone ? "-" : std::string(Name(p.recompute)),
              ShardingText(p), SplitText(res.plans[i].plan), Seconds(r.step_time_s),
              GroupThousands(static_cast<int64_t>(r.tokens_per_s)),
              fmt::format("{:.1f}", r.model_tflops_per_gpu), fmt::format("{:.1f}%", 100 * r.mfu),
              fmt::format("{:.1f}%", 100 * r.bubble_fraction),
              MemoryNumber(r.peak_memory_bytes, req.memory_unit),
              fmt::format("{:.0f}%", 100 * (1 - r.peak_memory_bytes / hbm))});
  }
  std::string table = t.Render();
  const bool starred = std::any_of(res.plans.begin(), res.plans.end(), [](const RankedPlan& r) {
    return !RunsInMegatron(r.plan.parallel);
  });
  if (starred)
    table +=
        "* not in Megatron-LM (a zero-bubble schedule: ptdp models it, Megatron-LM cannot run "
        "it)\n";
  return table;
}

std::string Explain(const PlanSearchResult& res) {
  std::string out = "Rejected, counted under the first Megatron-LM rule each breaks:\n";
  Table t({{"reason"}, {"count", Table::Align::kRight}, {"example"}});
  for (const auto& [reason, count] : res.rejected.counts) {
    t.AddRow({reason, GroupThousands(count), res.rejected.examples.at(reason)});
  }
  out += t.Render();
  // Only when nothing fits: beside plans that fit, the closest miss is no news.
  if (res.closest_out_of_memory && res.fits == 0) {
    out += fmt::format("Closest to fitting ({:.1f}% of the memory available): {}\n",
                       100 * res.closest_out_of_memory->peak_memory_bytes / res.memory_limit_bytes,
                       res.closest_out_of_memory_problem);
  }
  return out;
}

// --out-dir: an existing folder where plan files can be written.
std::optional<std::filesystem::path> ReadPlanFolder(const Flags& flags) {
  const auto dir = flags.OptionalString("out-dir");
  if (!dir) return std::nullopt;
  std::error_code ec;
  if (*dir == "-") flags.Fail("out-dir", "a folder is needed; standard output (-) holds one file");
  if (!std::filesystem::is_directory(*dir, ec)) {
    flags.Fail("out-dir", std::filesystem::exists(*dir, ec)
                              ? fmt::format("{} is a file, not a folder", *dir)
                              : fmt::format("no such folder: {} (create it first)", *dir));
  }
  const std::filesystem::path folder(*dir);
  CheckOutputPath((folder / "plan-1.yaml").string(), "--out-dir");
  return folder;
}

// The search, with a progress line on `err` while it runs (cleared when it ends); its wall time
// in seconds into `seconds`.
PlanSearchResult TimedSearch(PlanRequest& req, std::ostream& err, double& seconds) {
  const auto start = std::chrono::steady_clock::now();
  PlanSearchResult res;
  {
    ProgressLine progress(err, "ptdp plan");
    req.progress = [&progress](int64_t valid, int64_t simulated) {
      progress.Update(
          simulated == 0
              ? fmt::format("{} layouts pass Megatron-LM's rules so far", GroupThousands(valid))
              : fmt::format("ranking: {} of {} layouts simulated", GroupThousands(simulated),
                            GroupThousands(valid)));
    };
    res = SearchPlans(req);
  }
  // The line is gone; a later search of the same request (BestRunnable's) can still be stopped.
  req.progress = [](int64_t, int64_t) { ThrowIfStopRequested(); };
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

// The files asked for: the best plan (--out), every plan shown (--out-dir), the HTML report.
std::vector<OutputFile> PlanFiles(const Flags& flags, const PlanRequest& req,
                                  const PlanSearchResult& res,
                                  const std::optional<std::filesystem::path>& plan_folder) {
  std::vector<OutputFile> files;
  if (!res.plans.empty()) {
    if (auto path = flags.OptionalString("out")) {
      files.push_back({*path, WritePlanYaml(res.plans.front().plan), "--out"});
    }
    for (size_t i = 0; plan_folder && i < res.plans.size(); ++i) {
      files.push_back({(*plan_folder / fmt::format("plan-{}.yaml", i + 1)).string(),
                       WritePlanYaml(res.plans[i].plan), "--out-dir"});
    }
  }
  if (auto path = flags.OptionalString("html")) {
    files.push_back({*path, PlanReportHtml(req, res), "--html"});
  }
  return files;
}

// The flags of `runnable`, ranked `rank` (BestRunnable), saying which plan they are.
void PrintRunnableFlags(const PlanSearchResult& res, const RankedPlan& runnable, int rank,
                        std::ostream& out) {
  if (rank == 1) {
    out << "\nBest plan as Megatron-LM flags:\n  " << MegatronArgsLine(runnable.plan) << "\n";
  } else if (rank < 0) {
    out << "\nBest plan as flags, for a zero-bubble implementation (e.g. "
           "sail-sg/zero-bubble-pipeline-parallelism): no plan with a schedule Megatron-LM has "
           "was found among those searched.\n  "
        << MegatronArgsLine(runnable.plan) << "\n";
  } else {
    out << fmt::format(
        "\nBest plan Megatron-LM can run ({}: #1 is zb-h1, which Megatron-LM does not have; "
        "{:.1f}% slower than #1), as flags:\n  {}\n",
        rank > 0 ? fmt::format("#{} in the table", rank)
                 : fmt::format("{}, mbs {}", SizesText(runnable.plan.parallel),
                               runnable.plan.parallel.micro_batch_size),
        100 * (runnable.report.step_time_s / res.plans.front().report.step_time_s - 1),
        MegatronArgsLine(runnable.plan));
  }
}

// The best plan Megatron-LM can run, as its flags (BestRunnable), with what to know before
// using them: a checkpoint format other than Megatron's default, little memory to spare.
void PrintBestRunnable(const PlanRequest& req, const PlanSearchResult& res, std::ostream& out) {
  const auto [runnable, rank] = BestRunnable(req, res);
  PrintRunnableFlags(res, runnable, rank, out);
  if (const std::string note = CheckpointFormatNote(runnable.plan, kDefaultCheckpointFormat,
                                                    "--fix fsdp=none keeps torch_dist");
      !note.empty()) {
    out << NoteText(note);
  }
  if (req.memory_headroom == 0) {
    if (const std::string note = LowHeadroomNote(runnable.plan, runnable.report, req.memory_unit);
        !note.empty()) {
      out << NoteText(note);
    }
  }
}

// The layout placed in the ranking (--compare, or the example's), `label` naming it: its rank,
// or why it is not a plan.
void PrintReference(const PlanRequest& req, const PlanSearchResult& res, const std::string& label,
                    std::ostream& out) {
  const ReferenceResult& ref = *res.reference;
  Plan plan = MakePlan(req, ref.parallel);
  out << "\n" << label << ", " << LayoutLine(plan) << ": ";
  if (ref.rank > 0) {
    const double best_s = res.plans.front().report.step_time_s;
    const SimulationReport& r = ref.simulated->report;
    out << fmt::format("{} per step, {}; rank {} of {} ({:.2f}x the best's step time).\n",
                       Seconds(r.step_time_s), Memory(r.peak_memory_bytes, req.memory_unit),
                       GroupThousands(ref.rank), GroupThousands(res.fits), r.step_time_s / best_s);
  } else {
    out << "not a valid plan: " << ref.problem << "\n";
  }
}

// What was written, and the hint at what more there is.
void PrintClosing(const Flags& flags, const PlanSearchResult& res,
                  const std::optional<std::filesystem::path>& plan_folder, std::ostream& out) {
  if (auto path = flags.OptionalString("out")) out << "\nWrote the best plan to " << *path << "\n";
  if (plan_folder) {
    out << fmt::format("Wrote plans 1 to {} to {}\n", res.plans.size(),
                       (*plan_folder / "plan-<rank>.yaml").string());
  }
  if (auto path = flags.OptionalString("html")) out << "Wrote the report to " << *path << "\n";
  if (!flags.Switch("explain") && !flags.Has("out")) {
    out << "\nMore: --explain (why the rest were rejected; the communication groups), --out "
           "plan.yaml, --html report.html, "
           "--format json.\n";
  }
}

int RunPlan(const Flags& flags, std::ostream& out, std::ostream& err) {
  const std::optional<std::filesystem::path> plan_folder = ReadPlanFolder(flags);
  std::string reference_label;
  std::vector<std::string> notes;
  PlanRequest req = ReadRequest(flags, reference_label, notes);
  const Format format = flags.Enum("format", kFormats, Format::kTable);
  if (format == Format::kJson) {
    for (const std::string& note : notes) err << "ptdp: note: " << note << "\n";
  }
  double seconds = 0;
  const PlanSearchResult res = TimedSearch(req, err, seconds);
  WriteOutputFiles(PlanFiles(flags, req, res, plan_folder));
  if (format == Format::kJson) {
    out << PlanJson(req, res, flags.Switch("explain"));
    return res.plans.empty() ? kExitFailed : kExitOk;
  }

  out << fmt::format("ptdp plan: {} on {} x {}, global batch {} ({} tokens), {}\n", req.model.name,
                     req.gpus, req.cluster.name, req.training.global_batch_size,
                     GroupThousands(req.training.global_batch_size * req.model.seq_length),
                     Name(req.training.precision));
  if (const std::string changed = ClusterOverridesLine(req.cluster); !changed.empty()) {
    out << changed << "\n";
  }
  for (const std::string& note : notes) out << NoteText(note);
  out << fmt::format(
      "Searched {} configurations in {:.2f} s: {} pass Megatron-LM's rules, {} fit in {} per "
      "GPU{}; {} simulated.\n\n",
      GroupThousands(res.examined), seconds, GroupThousands(res.valid), GroupThousands(res.fits),
      Memory(res.memory_limit_bytes, req.memory_unit),
      req.memory_headroom > 0 ? fmt::format(" ({:.0f}% kept free)", 100 * req.memory_headroom) : "",
      GroupThousands(res.simulated));
  if (res.plans.empty()) {
    out << "No valid plan.\n";
    for (const std::string& hint : UnblockHints(req, res)) out << "  - " << hint << "\n";
    if (flags.Switch("explain")) out << "\n" << Explain(res);
    err << "ptdp: no plan satisfies Megatron-LM's rules and fits in memory (see above)\n";
    return kExitFailed;
  }
  out << PlanTable(req, res);
  PrintBestRunnable(req, res, out);
  if (res.reference) PrintReference(req, res, reference_label, out);
  if (flags.Switch("explain")) {
    const RankedPlan& top = res.plans.front();
    out << "\n"
        << Explain(res) << "\n"
        << CommGroupsText(CommGroupRows(top.plan, top.report),
                          "The best plan's communication groups");
  }
  PrintClosing(flags, res, plan_folder, out);
  return kExitOk;
}

}  // namespace

const Command kPlanCommand{
    .name = "plan",
    .summary = "search every valid configuration and rank them by predicted step time",
    .usage =
        "ptdp plan --model M --cluster C --gpus N --global-batch B [--top K]\n"
        "                 [--format table|json] [--out plan.yaml] [--explain] [--html FILE]\n"
        "                 [--fix tp=8] [--max-tp T] [--memory-headroom 10%] [--no-recompute]",
    .description =
        "Searches every PTD-P configuration Megatron-LM accepts for the model on the cluster "
        "(tensor,\ncontext (with its p2p / a2a / allgather exchange), expert (MoE models: ep, "
        "with etp 1 or tp),\npipeline and data-parallel sizes, micro-batch, the layer split "
        "(even, the embedding and loss\ncounted as layers, or fewer layers on the first and last "
        "stages), schedule 1f1b / interleaved\nwith every v / zb-h1, sequence parallelism, "
        "recompute none / selective / full, the distributed\noptimizer or Megatron-FSDP), keeps "
        "those that fit in memory, ranks them by simulated step time\n(ties: less memory) and "
        "shows the best as Megatron-LM flags. For Megatron-Core every plan\nruns with "
        "--overlap-grad-reduce (and --overlap-param-gather with the distributed optimizer, the\n"
        "all-to-all token dispatcher with expert parallelism) unless --no-overlap. The ranking is "
        "exact: the same as simulating every candidate.\n\nWithout flags it plans the founding "
        "document's example: seed-example (24 layers, hidden 2048,\n32 heads, sequence 2048) "
        "on 8 A100-80GB GPUs with global batch 128, and places its hand-picked\nTP 2 x PP 4 "
        "layout in the ranking. Exits 1 when no plan is valid, saying what would help.",
    .examples =
        "ptdp plan\n"
        "ptdp plan --model gpt3-175b --cluster dgx-a100-80gb --gpus 1024 "
        "--global-batch 1536 --explain\n"
        "ptdp plan --model llama3-70b --cluster hgx-h200 --gpus 64 --global-batch 512 "
        "--fix tp=8 --memory-headroom 10% --out plan.yaml\n"
        "ptdp plan --model path/to/config.json --cluster dgx-h100 --gpus 32 "
        "--global-batch 256 --seq-length 4096 --html report.html\n"
        "ptdp plan --model gpt3-175b --cluster dgx-h100 --gpus 1024 --global-batch 1536 "
        "--cluster-set nic_gb_per_s=x2 --cluster-set hbm_bytes=+50%",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddPlanOptions,
    .run = RunPlan,
    .unknown_flag_hint = FixHint,
};

}  // namespace ptdp::cli
