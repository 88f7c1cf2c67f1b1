// A launch script played as bash would play it (megatron/shell.h), down to the commands that
// run a Python script, each with the launcher words before it: what ReadMegatronCommand
// (megatron/read_command.h) reads its training command from. Internal to the reading of
// commands.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/read_command.h"

namespace ptdp::reading {

struct Token {
  std::string text;
  int line = 0;
  std::string file = "";  // where it was written, when not in the script given (a sourced file)
};

// A command that runs a Python script: a candidate for the training launch.
struct Launch {
  std::vector<Token> words;
  size_t script_at = 0;                            // the index of the `*.py` word
  std::map<std::string, std::string> environment;  // exported variables and inline assignments
  // The words of the commands that handed it to a shell (`srun -N 2 sh -c "..."`), outermost
  // first: launcher words too.
  std::vector<Token> outer;
};

struct Lexed {
  std::vector<Launch> launches;  // in the order bash would run them
  std::vector<MegatronFinding> findings;
  std::vector<std::string> unread_files;  // sourced files not read, once each
  bool missing_arguments = false;         // the script reads arguments ($1...) not given
  int scripts = 0;      // scripts played: the one given and those handed to shells
  size_t commands = 0;  // commands run by all of them
};

// Plays `text` as bash would, and the scripts its commands hand to another shell (`sh -c`,
// here-documents fed to a shell or to sbatch, sbatch's job script), to depth 4: every command
// that runs a `*.py` script, in the order bash would run them, and the interpreter's warnings.
Lexed PlayLaunchScript(std::string_view text, const std::string& source,
                       const MegatronReadOptions& read);

// The world size the launcher words before the script start: torchrun (or python -m
// torch.distributed.run / .launch) --nproc-per-node x --nnodes; deepspeed --num_gpus x
// --num_nodes; srun --ntasks, or --nodes x --ntasks-per-node; mpirun / mpiexec -np. Nothing when
// they do not say (a value the script computes at run time, or a launcher ptdp does not know); then
// `unknown`, when given, names the flag whose value is not known ("--nnodes $NNODES"), if that is
// why.
std::optional<int64_t> LauncherWorldSize(std::span<const Token> words,
                                         std::string* unknown = nullptr);

}  // namespace ptdp::reading
