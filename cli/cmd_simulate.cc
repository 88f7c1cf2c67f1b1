// `ptdp simulate`: one configuration, operation by operation.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/megatron_input.h"
#include "cli/output.h"
#include "cli/report.h"
#include "cli/workload.h"
#include "core/error.h"
#include "core/limits.h"
#include "core/presets.h"
#include "core/spec_yaml.h"
#include "core/trace.h"
#include "megatron/plan_file.h"
#include "megatron/rules.h"
#include "planner/check.h"
#include "simulator/comm_groups.h"
#include "simulator/simulate.h"
#include "simulator/timeline.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

enum class Format { kTable, kJson };
constexpr EnumName<Format> kFormats[] = {{"table", Format::kTable}, {"json", Format::kJson}};

void AddSimulateOptions(po::options_description& o) {
  o.add_options()("plan", po::value<std::string>()->value_name("FILE"),
                  "plan file to simulate (instead of the flags below)")(
      "megatron", po::value<std::string>()->value_name("CMD"),
      "a Megatron-LM command line to simulate as written (instead of the flags below; also: "
      "the command after a lone --)")(
      "file", po::value<std::string>()->value_name("FILE"),
      "a Megatron-LM launch script to simulate as written (`-`: standard input)")(
      "vocab-size", po::value<std::string>()->value_name("V"),
      "with --megatron / --file: the tokenizer's vocabulary, when the command does not give "
      "--vocab-size");
  AddScriptEnvironmentOptions(o);
  AddWorkloadOptions(o, /*example_defaults=*/false);
  o.add_options()("tp", po::value<std::string>()->value_name("T"), "tensor-parallel size")(
      "pp", po::value<std::string>()->value_name("P"), "pipeline-parallel size")(
      "cp", po::value<std::string>()->value_name("C"),
      "context-parallel size (default 1; Megatron's --context-parallel-size)")(
      "cp-comm", po::value<std::string>()->value_name("S"),
      "context parallelism's exchange: p2p (ring attention, the default) | a2a | allgather")(
      "ep", po::value<std::string>()->value_name("E"),
      "expert-parallel size (MoE models; Megatron's --expert-model-parallel-size)")(
      "etp", po::value<std::string>()->value_name("T"),
      "expert tensor-parallel size (default: --tp; Megatron's --expert-tensor-parallel-size)")(
      "micro-batch", po::value<std::string>()->value_name("b"), "micro-batch size (default 1)")(
      "virtual-stages", po::value<std::string>()->value_name("v"),
      "model chunks per pipeline rank (interleaved)")(
      "num-layers-per-virtual-pipeline-stage", po::value<std::string>()->value_name("N"),
      "Megatron's other way to ask for interleaving: virtual stages = layers / (pp x N)")(
      "schedule", po::value<std::string>()->value_name("S"),
      "gpipe | 1f1b | interleaved | zb-h1 (default: interleaved when v > 1, else 1f1b)")(
      "sequence-parallel", po::bool_switch(), "Megatron's --sequence-parallel")(
      "recompute", po::value<std::string>()->value_name("R"), "none | selective | full")(
      "distributed-optimizer", po::bool_switch(), "Megatron's --use-distributed-optimizer")(
      "fsdp", po::value<std::string>()->value_name("S"),
      "Megatron-FSDP's sharding: optim | optim_grads | optim_grads_params (implies "
      "--distributed-optimizer, as Megatron does)")(
      "decoder-first-pipeline-num-layers", po::value<std::string>()->value_name("N"),
      "transformer layers of the first pipeline stage (an uneven split)")(
      "decoder-last-pipeline-num-layers", po::value<std::string>()->value_name("N"),
      "transformer layers of the last pipeline stage")(
      "account-for-embedding-in-pipeline-split", po::bool_switch(),
      "the embedding takes one layer's place on the first stage")(
      "account-for-loss-in-pipeline-split", po::bool_switch(),
      "the loss takes one layer's place on the last stage")(
      "recompute-num-layers", po::value<std::string>()->value_name("N"),
      "with --recompute full: only the first N layers of each model chunk recompute "
      "(Megatron's --recompute-method block)");
  AddCostOptions(o);
  o.add_options()("format", po::value<std::string>()->default_value("table")->value_name("F"),
                  "table | json")(
      "trace", po::value<std::string>()->value_name("FILE"),
      "write the timeline as a Chrome trace (Perfetto, chrome://tracing)")(
      "svg", po::value<std::string>()->value_name("FILE"), "write the timeline as SVG")(
      "svg-from", po::value<std::string>()->value_name("S"),
      "draw the SVG from S seconds into the step (with --svg-until: a window to zoom into)")(
      "svg-until", po::value<std::string>()->value_name("S"),
      "draw the SVG to S seconds: before the step's end, the picture ends there; after it, the "
      "time axis goes on (to compare timelines at one scale)")(
      "explain", po::bool_switch(),
      "show the communication groups (TP, CP, DP, PP, EP, ETP, EDP): size, nodes spanned, "
      "link (NVLink / network), bandwidth, what travels, time and bytes per step")(
      "memory-unit", po::value<std::string>()->value_name("U"),
      "GiB (2^30 bytes, the default, as PyTorch and Megatron-LM report memory) | GB (1e9 "
      "bytes); JSON keeps bytes")(
      "timeline", po::bool_switch(),
      "print the timeline as text (automatic when it is small: up to 8 stages and 48 "
      "operations per stage)");
}

