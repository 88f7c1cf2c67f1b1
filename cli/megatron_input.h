// A Megatron-LM command line or launch script as `check` and `simulate --megatron` read it: from
// a flag's text, a file (`-`: standard input), or the words after a lone --.
#pragma once

#include <string>
#include <string_view>

#include "cli/flags.h"
#include "core/cluster_spec.h"
#include "megatron/read_command.h"
#include "planner/check.h"

namespace ptdp::cli {

struct MegatronInput {
  std::string text;
  std::string source;        // the file, "<stdin>", or the flag or words it came from
  bool has_lines = false;    // a script (a file or standard input): findings name their lines
  MegatronReadOptions read;  // the script's arguments (--script-args), its sourced files
};

// --script-args, --env, --env-file and --allow-source: what a launch script runs with and may
// read (for check and simulate).
void AddScriptEnvironmentOptions(boost::program_options::options_description& o);

// The command from --file, from `text_flag` (a flag holding the whole command; "" for none) or
// from the words after --: exactly one of them, else an InputError naming the flags. --file is a
// regular file, or `-` (standard input), of at most 1 MiB (kMaxShellTextBytes), else an
// InputError naming it; nothing larger is read into memory and a FIFO is never opened. A script
// read from a file runs from its own folder ($PWD). The files it sources or sbatch submits are
// read (MegatronReadOptions::read_file) only in its folder and below, or in a folder
// --allow-source names, after links and `..` are resolved; never in /proc, /sys or /dev, and
// only regular files: any other is left unread with a note saying why (issue 35). A script
// from standard input or the command line has no folder: only --allow-source's, a relative
// path from the current folder. With no command, the error reads "no command to <verb>" with
// `usage_hint`.
MegatronInput ReadMegatronInput(const Flags& flags, std::string_view text_flag,
                                std::string_view verb, std::string_view usage_hint);

// The command judged as Megatron-LM would (CheckMegatronCommand) on `gpus` (--gpus, read by the
// caller), with --vocab-size, when given, as the tokenizer's vocabulary: it replaces the
// vocabulary assumed for a command without --vocab-size, and the warning that says so.
CheckReport CheckMegatronInput(const Flags& flags, const MegatronInput& in,
                               std::optional<int64_t> gpus);

// A command that trains in FP8 needs a GPU with FP8 tensor cores: an InputError naming
// --cluster otherwise.
void RequireFp8Units(const Flags& flags, const MegatronCommand& command,
                     const ClusterSpec& cluster);

}  // namespace ptdp::cli
