// The subcommands of DESIGN.md's command-line contract. Each has its flags, help text and a
// handler; Run() in cli.cc dispatches. Handlers return an exit code (cli.h) and throw
// InputError for bad input.
#pragma once

#include <boost/program_options.hpp>
#include <ostream>
#include <span>
#include <string_view>

#include "cli/flags.h"

namespace ptdp::cli {

struct Command {
  std::string_view name;
  std::string_view summary;      // one line, for `ptdp --help`
  std::string_view usage;        // the synopsis line(s)
  std::string_view description;  // what it does, for `ptdp NAME --help`
  std::string_view examples;     // one example per line
  bool implemented;              // false: parses its flags, then says it is not implemented yet
  std::string_view tracked_in;   // for unimplemented ones: where the work is described
  void (*add_options)(boost::program_options::options_description& options);
  int (*run)(const Flags& flags, std::ostream& out, std::ostream& err);
  // Where a flag the command does not have is meant as one of its own (Flags::Parse).
  UnknownFlagHint unknown_flag_hint = nullptr;
};

// In the order `ptdp --help` lists them.
std::span<const Command> AllCommands();

// Defined in the cmd_*.cc files.
extern const Command kPlanCommand;
extern const Command kSweepCommand;
extern const Command kSimulateCommand;
extern const Command kCheckCommand;
extern const Command kScheduleCommand;
extern const Command kReplayCommand;
extern const Command kExecuteCommand;
extern const Command kValidateCommand;
extern const Command kCalibrateCommand;
extern const Command kModelsCommand;
extern const Command kProfilesCommand;

}  // namespace ptdp::cli
