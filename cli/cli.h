// The ptdp command line. main() is a thin wrapper around Run(), so tests drive the whole CLI
// in-process and pin its output and exit codes.
#pragma once

#include <functional>
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
// An in-process caller asked the command to stop (RunOptions::should_stop): 128 + SIGINT, what a
// shell reports for a command that Ctrl-C ended. The `ptdp` program never asks (Ctrl-C ends the
// process there), so its users never see this code; the Python package turns it into the
// KeyboardInterrupt that stopped the command.
inline constexpr int kExitInterrupted = 130;

struct RunOptions {
  // Asked on the thread that called Run, where long work reports its progress (the plan search:
  // every 16,384 candidates that pass the rules and every simulation of its ranking; `replay
  // --plan`; calibrate's GEMM grid), so at least every ~0.1 s of such work; it should answer
  // quickly (it may rate-limit itself). When it returns true the command stops there, writes
  // no output file, says "ptdp: interrupted" on `err` and Run returns kExitInterrupted. Work
  // that reports no progress (a single simulation, a check) runs to its end.
  std::function<bool()> should_stop = {};
};

// `args` excludes the program name. Normal output goes to `out`, errors and progress to `err`.
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        const RunOptions& options = {});

}  // namespace ptdp::cli
