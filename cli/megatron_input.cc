#include "cli/megatron_input.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include "core/error.h"
#include "core/yaml_io.h"

namespace ptdp::cli {
namespace po = boost::program_options;
namespace {

// `source FILE` in a launch script: FILE as written, else beside the script (a path the script
// builds from `pwd` or $(dirname $0) reaches the interpreter partly unknown: its file name
// is looked up next to the script).
std::function<std::optional<std::string>(const std::string&)> SourcedFileReader(
    const std::string& script) {
  const std::filesystem::path dir = std::filesystem::path(script).parent_path();
  return [dir](const std::string& path) -> std::optional<std::string> {
    for (const std::filesystem::path& candidate :
         {std::filesystem::path(path), dir / path, dir / std::filesystem::path(path).filename()}) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(candidate, ec)) return ReadTextFile(candidate.string());
    }
    return std::nullopt;
  };
}

// NAME=VALUE (an --env value or an --env-file line, `export ` before it allowed) into `env`;
// false when it is not one. The value is taken as written: no quotes removed, nothing expanded.
bool AddAssignment(std::string_view text, std::map<std::string, std::string>& env) {
  if (text.starts_with("export ")) text.remove_prefix(7);
  const size_t eq = text.find('=');
  if (eq == 0 || eq == std::string_view::npos) return false;
  const std::string_view name = text.substr(0, eq);
  const bool valid = std::all_of(name.begin(), name.end(),
                                 [](unsigned char ch) { return std::isalnum(ch) || ch == '_'; }) &&
                     !std::isdigit(static_cast<unsigned char>(name.front()));
  if (!valid) return false;
  env[std::string(name)] = std::string(text.substr(eq + 1));
  return true;
}

// --env-file FILE (NAME=VALUE lines, '#' comments, blank lines), then --env NAME=VALUE (they
// win): the environment the launch script starts in.
void ReadScriptEnvironment(const Flags& flags, MegatronReadOptions& read) {
  if (auto file = flags.OptionalString("env-file")) {
    std::istringstream lines(ReadTextFile(*file));
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const size_t first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#') continue;
      if (!AddAssignment(std::string_view(line).substr(first), read.environment)) {
        throw InputError({*file, number, ""}, fmt::format("expected NAME=VALUE, got \"{}\"", line),
                         "one variable per line, as `env` prints them");
      }
    }
  }
  for (const std::string& assignment : flags.Strings("env")) {
    if (!AddAssignment(assignment, read.environment)) {
      flags.Fail("env", fmt::format("expected NAME=VALUE, got \"{}\"", assignment),
                 "e.g. --env SLURM_NNODES=4 (repeat --env for more)");
    }
  }
}

}  // namespace

void AddScriptEnvironmentOptions(po::options_description& o) {
  o.add_options()("script-args", po::value<std::string>()->value_name("WORDS"),
                  "the script's own arguments ($1, $2, ...), space-separated; a parameter not "
                  "given reads as an unknown value")(
      "env", po::value<std::vector<std::string>>()->composing()->value_name("NAME=VALUE"),
      "a variable the script starts with (repeatable): what the scheduler or a wrapper "
      "exports, e.g. --env SLURM_NNODES=4")(
      "env-file", po::value<std::string>()->value_name("FILE"),
      "variables the script starts with, NAME=VALUE per line (as `env` prints them); --env "
      "wins");
}

MegatronInput ReadMegatronInput(const Flags& flags, std::string_view text_flag,
                                std::string_view verb, std::string_view usage_hint) {
  MegatronInput in;
  const auto file = flags.OptionalString("file");
  const auto text = text_flag.empty() ? std::nullopt : flags.OptionalString(text_flag);
  const int given = (file ? 1 : 0) + (text ? 1 : 0) + (flags.passthrough().empty() ? 0 : 1);
  if (given > 1) {
    flags.Fail(
        text && file ? text_flag : "file",
        text_flag.empty()
            ? "give the command either after -- or in --file, not both"
            : fmt::format("give the command once: in --{}, in --file or after --", text_flag));
  }
  bool from_file = false;
  if (file) {
    if (*file == "-") {
      in.text.assign(std::istreambuf_iterator<char>(std::cin), {});
      in.source = "<stdin>";
    } else {
      in.text = ReadTextFile(*file);
      in.source = *file;
      from_file = true;
    }
    in.has_lines = true;
  } else if (text) {
    in.text = *text;
    in.source = "--" + std::string(text_flag);
    in.has_lines = in.text.find('\n') != std::string::npos;
  } else if (!flags.passthrough().empty()) {
    for (const std::string& word : flags.passthrough()) {
      in.text += (in.text.empty() ? "" : " ") + word;
    }
    in.source = "the command line";
  } else {
    flags.Fail(text_flag.empty() ? "file" : text_flag, fmt::format("no command to {}", verb),
               std::string(usage_hint));
  }
  if (auto words = flags.OptionalString("script-args")) {
    std::istringstream args(*words);
    for (std::string w; args >> w;) in.read.script_args.push_back(w);
  }
  ReadScriptEnvironment(flags, in.read);
  if (from_file) {
    // The script is taken to run from its own folder: $PWD and `pwd` name it, and the files it
    // sources or submits are found there.
    in.read.read_file = SourcedFileReader(in.source);
    std::error_code ec;
    const std::filesystem::path dir =
        std::filesystem::absolute(std::filesystem::path(in.source), ec).parent_path();
    if (!ec) in.read.environment["PWD"] = dir.string();
  }
  return in;
}

CheckReport CheckMegatronInput(const Flags& flags, const MegatronInput& in,
                               std::optional<int64_t> gpus) {
  CheckReport report = CheckMegatronCommand(in.text, in.source, gpus, in.read);
  MegatronCommand& c = report.command;
  if (auto vocab = flags.OptionalPositiveInt("vocab-size")) {
    c.model.vocab_size = static_cast<int>(*vocab);
    std::erase_if(c.findings, [](const MegatronFinding& f) {
      return f.message.starts_with("the vocabulary size comes from the tokenizer");
    });
  }
  return report;
}

void RequireFp8Units(const Flags& flags, const MegatronCommand& command,
                     const ClusterSpec& cluster) {
  if (command.training.precision != Precision::kFp8 || cluster.gpu.peak_fp8_flops > 0) return;
  flags.Fail("cluster",
             fmt::format("the command trains in FP8 (--fp8-format) but {}'s {} has no FP8 "
                         "tensor cores",
                         cluster.name, cluster.gpu.name),
             "pass --cluster dgx-h100 (or hgx-h200, or your own profile with peak_fp8_tflops)");
}

}  // namespace ptdp::cli
