// `ptdp check`: a pasted Megatron-LM command line, checked and compared with the best plan.
#include <fmt/format.h>

#include <optional>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/megatron_input.h"
#include "cli/report.h"
#include "cli/workload.h"
#include "core/error.h"
#include "core/json.h"
#include "core/presets.h"
#include "core/table.h"
#include "megatron/read_command.h"
#include "megatron/write_flags.h"
#include "planner/check.h"
#include "planner/planner.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

void AddCheckOptions(po::options_description& o) {
  o.add_options()("gpus", po::value<std::string>()->value_name("N"),
                  "number of GPUs (default: the launcher's, else tp x pp)")(
      "cluster", po::value<std::string>()->default_value("dgx-a100-80gb")->value_name("C"),
      "hardware profile: name (ptdp profiles) or YAML file")(
      "file", po::value<std::string>()->value_name("FILE"),
      "read the command line or launch script from a file (`-`: standard input)")(
      "format", po::value<std::string>()->value_name("F"), "table (default) | json")(
      "vocab-size", po::value<std::string>()->value_name("V"),
      "the tokenizer's vocabulary, when the command does not give --vocab-size")(
      "require-fit", po::bool_switch(),
      "exit 4 when Megatron-LM would accept the command but it does not fit in memory")(
      "version", po::bool_switch(), "say which Megatron-LM commit the option table comes from");
  AddScriptEnvironmentOptions(o);
  AddMemoryUnitOption(o);
}

std::string Where(const MegatronFinding& f, bool show_lines) {
  std::string where;
  if (show_lines && f.line > 0) {
    where = f.file.empty() ? fmt::format("line {}", f.line)
                           : fmt::format("line {} of {}", f.line, f.file);
  } else if (!f.file.empty()) {
    where = f.file;
  }
  // A long flag the message names (an unknown one, quoted by its start) is said once.
  const bool said = f.flag.size() > kShortWordBytes && f.message.find(f.flag) != std::string::npos;
  if (!f.flag.empty() && !said) where += (where.empty() ? "" : " ") + f.flag;
  return where.empty() ? "" : where + ": ";
}

enum class Format { kTable, kJson };
constexpr EnumName<Format> kFormats[] = {{"table", Format::kTable}, {"json", Format::kJson}};

// What check found: Megatron's verdict on the flags and the layout, and, when the layout can be
// simulated, the search that places it among the plans for the same model, GPUs and batch.
struct CheckOutcome {
  CheckReport report;
  ClusterSpec cluster;
  bool show_lines = false;
  std::optional<PlanSearchResult> search;
  int verdict = kExitOk;               // 1 when Megatron-LM would refuse the command
  std::string cannot_judge;            // why ptdp cannot judge it (verdict 5), or ""
  MemoryUnit unit = MemoryUnit::kGiB;  // --memory-unit
};

// Why the verdict cannot be given from what was read (exit 5), or "": the configuration is in a
// --yaml-cfg file (argparse's own refusals still stand), or the script sources files that could
// not be read and Megatron-LM would refuse what was read (the missing files may hold the rest).
std::string CannotJudge(const CheckReport& report) {
  const MegatronCommand& c = report.command;
  if (!c.unplayable.empty()) return c.unplayable;
  if (!c.other_stack.empty()) return c.other_stack;
  if (!c.yaml_config.empty() && !c.has_errors()) {
    return fmt::format(
        "the configuration is in {} (--yaml-cfg): Megatron-LM replaces the command's arguments "
        "with the file's and checks them with validate_yaml; ptdp does not read that file",
        c.yaml_config);
  }
  if (!c.unread_files.empty() && report.failed()) {
    const bool one = c.unread_files.size() == 1;
    std::vector<std::string> files;
    for (const std::string& f : c.unread_files) files.push_back(QuotedWord(f));
    return fmt::format(
        "{} file{} the script sources could not be read ({}); the errors below may be what {} "
        "would set: check the script on a machine that has {} (--allow-source DIR for a folder "
        "outside the script's), or give {} variables with --env or --env-file",
        c.unread_files.size(), one ? "" : "s", fmt::join(files, ", "), one ? "it" : "they",
        one ? "it" : "them", one ? "its" : "their");
  }
  return "";
}

