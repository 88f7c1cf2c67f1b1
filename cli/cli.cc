#include "cli/cli.h"

#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/output.h"
#include "core/error.h"
#include "core/text.h"
#include "executor/device.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

constexpr int kHelpWidth = 100;

std::string TopHelp() {
  std::string text =
      "usage: ptdp <command> [flags]      (ptdp <command> --help for its flags)\n\n"
      "ptdp plans, simulates and executes PTD-P (pipeline x tensor x data parallel) training of\n"
      "GPT-style transformers the Megatron-LM way.\n\nCommands:\n";
  for (const Command& c : AllCommands()) {
    text += fmt::format("  {:<10} {}{}\n", c.name, c.summary,
                        c.implemented ? "" : " (not implemented yet)");
  }
  text +=
      "\nModels (--model) are preset names (`ptdp models`), model YAML files or Hugging Face\n"
      "config.json files; clusters (--cluster) are hardware-profile names (`ptdp profiles`) or\n"
      "files.\n\n"
      "Exit codes: 0 success, 1 no valid plan or failed check, 2 bad input (the message names the\n"
      "file, line, key or flag), 3 command not implemented yet.\n\n"
      "Other flags: --help, --version\n";
  return text;
}

std::string CommandHelp(const Command& c, const po::options_description& options) {
  std::ostringstream text;
  text << "usage: " << c.usage << "\n\n" << c.description << "\n";
  if (!c.implemented) {
    text << "\nNot implemented yet: the flags are read and checked, then the command stops "
            "with exit code 3 ("
         << c.tracked_in << ").\n";
  }
  text << "\n" << options;
  if (const std::string megatron = MegatronNamesHelp(options); !megatron.empty()) {
    text << "\n" << WrapWords(megatron, kHelpWidth) << "\n";
  }
  if (!c.examples.empty()) {
    text << "\nExamples:\n";
    std::istringstream lines{std::string(c.examples)};
    for (std::string line; std::getline(lines, line);) text << "  " << line << "\n";
  }
  return text.str();
}

std::string VersionText() {
  const CudaStatus cuda = QueryCuda();
  std::string text = fmt::format("ptdp {}\n", PTDP_VERSION);
  if (!cuda.built) {
    text += "CUDA: not built in\n";
  } else {
    text += fmt::format("CUDA: built in (NCCL {}); ", cuda.nccl_version);
    text += cuda.usable
                ? fmt::format("{} device(s), device 0: {}\n", cuda.device_count, cuda.device_name)
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
  po::options_description options("Flags", kHelpWidth, kHelpWidth / 2);
  command.add_options(options);
  options.add_options()("help,h", po::bool_switch(), "show this help");
  const Flags flags = Flags::Parse(args, options, std::string(command.name));
  if (flags.help()) {
    out << CommandHelp(command, options);
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

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
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
    const Command* command = FindCommand(first);
    if (command == nullptr) {
      throw InputError(
          {"", 0, first},
          first.starts_with("-") ? "unknown flag before the command" : "unknown command",
          "`ptdp --help` lists the commands");
    }
    return RunCommand(*command, {args.begin() + 1, args.end()}, out, err);
  } catch (const InputError& e) {
    err << "ptdp: error: " << e.what() << "\n";
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