// The flag that sets a ParallelConfig / TrainingSpec field, for rule violations.
std::string_view FlagFor(std::string_view key) {
  if (key == "tp") return "tp";
  if (key == "pp") return "pp";
  if (key == "cp") return "cp";
  if (key == "cp_comm") return "cp-comm";
  if (key == "ep") return "ep";
  if (key == "etp") return "etp";
  if (key == "dp") return "gpus";
  if (key == "global_batch_size") return "global-batch";
  if (key == "virtual_stages") return "virtual-stages";
  if (key == "sequence_parallel") return "sequence-parallel";
  if (key == "first_stage_layers") return "decoder-first-pipeline-num-layers";
  if (key == "last_stage_layers") return "decoder-last-pipeline-num-layers";
  if (key == "recompute_num_layers") return "recompute-num-layers";
  if (key == "distributed_optimizer") return "fsdp";
  if (key == "fp8_bf16_layers_at_start") return "num-layers-at-start-in-bf16";
  if (key == "fp8_bf16_layers_at_end") return "num-layers-at-end-in-bf16";
  if (key == "fp8_param_gather") return "fp8-param-gather";
  if (key == "keep_fp8_transpose_cache") return "keep-fp8-transpose-cache";
  return "micro-batch";
}

// The layout flags given, over `p` (a plan file's layout, or the defaults): each flag replaces
// its field; dp follows from the GPUs. `gpus_flag`: the flag a size that does not divide the
// GPUs is blamed on.
void ApplyLayoutFlags(const Flags& flags, int num_layers, int64_t gpus, const char* gpus_flag,
                      ParallelConfig& p) {
  const auto size = [&](const char* flag, int current) {
    return static_cast<int>(flags.OptionalPositiveInt(flag).value_or(current));
  };
  p.tp = size("tp", p.tp);
  p.pp = size("pp", p.pp);
  p.cp = size("cp", p.cp);
  p.cp_comm = flags.Enum("cp-comm", kCpCommNames, p.cp_comm);
  p.ep = size("ep", p.ep);
  p.etp = size("etp", p.etp);
  const int64_t model_size = int64_t{p.tp} * p.pp * p.cp;
  if (gpus % model_size != 0) {
    flags.Fail(
        gpus_flag,
        fmt::format("world size ({}) is not divisible by total_model_size (tp {} x pp {}{} "
                    "= {})",
                    gpus, p.tp, p.pp, p.cp > 1 ? fmt::format(" x cp {}", p.cp) : "", model_size));
  }
  p.dp = static_cast<int>(gpus / model_size);
  p.micro_batch_size = size("micro-batch", p.micro_batch_size);
  p.virtual_stages = size("virtual-stages", p.virtual_stages);
  if (auto v = VirtualStagesFromLayers(flags, num_layers, p)) p.virtual_stages = *v;
  // Interleaving follows the virtual stages unless a schedule is named.
  const Schedule implied = p.virtual_stages > 1                   ? Schedule::kInterleaved
                           : p.schedule == Schedule::kInterleaved ? Schedule::k1F1B
                                                                  : p.schedule;
  p.schedule = flags.Enum("schedule", kScheduleNames, implied);
  if (flags.Switch("sequence-parallel")) p.sequence_parallel = true;
  p.recompute = flags.Enum("recompute", kRecomputeNames, p.recompute);
  if (flags.Switch("distributed-optimizer")) p.distributed_optimizer = true;
  p.fsdp = flags.Enum("fsdp", kFsdpNames, p.fsdp);
  if (p.fsdp != Fsdp::kNone) p.distributed_optimizer = true;
  const auto layers = [&](const char* flag, int current) {
    return static_cast<int>(std::min<int64_t>(flags.OptionalPositiveInt(flag).value_or(current),
                                              std::numeric_limits<int>::max()));
  };
  p.first_stage_layers = layers("decoder-first-pipeline-num-layers", p.first_stage_layers);
  p.last_stage_layers = layers("decoder-last-pipeline-num-layers", p.last_stage_layers);
  if (flags.Switch("account-for-embedding-in-pipeline-split")) p.account_for_embedding = true;
  if (flags.Switch("account-for-loss-in-pipeline-split")) p.account_for_loss = true;
  p.recompute_num_layers = layers("recompute-num-layers", p.recompute_num_layers);
}