CheckOutcome AnalyseCommand(const Flags& flags, const MegatronInput& in) {
  CheckOutcome o;
  o.cluster = ResolveCluster(flags.String("cluster"));
  o.unit = ReadMemoryUnit(flags);
  o.show_lines = in.has_lines;  // a script (a file or standard input) has lines
  o.report = CheckMegatronInput(flags, in, flags.OptionalPositiveInt("gpus"));
  const MegatronCommand& c = o.report.command;
  // Exit codes mean one thing each: 1 when Megatron-LM would refuse the command; a command it
  // accepts exits 0 even when ptdp cannot simulate it or it does not fit (4 with --require-fit).
  o.verdict = o.report.failed() ? kExitFailed : kExitOk;
  o.cannot_judge = CannotJudge(o.report);
  if (!o.cannot_judge.empty()) o.verdict = kExitCannotJudge;
  if (!c.unplayable.empty() || !c.yaml_config.empty() || !c.model_complete ||
      !o.report.simulatable()) {
    return o;
  }
  RequireFp8Units(flags, c, o.cluster);
  PlanRequest req;
  req.model = c.model;
  req.cluster = o.cluster;
  req.training = c.training;
  req.gpus = o.report.gpus;
  req.top_k = 1;
  req.reference = c.parallel;
  req.options = c.options;
  req.reference_options = c.options;
  req.memory_unit = o.unit;
  o.search = SearchPlans(req);
  return o;
}

// Megatron's findings, the flags simulated, the layout and its rules (the part of the text
// report that needs no simulation).
void PrintFindings(const CheckOutcome& o, const std::string& source, std::ostream& out) {
  const CheckReport& report = o.report;
  const MegatronCommand& c = report.command;
  if (!c.unplayable.empty()) {
    out << fmt::format("ptdp check: {}\n\nCannot judge: {}.\n", source, o.cannot_judge);
    return;
  }
  out << fmt::format("ptdp check: {} from {} on {} x {}{}\n", c.script, source, report.gpus,
                     o.cluster.name,
                     !report.gpus_assumed ? ""
                     : c.world_size_unknown.empty()
                         ? fmt::format(" (assumed: {} GPUs, the fewest the layout runs on; the "
                                       "launcher does not say how many; pass "
                                       "--gpus N)",
                                       report.gpus)
                         : fmt::format(" (assumed: {} GPUs, the fewest the layout runs on; the "
                                       "launcher's {} is not known here; pass "
                                       "--gpus N, or the variable with --env NAME=VALUE)",
                                       report.gpus, c.world_size_unknown));
  if (!o.cannot_judge.empty()) out << "\nCannot judge: " << o.cannot_judge << ".\n";
  int errors = 0, warnings = 0;
  for (const MegatronFinding& f : c.findings) {
    (f.severity == MegatronFinding::Severity::kError ? errors : warnings)++;
  }
  for (bool error_pass : {true, false}) {
    const int n = error_pass ? errors : warnings;
    if (n == 0) continue;
    const std::string heading =
        !c.other_stack.empty()    ? "Read as a Megatron-LM command, Megatron-LM would refuse it"
        : !c.unread_files.empty() ? "As read, without the files it sources, Megatron-LM would "
                                    "refuse this command"
                                  : "Megatron-LM would refuse this command";
    out << (error_pass ? fmt::format("\n{} ({} error{}):\n", heading, n, n == 1 ? "" : "s")
                       : fmt::format("\nWarnings ({}):\n", n));
    for (const MegatronFinding& f : c.findings) {
      if ((f.severity == MegatronFinding::Severity::kError) != error_pass) continue;
      out << "  " << Where(f, o.show_lines) << f.message << "\n";
      if (!f.fix.empty()) out << "      fix: " << f.fix << "\n";
    }
  }
  if (!c.yaml_config.empty()) return;
  if (!c.simulated_flags.empty()) {
    std::string flags_read;
    for (const std::string& f : c.simulated_flags) flags_read += " " + f;
    out << "\nRead by the simulation:" << flags_read << ".\n";
  }
  const ParallelConfig& p = c.parallel;
  out << fmt::format(
      "\nLayout: {}, micro-batch {}, global batch {}{}, {}{}{}{}, {}\n", SizesText(p),
      p.micro_batch_size, c.training.global_batch_size,
      report.microbatches > 0 ? fmt::format(" (m = {})", report.microbatches) : "",
      Name(p.schedule),
      p.schedule == Schedule::kInterleaved ? fmt::format(" v={}", p.virtual_stages) : "",
      p.sequence_parallel ? ", SP" : "",
      p.recompute != Recompute::kNone ? fmt::format(", {} recompute", Name(p.recompute)) : "",
      Name(c.training.precision));
  if (!c.model_complete) {
    out << "The model is incomplete, so the layout cannot be checked or simulated.\n";
    return;
  }
  if (report.violations.empty()) {
    out << "Megatron-LM's layout rules: all pass.\n";
  } else {
    out << "Megatron-LM's layout rules, broken:\n";
    for (const Violation& v : report.violations) {
      out << "  " << v.message << "\n      fix: " << v.hint << "\n";
    }
  }
  if (!report.not_simulated.empty()) out << "Not simulated: " << report.not_simulated << ".\n";
}

