// The ptdp command line. main() is a thin wrapper around Run(), so tests drive the whole CLI
// in-process and pin its output and exit codes.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace ptdp::cli {

// Exit codes (DESIGN.md): 0 success; 1 no valid plan or a failed check; 2 bad input (the message
// names the file, line, key or flag); 3 the subcommand is not implemented yet; 4 `check
// --require-fit`: Megatron-LM would accept the command but it does not fit in memory; 5 `check`
// cannot judge the command: another stack's (Megatron-DeepSpeed, a fork's entry point), its
// configuration in a --yaml-cfg file, a launch that depends on what only the machine knows, or
// sourced files that could not be read where Megatron-LM would otherwise refuse it.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNotImplemented = 3;
inline constexpr int kExitDoesNotFit = 4;
inline constexpr int kExitCannotJudge = 5;

// `args` excludes the program name. Normal output goes to `out`, errors and progress to `err`.
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ptdp::cli