// The plan the flags describe; how its inputs were read into `notes` (Workload::notes).
Plan PlanFromFlags(const Flags& flags, std::vector<std::string>& notes) {
  for (const char* required : {"model", "cluster", "gpus", "global-batch", "tp", "pp"}) {
    if (!flags.Has(required)) {
      flags.Fail(required, "is required without --plan",
                 "give --plan FILE, or --model, --cluster, --gpus, --global-batch, --tp and --pp");
    }
  }
  const Workload w = ReadWorkload(flags);
  notes = w.notes;
  Plan plan{.model = w.model, .cluster = w.cluster, .num_gpus = w.gpus, .training = w.training};
  ApplyLayoutFlags(flags, w.model.num_layers, w.gpus, "gpus", plan.parallel);
  plan.options = ReadCostOptions(flags, plan.options);
  const std::vector<Violation> v =
      CheckParallelConfig(plan.model, plan.training, plan.parallel, w.gpus, plan.options);
  if (!v.empty()) flags.Fail(FlagFor(v.front().key), v.front().message, v.front().hint);
  return plan;
}

// A plan file, with any layout flag given replacing that field of its layout.
Plan PlanFromFile(const Flags& flags, const std::string& path) {
  for (const char* other : {"model", "cluster", "gpus", "global-batch", "seq-length", "fp8-recipe",
                            "num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16"}) {
    if (flags.Has(other)) {
      flags.Fail(other, "cannot be combined with --plan",
                 "a plan file fixes the model, the cluster and the training; layout flags "
                 "(--tp, --pp, --micro-batch, ...) override its layout");
    }
  }
  Plan plan = LoadPlanFile(path);
  ApplyClusterSets(flags, plan.cluster);
  const char* blamed = flags.Has("tp") ? "tp" : flags.Has("pp") ? "pp" : "cp";
  ApplyLayoutFlags(flags, plan.model.num_layers, plan.num_gpus, blamed, plan.parallel);
  return plan;
}

// The SVG's window in seconds (0 where not given): --svg-from at least 0, --svg-until positive,
// the start before the end; both only with --svg.
struct SvgWindow {
  double from_s = 0, until_s = 0;
};

// The value of a seconds flag: a finite number, all of the text ("inf" once drew ticks without
// end), positive or, with zero_ok, at least 0.
double SecondsFlag(const Flags& flags, std::string_view flag, const std::string& text,
                   bool zero_ok) {
  double seconds = -1;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, seconds);
  if (ec != std::errc() || ptr != end || !std::isfinite(seconds) || seconds < 0 ||
      (!zero_ok && seconds == 0)) {
    flags.Fail(flag, fmt::format("expected a finite {} number of seconds, got \"{}\"",
                                 zero_ok ? "non-negative" : "positive", text));
  }
  return seconds;
}

