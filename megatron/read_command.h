// Megatron-LM commands read into ptdp's specs.
//
// A command as a user pastes it (`python pretrain_gpt.py ...`, `torchrun ... pretrain_gpt.py
// ...`, line continuations, comment lines, `VAR=value` lines whose $VAR later lines use) or a
// launch script is read into the specs ptdp models, with a finding for everything Megatron would
// refuse or ptdp cannot model. The way back, a plan's flags, is megatron/write_flags.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"
#include "megatron/option_table.h"
#include "megatron/shell.h"

namespace ptdp {

struct MegatronFinding {
  enum class Severity { kError, kWarning };
  Severity severity;
  std::string flag;  // the flag concerned ("--num-microbatches"), or "" for the whole command
  int line = 0;      // 1-based line of the pasted text, 0 when not about one place
  std::string message;
  std::string fix;        // what to do instead; may be empty
  std::string file = "";  // the file `line` is in, when not the command's own (a sourced file)
};

// What a Megatron-LM command line says, in ptdp's terms.
struct MegatronCommand {
  std::string script;  // "pretrain_gpt.py"
  ModelSpec model;     // complete only when model_complete
  bool model_complete = false;
  TrainingSpec training;    // global_batch_size 0 when neither GBS nor the world size is known
  ParallelConfig parallel;  // dp is 1 until the world size is known
  CostOptions options;      // attention backend, overlap flags: what changes costs
  // --microbatch-group-size-per-virtual-pipeline-stage (Megatron's default: pp).
  std::optional<int> microbatch_group_size;
  std::optional<int64_t> world_size;  // from torchrun --nproc-per-node x --nnodes, or --world-size
  // Without it, the launcher's flag whose value is not known ("--nnodes $NNODES"), if any.
  std::string world_size_unknown;
  // The environment the training command is launched with, as far as the script says.
  std::map<std::string, std::string> environment;
  // Flags as given (after substitution), in order: (flag, values, line).
  struct Arg {
    std::string flag;
    std::vector<std::string> values;
    int line = 0;
    bool valid = true;      // false when argparse would refuse a value (read as if absent)
    std::string file = "";  // the file `line` is in, when not the command's own
  };
  std::vector<Arg> args;
  std::vector<std::string> argv;          // the words after the script, as bash passes them
  std::vector<MegatronFinding> findings;  // errors Megatron would raise, things ptdp ignores
  // What check lacks to judge the command: files the script sources that were not read (their
  // variables may be what the errors miss); the --yaml-cfg file, which replaces the command's
  // arguments in Megatron-LM and is not read (only argparse's findings are then made).
  std::vector<std::string> unread_files;
  std::string yaml_config;
  // The command is another stack's (Megatron-DeepSpeed, a fork's own entry point), which ptdp
  // cannot judge: why, naming what shows it; "" for a Megatron-LM command.
  std::string other_stack;
  // No command that runs a Python script was reached, because of what the script depends on and
  // ptdp cannot know (a condition on `hostname`, files of another machine): why; "" otherwise.
  std::string unplayable;
  // The flags argparse refuses (unknown, or with a value it refuses) that carry a model feature
  // or change the step, read as absent: what the simulation goes without ("--swi-glu (SwiGLU)").
  std::vector<std::string> refused_flags;
  // The given flags ptdp reads, in the order given (the others are either inert, such as
  // logging and checkpointing, or named by a "not simulated" warning).
  std::vector<std::string> simulated_flags;

  bool has_errors() const;
};

// What a launch script is run with.
struct MegatronReadOptions {
  std::vector<std::string> script_args;  // $1, $2, ...; one not given reads as an unknown value
  // The environment the script starts in. With environment_complete, a variable absent here is
  // unset at launch (the corpus tests know the launch environment); otherwise the user's shell
  // may set it (`check` says what Megatron needs rather than that it is missing).
  std::map<std::string, std::string> environment;
  bool environment_complete = false;
  // Reads a file the script sources (`source env.sh`) or submits (`sbatch job.sh`), or says why
  // it will not (megatron/shell.h: FileText); may be empty (such files are not read).
  FileReader read_file;
};

// Reads a pasted command line or launch script: it is played as bash would (megatron/shell.h) and
// the last command that runs a `*.py` script is the one read. Syntax it cannot make sense of (no
// `*.py` script, an unclosed quote) is an InputError naming `source` and the line; a script
// whose command is not reached because of what cannot be known here sets `unplayable`.
MegatronCommand ReadMegatronCommand(std::string_view text, const std::string& source,
                                    const MegatronReadOptions& options = {});

// Completes `command` once the world size is known (from the caller's --gpus when the command
// does not say): sets dp = world / (tp x pp) and the default global batch (MBS x DP). When tp x pp
// does not divide the world, dp stays 1 and CheckParallelConfig reports the world-size rule.
void ResolveWorldSize(MegatronCommand& command, int64_t world_size);

}  // namespace ptdp