// The command's layout simulated, against the best plan for the same model, GPUs and batch.
void PrintComparison(const CheckOutcome& o, std::ostream& out) {
  const PlanSearchResult& res = *o.search;
  out << (o.report.failed() ? "\nSimulated as if the errors above were fixed:\n"
                            : "\nSimulated:\n");
  const std::vector<std::string>& refused = o.report.command.refused_flags;
  if (!refused.empty()) {
    out << "  without what the refused flags say: " << fmt::format("{}", fmt::join(refused, ", "))
        << "\n";
  }
  const ReferenceResult& yours = *res.reference;
  if (yours.simulated) {
    const SimulationReport& r = yours.simulated->report;
    out << fmt::format(
        "  yours: {} per step, {} per GPU ({} allocated), bubble {:.1f}%, MFU "
        "{:.1f}%{}\n",
        Seconds(r.step_time_s), Memory(r.peak_memory_bytes, o.unit),
        Memory(PeakAllocated(r), o.unit), 100 * r.bubble_fraction, 100 * r.mfu,
        yours.problem.empty() ? "" : " - DOES NOT FIT: " + yours.problem);
  }
  if (res.plans.empty()) {
    out << "  best:  no layout fits (see `ptdp plan --explain`)\n";
  } else {
    const RankedPlan& best = res.plans.front();
    const double factor =
        yours.simulated ? yours.simulated->report.step_time_s / best.report.step_time_s : 0;
    out << fmt::format(
        "  best:  {} per step, {} per GPU ({} allocated), bubble {:.1f}%, MFU {:.1f}%, with {}{}\n",
        Seconds(best.report.step_time_s), Memory(best.report.peak_memory_bytes, o.unit),
        Memory(PeakAllocated(best.report), o.unit), 100 * best.report.bubble_fraction,
        100 * best.report.mfu, Describe(best.plan.parallel),
        factor > 1.0005 ? fmt::format(" ({:.2f}x faster)", factor) : "");
    out << "         flags: " << MegatronArgsLine(best.plan) << "\n";
    if (const std::string note =
            CheckpointFormatNote(best.plan, GivenCheckpointFormat(o.report.command), "");
        !note.empty()) {
      out << "  note: " << note << ".\n";
    }
    if (yours.rank > 0) {
      out << fmt::format("  yours ranks {} of {} valid plans.\n", GroupThousands(yours.rank),
                         GroupThousands(res.fits));
    }
  }
  if (o.report.command.training.precision == Precision::kFp32) {
    out << "  note: with neither --bf16 nor --fp16 Megatron-LM trains in fp32, without tensor-core "
           "rates; `ptdp plan --precision bf16` shows what bf16 would take.\n";
  }
}