SvgWindow ReadSvgWindow(const Flags& flags) {
  SvgWindow w;
  const auto from = flags.OptionalString("svg-from"), until = flags.OptionalString("svg-until");
  if ((from || until) && !flags.Has("svg")) {
    flags.Fail(from ? "svg-from" : "svg-until", "the window is the SVG's: there is no --svg FILE",
               "add --svg FILE");
  }
  if (from) w.from_s = SecondsFlag(flags, "svg-from", *from, true);
  if (until) w.until_s = SecondsFlag(flags, "svg-until", *until, false);
  if (from && until && !(w.from_s < w.until_s)) {
    flags.Fail("svg-from", fmt::format("the window must start before it ends (--svg-until {}), "
                                       "got {}",
                                       *until, *from));
  }
  return w;
}

// The Megatron-LM flag that sets a layout field, for a broken rule of a pasted command.
std::string_view MegatronFlagFor(std::string_view key) {
  if (key == "tp") return "--tensor-model-parallel-size";
  if (key == "pp") return "--pipeline-model-parallel-size";
  if (key == "cp") return "--context-parallel-size";
  if (key == "ep") return "--expert-model-parallel-size";
  if (key == "etp") return "--expert-tensor-parallel-size";
  if (key == "global_batch_size") return "--global-batch-size";
  if (key == "micro_batch_size") return "--micro-batch-size";
  if (key == "sequence_parallel") return "--sequence-parallel";
  if (key == "first_stage_layers") return "--decoder-first-pipeline-num-layers";
  if (key == "last_stage_layers") return "--decoder-last-pipeline-num-layers";
  if (key == "recompute_num_layers") return "--recompute-num-layers";
  return "";
}

// What may go with a Megatron-LM command: the hardware, the GPU count when the launcher does
// not say it, and the outputs. Everything else is the command's to say.
constexpr std::string_view kWithMegatron[] = {
    "megatron", "file",     "script-args", "env",   "env-file",   "allow-source", "vocab-size",
    "cluster",  "gpus",     "format",      "trace", "svg",        "svg-from",     "svg-until",
    "explain",  "timeline", "memory-unit", "help",  "cluster-set"};

bool MegatronGiven(const Flags& flags) {
  return flags.Has("megatron") || flags.Has("file") || !flags.passthrough().empty();
}

