#include "megatron/read_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
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

// Flags argparse accepts but validate_args refuses (megatron/training/arguments.py).
constexpr Mistake kDeprecated[] = {
    {"--batch-size", "--batch-size argument is no longer valid", "use --micro-batch-size"},
    {"--warmup", "--warmup argument is no longer valid", "use --lr-warmup-fraction"},
    {"--model-parallel-size", "--model-parallel-size is no longer valid",
     "use --tensor-model-parallel-size"},
    {"--checkpoint-activations", "--checkpoint-activations is no longer valid",
     "use --recompute-activations, or --recompute-granularity and --recompute-method"},
};

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

// The command that runs a Python script (the last one when there are several): its script, the
// launcher words before it (the world size), its environment and its words after the script.
const Launch& TrainingCommand(const Lexed& lexed, const std::string& source, MegatronCommand& c) {
  if (lexed.launches.empty()) {
    // What the interpreter could not follow is the likely reason: say it.
    std::string reasons;
    for (const MegatronFinding& f : c.findings) {
      if (reasons.size() < 400) reasons += fmt::format("; {}", f.message);
    }
    std::string hint = "paste the command that runs pretrain_gpt.py (python or torchrun)";
    if (!lexed.unread_files.empty()) {
      hint = fmt::format(
          "the script sources {} that could not be read: check it where they "
          "exist, or paste the command that runs pretrain_gpt.py",
          fmt::join(lexed.unread_files, ", "));
    } else if (lexed.missing_arguments) {
      hint =
          "the script takes arguments: give them with --script-args \"ARG1 ARG2 ...\" (or "
          "paste the command that runs pretrain_gpt.py)";
    }
    throw InputError({source, 0, ""},
                     "no Megatron-LM command found: no word ends in .py" +
                         (reasons.empty() ? "" : " (playing the script:" + reasons.substr(1) + ")"),
                     hint);
  }
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
      {Severity::kError, "", line, fmt::format("unrecognized arguments: {}", stray), fix});
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
      c.findings.push_back({Severity::kWarning, arg.flag, arg.line,
                            fmt::format("given twice (first on line {}); argparse keeps the "
                                        "last value",
                                        earlier.line),
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
  const Launch& launch = TrainingCommand(lexed, source, c);
  ReadArgs(launch.words, launch.script_at, c);
  for (const MegatronCommand::Arg& a : c.args) {
    // parse_args parses the command line, then load_yaml replaces every argument with the
    // file's, and validate_yaml checks them instead of validate_args.
    if (a.flag == "--yaml-cfg" && a.valid && !a.values.empty()) c.yaml_config = a.values.front();
  }
  if (!c.yaml_config.empty()) return c;
  Reader r(c);
  const std::vector<int> hybrid_segments = ReadModel(r, c);
  ReadLayout(r, c, hybrid_segments);
  ReadRecomputeAndSharding(r, c);
  ReadCostOptions(r, c);
  ReadTraining(r, c);
  ReadStartUpChecks(r, c, read.environment_complete);
  WarnAboutWhatIsNotSimulated(r, c);
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
