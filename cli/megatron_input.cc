#include "cli/megatron_input.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/text.h"
#include "megatron/shell.h"

namespace ptdp::cli {
namespace po = boost::program_options;
namespace {

namespace fs = std::filesystem;

// `path`'s components, without the empty one a trailing separator leaves.
std::vector<fs::path> Components(const fs::path& path) {
  std::vector<fs::path> parts;
  for (const fs::path& part : path) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// Whether `path` is `root` or lies below it, component by component (/a/bc is not in /a/b).
bool Inside(const fs::path& path, const fs::path& root) {
  const std::vector<fs::path> p = Components(path), r = Components(root);
  return p.size() >= r.size() && std::equal(r.begin(), r.end(), p.begin());
}

// The kernel's and the devices' trees: never read, whatever folder is allowed.
bool InSystemTree(const fs::path& path) {
  return Inside(path, "/proc") || Inside(path, "/sys") || Inside(path, "/dev");
}

// `path` absolute, with symbolic links and `..` resolved as far as it exists; empty when that
// fails.
fs::path Resolved(const fs::path& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) return {};
  fs::path resolved = fs::weakly_canonical(absolute, ec);
  return ec ? fs::path() : resolved.lexically_normal();
}

// The text of a regular file `path`, at most `max_bytes` + 1 bytes of it (more tells the caller
// it is too large); nothing when it cannot be opened or read. `not_regular` is set when it is a
// folder, a FIFO, a device or a socket, which is never opened (a FIFO would block, a device may
// have effects). Opened without blocking and checked again once open; with `resolved` (a path
// with no link left in it), without following a link either, so that a file swapped for a link
// meanwhile is not read.
std::optional<std::string> ReadRegularFile(const fs::path& path, size_t max_bytes,
                                           bool* not_regular, bool resolved = false) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (!S_ISREG(st.st_mode)) {
    if (not_regular != nullptr) *not_regular = true;
    return std::nullopt;
  }
  const int fd = ::open(path.c_str(),
                        O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (resolved ? O_NOFOLLOW : 0));
  if (fd < 0) return std::nullopt;
  std::string text;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok && not_regular != nullptr) *not_regular = true;
  while (ok && text.size() <= max_bytes) {
    char buffer[1 << 16];
    const size_t want = std::min(sizeof buffer, max_bytes + 1 - text.size());
    const ssize_t got = ::read(fd, buffer, want);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) ok = false;
    if (got <= 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  return text;
}

// At most `max_bytes` + 1 bytes of standard input.
std::string ReadStandardInput(size_t max_bytes) {
  std::string text;
  std::streambuf* in = std::cin.rdbuf();
  char buffer[1 << 16];
  while (text.size() <= max_bytes) {
    const auto want =
        static_cast<std::streamsize>(std::min(sizeof buffer, max_bytes + 1 - text.size()));
    const std::streamsize got = in->sgetn(buffer, want);
    if (got <= 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  return text;
}

// The folders a launch script may source files from (issue 35: `ptdp check` is safe to run on
// someone else's script): the script's own folder and everything below it, and the folders
// --allow-source names; never /proc, /sys or /dev, and only regular files. A relative path is
// taken from the script's folder; for a script from standard input or the command line, which
// has no folder, from the current folder, and then read only when that lies in an allowed one.
struct SourceRules {
  fs::path script_folder;         // resolved; empty when the script has no file
  std::vector<fs::path> allowed;  // resolved: the script's folder, then --allow-source's
  fs::path base;                  // where relative paths start
  std::string from;               // where the script came from, "<stdin>"

  // Why `resolved` may not be read, or "".
  std::string Refusal(const fs::path& resolved) const {
    if (InSystemTree(resolved)) return "ptdp never reads /proc, /sys or /dev";
    for (const fs::path& dir : allowed) {
      if (Inside(resolved, dir)) return "";
    }
    if (script_folder.empty()) {
      return allowed.empty()
                 ? fmt::format("a script from {} has no folder to read files from", from)
                 : "it lies outside the folders --allow-source names";
    }
    return fmt::format("it lies outside the script's folder ({}){}", script_folder.string(),
                       allowed.size() > 1 ? " and the folders --allow-source names" : "");
  }
};

// `source FILE` in a launch script (and sbatch's job script): FILE as written (a relative path
// from the script's folder), else the file of that name beside the script (a path the script
// builds from `pwd` or $(dirname $0) reaches the interpreter partly unknown, or names a folder
// of another machine), each read only where SourceRules allow.
FileReader SourcedFileReader(SourceRules rules) {
  return [rules = std::move(rules)](const std::string& path) -> FileText {
    if (path.empty()) return FileText();
    std::vector<fs::path> candidates = {fs::path(path).is_absolute() ? fs::path(path)
                                                                     : rules.base / path};
    const fs::path name = fs::path(path).filename();
    if (!rules.script_folder.empty() && !name.empty() && name != "." && name != ".." &&
        rules.script_folder / name != candidates.front()) {
      candidates.push_back(rules.script_folder / name);
    }
    std::optional<FileText> first_refusal;
    for (const fs::path& candidate : candidates) {
      const fs::path resolved = Resolved(candidate);
      if (resolved.empty()) continue;
      std::string why = rules.Refusal(resolved);
      bool not_regular = false;
      if (why.empty()) {
        if (auto text = ReadRegularFile(resolved, kMaxShellTextBytes, &not_regular, true)) {
          return FileText(std::move(text));
        }
        if (not_regular) why = "it is not a regular file";
      }
      if (!why.empty() && !first_refusal) {
        first_refusal = FileText::Refused(
            why, not_regular || InSystemTree(resolved)
                     ? ""
                     : "pass --allow-source DIR to read files in DIR, or give the variables the "
                       "file sets with --env or --env-file");
      }
    }
    return first_refusal.value_or(FileText());
  };
}

// The text of the file a flag names (`-`: standard input), at most kMaxShellTextBytes of it: a
// larger one, or one that is not a regular file (a FIFO would block, /dev/zero never ends), is an
// InputError naming the flag, before anything is read into memory (issue 35).
std::string ReadInputFile(const Flags& flags, std::string_view flag, const std::string& path) {
  const std::string limit =
      fmt::format("ptdp reads at most {} MiB of a launch script", kMaxShellTextBytes >> 20);
  if (path == "-") {
    std::string text = ReadStandardInput(kMaxShellTextBytes);
    if (text.size() > kMaxShellTextBytes) {
      flags.Fail(flag,
                 fmt::format("standard input holds more than {} MiB", kMaxShellTextBytes >> 20),
                 limit);
    }
    return text;
  }
  bool not_regular = false;
  std::optional<std::string> text = ReadRegularFile(path, kMaxShellTextBytes, &not_regular);
  if (not_regular) {
    flags.Fail(
        flag,
        fmt::format("{} is not a regular file (a folder, a FIFO or a device)", QuotedWord(path)),
        "give the script's file, or `-` and the text on standard input");
  }
  if (!text) {
    throw InputError({QuotedWord(path), 0, ""},
                     fmt::format("cannot read file: {}", std::strerror(errno)));
  }
  if (text->size() > kMaxShellTextBytes) {
    flags.Fail(flag,
               fmt::format("{} is larger than {} MiB", QuotedWord(path), kMaxShellTextBytes >> 20),
               limit);
  }
  return std::move(*text);
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
    std::istringstream lines(ReadInputFile(flags, "env-file", *file));
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
      "wins")(
      "allow-source", po::value<std::vector<std::string>>()->composing()->value_name("DIR"),
      "a folder whose files the script may source or submit (repeatable); without it only files "
      "in the script's own folder (and below) are read, none for a script from standard input "
      "or the command line; never /proc, /sys, /dev or what is not a regular file");
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
    in.text = ReadInputFile(flags, "file", *file);
    if (*file == "-") {
      in.source = "<stdin>";
    } else {
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
  // The files the script sources or submits: from its own folder, or those --allow-source names
  // (SourceRules).
  SourceRules rules;
  rules.from = in.source;
  std::error_code ec;
  if (from_file) {
    // The script is taken to run from its own folder: $PWD and `pwd` name it, and the files it
    // sources or submits are found there.
    const fs::path dir = fs::absolute(fs::path(in.source), ec).parent_path();
    if (!ec) in.read.environment["PWD"] = dir.string();
    rules.script_folder = Resolved(dir);
    if (!rules.script_folder.empty()) rules.allowed.push_back(rules.script_folder);
  }
  for (const std::string& dir : flags.Strings("allow-source")) {
    const fs::path resolved = Resolved(dir);
    if (resolved.empty() || !fs::is_directory(resolved, ec)) {
      flags.Fail("allow-source", fmt::format("{} is not a folder", QuotedWord(dir)),
                 "name a folder whose files the script may source (repeat the flag for more)");
    }
    rules.allowed.push_back(resolved);
  }
  rules.base = !rules.script_folder.empty() ? rules.script_folder : Resolved(fs::current_path(ec));
  in.read.read_file = SourcedFileReader(std::move(rules));
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