// A Megatron-LM command line or launch script, read as `ptdp check` reads it, on --cluster.
// Whatever Megatron-LM would refuse, or ptdp cannot simulate, is bad input (exit 2) naming the
// source, its line and the flag; warnings go to `err`.
Plan PlanFromMegatron(const Flags& flags, std::ostream& err) {
  const std::string_view via = flags.Has("megatron") ? "--megatron"
                               : flags.Has("file")   ? "--file"
                                                     : "a command after --";
  for (const std::string& flag : flags.Given()) {
    if (std::find(std::begin(kWithMegatron), std::end(kWithMegatron), flag) ==
        std::end(kWithMegatron)) {
      flags.Fail(flag, fmt::format("cannot be combined with {}", via),
                 "the command gives the model, the batch and the layout; only --cluster, --gpus "
                 "and the output flags go with it");
    }
  }
  if (!flags.Has("cluster")) {
    flags.Fail("cluster", fmt::format("is required with {}", via),
               "a Megatron-LM command does not say the hardware: pass --cluster dgx-h100 (`ptdp "
               "profiles` lists them)");
  }
  const MegatronInput in = ReadMegatronInput(
      flags, "megatron", "simulate",
      "ptdp simulate --cluster C --megatron \"python pretrain_gpt.py ...\"   or   ptdp simulate "
      "--cluster C --file cmd.sh");
  Plan plan;
  plan.cluster = ResolveCluster(flags.String("cluster"));
  ApplyClusterSets(flags, plan.cluster);
  const CheckReport report =
      CheckMegatronInput(flags, in, flags.OptionalPositiveInt("gpus", kMaxGpus));
  const MegatronCommand& c = report.command;
  const auto line_of = [&](int line) { return in.has_lines ? line : 0; };
  const std::string check_hint =
      fmt::format("`ptdp check {}` lists every problem", flags.Has("file") ? "--file FILE" : "--");
  if (!c.unplayable.empty()) {
    throw InputError({in.source, 0, ""}, "cannot simulate: " + c.unplayable,
                     "paste the command that runs pretrain_gpt.py, or give what the script "
                     "reads with --env / --script-args");
  }
  if (!c.yaml_config.empty() && !c.has_errors()) {
    throw InputError({in.source, 0, "--yaml-cfg"},
                     fmt::format("the configuration is in {}, which Megatron-LM reads in place of "
                                 "the command's arguments and ptdp does not: nothing to simulate",
                                 c.yaml_config),
                     "write the configuration as Megatron-LM flags");
  }
  int errors = 0;
  for (const MegatronFinding& f : c.findings) {
    if (f.severity == MegatronFinding::Severity::kError) ++errors;
  }
  for (const MegatronFinding& f : c.findings) {
    if (f.severity != MegatronFinding::Severity::kError) continue;
    std::vector<std::string> files;
    for (const std::string& file : c.unread_files) files.push_back(QuotedWord(file));
    const std::string unread =
        files.empty() ? ""
                      : fmt::format(" (the script sources {}, which could not be read)",
                                    fmt::join(files, ", "));
    // A long flag the message names (an unknown one, quoted by its start) is said once.
    const bool said =
        f.flag.size() > kShortWordBytes && f.message.find(f.flag) != std::string::npos;
    throw InputError({in.source, line_of(f.line), said ? "" : f.flag},
                     fmt::format("Megatron-LM would refuse this command{}: {}", unread, f.message),
                     (f.fix.empty() ? "" : f.fix + "; ") +
                         (errors > 1 ? fmt::format("{} errors in all; ", errors) : "") +
                         check_hint);
  }
  if (!c.model_complete) {
    throw InputError({in.source, 0, ""},
                     "the command does not describe a complete model, so it cannot be simulated",
                     check_hint);
  }
  if (!report.violations.empty()) {
    const Violation& v = report.violations.front();
    const std::string_view flag = MegatronFlagFor(v.key);
    int line = 0;
    for (const MegatronCommand::Arg& a : c.args) {
      if (a.flag == flag) line = a.line;
    }
    throw InputError({in.source, line_of(line), std::string(flag)}, v.message, v.hint);
  }
  if (!report.not_simulated.empty()) {
    throw InputError({in.source, 0, ""}, "not simulated: " + report.not_simulated, check_hint);
  }
  RequireFp8Units(flags, c, plan.cluster);
  // The command runs: what it changes that is not simulated, and what was assumed.
  for (const MegatronFinding& f : c.findings) {
    std::string where =
        in.has_lines && f.line > 0 ? fmt::format("{}:{}: ", in.source, f.line) : in.source + ": ";
    if (!f.flag.empty()) where += f.flag + ": ";
    err << "ptdp: warning: " << where << f.message << "\n";
  }
  if (report.gpus_assumed) {
    err << fmt::format(
        "ptdp: note: the launcher does not say how many GPUs; simulating tp x pp{} = {} (pass "
        "--gpus N)\n",
        c.parallel.cp > 1 ? " x cp" : "", report.gpus);
  }
  plan.model = c.model;
  plan.num_gpus = report.gpus;
  plan.training = c.training;
  plan.parallel = c.parallel;
  plan.options = c.options;
  if (const std::string problem =
          ScheduleSizeProblem(plan.parallel.pp, NumMicrobatches(plan.training, plan.parallel),
                              plan.parallel.virtual_stages);
      !problem.empty()) {
    int line = 0;
    for (const MegatronCommand::Arg& a : c.args) {
      if (a.flag == "--global-batch-size") line = a.line;
    }
    throw InputError({in.source, line_of(line), "--global-batch-size"}, problem,
                     "a smaller --global-batch-size, or a larger --micro-batch-size");
  }
  return plan;
}

