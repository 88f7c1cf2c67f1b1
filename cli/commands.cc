#include "cli/commands.h"

namespace ptdp::cli {

std::span<const Command> AllCommands() {
  static const Command* const kAll[] = {
      &kPlanCommand,    &kSweepCommand,    &kSimulateCommand,  &kCheckCommand,
      &kExecuteCommand, &kValidateCommand, &kCalibrateCommand, &kScheduleCommand,
      &kReplayCommand,  &kModelsCommand,   &kProfilesCommand,
  };
  static const std::vector<Command> commands = [] {
    std::vector<Command> v;
    for (const Command* c : kAll) v.push_back(*c);
    return v;
  }();
  return commands;
}

}  // namespace ptdp::cli
