#include "cli/cli.h"

#include <fmt/format.h>

#include <boost/program_options.hpp>

#include "cli/commands.h"
#include "cli/docs.h"
#include "cli/output.h"
#include "cli/printable.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/text.h"
#include "executor/backend/device.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

std::string VersionText() {
  const CudaStatus cuda = QueryCuda();
  std::string text = fmt::format("ptdp {}\n", PTDP_VERSION);
  if (!cuda.built) {
    text += "CUDA: not built in\n";
  } else {
    text += fmt::format("CUDA: built in (NCCL {}); ", cuda.nccl_version);
    // No GPU here is not a problem to report (plan and simulate need none); another reason
    // (a driver too old for the GPU it has) is.
    text += cuda.usable
                ? fmt::format("{} device(s), device 0: {}\n", cuda.device_count, cuda.device_name)
            : cuda.no_device ? "no GPU on this machine\n"
                             : cuda.reason + "\n";
  }
  return text;
}

const Command* FindCommand(std::string_view name) {
  for (const Command& c : AllCommands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

int RunCommand(const Command& command, const std::vector<std::string>& args, std::ostream& out,
               std::ostream& err) {
  const po::options_description options = CommandOptions(command);
  const Flags flags =
      Flags::Parse(args, options, std::string(command.name), command.unknown_flag_hint);
  if (flags.help()) {
    out << CommandHelp(command);
    return kExitOk;
  }
  if (!command.implemented) {
    err << fmt::format("ptdp: error: `ptdp {}` is not implemented yet ({})\n", command.name,
                       command.tracked_in);
    return kExitNotImplemented;
  }
  CheckOutputs(flags);  // before any work: an unwritable output is said at once
  // An output written to standard output ("-") takes it: the report goes to stderr instead.
  SetStandardOutput(&out);
  return command.run(flags, AnOutputIsStandardOutput(flags) ? err : out, err);
}

}  // namespace

int Run(const std::vector<std::string>& args, std::ostream& raw_out, std::ostream& raw_err,
        const RunOptions& options) {
  const StopRequestScope stop(options.should_stop);
  // Whatever a command prints, a launch script's words in it cannot reach the terminal as
  // control characters, nor a caller as bytes that are not UTF-8 (cli/printable.h).
  PrintableStream out(raw_out), err(raw_err);
  try {
    if (args.empty()) {
      err << TopHelp() << "\nptdp: error: no command given\n";
      return kExitBadInput;
    }
    const std::string& first = args.front();
    if (first == "--help" || first == "-h" || first == "help") {
      out << TopHelp();
      return kExitOk;
    }
    if (first == "--version") {
      out << VersionText();
      return kExitOk;
    }
    // Hidden: what the build generates from the help text and the flag tables.
    if (first == "--man" && args.size() == 1) {
      out << ManPage();
      return kExitOk;
    }
    if (first == "--completion" && args.size() == 2) {
      out << CompletionScript(args[1]);
      return kExitOk;
    }
    const Command* command = FindCommand(first);
    if (command == nullptr) {
      std::vector<std::string> names;
      for (const Command& c : AllCommands()) names.emplace_back(c.name);
      const std::string near = first.starts_with("-") ? "" : ClosestName(first, names);
      throw InputError(
          {"", 0, first},
          first.starts_with("-") ? "unknown flag before the command" : "unknown command",
          near.empty() ? "`ptdp --help` lists the commands"
                       : fmt::format("did you mean {}? `ptdp --help` lists the commands", near));
    }
    return RunCommand(*command, {args.begin() + 1, args.end()}, out, err);
  } catch (const Interrupted&) {
    err << "ptdp: interrupted\n";
    return kExitInterrupted;
  } catch (const InputError& e) {
    // A word of the input it quotes is bounded however long it was (core/text.h).
    err << "ptdp: error: " << ShortenLongWords(e.what()) << "\n";
    return kExitBadInput;
  } catch (const InternalError& e) {
    err << "ptdp: internal error (a bug in ptdp; please report it): " << e.what() << "\n";
    return kExitFailed;
  } catch (const std::exception& e) {
    err << "ptdp: error: " << e.what() << "\n";
    return kExitFailed;
  }
}

}  // namespace ptdp::cli