int RunSimulate(const Flags& flags, std::ostream& out, std::ostream& err) {
  const auto path = flags.OptionalString("plan");
  std::vector<std::string> notes;
  Plan plan = MegatronGiven(flags) ? PlanFromMegatron(flags, err)
              : path               ? PlanFromFile(flags, *path)
                                   : PlanFromFlags(flags, notes);
  const Format format = flags.Enum("format", kFormats, Format::kTable);
  if (format == Format::kJson) {
    for (const std::string& note : notes) err << "ptdp: note: " << note << "\n";
  }
  plan.options = ReadCostOptions(flags, plan.options);
  // The options given as flags may break a rule the plan file kept (an attention backend
  // context parallelism cannot use).
  if (const std::vector<Violation> v = CheckParallelConfig(plan.model, plan.training, plan.parallel,
                                                           plan.num_gpus, plan.options);
      !v.empty()) {
    flags.Fail(
        v.front().rule == Rule::kContextParallel ? "attention-backend" : FlagFor(v.front().key),
        v.front().message, v.front().hint);
  }
  // The schedule is built operation by operation: its length bounded (a plan file's own is
  // checked where it is read, a Megatron command's in PlanFromMegatron; here what flags set).
  if (const std::string problem =
          ScheduleSizeProblem(plan.parallel.pp, NumMicrobatches(plan.training, plan.parallel),
                              plan.parallel.virtual_stages);
      !problem.empty()) {
    const char* flag = !path                      ? "global-batch"
                       : flags.Has("micro-batch") ? "micro-batch"
                       : flags.Has("pp")          ? "pp"
                                                  : "virtual-stages";
    flags.Fail(flag, problem, "a smaller global batch, or a larger micro-batch");
  }
  const SvgWindow window = ReadSvgWindow(flags);
  const SimulationReport report = SimulatePlan(plan);
  const MemoryUnit unit = ReadMemoryUnit(flags);

  std::vector<OutputFile> files;
  if (auto path = flags.OptionalString("svg")) {
    TimelineTitle title = SimulationTitle(plan, report, unit);
    title.window_start_s = window.from_s;
    title.axis_end_s = window.until_s;
    // Without --svg-until the window ends with the step: it must start before.
    if (window.until_s == 0 && window.from_s >= report.sim.step_time_s) {
      flags.Fail("svg-from",
                 fmt::format("{:g} s is not before the step's end ({:g} s): the window would be "
                             "empty",
                             window.from_s, report.sim.step_time_s),
                 "a start before the step's end, or --svg-until for an axis beyond it");
    }
    files.push_back({*path, TimelineSvg(report.schedule, report.sim, title), "--svg"});
  }
  if (auto path = flags.OptionalString("trace")) {
    const TimelineTrace trace = TimelineTraceEvents(report.schedule, report.sim);
    files.push_back(
        {*path,
         ChromeTraceJson(SimulationTitle(plan, report, unit).title, trace.tracks, trace.events),
         "--trace"});
  }
  WriteOutputFiles(files);
  const bool explain = flags.Switch("explain");
  if (format == Format::kJson) {
    out << "{" << SimulationJsonMembers(report) << ClusterOverridesJsonMember(plan.cluster);
    if (explain) out << ",\n \"groups\": " << CommGroupsJson(CommGroupRows(plan, report), 1);
    out << "}\n";
  } else {
    out << SimulationText(plan, report, unit, notes);
    if (explain) out << "\n" << CommGroupsText(CommGroupRows(plan, report));
    const bool small = report.schedule.stages <= 8 && report.schedule.ops[0].size() <= 48;
    if (flags.Switch("timeline") || small) {
      out << "\nTimeline (F forward, B backward, W weight gradient; '.' idle):\n"
          << TimelineText(report.schedule, report.sim);
    }
    // What was written ("-": it went to standard output, this report to stderr).
    const auto svg = flags.OptionalString("svg"), trace = flags.OptionalString("trace");
    std::string wrote;
    if (svg && *svg != "-") wrote += "Wrote the timeline to " + *svg + "\n";
    if (trace && *trace != "-")
      wrote += "Wrote the trace to " + *trace + " (open it in Perfetto)\n";
    if (!wrote.empty()) out << "\n" << wrote;
    if (!svg) out << "\nThe timeline: add --svg FILE (or --trace FILE for Perfetto).\n";
  }
  return report.memory_problem.empty() ? kExitOk : kExitFailed;
}

}  // namespace