// One simulated layout as JSON members: step time, memory (the fit verdict's and what PyTorch
// would count allocated), bubble, MFU.
std::string SimulatedJson(const SimulationReport& r) {
  return fmt::format(
      "\"step_time_s\": {}, \"peak_memory_bytes\": {}, \"peak_allocated_bytes\": {}, "
      "\"bubble_fraction\": {}, \"mfu\": {}",
      JsonNumber(r.step_time_s), JsonNumber(r.peak_memory_bytes), JsonNumber(PeakAllocated(r)),
      JsonNumber(r.bubble_fraction), JsonNumber(r.mfu));
}

// Everything the text report says, as one JSON object (`check --format json`).
std::string CheckJson(const CheckOutcome& o, const std::string& source) {
  const CheckReport& report = o.report;
  const MegatronCommand& c = report.command;
  const ParallelConfig& p = c.parallel;
  std::string j = "{\n";
  j += fmt::format("  \"script\": {},\n  \"source\": {},\n  \"megatron\": {},\n",
                   JsonString(c.script), JsonString(source), JsonString(MegatronTableVersion()));
  j += fmt::format("  \"gpus\": {},\n  \"gpus_assumed\": {},\n  \"cluster\": {},\n", report.gpus,
                   report.gpus_assumed, JsonString(o.cluster.name));
  j += fmt::format("  \"accepted\": {},\n  \"cannot_judge\": {},\n  \"findings\": [",
                   !report.failed() && o.cannot_judge.empty(),
                   o.cannot_judge.empty() ? "null" : JsonString(o.cannot_judge));
  for (size_t i = 0; i < c.findings.size(); ++i) {
    const MegatronFinding& f = c.findings[i];
    j += fmt::format(
        "{}\n    {{\"severity\": {}, \"line\": {}, \"file\": {}, \"flag\": {}, \"message\": {}, "
        "\"fix\": {}}}",
        i == 0 ? "" : ",",
        JsonString(f.severity == MegatronFinding::Severity::kError ? "error" : "warning"),
        o.show_lines ? f.line : 0, JsonString(f.file), JsonString(f.flag), JsonString(f.message),
        JsonString(f.fix));
  }
  j += c.findings.empty() ? "],\n" : "\n  ],\n";
  std::vector<std::string> simulated;
  for (const std::string& f : c.simulated_flags) simulated.push_back(JsonString(f));
  j += fmt::format("  \"simulated_flags\": [{}],\n", fmt::join(simulated, ", "));
  j += fmt::format(
      "  \"layout\": {{\"tp\": {}, \"pp\": {}, \"cp\": {}, \"ep\": {}, \"dp\": {}, "
      "\"micro_batch_size\": {}, \"global_batch_size\": {}, \"microbatches\": {}, "
      "\"schedule\": {}, \"virtual_stages\": {}, \"sequence_parallel\": {}, \"recompute\": {}, "
      "\"precision\": {}}},\n",
      p.tp, p.pp, p.cp, p.ep, p.dp, p.micro_batch_size, c.training.global_batch_size,
      report.microbatches, JsonString(Name(p.schedule)), p.virtual_stages, p.sequence_parallel,
      JsonString(Name(p.recompute)), JsonString(Name(c.training.precision)));
  j += fmt::format("  \"model_complete\": {},\n  \"rules_broken\": [", c.model_complete);
  for (size_t i = 0; i < report.violations.size(); ++i) {
    const Violation& v = report.violations[i];
    j += fmt::format("{}\n    {{\"rule\": {}, \"message\": {}, \"fix\": {}}}", i == 0 ? "" : ",",
                     JsonString(RuleId(v.rule)), JsonString(v.message), JsonString(v.hint));
  }
  j += report.violations.empty() ? "],\n" : "\n  ],\n";
  j += fmt::format("  \"not_simulated\": {}", JsonString(report.not_simulated));
  if (o.search) {
    const ReferenceResult& yours = *o.search->reference;
    j += ",\n  \"yours\": ";
    j += yours.simulated ? fmt::format("{{{}, \"fits\": {}, \"problem\": {}, \"rank\": {}}}",
                                       SimulatedJson(yours.simulated->report),
                                       yours.problem.empty(), JsonString(yours.problem), yours.rank)
                         : "null";
    j += ",\n  \"best\": ";
    if (o.search->plans.empty()) {
      j += "null";
    } else {
      const RankedPlan& best = o.search->plans.front();
      j += fmt::format("{{{}, \"layout\": {}, \"flags\": {}}}", SimulatedJson(best.report),
                       JsonString(Describe(best.plan.parallel)),
                       JsonString(MegatronArgsLine(best.plan)));
    }
    j += fmt::format(",\n  \"valid_plans\": {}", o.search->fits);
  }
  return j + "\n}\n";
}

