// Megatron-LM command lines, in and out.
//
// In: a command as a user pastes it (`python pretrain_gpt.py ...`, `torchrun ... pretrain_gpt.py
// ...`, line continuations, comment lines, `VAR=value` lines whose $VAR later lines use) is
// read into the specs ptdp models, with a finding for everything Megatron would refuse or
// ptdp cannot model. Out: the Megatron-LM flags of a plan.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/plan.h"
#include "core/training_spec.h"

namespace ptdp {

enum class FlagArity { kSwitch, kOne, kOptional, kMany };

struct KnownFlag {
  std::string_view name;
  FlagArity arity;
};

// Every option of megatron/training/arguments.py (core/megatron_flags.inc says which commit),
// and the options of the launchers (torchrun) that come before the script.
std::span<const KnownFlag> MegatronFlags();
std::span<const KnownFlag> LauncherFlags();

struct MegatronFinding {
  enum class Severity { kError, kWarning };
  Severity severity;
  std::string flag;  // the flag concerned ("--num-microbatches"), or "" for the whole command
  int line = 0;      // 1-based line of the pasted text, 0 when not about one place
  std::string message;
  std::string fix;  // what to do instead; may be empty
};

// What a Megatron-LM command line says, in ptdp's terms.
struct MegatronCommand {
  std::string script;  // "pretrain_gpt.py"
  ModelSpec model;     // complete only when model_complete
  bool model_complete = false;
  TrainingSpec training;    // global_batch_size 0 when neither GBS nor the world size is known
  ParallelConfig parallel;  // dp is 1 until the world size is known
  CostOptions options;      // attention backend, overlap flags: what changes costs
  std::optional<int64_t> world_size;  // from torchrun --nproc-per-node x --nnodes, or --world-size
  // Flags as given (after substitution), in order: (flag, values, line).
  struct Arg {
    std::string flag;
    std::vector<std::string> values;
    int line = 0;
  };
  std::vector<Arg> args;
  std::vector<MegatronFinding> findings;  // errors Megatron would raise, things ptdp ignores

  bool has_errors() const;
};

// Reads a pasted command line. Syntax it cannot make sense of (no `*.py` script, an unclosed
// quote) is an InputError naming `source` and the line.
MegatronCommand ReadMegatronCommand(std::string_view text, const std::string& source);

// Completes `command` once the world size is known (from the caller's --gpus when the command
// does not say): sets dp = world / (tp x pp) and the default global batch (MBS x DP). When tp x pp
// does not divide the world, dp stays 1 and CheckParallelConfig reports the world-size rule.
void ResolveWorldSize(MegatronCommand& command, int64_t world_size);

// The flags that give Megatron-LM this plan's model, batch and layout, in a stable order, e.g.
// {"--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "8", ...}. Flags for
// things Megatron-LM lacks (the zb-h1 and gpipe schedules) are left out; see the schedule note.
std::vector<std::string> MegatronArgs(const Plan& plan);

// The same, as one shell-ready line: "--tensor-model-parallel-size 8 --pipeline-...".
std::string MegatronArgsLine(const Plan& plan);

}  // namespace ptdp