const Command kSimulateCommand{
    .name = "simulate",
    .summary = "simulate one configuration operation by operation",
    .usage =
        "ptdp simulate --plan plan.yaml | (--model M --cluster C --gpus N --global-batch B\n"
        "                     --tp T --pp P [--cp C [--cp-comm p2p|a2a|allgather]]\n"
        "                     [--micro-batch b] [--virtual-stages v]\n"
        "                     [--schedule gpipe|1f1b|interleaved|zb-h1] [--sequence-parallel]\n"
        "                     [--recompute none|selective|full] [--distributed-optimizer])\n"
        "                     [--format table|json] [--trace out.json] [--svg out.svg] "
        "[--explain]\n"
        "                     [--svg-from S] [--svg-until S]\n"
        "       ptdp simulate --cluster C [--gpus N] (--megatron \"<Megatron-LM command>\" | "
        "--file cmd.sh)\n"
        "                     [--allow-source DIR] [--format table|json] [--trace out.json] "
        "[--svg out.svg]\n"
        "                     [--explain]",
    .description =
        "Plays one configuration's pipeline schedule (the operation lists of `ptdp schedule`) "
        "with\ndurations from the cost model: step time, bubbles, memory per stage, "
        "communication, as numbers,\nan SVG timeline and a Chrome trace (context-parallel "
        "exchanges "
        "and MoE dispatch / combine in\ntheir own lane and events; the SVG's lane also holds "
        "the TP collectives; --svg-from and\n--svg-until draw a window of the step). --explain "
        "adds the "
        "communication groups: per parallel dimension its\nsize, the nodes one group spans, the "
        "link its traffic runs over (NVLink, network, or both for\nhierarchical collectives), "
        "the bandwidth the cost model uses, what travels, and the step's time\nand bytes of it "
        "(JSON: \"groups\"). With --plan, layout flags (--tp, --pp, --micro-batch, --recompute, "
        "...)\n"
        "override that field of the plan's layout. With --megatron (or --file, or the words "
        "after a lone\n--), a Megatron-LM command line or launch script is simulated as written, "
        "read as `ptdp check`\nreads it: what Megatron-LM would refuse is bad input (exit 2) "
        "naming the line and the flag.\nMemory is in GiB unless --memory-unit GB. Exits 1 when "
        "a stage does not fit in the GPU's memory.",
    .examples =
        "ptdp simulate --model seed-example --cluster dgx-a100-80gb --gpus 8 --global-batch 128 "
        "--tp 2 --pp 4 --micro-batch 4\n"
        "ptdp simulate --plan plan.yaml --svg timeline.svg --trace timeline.json\n"
        "ptdp simulate --plan plan.yaml --svg window.svg --svg-from 0.5 --svg-until 0.8\n"
        "ptdp simulate --plan plan.yaml --micro-batch 2 --recompute full\n"
        "ptdp simulate --plan plan.yaml --cluster-set nvlink_gb_per_s=x2\n"
        "ptdp simulate --cluster dgx-h100 --file train_gpt.sh --svg timeline.svg\n"
        "ptdp simulate --model qwen3-30b-a3b --cluster dgx-h100 --gpus 16 --global-batch 256 "
        "--tp 1 --pp 2 --ep 8 --etp 1 --moe-token-dispatcher alltoall --explain\n"
        "ptdp simulate --model gpt3-175b --cluster dgx-a100-80gb --gpus 1024 --global-batch 1536 "
        "--tp 8 --pp 8 --virtual-stages 3 --sequence-parallel --format json",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddSimulateOptions,
    .run = RunSimulate,
};

}  // namespace ptdp::cli