int RunCheck(const Flags& flags, std::ostream& out, std::ostream&) {
  if (flags.Switch("version")) {
    out << MegatronTableVersion() << "\n";
    return kExitOk;
  }
  const Format format = flags.Enum("format", kFormats, Format::kTable);
  const MegatronInput in =
      ReadMegatronInput(flags, "", "check",
                        "ptdp check -- python pretrain_gpt.py ...   or   ptdp check --file cmd.sh");
  const CheckOutcome o = AnalyseCommand(flags, in);
  if (format == Format::kJson) {
    out << CheckJson(o, in.source);
  } else {
    PrintFindings(o, in.source, out);
    if (o.search) PrintComparison(o, out);
  }
  const bool does_not_fit = o.search && !o.search->reference->problem.empty();
  if (o.verdict == kExitOk && does_not_fit && flags.Switch("require-fit")) return kExitDoesNotFit;
  return o.verdict;
}

}  // namespace

const Command kCheckCommand{
    .name = "check",
    .summary = "check a Megatron-LM command line against Megatron's rules and the best plan",
    .usage =
        "ptdp check [--gpus N] [--cluster C] -- <Megatron-LM command line>\n"
        "       ptdp check [--gpus N] [--cluster C] --file cmd.sh [--allow-source DIR]",
    .description =
        "Reads a Megatron-LM launch as written: a pasted command, or a launch script played as "
        "bash\nwould play it (arrays, ${VAR:-x}, $((...)), if/case/for, functions, `source`, "
        "quotes over\nseveral lines, export and inline VAR=1, torchrun / python -m "
        "torch.distributed.run / srun /\nmpirun and their GPU counts, `sh -c` and sbatch job "
        "scripts). Says in Megatron-LM's words what\nits parse_args and validate_args would "
        "refuse and how to fix it (the option table is generated\nfrom one Megatron-LM commit: "
        "--version says which), warns once for every flag that changes\nthe run but is not "
        "simulated, then simulates the layout and compares it with the best plan\nfor the same "
        "model, GPUs and batch.\n\n"
        "What it reads: the script (--file: a regular file of at most 1 MiB, or `-`), and the "
        "files it\nsources or submits to sbatch only in the script's own folder and below, or "
        "in a folder\n--allow-source names (a script from standard input or the command line "
        "has no folder: only\nthose, relative paths taken from the current folder); never "
        "/proc, /sys, /dev or anything\nbut a regular file. A file not read is named in a "
        "warning and what it would set stays\nunknown. It runs nothing, and prints the "
        "script's words with control characters escaped.\n\n"
        "Exit codes: 0 Megatron-LM would accept the command (even when it does not fit, unless\n"
        "--require-fit); 1 Megatron-LM would refuse it; 2 bad input (no command, unreadable "
        "file);\n4 with --require-fit: accepted, but it does not fit in memory; 5 cannot judge, "
        "saying why:\nanother stack's command (Megatron-DeepSpeed, a fork's own entry point), "
        "the configuration\nin a --yaml-cfg file, a launch that depends on what only the machine "
        "knows, or files\nthe script sources that could not be read where what was read would "
        "be refused.",
    .examples =
        "ptdp check --file train_gpt3_175b_distributed.sh --script-args \"/ckpt /tb /vocab.json "
        "/merges.txt /data\"\n"
        "ptdp check --gpus 16 -- torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py "
        "--num-layers 24 ...\n"
        "ptdp check --version",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddCheckOptions,
    .run = RunCheck,
};

}  // namespace ptdp::cli
