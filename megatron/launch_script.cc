#include "megatron/launch_script.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "core/text.h"
#include "megatron/option_table.h"
#include "megatron/shell.h"

namespace ptdp::reading {
namespace {

using Severity = MegatronFinding::Severity;

bool IsScript(std::string_view word) { return word.size() > 3 && word.ends_with(".py"); }

// The index of the `*.py` word of a command that runs a Python script (not one that only
// prints its name).
std::optional<size_t> ScriptWord(const std::vector<Token>& words) {
  if (words.empty() || words[0].text == "echo" || words[0].text == "printf") return std::nullopt;
  for (size_t i = 0; i < words.size(); ++i) {
    if (IsScript(words[i].text)) return i;
  }
  return std::nullopt;
}

bool IsShell(std::string_view program) {
  const std::string_view base = program.substr(program.rfind('/') + 1);
  return base == "bash" || base == "sh" || base == "dash" || base == "zsh";
}

// A script a command runs in another shell: its text, and where that text was written: in a
// file of its own (`file`: sbatch's job script), or in the script being played, from line
// `first_line` on (the `sh -c` word's line, a here-document's first line).
struct InnerText {
  std::string text;
  std::string file;
  int first_line = 1;
};

// The script a command hands to a shell: `bash -c "..."`, `srun ... sh -x -c "$CMD"`; nothing
// when it does not.
std::optional<InnerText> ShellScriptOf(const ShellCommand& command) {
  const auto& w = command.words;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!IsShell(w[i].text)) continue;
    for (size_t j = i + 1; j + 1 < w.size() && w[j].text.starts_with("-"); ++j) {
      if (w[j].text.find('c') != std::string::npos && !w[j].text.starts_with("--")) {
        return InnerText{w[j + 1].text, "", std::max(1, w[j + 1].line)};
      }
    }
  }
  return std::nullopt;
}

bool IsSbatch(const ShellCommand& command) {
  return !command.words.empty() && command.words.front().text.ends_with("sbatch");
}

bool LooksLikeJobScript(std::string_view word) {
  return word.ends_with(".sh") || word.ends_with(".slurm") || word.ends_with(".sbatch");
}

// A job script sbatch names that the reader refused to read (FileText::refused), with where
// sbatch's word was written.
struct RefusedFile {
  const ShellWord* word = nullptr;
  FileText file;
};

// The script a command runs in another shell: `sh -c "..."`, a here-document fed to a shell or
// to sbatch (Megatron-LM's examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh: `sbatch <<EOF ...
// srun ... EOF`), or sbatch's job script file, read as a sourced file is (its options may take
// values, so the words are tried from the end). When no file is read and the reader refused
// the word that names the job script (the last `*.sh` word, else the last word), `refused`
// says why.
std::optional<InnerText> InnerScript(const ShellCommand& command, const ShellOptions& options,
                                     std::optional<RefusedFile>& refused) {
  if (auto script = ShellScriptOf(command)) return script;
  if (command.words.empty()) return std::nullopt;
  if (command.input && (IsShell(command.words.front().text) || IsSbatch(command))) {
    return InnerText{command.input->text, "", std::max(1, command.input->line)};
  }
  if (!IsSbatch(command) || !options.read_file) return std::nullopt;
  std::optional<RefusedFile> last, job;
  bool seen_last = false, seen_job = false;
  for (size_t i = command.words.size(); i-- > 1;) {
    const ShellWord& word = command.words[i];
    if (word.text.starts_with("-")) continue;
    FileText file = options.read_file(word.text);
    if (file.text) return InnerText{std::move(*file.text), word.text, 1};
    const bool is_job = LooksLikeJobScript(word.text);
    if (!file.refused.empty()) {
      if (!seen_last) last = RefusedFile{&word, file};
      if (is_job && !seen_job) job = RefusedFile{&word, std::move(file)};
    }
    seen_last = true;
    seen_job = seen_job || is_job;
  }
  refused = seen_job ? job : last;
  return std::nullopt;
}

// A job script's `#SBATCH --nodes=4 --ntasks-per-node=8` lines, as launcher words (sbatch's own
// command-line options come after them and win).
std::vector<Token> SbatchDirectives(std::string_view script) {
  std::vector<Token> out;
  for (size_t start = 0; start < script.size();) {
    const size_t end = std::min(script.find('\n', start), script.size());
    std::string_view line = script.substr(start, end - start);
    start = end + 1;
    if (!line.starts_with("#SBATCH")) continue;
    line.remove_prefix(7);
    for (size_t i = 0; i < line.size();) {
      const size_t word_end = std::min(line.find_first_of(" \t", i), line.size());
      if (word_end > i) out.push_back({std::string(line.substr(i, word_end - i)), 0});
      i = word_end + 1;
    }
  }
  return out;
}

std::optional<int64_t> PositiveNumber(std::string_view text) {
  int64_t n = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || ptr != text.data() + text.size() || n <= 0) return std::nullopt;
  return n;
}

