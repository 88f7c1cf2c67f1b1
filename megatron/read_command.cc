#include "megatron/read_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/text.h"
#include "megatron/launch_script.h"
#include "megatron/option_table.h"
#include "megatron/reader.h"

namespace ptdp {
namespace reading {
namespace {

// Flags people often write that Megatron-LM does not have, with what to write instead.
struct Mistake {
  std::string_view flag, message, fix;
};
constexpr Mistake kMistakes[] = {
    {"--num-microbatches",
     "Megatron-LM has no --num-microbatches (it existed for one commit in December 2020): it "
     "derives the number of micro-batches as global batch / (micro-batch x data-parallel size)",
     "remove it; set --global-batch-size and --micro-batch-size"},
    {"--learning-rate", "Megatron-LM's learning-rate flag is --lr", "write --lr"},
    {"--num-gpus", "Megatron-LM takes the world size from the launcher (torchrun)",
     "pass --nproc-per-node (and --nnodes) to torchrun"},
    {"--tensor-parallel-size", "the flag is --tensor-model-parallel-size",
     "write --tensor-model-parallel-size"},
    {"--pipeline-parallel-size", "the flag is --pipeline-model-parallel-size",
     "write --pipeline-model-parallel-size"},
    {"--overlap-p2p-communication",
     "Megatron-LM no longer has --overlap-p2p-communication: the interleaved schedule overlaps "
     "its pipeline sends by default (--no-overlap-p2p-communication turns that off)",
     "remove it"},
};

// Flags Megatron-LM renamed or removed, and other stacks' names for its flags: argparse refuses
// them as unknown, and why they are, with what to write instead.
constexpr Mistake kRenamed[] = {
    {"--activations-checkpoint-method", "renamed --recompute-method",
     "write --recompute-granularity full --recompute-method uniform|block"},
    {"--activations-checkpoint-num-layers", "renamed --recompute-num-layers",
     "write --recompute-num-layers"},
    {"--checkpoint-num-layers", "renamed --recompute-num-layers", "write --recompute-num-layers"},
    {"--distribute-checkpointed-activations", "renamed --distribute-saved-activations",
     "write --distribute-saved-activations"},
    {"--num-key-value-heads",
     "Megatron-LM's grouped-query attention is --group-query-attention --num-query-groups N",
     "write --group-query-attention --num-query-groups N"},
    {"--DDP-impl", "Megatron-LM removed it: its own DistributedDataParallel always runs",
     "remove it"},
    {"--data-impl", "Megatron-LM removed it: datasets are always memory-mapped", "remove it"},
    {"--no-async-tensor-model-parallel-allreduce", "Megatron-LM removed it", "remove it"},
    {"--no-query-key-layer-scaling",
     "Megatron-LM removed it: no scaling is the default; --apply-query-key-layer-scaling turns it "
     "on",
     "remove it"},
    {"--use-flash-attn-v2", "Megatron-DeepSpeed's flag", "write --attention-backend flash"},
    {"--moe-expert-parallel-size", "Megatron-DeepSpeed's flag",
     "write --expert-model-parallel-size"},
};

// Flags argparse accepts but validate_args refuses (megatron/training/arguments.py).
constexpr Mistake kDeprecated[] = {
    {"--batch-size", "--batch-size argument is no longer valid", "use --micro-batch-size"},
    {"--warmup", "--warmup argument is no longer valid", "use --lr-warmup-fraction"},
    {"--model-parallel-size", "--model-parallel-size is no longer valid",
     "use --tensor-model-parallel-size"},
    {"--checkpoint-activations", "--checkpoint-activations is no longer valid",
     "use --recompute-activations, or --recompute-granularity and --recompute-method"},
};

// "d98e8a6 (2026-08-22)": the Megatron-LM commit the option table comes from.
std::string MegatronCommit() {
  const std::string version = MegatronTableVersion();
  const size_t at = version.find("commit ");
  if (at == std::string::npos) return version;
  const size_t date = version.find(" (", at);
  const size_t date_end = version.find(')', date);
  return version.substr(at + 7, 7) + (date == std::string::npos || date_end == std::string::npos
                                          ? ""
                                          : version.substr(date, date_end - date + 1));
}

// Megatron-LM's training entry points (its repository's top level, and those it had).
constexpr std::string_view kMegatronScripts[] = {
    "pretrain_gpt.py", "pretrain_mamba.py", "pretrain_hybrid.py", "pretrain_vlm.py",
    "train_rl.py",     "pretrain_bert.py",  "pretrain_t5.py",     "pretrain_retro.py"};

// Flags only Megatron-DeepSpeed (and DeepSpeed's launcher arguments it passes on) has.
constexpr std::string_view kDeepSpeedFlags[] = {"--deepspeed",
                                                "--deepspeed_config",
                                                "--deepspeed-config",
                                                "--zero-stage",
                                                "--deepspeed-activation-checkpointing",
                                                "--deepspeed_mpi",
                                                "--no-pipeline-parallel",
                                                "--ds-sequence-parallel-size",
                                                "--use-flash-attn-v2",
                                                "--use-flash-attn-triton",
                                                "--moe-expert-parallel-size",
                                                "--partition-activations",
                                                "--checkpoint-in-cpu",
                                                "--synchronize-each-layer",
                                                "--contigious-checkpointing",
                                                "--cpu-optimizer",
                                                "--ds-inference",
                                                "--lr-decay-tokens",
                                                "--lr-warmup-tokens",
                                                "--train-tokens",
                                                "--zero-reduce-bucket-size",
                                                "--zero-allgather-bucket-size",
                                                "--curriculum-learning-legacy"};

// Model features a refused flag carries, which the simulation then goes without.
constexpr std::pair<std::string_view, std::string_view> kFeatureOf[] = {
    {"--num-key-value-heads", "grouped-query attention"},
    {"--swi-glu", "SwiGLU"},
    {"--intermediate-size", "the FFN width"},
    {"--moe-expert-parallel-size", "expert parallelism"},
    {"--ds-sequence-parallel-size", "Ulysses sequence parallelism"},
    {"--position-embedding-type", "the position embedding"},
    {"--num-experts", "the experts"},
    {"--normalization", "the norm"},
    {"--activations-checkpoint-method", "activation recompute"},
    {"--checkpoint-activations", "activation recompute"},
    {"--recompute-method", "activation recompute"},
    {"--use-flash-attn-v2", "flash attention"},
};

// Which stack the command is written for, from its entry point, launcher and refused flags
// (c.other_stack, and a warning naming the flags of a fork or an older Megatron-LM); the
// refused flags with the model features they carry (c.refused_flags).
void DiagnoseStack(const Launch& launch, MegatronCommand& c) {
  std::vector<std::string> unknown, deepspeed;
  for (const MegatronCommand::Arg& a : c.args) {
    const KnownFlag* known_flag = FindFlag(MegatronFlags(), a.flag);
    const bool known = known_flag != nullptr;
    if (known && a.valid) continue;
    // What the simulation goes without: a model feature a refused flag carries, or a refused
    // value of a flag that changes the step.
    std::string name;
    for (const auto& [flag, feature] : kFeatureOf) {
      if (flag == a.flag) name = fmt::format("{} ({})", a.flag, feature);
    }
    if (name.empty() && known && CanChangeTheStep(*known_flag)) name = a.flag;
    if (!name.empty() &&
        std::find(c.refused_flags.begin(), c.refused_flags.end(), name) == c.refused_flags.end()) {
      c.refused_flags.push_back(name);
    }
    if (known) continue;
    if (std::find(std::begin(kDeepSpeedFlags), std::end(kDeepSpeedFlags), a.flag) !=
            std::end(kDeepSpeedFlags) &&
        std::find(deepspeed.begin(), deepspeed.end(), a.flag) == deepspeed.end()) {
      deepspeed.push_back(a.flag);
    }
    // A known slip (--learning-rate for --lr) is no sign of another Megatron-LM; a renamed or
    // removed flag (kRenamed) is.
    const bool slip = std::any_of(std::begin(kMistakes), std::end(kMistakes),
                                  [&](const Mistake& m) { return m.flag == a.flag; });
    if (!slip && std::find(unknown.begin(), unknown.end(), a.flag) == unknown.end()) {
      unknown.push_back(a.flag);
    }
  }
  const auto listed = [](const std::vector<std::string>& flags) {
    std::string text;
    for (size_t i = 0; i < flags.size() && i < 4; ++i) text += (i ? ", " : "") + flags[i];
    if (flags.size() > 4) text += fmt::format(" and {} more", flags.size() - 4);
    return text;
  };
  std::string launcher;
  for (size_t i = 0; i < launch.script_at; ++i) {
    const std::string& w = launch.words[i].text;
    if (w.substr(w.rfind('/') + 1) == "deepspeed") launcher = "the deepspeed launcher";
  }
  const std::string script = c.script.substr(c.script.rfind('/') + 1);
  if (!deepspeed.empty() || !launcher.empty()) {
    c.other_stack = fmt::format(
        "this is a Megatron-DeepSpeed command ({}): ptdp judges Megatron-LM's commands; "
        "Megatron-DeepSpeed's flags and rules are not modelled",
        deepspeed.empty() ? launcher : listed(deepspeed));
  } else if (!unknown.empty() && std::find(std::begin(kMegatronScripts), std::end(kMegatronScripts),
                                           script) == std::end(kMegatronScripts)) {
    c.other_stack = fmt::format(
        "{} is not one of Megatron-LM's entry points but a fork's, which adds its own flags "
        "({}); ptdp judges Megatron-LM's commands only",
        script, listed(unknown));
  } else if (!unknown.empty()) {
    c.findings.insert(
        c.findings.begin(),
        {Severity::kWarning, "", 0,
         fmt::format("{} flag{} Megatron-LM does not have ({}): the script may be written for a "
                     "fork or an older Megatron-LM; it is judged against Megatron-LM at commit {}",
                     unknown.size(), unknown.size() == 1 ? "" : "s", listed(unknown),
                     MegatronCommit()),
         ""});
  }
}

// One warning per flag that can change the step but that reading the command never looked at:
// the simulation runs as if it were absent.
void WarnAboutWhatIsNotSimulated(Reader& r, MegatronCommand& c) {
  std::set<std::string, std::less<>> warned;
  for (const MegatronCommand::Arg& a : c.args) {
    const KnownFlag* known = FindFlag(MegatronFlags(), a.flag);
    if (known == nullptr || !warned.insert(a.flag).second) continue;
    if (r.Consulted(a.flag)) {
      c.simulated_flags.push_back(a.flag);
      continue;
    }
    if (!CanChangeTheStep(*known)) continue;
    c.findings.push_back({Severity::kWarning, a.flag, a.line,
                          fmt::format("not simulated: ptdp simulates as if {} were absent", a.flag),
                          ""});
  }
}

// No command runs a Python script. When what the interpreter could not follow explains it (a
// condition on `ps` or `hostname`, a file of another machine), the command cannot be judged:
// c.unplayable says why. Otherwise (nothing ran, or the script's own arguments are missing) it
// is bad input, with the likely fix.
void NoTrainingCommand(const Lexed& lexed, const std::string& source, MegatronCommand& c) {
  std::string reasons;
  for (const MegatronFinding& f : c.findings) {
    if (reasons.size() < 400) reasons += fmt::format("; {}", f.message);
  }
  if (!reasons.empty() && !lexed.missing_arguments) {
    c.unplayable = fmt::format(
        "no command that runs a Python script was reached: it depends on what ptdp cannot know "
        "here ({})",
        reasons.substr(2));
    return;
  }
  throw InputError({source, 0, ""},
                   "no Megatron-LM command found: no word ends in .py" +
                       (reasons.empty() ? "" : " (playing the script:" + reasons.substr(1) + ")"),
                   lexed.missing_arguments
                       ? "the script takes arguments: give them with --script-args \"ARG1 ARG2 "
                         "...\" (or paste the command that runs pretrain_gpt.py)"
                       : "paste the command that runs pretrain_gpt.py (python or torchrun)");
}

// The command that runs a Python script (the last one when there are several): its script, the
// launcher words before it (the world size), its environment and its words after the script.
const Launch& TrainingCommand(const Lexed& lexed, MegatronCommand& c) {
  const Launch& launch = lexed.launches.back();
  const std::vector<Token>& words = launch.words;
  c.script = words[launch.script_at].text;
  c.environment = launch.environment;
  std::vector<Token> launcher = launch.outer;
  launcher.insert(launcher.end(), words.begin(),
                  words.begin() + static_cast<long>(launch.script_at));
  c.world_size = LauncherWorldSize(launcher, &c.world_size_unknown);
  for (size_t i = launch.script_at + 1; i < words.size(); ++i) c.argv.push_back(words[i].text);
  return launch;
}

// Stray words from words[i] on, said once per run as argparse says them. After a one-value flag
// they are usually its value split by the shell (an unquoted array or variable). Returns the
// index of the last stray word.
size_t SayStrayWords(const std::vector<Token>& words, size_t i, MegatronCommand& c) {
  const int line = words[i].line;
  const std::string file = words[i].file;
  std::string stray = words[i].text;
  while (i + 1 < words.size() && !words[i + 1].text.starts_with("-")) {
    stray += " " + words[++i].text;
  }
  std::string fix = "every value follows the flag it belongs to";
  if (!c.args.empty()) {
    const KnownFlag* before = FindFlag(MegatronFlags(), c.args.back().flag);
    if (before != nullptr && before->arity == FlagArity::kOne) {
      fix = fmt::format(
          "{} takes one value: if these words belong to it, the shell split them apart; "
          "quote the value, and expand arrays quoted (\"${{ARGS[@]}}\")",
          c.args.back().flag);
    }
  }
  c.findings.push_back(
      {Severity::kError, "", line, fmt::format("unrecognized arguments: {}", stray), fix, file});
  return i;
}

// A flag Megatron-LM does not have: a known mistake with what to write instead, or the closest
// flag it has.
MegatronFinding UnknownFlag(const MegatronCommand::Arg& arg) {
  std::string message = fmt::format("unrecognized arguments: {}", arg.flag);
  std::string fix;
  for (const Mistake& m : kMistakes) {
    if (m.flag == arg.flag) message = std::string(m.message), fix = std::string(m.fix);
  }
  for (const Mistake& m : kRenamed) {
    if (m.flag == arg.flag) message += fmt::format(" ({})", m.message), fix = std::string(m.fix);
  }
  if (fix.empty()) {
    const std::string suggestion = SuggestFlag(arg.flag);
    if (!suggestion.empty()) fix = fmt::format("did you mean {}?", suggestion);
  }
  return {Severity::kError, arg.flag, arg.line, message, fix};
}

// A known flag's values as argparse takes them (marking the argument invalid when it refuses
// one), a deprecated flag, a flag given twice.
void CheckKnownFlag(const KnownFlag& known, MegatronCommand::Arg& arg, MegatronCommand& c) {
  for (const std::string& v : arg.values) {
    const bool value_matters = known.type == "int" || known.type == "float" ||
                               known.type == "enum" || !known.choices.empty();
    if (value_matters && (v.find('$') != std::string::npos || v.find('`') != std::string::npos)) {
      c.findings.push_back(
          {Severity::kWarning, arg.flag, arg.line,
           fmt::format("the value '{}' is known only when the script runs: not checked", v),
           "give the value in the script (or the script's arguments: --script-args)"});
      break;
    }
    if (std::string problem = FlagValueProblem(known, v); !problem.empty()) {
      c.findings.push_back({Severity::kError, arg.flag, arg.line,
                            fmt::format("argument {}: {}", arg.flag, problem), ""});
      arg.valid = false;
      break;
    }
  }
  for (const Mistake& m : kDeprecated) {
    if (m.flag == arg.flag) {
      c.findings.push_back(
          {Severity::kError, arg.flag, arg.line, std::string(m.message), std::string(m.fix)});
    }
  }
  for (const auto& earlier : c.args) {
    if (earlier.flag == arg.flag) {
      const std::string first =
          earlier.line <= 0 ? ""
          : earlier.file.empty()
              ? fmt::format(" (first on line {})", earlier.line)
              : fmt::format(" (first on line {} of {})", earlier.line, earlier.file);
      c.findings.push_back({Severity::kWarning, arg.flag, arg.line,
                            fmt::format("given twice{}; argparse keeps the last value", first),
                            "keep one"});
      break;
    }
  }
}

// Megatron's own flags after the script, as argparse reads them: arity and value types from the
// option table, unknown flags with a suggestion, stray words, repeated flags.
void ReadArgs(const std::vector<Token>& words, size_t script_at, MegatronCommand& c) {
  for (size_t i = script_at + 1; i < words.size(); ++i) {
    const Token& w = words[i];
    if (!w.text.starts_with("-")) {
      i = SayStrayWords(words, i, c);
      continue;
    }
    MegatronCommand::Arg arg{w.text, {}, w.line};
    arg.file = w.file;
    const size_t eq = arg.flag.find('=');
    if (eq != std::string::npos) {
      arg.values.push_back(arg.flag.substr(eq + 1));
      arg.flag = arg.flag.substr(0, eq);
    }
    const KnownFlag* known = FindFlag(MegatronFlags(), arg.flag);
    const FlagArity arity = known != nullptr ? known->arity : FlagArity::kOptional;
    auto next_is_value = [&]() {
      return i + 1 < words.size() && !words[i + 1].text.starts_with("--");
    };
    if (eq == std::string::npos) {
      if (arity == FlagArity::kOne) {
        if (next_is_value()) {
          arg.values.push_back(words[++i].text);
        } else {
          c.findings.push_back({Severity::kError, arg.flag, w.line,
                                fmt::format("argument {}: expected one argument", arg.flag), ""});
        }
      } else if (arity == FlagArity::kOptional) {
        if (next_is_value()) arg.values.push_back(words[++i].text);
      } else if (arity == FlagArity::kMany) {
        while (next_is_value()) arg.values.push_back(words[++i].text);
      }
    } else if (arity == FlagArity::kSwitch) {
      c.findings.push_back(
          {Severity::kError, arg.flag, w.line,
           fmt::format("argument {}: ignored explicit argument '{}'", arg.flag, arg.values.front()),
           fmt::format("write {} alone", arg.flag)});
    }
    if (known == nullptr) {
      c.findings.push_back(UnknownFlag(arg));
    } else {
      CheckKnownFlag(*known, arg, c);
    }
    c.args.push_back(std::move(arg));
  }
}

// Every word of what is said about the command bounded (core/text.h: ShortenLongWords): a flag,
// a value or a path of a megabyte is quoted by its start and its size (issue 35).
void BoundWords(MegatronCommand& c) {
  for (MegatronFinding& f : c.findings) {
    f.message = ShortenLongWords(f.message);
    f.fix = ShortenLongWords(f.fix);
    f.flag = ShortWord(f.flag);
    f.file = ShortWord(f.file);
  }
  for (std::string* text :
       {&c.script, &c.other_stack, &c.unplayable, &c.world_size_unknown, &c.yaml_config}) {
    *text = ShortenLongWords(*text);
  }
}

}  // namespace
}  // namespace reading

bool MegatronCommand::has_errors() const {
  return std::any_of(findings.begin(), findings.end(), [](const MegatronFinding& f) {
    return f.severity == MegatronFinding::Severity::kError;
  });
}

MegatronCommand ReadMegatronCommand(std::string_view text, const std::string& source,
                                    const MegatronReadOptions& read) {
  using namespace reading;  // the parts of the reading (megatron/reader.h)
  Lexed lexed = PlayLaunchScript(text, source, read);
  MegatronCommand c;
  c.findings = std::move(lexed.findings);
  c.unread_files = std::move(lexed.unread_files);
  if (lexed.launches.empty()) {
    BoundWords(c);
    NoTrainingCommand(lexed, source, c);
    return c;
  }
  const Launch& launch = TrainingCommand(lexed, c);
  ReadArgs(launch.words, launch.script_at, c);
  DiagnoseStack(launch, c);
  for (const MegatronCommand::Arg& a : c.args) {
    // parse_args parses the command line, then load_yaml replaces every argument with the
    // file's, and validate_yaml checks them instead of validate_args.
    if (a.flag == "--yaml-cfg" && a.valid && !a.values.empty()) c.yaml_config = a.values.front();
  }
  if (!c.yaml_config.empty()) {
    BoundWords(c);
    return c;
  }
  Reader r(c);
  const std::vector<int> hybrid_segments = ReadModel(r, c);
  ReadLayout(r, c, hybrid_segments);
  ReadRecomputeAndSharding(r, c);
  ReadCostOptions(r, c);
  ReadTraining(r, c);
  ReadStartUpChecks(r, c, read.environment_complete);
  WarnAboutWhatIsNotSimulated(r, c);
  // A finding about a flag written in a sourced file names that file.
  for (MegatronFinding& f : c.findings) {
    if (f.flag.empty() || !f.file.empty()) continue;
    for (const MegatronCommand::Arg& a : c.args) {
      if (a.flag == f.flag && a.line == f.line && !a.file.empty()) f.file = a.file;
    }
  }
  BoundWords(c);
  return c;
}

void ResolveWorldSize(MegatronCommand& c, int64_t world) {
  c.world_size = world;
  ParallelConfig& p = c.parallel;
  const int64_t model = int64_t{p.tp} * p.pp * p.cp;
  if (world % model != 0) {
    // CheckParallelConfig reports it, in Megatron's words; dp stays 1 meanwhile.
    if (c.training.global_batch_size == 0) c.training.global_batch_size = p.micro_batch_size;
    return;
  }
  p.dp = static_cast<int>(world / model);
  if (c.training.global_batch_size == 0) {
    c.training.global_batch_size = int64_t{p.micro_batch_size} * p.dp;
  }
  // A --num-microbatches that Megatron would refuse: say what Megatron derives instead.
  for (MegatronFinding& f : c.findings) {
    if (f.flag != "--num-microbatches") continue;
    const int64_t per_step = int64_t{p.micro_batch_size} * p.dp;
    if (c.training.global_batch_size % per_step != 0) continue;
    const int64_t derived = c.training.global_batch_size / per_step;
    std::string given;
    for (const auto& a : c.args) {
      if (a.flag == "--num-microbatches" && !a.values.empty()) given = a.values.front();
    }
    f.message +=
        fmt::format("; here {} / ({} x {}) = {}{}", c.training.global_batch_size,
                    p.micro_batch_size, p.dp, derived,
                    given.empty()                      ? ""
                    : given == std::to_string(derived) ? ", the value given"
                                                       : fmt::format(", not the {} given", given));
  }
}

}  // namespace ptdp