// Launcher options as they were given: flag (dashes for underscores, without its "=value") ->
// its last value, as text. A flag takes the next word as its value unless the launchers' table
// says it is a switch.
std::map<std::string, std::string> LauncherValues(std::span<const Token> words) {
  std::map<std::string, std::string> given;
  for (size_t i = 0; i < words.size(); ++i) {
    std::string flag = words[i].text, value;
    if (!flag.starts_with("-")) continue;
    const size_t eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < words.size() && !words[i + 1].text.starts_with("-")) {
      const KnownFlag* known = FindFlag(LauncherFlags(), flag);
      if (known == nullptr || known->arity != FlagArity::kSwitch) value = words[++i].text;
    }
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (!value.empty()) given[flag] = value;
  }
  return given;
}

// The variables Slurm sets in a job that sbatch's options `words` (its #SBATCH lines, then its
// command line) ask for, into `env` where it does not set them already: SLURM_NNODES and
// SLURM_JOB_NUM_NODES (--nodes, -N), SLURM_NTASKS_PER_NODE, SLURM_NTASKS (--ntasks, -n, or
// nodes x tasks per node), SLURM_GPUS_PER_NODE and SLURM_GPUS_ON_NODE (--gpus-per-node,
// --gres=gpu:[type:]N). Only plain numbers count ("2-4" nodes says nothing).
void AddSlurmEnvironment(std::span<const Token> words, std::map<std::string, std::string>& env) {
  const std::map<std::string, std::string> given = LauncherValues(words);
  const auto get = [&](std::initializer_list<const char*> names) -> std::optional<int64_t> {
    for (const char* name : names) {
      if (const auto it = given.find(name); it != given.end()) return PositiveNumber(it->second);
    }
    return std::nullopt;
  };
  // --gpus-per-node=[type:]N, else --gres=gpu:[type:]N.
  std::optional<int64_t> gpus;
  for (const std::string_view name : {"--gpus-per-node", "--gres"}) {
    const auto it = given.find(std::string(name));
    if (it == given.end() || (name == "--gres" && !it->second.starts_with("gpu"))) continue;
    gpus = PositiveNumber(std::string_view(it->second).substr(it->second.rfind(':') + 1));
    break;
  }
  const std::optional<int64_t> nodes = get({"--nodes", "-N"}),
                               per_node = get({"--ntasks-per-node"});
  std::optional<int64_t> tasks = get({"--ntasks", "-n"});
  if (!tasks && per_node) tasks = *per_node * nodes.value_or(1);
  const auto set = [&](const char* name, std::optional<int64_t> n) {
    if (n && !env.contains(name)) env[name] = std::to_string(*n);
  };
  set("SLURM_NNODES", nodes);
  set("SLURM_JOB_NUM_NODES", nodes);
  set("SLURM_NTASKS_PER_NODE", per_node);
  set("SLURM_NTASKS", tasks);
  set("SLURM_GPUS_PER_NODE", gpus);
  set("SLURM_GPUS_ON_NODE", gpus);
}

// Plays the launch script as bash would (megatron/shell.h), and the scripts its commands run in
// another shell (InnerScript), to depth 4. The words of the commands that led to each command
// are kept as its launcher words. `text` is named `source`; its line 1 is line `first_line` of
// `file` ("": the script given). Words and notes carry their file and line.
void AddCommands(std::string_view text, const std::string& source, const std::string& file,
                 int first_line, const ShellOptions& options, int depth,
                 const std::vector<Token>& outer, Lexed& out) {
  // Scripts that hand scripts to shells that hand scripts on multiply: the scripts played and
  // the commands kept are bounded in all, not only the depth (found by fuzzing).
  constexpr int kMaxScripts = 16;
  constexpr size_t kMaxCommands = 20'000;
  if (++out.scripts > kMaxScripts) {
    throw InputError(
        {source, 0, ""},
        fmt::format("the script hands more than {} scripts to shells (sh -c, sbatch)", kMaxScripts),
        "check the command that runs pretrain_gpt.py on its own");
  }
  const ShellResult result = InterpretShell(text, source, options);
  out.commands += result.commands.size();
  if (out.commands > kMaxCommands) {
    throw InputError({source, 0, ""},
                     fmt::format("the script runs more than {} commands", kMaxCommands),
                     "check the command that runs pretrain_gpt.py on its own");
  }
  out.missing_arguments = out.missing_arguments || !result.missing_arguments.empty();
  for (const std::string& file : result.unread_files) {
    if (std::find(out.unread_files.begin(), out.unread_files.end(), file) ==
        out.unread_files.end()) {
      out.unread_files.push_back(file);
    }
  }
  // A line of `text` (or of a file it sources) where it was written.
  const auto place = [&](const std::string& in, int line) -> std::pair<int, std::string> {
    if (in != source) return {line, in};
    return {line > 0 ? line + first_line - 1 : 0, file};
  };
  for (const ShellNote& note : result.notes) {
    if (!note.warning) continue;
    const auto [line, in] = place(note.source, note.line);
    out.findings.push_back({Severity::kWarning, "", line, note.message, note.fix, in});
  }
  for (const ShellCommand& command : result.commands) {
    std::vector<Token> words;
    for (const ShellWord& w : command.words) {
      const auto [line, in] = place(w.source, w.line);
      words.push_back({w.text, line, in});
    }
    if (const auto at = ScriptWord(words)) {
      out.launches.push_back({words, *at, command.environment, outer});
    }
    std::optional<RefusedFile> refused;
    const std::optional<InnerText> inner = InnerScript(command, options, refused);
    if (refused) {
      // As a sourced file the reader refused is noted (megatron/shell.cc: RunSource).
      const auto [line, in] = place(refused->word->source, refused->word->line);
      out.findings.push_back({Severity::kWarning, "", line,
                              fmt::format("{} was not read: {}", QuotedWord(refused->word->text),
                                          refused->file.refused),
                              refused->file.fix, in});
      if (std::find(out.unread_files.begin(), out.unread_files.end(), refused->word->text) ==
          out.unread_files.end()) {
        out.unread_files.push_back(refused->word->text);
      }
    }
    if (!inner || depth >= 4) continue;
    ShellOptions nested = options;
    nested.environment = command.environment;
    nested.positional.clear();
    std::vector<Token> launcher = outer;
    if (IsSbatch(command)) {
      std::vector<Token> sbatch = SbatchDirectives(inner->text);
      launcher.insert(launcher.end(), sbatch.begin(), sbatch.end());
      sbatch.insert(sbatch.end(), words.begin(), words.end());
      AddSlurmEnvironment(sbatch, nested.environment);
    }
    launcher.insert(launcher.end(), words.begin(), words.end());
    if (inner->file.empty()) {
      AddCommands(inner->text, source, file, place(source, inner->first_line).first, nested,
                  depth + 1, launcher, out);
    } else {
      AddCommands(inner->text, inner->file, inner->file, 1, nested, depth + 1, launcher, out);
    }
  }
}

}  // namespace

Lexed PlayLaunchScript(std::string_view text, const std::string& source,
                       const MegatronReadOptions& read) {
  Lexed out;
  ShellOptions options;
  options.positional = read.script_args;
  options.environment = read.environment;
  options.read_file = read.read_file;
  if (!read.environment_complete) {
    // Schedulers' and MPI launchers' variables: set where the script really runs.
    // Slurm, PBS, LSF, Flux, Cobalt, Grid Engine (JOB_ID, NHOSTS, NSLOTS, PE_HOSTFILE, SGE_*),
    // Open MPI and PMI.
    options.unknown_when_unset = {
        "SLURM_", "PBS_",   "LSB_",   "FLUX_",       "COBALT_",          "SGE_",
        "JOB_ID", "NHOSTS", "NSLOTS", "PE_HOSTFILE", "OMPI_COMM_WORLD_", "PMI_",
        "PMIX_"};
  }
  // A job script given itself: its #SBATCH lines are sbatch's options, as when a script
  // submits it (AddCommands), and the variables Slurm would set from them are set.
  const std::vector<Token> directives = SbatchDirectives(text);
  AddSlurmEnvironment(directives, options.environment);
  AddCommands(text, source, "", 1, options, 0, directives, out);
  return out;
}

std::optional<int64_t> LauncherWorldSize(std::span<const Token> words, std::string* unknown) {
  const std::map<std::string, std::string> given = LauncherValues(words);
  // The first of `names` given; a value that is not a number makes the world size unknown.
  bool known = true;
  auto get = [&](std::initializer_list<const char*> names) -> std::optional<int64_t> {
    for (const char* name : names) {
      const auto it = given.find(name);
      if (it == given.end()) continue;
      const std::optional<int64_t> n = PositiveNumber(it->second);
      if (!n && known) {
        known = false;
        if (unknown != nullptr) *unknown = fmt::format("{} {}", name, it->second);
      }
      return n;
    }
    return std::nullopt;
  };
  std::optional<int64_t> world;
  if (given.contains("--nproc-per-node")) {
    const auto nproc = get({"--nproc-per-node"});
    const auto nodes = get({"--nnodes"});
    if (nproc) world = *nproc * nodes.value_or(1);
  } else if (given.contains("--num-gpus")) {
    // DeepSpeed's launcher: `deepspeed --num_gpus 8 --num_nodes 2 pretrain_gpt.py`.
    const auto gpus = get({"--num-gpus"});
    const auto nodes = get({"--num-nodes"});
    if (gpus) world = *gpus * nodes.value_or(1);
  } else if (auto tasks = get({"--ntasks", "-n", "-np", "--np"})) {
    world = *tasks;
  } else if (known && given.contains("--ntasks-per-node")) {
    const auto per_node = get({"--ntasks-per-node"});
    const auto nodes = get({"--nodes", "-N"});
    if (per_node) world = *per_node * nodes.value_or(1);
  }
  if (!known) return std::nullopt;
  return world;
}

}  // namespace ptdp::reading
