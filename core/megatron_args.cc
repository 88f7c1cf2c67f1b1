#include "core/megatron_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/launcher_flags.inc"
#include "core/limits.h"
#include "core/megatron_flags.inc"
#include "core/megatron_rules.h"
#include "core/shell.h"
#include "core/text.h"

namespace ptdp {
namespace {

constexpr KnownFlag kMegatronFlags[] = {PTDP_MEGATRON_FLAGS};
constexpr KnownFlag kLauncherFlags[] = {PTDP_LAUNCHER_FLAGS};

using Severity = MegatronFinding::Severity;

struct Token {
  std::string text;
  int line = 0;
};

// ---- The launch script: commands of words ------------------------------------------------

bool IsScript(std::string_view word) { return word.size() > 3 && word.ends_with(".py"); }

// A command that runs a Python script: a candidate for the training launch.
struct Launch {
  std::vector<Token> words;
  size_t script_at = 0;                            // the index of the `*.py` word
  std::map<std::string, std::string> environment;  // exported variables and inline assignments
  // The words of the commands that handed it to a shell (`srun -N 2 sh -c "..."`), outermost
  // first: launcher words too.
  std::vector<Token> outer;
};

struct Lexed {
  std::vector<Launch> launches;  // in the order bash would run them
  std::vector<MegatronFinding> findings;
  int scripts = 0;      // scripts played: the one given and those handed to shells
  size_t commands = 0;  // commands run by all of them
};

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

// The script a command hands to a shell: `bash -c "..."`, `srun ... sh -x -c "$CMD"`; nothing
// when it does not.
std::optional<std::string> ShellScriptOf(const ShellCommand& command) {
  const auto& w = command.words;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!IsShell(w[i].text)) continue;
    for (size_t j = i + 1; j + 1 < w.size() && w[j].text.starts_with("-"); ++j) {
      if (w[j].text.find('c') != std::string::npos && !w[j].text.starts_with("--")) {
        return w[j + 1].text;
      }
    }
  }
  return std::nullopt;
}

bool IsSbatch(const ShellCommand& command) {
  return !command.words.empty() && command.words.front().text.ends_with("sbatch");
}

// The script a command runs in another shell: `sh -c "..."`, a here-document fed to a shell or
// to sbatch (Megatron-LM's examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh: `sbatch <<EOF ...
// srun ... EOF`), or sbatch's job script file, read as a sourced file is (its options may take
// values, so the words are tried from the end).
std::optional<std::string> InnerScript(const ShellCommand& command, const ShellOptions& options) {
  if (auto script = ShellScriptOf(command)) return script;
  if (command.words.empty()) return std::nullopt;
  if (command.input && (IsShell(command.words.front().text) || IsSbatch(command))) {
    return command.input->text;
  }
  if (!IsSbatch(command) || !options.read_file) return std::nullopt;
  for (size_t i = command.words.size(); i-- > 1;) {
    if (command.words[i].text.starts_with("-")) continue;
    if (auto text = options.read_file(command.words[i].text)) return text;
  }
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

// Plays the launch script as bash would (core/shell.h), and the scripts its commands run in
// another shell (InnerScript), to depth 4. The words of the commands that led to each command
// are kept as its launcher words.
void AddCommands(std::string_view text, const std::string& source, const ShellOptions& options,
                 int depth, const std::vector<Token>& outer, Lexed& out) {
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
  for (const ShellNote& note : result.notes) {
    if (!note.warning) continue;
    out.findings.push_back(
        {Severity::kWarning, "", note.source == source ? note.line : 0,
         note.source == source ? note.message : fmt::format("{}: {}", note.source, note.message),
         note.fix});
  }
  for (const ShellCommand& command : result.commands) {
    std::vector<Token> words;
    for (const ShellWord& w : command.words) {
      words.push_back({w.text, w.source == source ? w.line : 0});
    }
    if (const auto at = ScriptWord(words)) {
      out.launches.push_back({words, *at, command.environment, outer});
    }
    const std::optional<std::string> inner = InnerScript(command, options);
    if (!inner || depth >= 4) continue;
    ShellOptions nested = options;
    nested.environment = command.environment;
    nested.positional.clear();
    std::vector<Token> launcher = outer;
    if (IsSbatch(command)) {
      const std::vector<Token> directives = SbatchDirectives(*inner);
      launcher.insert(launcher.end(), directives.begin(), directives.end());
    }
    launcher.insert(launcher.end(), words.begin(), words.end());
    AddCommands(*inner, source, nested, depth + 1, launcher, out);
  }
}

Lexed Lex(std::string_view text, const std::string& source, const MegatronReadOptions& read) {
  Lexed out;
  ShellOptions options;
  options.positional = read.script_args;
  options.environment = read.environment;
  options.read_file = read.read_file;
  AddCommands(text, source, options, 0, {}, out);
  return out;
}

// ---- Flags -------------------------------------------------------------------------------

const KnownFlag* Find(std::span<const KnownFlag> table, std::string_view name) {
  for (const KnownFlag& f : table) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// Flags people often write that Megatron-LM does not have, with what to write instead.
struct Mistake {
  std::string_view flag, message, fix;
};
constexpr Mistake kMistakes[] = {
    {"--num-microbatches",
     "Megatron-LM has no --num-microbatches (it existed for one commit in December 2020): it "
     "derives the number of micro-batches as global batch / (micro-batch x data-parallel size)",
     "remove it; set --global-batch-size and --micro-batch-size"},
    {"--learning-rate", "Megatron-LM's learning-rate flag is --lr", "write --lr"},
    {"--num-gpus", "Megatron-LM takes the world size from the launcher (torchrun)",
     "pass --nproc-per-node (and --nnodes) to torchrun"},
    {"--tensor-parallel-size", "the flag is --tensor-model-parallel-size",
     "write --tensor-model-parallel-size"},
    {"--pipeline-parallel-size", "the flag is --pipeline-model-parallel-size",
     "write --pipeline-model-parallel-size"},
    {"--overlap-p2p-communication",
     "Megatron-LM no longer has --overlap-p2p-communication: the interleaved schedule overlaps "
     "its pipeline sends by default (--no-overlap-p2p-communication turns that off)",
     "remove it"},
};

// Flags argparse accepts but validate_args refuses (megatron/training/arguments.py).
constexpr Mistake kDeprecated[] = {
    {"--batch-size", "--batch-size argument is no longer valid", "use --micro-batch-size"},
    {"--warmup", "--warmup argument is no longer valid", "use --lr-warmup-fraction"},
    {"--model-parallel-size", "--model-parallel-size is no longer valid",
     "use --tensor-model-parallel-size"},
    {"--checkpoint-activations", "--checkpoint-activations is no longer valid",
     "use --recompute-activations, or --recompute-granularity and --recompute-method"},
};

// Whether a flag Megatron-LM accepts can change a step's time or memory. Whole sections of the
// parser cannot (logging, checkpointing, data, the learning-rate schedule, ...); in the others,
// the flags that only change numerics or bookkeeping (initialisation, RoPE's base, loss scaling,
// router losses, profiling, timeouts) cannot either. A flag that can, and that reading the
// command never looked at, is not simulated: `check` says so.
bool CanChangeTheStep(const KnownFlag& flag) {
  static constexpr std::string_view kSections[] = {
      "network_size",  "distributed",
      "training",      "mixed_precision",
      "mla",           "moe",
      "experimental",  "transformer_engine",
      "heterogeneous", "experimental_attention_variant"};
  if (std::find(std::begin(kSections), std::end(kSections), flag.section) == std::end(kSections)) {
    return false;
  }
  static constexpr std::string_view kInertPrefixes[] = {
      "--init-method-std",
      "--embedding-init-method-std",
      "--rotary-",
      "--rope-",
      "--use-rope-",
      "--yarn-",
      "--no-yarn-",
      "--mscale",
      "--norm-epsilon",
      "--apply-layernorm-1p",
      "--apply-query-key-layer-scaling",
      "--attention-softmax-in-fp32",
      "--train-iters",
      "--train-samples",
      "--exit-",
      "--distributed-timeout-",
      "--distributed-backend",
      "--local-rank",
      "--lazy-mpu-init",
      "--use-cpu-initialization",
      "--init-model-with-meta",
      "--no-initialization",
      "--use-mcore-models",
      "--profile",
      "--pytorch-profiler-",
      "--use-pytorch-profiler",
      "--record-",
      "--memory-snapshot-path",
      "--nvtx-ranges",
      "--flight-recorder-",
      "--disable-flight-recorder-",
      "--no-flight-recorder-",
      "--check-for-large-grads",
      "--no-check-for-nan-in-loss-and-grad",
      "--check-weight-hash-across-dp-replicas-interval",
      "--config-logger-dir",
      "--dump-param-to-param-group-map",
      "--result-rejected-tracker-filename",
      "--iterations-to-skip",
      "--manual-gc",
      "--no-manual-gc-eval",
      "--disable-manual-gc-eval",
      "--gpu-sniff-test-interval",
      "--train-sync-interval",
      "--initial-loss-scale",
      "--loss-scale",
      "--min-loss-scale",
      "--hysteresis",
      "--mup-",
      "--use-mup",
      "--moe-aux-loss-coeff",
      "--moe-z-loss-coeff",
      "--moe-input-jitter-eps",
      "--moe-router-bias-update-rate",
      "--moe-router-enable-expert-bias",
      "--moe-router-score-function",
      "--moe-router-pre-softmax",
      "--moe-router-topk-scaling-factor",
      "--moe-router-load-balancing-type",
      "--moe-per-layer-logging",
      "--moe-router-dtype",
      "--mtp-loss-scaling-factor",
      "--qk-clip",
      "--dataloader-type",
      "--calculate-per-token-loss",
      "--onnx-safe",
      "--bert-no-binary-head",
      "--fake-process-group",
      "--disable-gloo-process-groups",
      "--tp-comm-bootstrap-backend",
      "--nccl-communicator-config-path",
      "--ddp-average-in-collective",
      "--accumulate-allreduce-grads-in-fp32",
      "--seed",
      "--spec",
      "--check-for-spiky-loss",
      "--fp8-amax-",
      "--fp8-margin",
      "--fp8-interval"};
  return std::none_of(std::begin(kInertPrefixes), std::end(kInertPrefixes),
                      [&](std::string_view prefix) { return flag.name.starts_with(prefix); });
}

std::string Suggest(std::string_view flag) {
  std::string best;
  size_t best_distance = 3;
  for (const KnownFlag& f : kMegatronFlags) {
    const size_t d = EditDistance(flag, f.name, best_distance - 1);
    if (d < best_distance) best_distance = d, best = std::string(f.name);
  }
  if (best.empty() && flag.find('_') != std::string_view::npos) {
    std::string dashed(flag);
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    if (Find(kMegatronFlags, dashed) != nullptr) best = dashed;
  }
  return best;
}

// What argparse says of `value` for this flag (its type and choices, core/megatron_flags.inc),
// or "" when it takes it. A value the script computes at run time ($(...), an argument not
// given) is taken.
std::string ValueProblem(const KnownFlag& flag, std::string_view value) {
  if (value.find('$') != std::string_view::npos || value.find('`') != std::string_view::npos) {
    return "";
  }
  std::string_view number = value;
  if (number.starts_with('+')) number.remove_prefix(1);
  if (flag.type == "int") {
    int64_t n = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
    if (ec != std::errc() || ptr != number.data() + number.size() || number.empty()) {
      return fmt::format("invalid int value: '{}'", value);
    }
  } else if (flag.type == "float") {
    double x = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), x);
    const bool special = number == "inf" || number == "nan" || number == "-inf";
    if (!special && (ec != std::errc() || ptr != number.data() + number.size() || number.empty())) {
      return fmt::format("invalid float value: '{}'", value);
    }
  }
  if (flag.choices.empty()) return "";
  std::string listed;
  for (std::string_view rest = flag.choices; !rest.empty();) {
    const size_t bar = rest.find('|');
    const std::string_view choice = rest.substr(0, bar);
    if (choice == value) return "";
    listed += fmt::format("{}'{}'", listed.empty() ? "" : ", ", choice);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  return fmt::format("invalid choice: '{}' (choose from {})", value, listed);
}

// ---- Launchers ---------------------------------------------------------------------------

std::optional<int64_t> PositiveNumber(std::string_view text) {
  int64_t n = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || ptr != text.data() + text.size() || n <= 0) return std::nullopt;
  return n;
}

// The world size the launcher words before the script start: torchrun (or python -m
// torch.distributed.run / .launch) --nproc-per-node x --nnodes; srun --ntasks, or --nodes x
// --ntasks-per-node; mpirun / mpiexec -np. Nothing when they do not say (a value the script
// computes at run time, or a launcher ptdp does not know).
std::optional<int64_t> LauncherWorldSize(std::span<const Token> words) {
  std::map<std::string, int64_t> given;  // flag (dashes, no '=') -> value
  for (size_t i = 0; i < words.size(); ++i) {
    std::string flag = words[i].text, value;
    if (!flag.starts_with("-")) continue;
    const size_t eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < words.size() && !words[i + 1].text.starts_with("-")) {
      const KnownFlag* known = Find(kLauncherFlags, flag);
      if (known == nullptr || known->arity != FlagArity::kSwitch) value = words[++i].text;
    }
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (auto n = PositiveNumber(value)) given[flag] = *n;
  }
  auto get = [&](std::initializer_list<const char*> names) -> std::optional<int64_t> {
    for (const char* name : names) {
      if (auto it = given.find(name); it != given.end()) return it->second;
    }
    return std::nullopt;
  };
  if (auto nproc = get({"--nproc-per-node"})) return *nproc * get({"--nnodes"}).value_or(1);
  if (auto tasks = get({"--ntasks", "-n", "-np", "--np"})) return *tasks;
  if (auto per_node = get({"--ntasks-per-node"}))
    return *per_node * get({"--nodes", "-N"}).value_or(1);
  return std::nullopt;
}

// ---- Reading the values ------------------------------------------------------------------

class Reader {
 public:
  explicit Reader(MegatronCommand& c) : c_(c) {}

  const MegatronCommand::Arg* Last(std::string_view flag) const {
    consulted_.emplace(flag);
    const MegatronCommand::Arg* found = nullptr;
    for (const auto& a : c_.args) {
      if (a.flag == flag && a.valid) found = &a;
    }
    return found;
  }
  bool Has(std::string_view flag) const { return Last(flag) != nullptr; }

  std::optional<int64_t> Int(std::string_view flag) {
    const auto* a = Last(flag);
    if (a == nullptr || a->values.empty()) return std::nullopt;
    const std::string& v = a->values.front();
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (ec != std::errc() || ptr != v.data() + v.size()) {
      return std::nullopt;  // argparse's refusal, or a value known at run time only: said once
    }
    return value;
  }
  std::optional<double> Number(std::string_view flag) {
    const auto* a = Last(flag);
    if (a == nullptr || a->values.empty()) return std::nullopt;
    const std::string& v = a->values.front();
    double value = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (ec != std::errc() || ptr != v.data() + v.size()) {
      return std::nullopt;  // argparse's refusal, or a value known at run time only: said once
    }
    return value;
  }
  std::optional<std::string> String(std::string_view flag) const {
    const auto* a = Last(flag);
    if (a == nullptr || a->values.empty()) return std::nullopt;
    return a->values.front();
  }
  int LineOf(std::string_view flag) const {
    const auto* a = Last(flag);
    return a != nullptr ? a->line : 0;
  }
  void Error(const MegatronCommand::Arg& a, std::string message, std::string fix) {
    c_.findings.push_back({Severity::kError, a.flag, a.line, std::move(message), std::move(fix)});
  }
  void Add(Severity severity, std::string_view flag, std::string message, std::string fix) {
    c_.findings.push_back(
        {severity, std::string(flag), LineOf(flag), std::move(message), std::move(fix)});
  }

  // Whether reading the command looked at `flag`: a flag it never looked at is not simulated.
  bool Consulted(std::string_view flag) const { return consulted_.contains(flag); }

 private:
  MegatronCommand& c_;
  mutable std::set<std::string, std::less<>> consulted_;
};

int ToInt(int64_t v) {
  return static_cast<int>(std::clamp<int64_t>(v, -1'000'000'000, 1'000'000'000));
}

// Megatron's --moe-layer-freq list form (moe_freq_type evaluates a Python expression such as
// "([0]*3+[1]*58)" or "[1,0,1,0]"): the terms "[a,b,...]" and "[a]*n" joined by '+'. Empty on
// anything else.
std::vector<int> LayerPattern(std::string_view text) {
  std::string t;
  for (char c : text) {
    if (c != ' ' && c != '(' && c != ')') t += c;
  }
  std::vector<int> out;
  size_t at = 0;
  while (at < t.size()) {
    if (t[at] != '[') return {};
    const size_t close = t.find(']', at);
    if (close == std::string::npos) return {};
    std::vector<int> items;
    for (size_t i = at + 1; i < close;) {
      const size_t comma = std::min(t.find(',', i), close);
      int v = 0;
      const auto [p, ec] = std::from_chars(t.data() + i, t.data() + comma, v);
      if (ec != std::errc() || p != t.data() + comma || (v != 0 && v != 1)) return {};
      items.push_back(v);
      i = comma + 1;
    }
    at = close + 1;
    int times = 1;
    if (at < t.size() && t[at] == '*') {
      const size_t end = std::min(t.find('+', at), t.size());
      const auto [p, ec] = std::from_chars(t.data() + at + 1, t.data() + end, times);
      if (ec != std::errc() || p != t.data() + end || times < 0) return {};
      at = end;
    }
    for (int k = 0; k < times; ++k) out.insert(out.end(), items.begin(), items.end());
    if (at < t.size()) {
      if (t[at] != '+') return {};
      ++at;
    }
  }
  return out;
}

// The MoE and multi-latent attention flags (arguments.py's moe and mla groups; the rest of the
// MoE options in megatron/training/config).
void ReadMoeFlags(Reader& r, ModelSpec& m) {
  if (r.Has("--qk-layernorm")) m.qk_layernorm = true;
  if (r.Has("--multi-latent-attention")) {
    if (r.Has("--group-query-attention")) {
      r.Add(Severity::kError, "--group-query-attention",
            "Group query attention is mutually exclusive with multi latent attention.",
            "drop --group-query-attention");
    }
    m.multi_latent_attention = true;
    m.q_lora_rank = ToInt(r.Int("--q-lora-rank").value_or(0));
    m.kv_lora_rank = ToInt(r.Int("--kv-lora-rank").value_or(32));
    m.qk_head_dim = ToInt(r.Int("--qk-head-dim").value_or(128));
    m.qk_pos_emb_head_dim = ToInt(r.Int("--qk-pos-emb-head-dim").value_or(64));
    m.v_head_dim = ToInt(r.Int("--v-head-dim").value_or(128));
  } else {
    for (const char* flag : {"--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
                             "--qk-pos-emb-head-dim", "--v-head-dim"}) {
      if (r.Has(flag)) {
        r.Add(Severity::kWarning, flag, "has no effect without --multi-latent-attention",
              "add --multi-latent-attention");
      }
    }
  }
  const auto experts = r.Int("--num-experts");
  if (!experts || *experts == 0) {
    if (r.Has("--moe-ffn-hidden-size")) {
      r.Add(Severity::kError, "--moe-ffn-hidden-size",
            "moe_ffn_hidden_size is set but num_moe_experts is None. Please set num_moe_experts "
            "or remove moe_ffn_hidden_size.",
            "add --num-experts, or drop --moe-ffn-hidden-size");
    }
    for (const char* flag : {"--moe-router-topk", "--moe-shared-expert-intermediate-size",
                             "--moe-layer-freq", "--moe-expert-capacity-factor"}) {
      if (r.Has(flag)) {
        r.Add(Severity::kWarning, flag, "has no effect without --num-experts", "");
      }
    }
    return;
  }
  if (*experts < 0) {
    r.Add(Severity::kError, "--num-experts", "num_moe_experts must be non-negative.", "");
    return;
  }
  m.num_experts = ToInt(*experts);
  m.moe_router_topk = ToInt(r.Int("--moe-router-topk").value_or(2));
  if (m.moe_router_topk < 1 || m.moe_router_topk > m.num_experts) {
    r.Add(Severity::kError, "--moe-router-topk",
          fmt::format("moe_router_topk ({}) must be between 1 and num_experts ({})",
                      m.moe_router_topk, m.num_experts),
          "");
    m.moe_router_topk = std::clamp(m.moe_router_topk, 1, m.num_experts);
  }
  if (auto f = r.Int("--moe-ffn-hidden-size")) {
    m.moe_ffn_hidden_size = ToInt(*f);
  } else {
    m.moe_ffn_hidden_size = m.ffn_hidden_size;
    r.Add(Severity::kWarning, "--num-experts",
          "moe_ffn_hidden_size is not set, using ffn_hidden_size for MoE instead.",
          "add --moe-ffn-hidden-size");
  }
  m.moe_shared_expert_intermediate_size =
      ToInt(r.Int("--moe-shared-expert-intermediate-size").value_or(0));
  if (auto freq = r.String("--moe-layer-freq")) {
    int n = 0;
    const auto [p, ec] = std::from_chars(freq->data(), freq->data() + freq->size(), n);
    if (ec == std::errc() && p == freq->data() + freq->size()) {
      if (n < 1) {
        r.Add(Severity::kError, "--moe-layer-freq", "the MoE layer frequency must be positive", "");
      } else {
        m.moe_layer_freq = n;
      }
    } else {
      const std::vector<int> pattern = LayerPattern(*freq);
      const int first =
          static_cast<int>(std::find(pattern.begin(), pattern.end(), 1) - pattern.begin());
      bool found = false;
      for (int f = 1; f <= static_cast<int>(pattern.size()) && !found; ++f) {
        bool match = first < static_cast<int>(pattern.size());
        for (int i = 0; i < static_cast<int>(pattern.size()) && match; ++i) {
          match = pattern[i] == (i >= first && i % f == 0 ? 1 : 0);
        }
        if (match) m.moe_first_dense_layers = first, m.moe_layer_freq = f, found = true;
      }
      if (pattern.empty()) {
        r.Add(Severity::kError, "--moe-layer-freq",
              fmt::format("cannot read \"{}\": expected an integer or a list such as "
                          "([0]*3+[1]*58)",
                          *freq),
              "");
      } else if (m.num_layers > 0 && static_cast<int>(pattern.size()) != m.num_layers) {
        r.Add(Severity::kError, "--moe-layer-freq",
              fmt::format("Invalid length of moe_layer_pattern: {}, expected {}, current moe layer "
                          "pattern: {}",
                          pattern.size(), m.num_layers, *freq),
              "");
      } else if (!found) {
        r.Add(Severity::kWarning, "--moe-layer-freq",
              "ptdp models MoE layer patterns of some dense layers first, then every n-th layer: "
              "simulated with every layer an MoE layer",
              "");
      }
    }
  }
  if (auto type = r.String("--moe-router-load-balancing-type")) {
    if (auto b = ValueOf<MoeLoadBalancing>(kMoeLoadBalancingNames, *type)) {
      m.moe_router_load_balancing_type = *b;
    } else {
      r.Add(Severity::kWarning, "--moe-router-load-balancing-type",
            fmt::format("ptdp does not model the {} router loss: simulated as aux_loss", *type),
            "");
    }
  }
  if (auto cf = r.Number("--moe-expert-capacity-factor")) {
    m.moe_expert_capacity_factor = std::max(0.0, *cf);
  }
}

// The hybrid (Mamba) model's flags (arguments.py; read by pretrain_mamba.py's MambaModel): the
// layer pattern, given or built from the ratios, and the Mamba mixer's sizes.
// Returns the layers of each pipeline segment when the pattern has '|' separators (Megatron's
// explicit stages: virtual stages = segments / pp), else nothing.
std::vector<int> ReadHybridFlags(Reader& r, ModelSpec& m, std::string_view script) {
  // --hybrid-layer-pattern, or its deprecated alias --hybrid-override-pattern (arguments.py).
  auto pattern = r.String("--hybrid-layer-pattern");
  if (auto old = r.String("--hybrid-override-pattern")) {
    if (pattern) {
      r.Add(Severity::kError, "--hybrid-override-pattern",
            "--hybrid-override-pattern and --hybrid-layer-pattern cannot both be specified. "
            "--hybrid-override-pattern is deprecated; use --hybrid-layer-pattern instead.",
            "keep --hybrid-layer-pattern");
    }
    pattern = old;
  }
  // The main pattern's layers give --num-layers; '/' parts after it are the multi-token
  // prediction depths, which ptdp does not simulate in a hybrid model.
  if (pattern && pattern->find('/') != std::string::npos) {
    r.Add(Severity::kWarning, "--hybrid-layer-pattern",
          "multi-token prediction in a hybrid model is not simulated: simulated without the MTP "
          "layers after '/'",
          "");
    pattern = pattern->substr(0, pattern->find('/'));
  }
  if (pattern) {
    m.num_layers = static_cast<int>(
        std::count_if(pattern->begin(), pattern->end(), [](char ch) { return ch != '|'; }));
  }
  const double attention_ratio = r.Number("--hybrid-attention-ratio").value_or(0);
  const double mlp_ratio = r.Number("--hybrid-mlp-ratio").value_or(0);
  const bool mamba_script = script.find("mamba") != std::string_view::npos ||
                            script.find("hybrid") != std::string_view::npos;
  constexpr const char* kMambaFlags[] = {"--mamba-num-heads", "--mamba-head-dim",
                                         "--mamba-state-dim", "--mamba-num-groups"};
  if (!mamba_script) {
    for (const char* flag :
         {"--hybrid-override-pattern", "--hybrid-attention-ratio", "--hybrid-mlp-ratio",
          kMambaFlags[0], kMambaFlags[1], kMambaFlags[2], kMambaFlags[3]}) {
      if (r.Has(flag)) {
        r.Add(
            Severity::kWarning, flag,
            fmt::format("{} builds a GPT model, which ignores the hybrid (Mamba) options", script),
            "run pretrain_mamba.py for a hybrid model");
      }
    }
    return {};
  }
  if (attention_ratio < 0 || attention_ratio > 1 || mlp_ratio < 0 || mlp_ratio > 1 ||
      attention_ratio + mlp_ratio > 1) {
    r.Add(Severity::kError, "--hybrid-attention-ratio",
          "assert target_attention_ratio + target_mlp_ratio <= 1.0 (each in [0, 1])", "");
    return {};
  }
  if (m.num_layers <= 0) return {};  // reported above
  std::vector<int> segments;
  const std::string auto_pattern =
      HybridPatternFromRatios(m.num_layers, attention_ratio, mlp_ratio);
  if (pattern) {
    m.hybrid_layer_pattern.clear();
    segments.push_back(0);
    for (char symbol : *pattern) {
      if (symbol == '|') {
        segments.push_back(0);
      } else {
        m.hybrid_layer_pattern += symbol;
        ++segments.back();
      }
    }
    if (segments.size() == 1) segments.clear();
    if ((attention_ratio > 0 || mlp_ratio > 0) &&
        static_cast<int>(m.hybrid_layer_pattern.size()) == m.num_layers) {
      const std::string& given = m.hybrid_layer_pattern;
      for (char symbol : {'M', '*', '-'}) {
        if (std::count(given.begin(), given.end(), symbol) !=
            std::count(auto_pattern.begin(), auto_pattern.end(), symbol)) {
          r.Add(Severity::kError, "--hybrid-override-pattern",
                "The number of each type of layer in the override pattern must match the number "
                "in the overridden pattern.",
                "drop --hybrid-attention-ratio and --hybrid-mlp-ratio, or match their counts");
          break;
        }
      }
    }
  } else {
    m.hybrid_layer_pattern = auto_pattern;  // all Mamba without ratios
  }
  m.mamba_head_dim = ToInt(r.Int("--mamba-head-dim").value_or(64));
  m.mamba_state_dim = ToInt(r.Int("--mamba-state-dim").value_or(128));
  m.mamba_num_groups = ToInt(r.Int("--mamba-num-groups").value_or(8));
  if (auto heads = r.Int("--mamba-num-heads")) {
    m.mamba_num_heads = ToInt(*heads);
  } else if (m.hybrid_layer_pattern.find('M') != std::string::npos && m.mamba_head_dim > 0) {
    if (2 * m.hidden_size % m.mamba_head_dim != 0) {
      r.Add(Severity::kError, "--mamba-head-dim", "d_inner must be evenly divisible by headdim",
            "give --mamba-num-heads");
    }
    m.mamba_num_heads = 2 * m.hidden_size / m.mamba_head_dim;
  }
  if (m.mtp_num_layers > 0) {
    r.Add(Severity::kWarning, "--mtp-num-layers",
          "multi-token prediction in a hybrid model is not simulated: simulated without it", "");
    m.mtp_num_layers = 0;
  }
  const std::string problem = HybridModelProblem(m);
  if (!problem.empty()) {
    const bool mixer = problem.starts_with("nheads") || problem.starts_with("mamba_");
    r.Add(Severity::kError, mixer ? "--mamba-num-heads" : "--hybrid-override-pattern", problem, "");
  }
  return segments;
}

// Torch FSDP2's requirements (arguments.py validate_args, the `if args.use_torch_fsdp2:` block)
// and --deterministic-mode's (megatron/training/determinism.py), in Megatron's words.
void CheckFsdp2AndDeterminism(Reader& r, const MegatronCommand& c) {
  if (r.Has("--use-torch-fsdp2")) {
    const ParallelConfig& p = c.parallel;
    const std::string format = r.String("--ckpt-format").value_or("torch_dist");
    const std::pair<bool, const char*> rules[] = {
        {p.pp == 1, "--use-torch-fsdp2 is not supported with pipeline parallelism"},
        {p.ep == 1, "--use-torch-fsdp2 is not supported with expert parallelism"},
        {!r.Has("--use-distributed-optimizer"),
         "--use-torch-fsdp2 is not supported with MCore's distributed optimizer"},
        {r.Has("--no-gradient-accumulation-fusion"),
         "--use-torch-fsdp2 is not supported with gradient accumulation fusion (add "
         "--no-gradient-accumulation-fusion)"},
        {format == "torch_dist" || format == "torch_dcp",
         "--use-torch-fsdp2 requires --ckpt-format torch_dist or torch_dcp"},
        {r.Has("--untie-embeddings-and-output-weights"),
         "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"},
        {!r.Has("--fp16"), "--use-torch-fsdp2 not supported with fp16 yet"},
    };
    for (const auto& [holds, message] : rules) {
      if (!holds) r.Add(Severity::kError, "--use-torch-fsdp2", message, "");
    }
  }
  if (r.Has("--deterministic-mode")) {
    std::vector<std::string> mismatched;
    if (r.Has("--cross-entropy-loss-fusion"))
      mismatched.push_back("cross_entropy_loss_fusion=False (got True)");
    if (r.Has("--tp-comm-overlap")) mismatched.push_back("tp_comm_overlap=False (got True)");
    if (!mismatched.empty()) {
      std::string joined;
      for (const std::string& m : mismatched) joined += (joined.empty() ? "" : ", ") + m;
      r.Add(Severity::kError, "--deterministic-mode",
            fmt::format("--deterministic-mode requires: {}. Adjust these options to continue.",
                        joined),
            "");
    }
  }
}

// CUDA_DEVICE_MAX_CONNECTIONS at launch, as validate_args asserts it on GPUs before Blackwell:
// FSDP (Megatron's or Torch's) needs it unset or above 1; otherwise tensor or context
// parallelism needs it at 1 (unless --overlap-moe-expert-parallel-comm, which only warns).
// When the script does not set it, the user's shell may: `check` then says what Megatron needs.
void CheckDeviceConnections(Reader& r, MegatronCommand& c, bool environment_complete) {
  const auto it = c.environment.find("CUDA_DEVICE_MAX_CONNECTIONS");
  const std::optional<std::string> value =
      it != c.environment.end() ? std::optional(it->second) : std::nullopt;
  const bool known = value || environment_complete;
  const ParallelConfig& p = c.parallel;
  if (r.Has("--use-torch-fsdp2") || r.Has("--use-megatron-fsdp")) {
    if (value == "1") {
      r.Add(Severity::kError,
            r.Has("--use-megatron-fsdp") ? "--use-megatron-fsdp" : "--use-torch-fsdp2",
            "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.",
            "do not export CUDA_DEVICE_MAX_CONNECTIONS=1 for this run");
    }
    return;
  }
  if ((p.tp <= 1 && p.cp <= 1) || r.Has("--overlap-moe-expert-parallel-comm") || value == "1") {
    return;
  }
  const char* flag = p.tp > 1 ? "--tensor-model-parallel-size" : "--context-parallel-size";
  if (known) {
    r.Add(Severity::kError, flag,
          fmt::format("Using tensor model parallelism or context parallelism require setting the "
                      "environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1 (it is {} at launch)",
                      value ? "'" + *value + "'" : "unset"),
          "export CUDA_DEVICE_MAX_CONNECTIONS=1 before launching");
  } else {
    r.Add(Severity::kWarning, flag,
          "with tensor or context parallelism Megatron-LM asserts the environment variable "
          "CUDA_DEVICE_MAX_CONNECTIONS=1 on GPUs before Blackwell; the command does not set it",
          "export CUDA_DEVICE_MAX_CONNECTIONS=1 before launching");
  }
}

// One warning per flag that can change the step but that reading the command never looked at:
// the simulation runs as if it were absent.
void WarnAboutWhatIsNotSimulated(Reader& r, MegatronCommand& c) {
  std::set<std::string, std::less<>> warned;
  for (const MegatronCommand::Arg& a : c.args) {
    const KnownFlag* known = Find(kMegatronFlags, a.flag);
    if (known == nullptr || !warned.insert(a.flag).second) continue;
    if (r.Consulted(a.flag)) {
      c.simulated_flags.push_back(a.flag);
      continue;
    }
    if (!CanChangeTheStep(*known)) continue;
    c.findings.push_back({Severity::kWarning, a.flag, a.line,
                          fmt::format("not simulated: ptdp simulates as if {} were absent", a.flag),
                          ""});
  }
}

// The command that runs a Python script (the last one when there are several): its script, the
// launcher words before it (the world size), its environment and its words after the script.
const Launch& TrainingCommand(const Lexed& lexed, const std::string& source, MegatronCommand& c) {
  if (lexed.launches.empty()) {
    // What the interpreter could not follow is the likely reason: say it.
    std::string reasons;
    for (const MegatronFinding& f : c.findings) {
      if (reasons.size() < 400) reasons += fmt::format("; {}", f.message);
    }
    throw InputError({source, 0, ""},
                     "no Megatron-LM command found: no word ends in .py" +
                         (reasons.empty() ? "" : " (playing the script:" + reasons.substr(1) + ")"),
                     "paste the command that runs pretrain_gpt.py (python or torchrun)");
  }
  const Launch& launch = lexed.launches.back();
  const std::vector<Token>& words = launch.words;
  c.script = words[launch.script_at].text;
  c.environment = launch.environment;
  std::vector<Token> launcher = launch.outer;
  launcher.insert(launcher.end(), words.begin(),
                  words.begin() + static_cast<long>(launch.script_at));
  c.world_size = LauncherWorldSize(launcher);
  for (size_t i = launch.script_at + 1; i < words.size(); ++i) c.argv.push_back(words[i].text);
  return launch;
}

// Megatron's own flags after the script, as argparse reads them: arity and value types from the
// option table, unknown flags with a suggestion, stray words, repeated flags.
void ReadArgs(const std::vector<Token>& words, size_t script_at, MegatronCommand& c) {
  for (size_t i = script_at + 1; i < words.size(); ++i) {
    const Token& w = words[i];
    if (!w.text.starts_with("-")) {
      // Stray words, said once per run as argparse says them. After a one-value flag they
      // are usually its value split by the shell (an unquoted array or variable).
      std::string stray = w.text;
      while (i + 1 < words.size() && !words[i + 1].text.starts_with("-")) {
        stray += " " + words[++i].text;
      }
      std::string fix = "every value follows the flag it belongs to";
      if (!c.args.empty()) {
        const KnownFlag* before = Find(kMegatronFlags, c.args.back().flag);
        if (before != nullptr && before->arity == FlagArity::kOne) {
          fix = fmt::format(
              "{} takes one value: if these words belong to it, the shell split them apart; "
              "quote the value, and expand arrays quoted (\"${{ARGS[@]}}\")",
              c.args.back().flag);
        }
      }
      c.findings.push_back(
          {Severity::kError, "", w.line, fmt::format("unrecognized arguments: {}", stray), fix});
      continue;
    }
    MegatronCommand::Arg arg{w.text, {}, w.line};
    const size_t eq = arg.flag.find('=');
    if (eq != std::string::npos) {
      arg.values.push_back(arg.flag.substr(eq + 1));
      arg.flag = arg.flag.substr(0, eq);
    }
    const KnownFlag* known = Find(kMegatronFlags, arg.flag);
    const FlagArity arity = known != nullptr ? known->arity : FlagArity::kOptional;
    auto next_is_value = [&]() {
      return i + 1 < words.size() && !words[i + 1].text.starts_with("--");
    };
    if (eq == std::string::npos) {
      if (arity == FlagArity::kOne) {
        if (next_is_value()) {
          arg.values.push_back(words[++i].text);
        } else {
          c.findings.push_back({Severity::kError, arg.flag, w.line,
                                fmt::format("argument {}: expected one argument", arg.flag), ""});
        }
      } else if (arity == FlagArity::kOptional) {
        if (next_is_value()) arg.values.push_back(words[++i].text);
      } else if (arity == FlagArity::kMany) {
        while (next_is_value()) arg.values.push_back(words[++i].text);
      }
    } else if (arity == FlagArity::kSwitch) {
      c.findings.push_back(
          {Severity::kError, arg.flag, w.line,
           fmt::format("argument {}: ignored explicit argument '{}'", arg.flag, arg.values.front()),
           fmt::format("write {} alone", arg.flag)});
    }
    if (known == nullptr) {
      std::string message = fmt::format("unrecognized arguments: {}", arg.flag);
      std::string fix;
      for (const Mistake& m : kMistakes) {
        if (m.flag == arg.flag) message = std::string(m.message), fix = std::string(m.fix);
      }
      if (fix.empty()) {
        const std::string suggestion = Suggest(arg.flag);
        if (!suggestion.empty()) fix = fmt::format("did you mean {}?", suggestion);
      }
      c.findings.push_back({Severity::kError, arg.flag, w.line, message, fix});
    } else {
      for (const std::string& v : arg.values) {
        const bool value_matters = known->type == "int" || known->type == "float" ||
                                   known->type == "enum" || !known->choices.empty();
        if (value_matters &&
            (v.find('$') != std::string::npos || v.find('`') != std::string::npos)) {
          c.findings.push_back(
              {Severity::kWarning, arg.flag, w.line,
               fmt::format("the value '{}' is known only when the script runs: not checked", v),
               "give the value in the script (or the script's arguments: --script-args)"});
          break;
        }
        if (std::string problem = ValueProblem(*known, v); !problem.empty()) {
          c.findings.push_back({Severity::kError, arg.flag, w.line,
                                fmt::format("argument {}: {}", arg.flag, problem), ""});
          arg.valid = false;
          break;
        }
      }
      for (const Mistake& m : kDeprecated) {
        if (m.flag == arg.flag) {
          c.findings.push_back(
              {Severity::kError, arg.flag, w.line, std::string(m.message), std::string(m.fix)});
        }
      }
      for (const auto& earlier : c.args) {
        if (earlier.flag == arg.flag) {
          c.findings.push_back({Severity::kWarning, arg.flag, w.line,
                                fmt::format("given twice (first on line {}); argparse keeps the "
                                            "last value",
                                            earlier.line),
                                "keep one"});
          break;
        }
      }
    }
    c.args.push_back(std::move(arg));
  }
}

// The model the flags describe, with Megatron's defaults and required arguments. Returns the
// layers of each pipeline segment a hybrid pattern's '|' gives (ReadHybridFlags).
std::vector<int> ReadModel(Reader& r, MegatronCommand& c) {
  ModelSpec& m = c.model;
  const auto layers = r.Int("--num-layers"), hidden = r.Int("--hidden-size"),
             heads = r.Int("--num-attention-heads"), seq = r.Int("--seq-length"),
             max_pos = r.Int("--max-position-embeddings");
  for (auto [flag, value] : {std::pair{"--num-layers", layers},
                             {"--hidden-size", hidden},
                             {"--num-attention-heads", heads},
                             {"--max-position-embeddings", max_pos}}) {
    const bool from_pattern =
        flag == std::string_view("--num-layers") &&
        (r.Has("--hybrid-layer-pattern") || r.Has("--hybrid-override-pattern"));
    if (!value && !r.Has(flag) && !from_pattern) {
      r.Add(
          Severity::kError, flag,
          fmt::format("{} argument is None: Megatron-LM requires it", std::string(flag).substr(2)),
          flag == std::string_view("--max-position-embeddings")
              ? "add --max-position-embeddings (at least --seq-length)"
              : fmt::format("add {}", flag));
    }
  }
  if (!seq && !r.Has("--seq-length")) {
    r.Add(Severity::kError, "--seq-length", "seq-length argument is None", "add --seq-length");
  }
  m.name = "megatron-command";
  m.num_layers = ToInt(layers.value_or(0));
  m.hidden_size = ToInt(hidden.value_or(0));
  m.num_attention_heads = ToInt(heads.value_or(0));
  m.seq_length = ToInt(seq.value_or(0));
  // ptdp's model needs a size even where Megatron stops; the error above says so.
  m.max_position_embeddings = ToInt(max_pos.value_or(seq.value_or(0)));
  m.activation = r.Has("--swiglu")         ? Activation::kSwiglu
                 : r.Has("--squared-relu") ? Activation::kSquaredRelu
                                           : Activation::kGelu;
  if (r.Has("--swiglu") && r.Has("--squared-relu")) {
    r.Add(Severity::kError, "--squared-relu", "assert not (args.swiglu and args.squared_relu)",
          "keep one activation");
  }
  m.ffn_hidden_size = ToInt(
      r.Int("--ffn-hidden-size")
          .value_or(m.hidden_size > 0 ? DefaultFfnHiddenSize(m.hidden_size, m.activation) : 0));
  m.num_query_groups = m.num_attention_heads;
  if (auto groups = r.Int("--num-query-groups")) {
    if (r.Has("--group-query-attention")) {
      m.num_query_groups = ToInt(*groups);
    } else {
      r.Add(Severity::kWarning, "--num-query-groups",
            "--num-query-groups has no effect without --group-query-attention",
            "add --group-query-attention");
    }
  }
  if (auto kv = r.Int("--kv-channels")) {
    m.kv_channels = ToInt(*kv);
  } else if (m.num_attention_heads > 0 && m.hidden_size % m.num_attention_heads != 0) {
    r.Add(Severity::kError, "--hidden-size",
          fmt::format("hidden_size ({}) must be a multiple of num_attention_heads ({})",
                      m.hidden_size, m.num_attention_heads),
          "give --kv-channels");
  } else if (m.num_attention_heads > 0) {
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  if (m.num_query_groups > 0 && m.num_attention_heads % m.num_query_groups != 0) {
    r.Add(Severity::kError, "--num-query-groups",
          fmt::format("num_attention_heads ({}) must be a multiple of num_query_groups ({})",
                      m.num_attention_heads, m.num_query_groups),
          "");
  }
  if (max_pos && seq && *max_pos < *seq) {
    r.Add(Severity::kError, "--max-position-embeddings",
          fmt::format("max_position_embeddings ({}) must be greater than or equal to seq_length "
                      "({}).",
                      *max_pos, *seq),
          "");
  }
  if (auto norm = r.String("--normalization")) {
    if (*norm == "RMSNorm")
      m.normalization = Normalization::kRmsNorm;
    else if (*norm != "LayerNorm") {
      r.Add(Severity::kError, "--normalization",
            fmt::format("ptdp models LayerNorm and RMSNorm, not {}", *norm), "");
    }
  }
  const auto pos_type = r.String("--position-embedding-type");
  if (r.Has("--use-rotary-position-embeddings") || (pos_type && *pos_type == "rope")) {
    m.position_embedding = PositionEmbedding::kRope;
  } else if (pos_type && *pos_type == "none") {
    m.position_embedding = PositionEmbedding::kNone;
  } else if (pos_type && (*pos_type == "yarn" || *pos_type == "mrope")) {
    m.position_embedding = PositionEmbedding::kRope;  // rotary variants: the same costs
  } else if (pos_type && *pos_type != "learned_absolute") {
    m.position_embedding = PositionEmbedding::kNone;
    r.Add(Severity::kWarning, "--position-embedding-type",
          fmt::format("ptdp models learned_absolute, rope and none positions: {} is simulated "
                      "as none",
                      *pos_type),
          "");
  }
  m.tied_embeddings = !r.Has("--untie-embeddings-and-output-weights");
  for (auto [flag, field] : {std::pair{"--hidden-dropout", &m.hidden_dropout},
                             {"--attention-dropout", &m.attention_dropout}}) {
    if (auto v = r.Number(flag)) {
      if (*v < 0 || *v >= 1) {
        r.Add(Severity::kError, flag, fmt::format("{} must be in [0, 1), got {}", flag, *v), "");
      } else {
        *field = *v;
      }
    }
  }
  m.add_bias_linear = !r.Has("--disable-bias-linear");
  m.make_vocab_size_divisible_by = ToInt(r.Int("--make-vocab-size-divisible-by").value_or(128));
  if (auto vocab = r.Int("--vocab-size")) {
    m.vocab_size = ToInt(*vocab);
  } else {
    m.vocab_size = 50257;
    r.Add(Severity::kWarning, "",
          "the vocabulary size comes from the tokenizer, which ptdp cannot read: assuming GPT-2's "
          "50257 tokens",
          "pass --vocab-size to Megatron (or to this check) for exact figures");
  }
  ReadMoeFlags(r, m);
  m.mtp_num_layers = ToInt(std::max<int64_t>(0, r.Int("--mtp-num-layers").value_or(0)));
  const std::vector<int> hybrid_segments = ReadHybridFlags(r, m, c.script);
  // Sizes ptdp can work with (core/limits.h): a given size out of range is an error, and no
  // figures are computed from it.
  bool sizes_in_range = true;
  for (auto [flag, value, max] :
       {std::tuple{"--num-layers", m.num_layers, kMaxLayers},
        {"--hidden-size", m.hidden_size, kMaxModelDimension},
        {"--num-attention-heads", m.num_attention_heads, kMaxModelDimension},
        {"--seq-length", m.seq_length, kMaxModelDimension},
        {"--max-position-embeddings", m.max_position_embeddings, kMaxModelDimension},
        {"--ffn-hidden-size", m.ffn_hidden_size, kMaxModelDimension},
        {"--kv-channels", m.kv_channels, kMaxModelDimension},
        {"--num-query-groups", m.num_query_groups, kMaxModelDimension},
        {"--vocab-size", m.vocab_size, kMaxModelDimension},
        {"--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by, kMaxModelDimension}}) {
    if (!r.Has(flag) || (value > 0 && value <= max)) continue;
    sizes_in_range = false;
    r.Add(Severity::kError, flag,
          value <= 0
              ? fmt::format("{} must be positive, got {}", flag, value)
              : fmt::format("{} is beyond what ptdp models (at most {}), got {}", flag, max, value),
          "");
  }
  c.model_complete = sizes_in_range && m.vocab_size > 0 && m.make_vocab_size_divisible_by > 0 &&
                     m.num_layers > 0 && m.hidden_size > 0 && m.num_attention_heads > 0 &&
                     m.seq_length > 0 && m.kv_channels > 0 && m.ffn_hidden_size > 0 &&
                     m.num_query_groups > 0 && m.num_attention_heads % m.num_query_groups == 0 &&
                     m.max_position_embeddings >= m.seq_length && HybridModelProblem(m).empty();

  return hybrid_segments;
}

// The layout: parallel sizes, context-parallel exchange, the layer split and virtual stages.
// --cp-comm-type: one type for every layer, or one per layer (ptdp models one for all).
void ReadContextParallelExchange(Reader& r, MegatronCommand& c) {
  const ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  if (const auto* a = r.Last("--cp-comm-type"); a != nullptr && !a->values.empty()) {
    const std::string& first = a->values.front();
    const bool hierarchical = r.Has("--hierarchical-context-parallel-sizes");
    for (const std::string& type : a->values) {
      if (type != "p2p" && type != "a2a" && type != "allgather" && type != "all_gather" &&
          type != "a2a+p2p") {
        r.Add(Severity::kError, "--cp-comm-type",
              fmt::format("cp_comm_type '{}' is not one of p2p, a2a, allgather, a2a+p2p", type),
              "");
      } else if (type == "a2a+p2p" && !hierarchical) {
        r.Add(Severity::kError, "--cp-comm-type",
              "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm",
              "add --hierarchical-context-parallel-sizes A B with A x B the context-parallel "
              "size, or use p2p");
      }
    }
    if (a->values.size() > 1 && a->values.size() != static_cast<size_t>(m.num_layers) &&
        m.num_layers > 0) {
      r.Add(Severity::kError, "--cp-comm-type",
            fmt::format("Length of cp_comm_type ({}) should equal to the total number of "
                        "transformer layers ({})",
                        a->values.size(), m.num_layers),
            "give one type for all layers");
    } else if (std::any_of(a->values.begin(), a->values.end(),
                           [&](const std::string& t) { return t != first; })) {
      r.Add(Severity::kWarning, "--cp-comm-type",
            fmt::format("ptdp models one context-parallel exchange for all layers: simulated "
                        "with the first layer's ({})",
                        first),
            "");
    }
    if (first == "a2a") {
      p.cp_comm = CpComm::kA2a;
    } else if (first == "allgather" || first == "all_gather") {
      p.cp_comm = CpComm::kAllGather;
    } else if (first == "a2a+p2p" && hierarchical) {
      r.Add(Severity::kWarning, "--cp-comm-type",
            "ptdp does not model the hierarchical a2a+p2p exchange yet: simulated as p2p over "
            "the whole context-parallel group",
            "");
    }
  }
}

// The layer split and the virtual stages: uneven first / last stages, the embedding and the loss
// counted as layers, a pipeline layout string or a hybrid pattern's segments.
void ReadLayerSplit(Reader& r, MegatronCommand& c, const std::vector<int>& hybrid_segments) {
  ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  const auto per_vstage = r.Int("--num-layers-per-virtual-pipeline-stage");
  const auto vstages = r.Int("--num-virtual-stages-per-pipeline-rank");
  if (per_vstage && vstages) {
    r.Add(Severity::kError, "--num-virtual-stages-per-pipeline-rank",
          "No more than one of the following arguments can be set at the same time: "
          "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank",
          "keep one");
  }
  // The layer split: uneven first / last stages, or the embedding and the loss counted as
  // layers (the rules check the divisions; core/megatron_rules.h).
  for (auto [flag, field] :
       {std::pair{"--decoder-first-pipeline-num-layers", &p.first_stage_layers},
        {"--decoder-last-pipeline-num-layers", &p.last_stage_layers}}) {
    if (auto n = r.Int(flag)) {
      if (*n <= 0) {
        r.Add(Severity::kError, flag,
              fmt::format("num_layers_in_{}_pipeline_stage must be larger than 0",
                          std::string_view(flag).find("first") != std::string_view::npos ? "first"
                                                                                         : "last"),
              "give a positive number of layers, or drop the flag");
      } else {
        *field = ToInt(*n);
      }
    }
  }
  p.account_for_embedding = r.Has("--account-for-embedding-in-pipeline-split");
  p.account_for_loss = r.Has("--account-for-loss-in-pipeline-split");
  p.virtual_stages = 1;
  if (auto text = r.String("--pipeline-model-parallel-layout")) {
    // The layout names the stages: virtual stages = its stages / pp (arguments.py).
    const PipelineLayout layout = ParsePipelineLayout(*text);
    if (!layout.error.empty()) {
      r.Add(Severity::kError, "--pipeline-model-parallel-layout", layout.error, "");
    } else if (layout.layers.size() % static_cast<size_t>(p.pp) != 0) {
      r.Add(Severity::kError, "--pipeline-model-parallel-layout",
            fmt::format("pipeline_model_parallel_layout must be divisible by "
                        "pipeline_model_parallel_size (len(layout)={}, "
                        "pipeline_model_parallel_size={})",
                        layout.layers.size(), p.pp),
            "");
    } else {
      p.layout = layout.layers;
      p.virtual_stages = static_cast<int>(layout.layers.size()) / p.pp;
      if (layout.mtp != m.mtp_num_layers) {
        r.Add(Severity::kError, "--pipeline-model-parallel-layout",
              fmt::format("Number of mtp layers in layout ({}) must match mtp_num_layers ({})",
                          layout.mtp, m.mtp_num_layers),
              "");
      }
    }
    if (per_vstage || vstages) {
      r.Add(Severity::kError, "--pipeline-model-parallel-layout",
            "the layout gives the virtual stages: drop --num-layers-per-virtual-pipeline-stage and "
            "--num-virtual-stages-per-pipeline-rank",
            "");
    }
  } else if (!hybrid_segments.empty()) {
    // The pattern's '|' separators give the stages (arguments.py: virtual stages = segments /
    // pp).
    if (hybrid_segments.size() % static_cast<size_t>(p.pp) != 0) {
      r.Add(Severity::kError, "--hybrid-override-pattern",
            fmt::format("The number of hybrid pipeline segments described by "
                        "--hybrid-layer-pattern must be evenly divisible by "
                        "--pipeline-model-parallel-size. Got {} segments and {}",
                        hybrid_segments.size(), p.pp),
            "");
    } else {
      p.layout = hybrid_segments;
      p.virtual_stages = static_cast<int>(hybrid_segments.size()) / p.pp;
    }
    if (per_vstage || vstages || p.first_stage_layers > 0 || p.last_stage_layers > 0) {
      r.Add(Severity::kError, "--hybrid-override-pattern",
            "If --hybrid-layer-pattern contains pipe separators, the pipeline layout is "
            "explicitly defined: drop the other pipeline split options",
            "");
    }
  } else if (vstages && *vstages > 0) {
    p.virtual_stages = ToInt(*vstages);
  } else if (per_vstage && *per_vstage > 0) {
    if (p.first_stage_layers > 0 || p.last_stage_layers > 0) {
      r.Add(Severity::kError, "--num-layers-per-virtual-pipeline-stage",
            "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
            "parallel degree when enable uneven pipeline parallelism",
            "write --num-virtual-stages-per-pipeline-rank");
    } else {
      const int total =
          m.num_layers + (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0);
      if (total % p.pp == 0) {
        const int per_stage = total / p.pp;
        if (per_stage % *per_vstage != 0) {
          r.Add(Severity::kError, "--num-layers-per-virtual-pipeline-stage",
                "number of layers per pipeline stage must be divisible number of layers per "
                "virtual pipeline stage",
                "");
        } else {
          p.virtual_stages = per_stage / ToInt(*per_vstage);
        }
      }
    }
  }
}

void ReadLayout(Reader& r, MegatronCommand& c, const std::vector<int>& hybrid_segments) {
  ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  p.tp = ToInt(r.Int("--tensor-model-parallel-size").value_or(1));
  p.pp = ToInt(r.Int("--pipeline-model-parallel-size").value_or(1));
  p.cp = ToInt(r.Int("--context-parallel-size").value_or(1));
  p.ep = ToInt(r.Int("--expert-model-parallel-size").value_or(1));
  p.etp = ToInt(r.Int("--expert-tensor-parallel-size").value_or(0));
  p.dp = 1;
  if (auto mbs = r.Int("--micro-batch-size")) {
    p.micro_batch_size = ToInt(*mbs);
  } else if (!r.Has("--micro-batch-size")) {
    r.Add(Severity::kError, "--micro-batch-size", "assert args.micro_batch_size is not None",
          "add --micro-batch-size");
  }
  for (auto [flag, size] : {std::pair{"--tensor-model-parallel-size", &p.tp},
                            {"--pipeline-model-parallel-size", &p.pp},
                            {"--context-parallel-size", &p.cp},
                            {"--expert-model-parallel-size", &p.ep},
                            {"--micro-batch-size", &p.micro_batch_size}}) {
    if (*size <= 0) {
      r.Add(Severity::kError, flag, fmt::format("{} must be positive, got {}", flag, *size), "");
    } else if (*size > kMaxGpus) {
      // Said, and checked as if 1 (core/limits.h).
      r.Add(Severity::kError, flag,
            fmt::format("{} is beyond what ptdp models (at most {}), got {}", flag, kMaxGpus,
                        *r.Int(flag)),
            "");
      *size = 1;
    }
  }
  p.tp = std::max(p.tp, 1);
  p.pp = std::max(p.pp, 1);
  p.cp = std::max(p.cp, 1);
  p.ep = std::max(p.ep, 1);
  if (r.Has("--expert-tensor-parallel-size") && p.etp <= 0) {
    r.Add(Severity::kError, "--expert-tensor-parallel-size",
          fmt::format("--expert-tensor-parallel-size must be positive, got {}", p.etp), "");
  }
  p.etp = std::max(p.etp, 0);
  // TransformerConfig.__post_init__ (at start-up); the expert tensor-parallel size defaults to
  // the tensor-parallel size (arguments.py).
  if (m.num_experts > 0 && m.add_bias_linear && (p.etp > 0 ? p.etp : p.tp) != 1) {
    r.Add(Severity::kError, "--expert-tensor-parallel-size",
          "Bias in Moe is only supported when ETP==1",
          "add --disable-bias-linear, or --expert-tensor-parallel-size 1");
  }
  ReadContextParallelExchange(r, c);
  p.micro_batch_size = std::max(p.micro_batch_size, 1);
  ReadLayerSplit(r, c, hybrid_segments);
}

// The schedule, sequence parallelism, recompute and sharding.
void ReadRecomputeAndSharding(Reader& r, MegatronCommand& c) {
  ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  p.schedule = p.virtual_stages > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  p.sequence_parallel = r.Has("--sequence-parallel");
  if (p.sequence_parallel && p.tp == 1) {
    r.Add(Severity::kWarning, "--sequence-parallel",
          "Disabling sequence parallelism because tensor model parallelism is disabled",
          "drop --sequence-parallel or use tensor parallelism");
    p.sequence_parallel = false;
  }
  const auto granularity = r.String("--recompute-granularity");
  if (r.Has("--recompute-activations")) p.recompute = Recompute::kSelective;
  if (granularity) {
    if (*granularity == "full") {
      p.recompute = Recompute::kFull;
      const auto method = r.String("--recompute-method");
      const auto count = r.Int("--recompute-num-layers");
      if (!method) {
        // TransformerConfig.__post_init__ (at start-up).
        r.Add(Severity::kError, "--recompute-granularity",
              "Using recompute_granularity: full so recompute_method must be \"block\" or "
              "\"uniform\"",
              "add --recompute-method uniform --recompute-num-layers 1");
      } else if (!count) {
        r.Add(Severity::kError, "--recompute-granularity",
              fmt::format("When using recompute_granularity: full recompute_num_layers must be "
                          "between 1 and num_layers_per_pipeline_rank: {}",
                          m.num_layers / std::max(p.pp, 1)),
              "add --recompute-num-layers");
      }
      if (method == "block") {
        // The first N layers of each model chunk recompute, the rest keep their activations.
        if (count && *count <= 0) {
          r.Add(Severity::kError, "--recompute-num-layers",
                "the block method needs --recompute-num-layers N > 0", "");
        } else if (count) {
          p.recompute_num_layers = ToInt(*count);
        }
      } else if (method == "uniform" && count.value_or(1) != 1) {
        r.Add(Severity::kWarning, "--recompute-num-layers",
              "uniform recompute in groups of several layers keeps one input per group; ptdp "
              "simulates groups of one layer (a little more memory, the same time)",
              "");
      }
    } else if (*granularity == "selective") {
      p.recompute = Recompute::kSelective;
      if (r.Has("--recompute-num-layers")) {
        r.Add(Severity::kError, "--recompute-num-layers",
              "When using recompute_granularity: selective recompute_num_layers must be None.",
              "drop --recompute-num-layers");
      }
      if (r.Has("--recompute-method")) {
        r.Add(Severity::kError, "--recompute-method",
              "recompute method is not yet supported for selective recomputing granularity",
              "drop --recompute-method");
      }
    }
  }
  if (const auto* a = r.Last("--recompute-modules"); a != nullptr) {
    std::string joined, error;
    for (const std::string& v : a->values) joined += v + " ";
    const uint8_t modules = ParseRecomputeModules(joined, &error);
    if (!error.empty()) {
      r.Add(Severity::kError, "--recompute-modules",
            "Invalid choices for recompute_modules: " + error, "");
    } else if (p.recompute == Recompute::kSelective) {
      p.recompute_modules = modules;
    } else {
      r.Add(Severity::kWarning, "--recompute-modules",
            "recompute modules apply to --recompute-granularity selective only: ignored",
            "add --recompute-granularity selective, or drop --recompute-modules");
    }
  }
  p.distributed_optimizer = r.Has("--use-distributed-optimizer");
  if (r.Has("--use-megatron-fsdp")) {
    const std::string strategy =
        r.String("--data-parallel-sharding-strategy").value_or("optim_grads_params");
    if (strategy == "optim") {
      p.fsdp = Fsdp::kOptim;
    } else if (strategy == "optim_grads") {
      p.fsdp = Fsdp::kOptimGrads;
    } else if (strategy == "optim_grads_params") {
      p.fsdp = Fsdp::kOptimGradsParams;
    } else if (strategy != "no_shard") {
      r.Add(Severity::kError, "--data-parallel-sharding-strategy",
            fmt::format("argument --data-parallel-sharding-strategy: invalid choice: '{}' (choose "
                        "from 'no_shard', 'optim', 'optim_grads', 'optim_grads_params')",
                        strategy),
            "");
    }
    if (!p.distributed_optimizer) {
      r.Add(Severity::kWarning, "--use-megatron-fsdp",
            "Megatron-FSDP v1 is only compatible with --use-distributed-optimizer. Using "
            "DistributedOptimizer...",
            "add --use-distributed-optimizer");
      p.distributed_optimizer = true;
    }
    if (r.String("--ckpt-format").value_or("torch_dist") != "fsdp_dtensor") {
      r.Add(Severity::kError, "--ckpt-format",
            "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format.",
            "add --ckpt-format fsdp_dtensor");
    }
  } else if (r.Has("--data-parallel-sharding-strategy")) {
    r.Add(Severity::kWarning, "--data-parallel-sharding-strategy",
          "has no effect without --use-megatron-fsdp", "add --use-megatron-fsdp");
  }
}

// What changes costs but not the layout: attention backend, dispatcher, overlaps.
void ReadCostOptions(Reader& r, MegatronCommand& c) {
  ParallelConfig& p = c.parallel;
  CostOptions& o = c.options;
  if (auto backend = r.String("--attention-backend")) {
    if (*backend == "flash" || *backend == "auto") {
      o.attention = AttentionBackend::kFlash;
    } else if (*backend == "fused") {
      o.attention = AttentionBackend::kFused;
    } else if (*backend == "unfused" || *backend == "local") {
      o.attention = AttentionBackend::kUnfused;
    } else {
      r.Add(Severity::kError, "--attention-backend",
            fmt::format("argument --attention-backend: invalid choice: '{}' (choose from "
                        "'flash', 'fused', 'unfused', 'local', 'auto')",
                        *backend),
            "");
    }
  }
  if (auto d = r.String("--moe-token-dispatcher-type")) {
    if (auto v = ValueOf<MoeDispatcher>(kMoeDispatcherNames, *d)) {
      o.moe_token_dispatcher = *v;
    } else {
      r.Add(Severity::kError, "--moe-token-dispatcher-type",
            fmt::format("argument --moe-token-dispatcher-type: invalid choice: '{}' (choose from "
                        "'allgather', 'alltoall', 'flex')",
                        *d),
            "");
    }
  }
  o.overlap_grad_reduce = r.Has("--overlap-grad-reduce");
  o.overlap_param_gather = r.Has("--overlap-param-gather");
  o.tp_comm_overlap = r.Has("--tp-comm-overlap");
  // On by default, for the interleaved schedule only (validate_args turns it off otherwise).
  o.overlap_p2p_communication = p.virtual_stages > 1 && !r.Has("--no-overlap-p2p-communication");
  if (auto bucket = r.Int("--ddp-bucket-size")) o.ddp_bucket_size = std::max<int64_t>(*bucket, 0);
  if (o.overlap_param_gather) {
    if (!p.distributed_optimizer) {
      r.Add(Severity::kError, "--overlap-param-gather",
            "--overlap-param-gather only supported with distributed optimizer, megatron fsdp, or "
            "dist_muon",
            "add --use-distributed-optimizer");
    }
    if (!o.overlap_grad_reduce) {
      r.Add(Severity::kError, "--overlap-param-gather",
            "Must use --overlap-param-gather with --overlap-grad-reduce",
            "add --overlap-grad-reduce");
    }
  }
  if (o.tp_comm_overlap && !r.Has("--sequence-parallel")) {
    r.Add(Severity::kError, "--tp-comm-overlap",
          "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism "
          "is enabled",
          "add --sequence-parallel");
  }
}

// Training: precision and FP8, the optimizer, the batch.
void ReadTraining(Reader& r, MegatronCommand& c) {
  TrainingSpec& t = c.training;
  if (r.Has("--bf16") && r.Has("--fp16")) {
    r.Add(Severity::kError, "--fp16", "assert not args.bf16: choose one of --fp16 and --bf16", "");
  }
  t.precision = r.Has("--bf16")   ? Precision::kBf16
                : r.Has("--fp16") ? Precision::kFp16
                                  : Precision::kFp32;
  if (auto format = r.String("--fp8-format")) {
    if (*format != "hybrid" && *format != "e4m3") {
      r.Add(Severity::kError, "--fp8-format",
            fmt::format("argument --fp8-format: invalid choice: '{}' (choose from 'e4m3', "
                        "'hybrid')",
                        *format),
            "");
    } else if (t.precision != Precision::kBf16) {
      r.Add(Severity::kWarning, "--fp8-format",
            "ptdp models FP8 training with bf16 parameters (--bf16 --fp8-format); simulated "
            "without FP8",
            "add --bf16");
    } else {
      t.precision = Precision::kFp8;
      if (*format == "e4m3") {
        r.Add(Severity::kWarning, "--fp8-format",
              "e4m3 for the gradients too: simulated as hybrid (the same GEMM rates)", "");
      }
    }
  }
  if (auto recipe = r.String("--fp8-recipe")) {
    if (*recipe == "delayed") {
      t.fp8_recipe = Fp8Recipe::kDelayed;
    } else if (*recipe == "tensorwise") {
      t.fp8_recipe = Fp8Recipe::kTensorwise;
    } else if (*recipe == "blockwise") {
      t.fp8_recipe = Fp8Recipe::kBlockwise;
    } else if (*recipe == "mxfp8") {
      t.fp8_recipe = Fp8Recipe::kBlockwise;
      r.Add(Severity::kWarning, "--fp8-recipe",
            "mxfp8 is for Blackwell GPUs; ptdp simulates it as blockwise scaling", "");
    } else if (*recipe == "custom") {
      r.Add(Severity::kWarning, "--fp8-recipe",
            "a custom FP8 recipe is simulated as delayed scaling", "");
    }
  } else {
    t.fp8_recipe = Fp8Recipe::kDelayed;  // Megatron's default
  }
  if (r.Has("--first-last-layers-bf16")) {
    t.fp8_bf16_layers_at_start = ToInt(r.Int("--num-layers-at-start-in-bf16").value_or(1));
    t.fp8_bf16_layers_at_end = ToInt(r.Int("--num-layers-at-end-in-bf16").value_or(1));
    if (t.precision == Precision::kFp8 && t.fp8_recipe == Fp8Recipe::kDelayed) {
      r.Add(Severity::kError, "--first-last-layers-bf16",
            "Delayed scaling does not support first / last layer in BF16.",
            "add --fp8-recipe tensorwise (or blockwise)");
    }
  }
  t.fp8_param_gather = r.Has("--fp8-param-gather");  // the rules check its optimizer
  if (t.fp8_param_gather && !r.Has("--fp8-format")) {
    r.Add(Severity::kError, "--fp8-param-gather", "fp8_param must be used together with fp8 mode.",
          "add --fp8-format, or drop it");
  }
  if (t.fp8_param_gather && r.Has("--use-torch-fsdp2")) {
    // validate_args turns it off (Transformer Engine 2.0 and later).
    r.Add(Severity::kWarning, "--fp8-param-gather",
          "FSDP2 FP8 param gather is not supported yet in TE 2.0, will fallback to bf16 "
          "all_gather instead, turning off fp8_param_gather",
          "");
    t.fp8_param_gather = false;
  }
  if (t.precision != Precision::kFp8) {
    t.fp8_bf16_layers_at_start = t.fp8_bf16_layers_at_end = 0;
    t.fp8_param_gather = false;
  }
  if (auto opt = r.String("--optimizer"))
    t.optimizer = *opt == "sgd" ? Optimizer::kSgd : Optimizer::kAdam;
  if (auto lr = r.Number("--lr")) t.lr = *lr;
  if (auto wd = r.Number("--weight-decay")) t.weight_decay = *wd;
  if (auto clip = r.Number("--clip-grad")) t.clip_grad = *clip;
  if (auto b1 = r.Number("--adam-beta1")) t.adam_beta1 = *b1;
  if (auto b2 = r.Number("--adam-beta2")) t.adam_beta2 = *b2;
  if (auto eps = r.Number("--adam-eps")) t.adam_eps = *eps;
  if (auto seed = r.Int("--seed")) t.seed = *seed;
  t.global_batch_size = r.Int("--global-batch-size").value_or(0);
  if (r.Has("--global-batch-size") && t.global_batch_size <= 0) {
    r.Add(Severity::kError, "--global-batch-size", "assert args.global_batch_size > 0", "");
  }
}

// Checks that need the whole command: the world size flag, hierarchical context parallelism,
// the micro-batch group, Torch FSDP2 and determinism, the launch environment.
// --overlap-moe-expert-parallel-comm's requirements (TransformerConfig.__post_init__, at
// start-up), in Megatron's words.
void CheckExpertParallelOverlap(Reader& r, const MegatronCommand& c) {
  if (!r.Has("--overlap-moe-expert-parallel-comm")) return;
  const ParallelConfig& p = c.parallel;
  const std::string dispatcher = r.String("--moe-token-dispatcher-type").value_or("allgather");
  bool recompute_moe = false;
  if (const auto* a = r.Last("--recompute-modules"); a != nullptr) {
    recompute_moe = std::find(a->values.begin(), a->values.end(), "moe") != a->values.end();
  }
  const std::pair<bool, const char*> rules[] = {
      {p.pp <= 1 || p.virtual_stages > 1,
       "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when "
       "pipeline_model_parallel_size > 1"},
      {p.ep > 1,
       "overlap_moe_expert_parallel_comm is only supported with expert model parallelism"},
      {dispatcher == "alltoall" || dispatcher == "flex",
       "overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher"},
      {r.String("--recompute-granularity").value_or("") != "full",
       "disable full recomputation when enabling overlap_moe_expert_parallel_comm"},
      {!r.Has("--recompute-method"),
       "disable recomputation method when enabling overlap_moe_expert_parallel_comm"},
      {!r.Has("--recompute-num-layers"),
       "recompute_num_layers must be None when enabling overlap_moe_expert_parallel_comm"},
      {!recompute_moe,
       "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm"},
      {r.Has("--bf16") || r.Has("--fp16"),
       "overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 model"},
      {!r.Has("--moe-shared-expert-overlap"),
       "disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm"},
      {c.model.mtp_num_layers <= 1,
       "MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm."},
  };
  for (const auto& [holds, message] : rules) {
    if (!holds) r.Add(Severity::kError, "--overlap-moe-expert-parallel-comm", message, "");
  }
}

void ReadStartUpChecks(Reader& r, MegatronCommand& c, bool environment_complete) {
  ParallelConfig& p = c.parallel;
  if (auto world = r.Int("--world-size")) c.world_size = *world;
  if (const auto* a = r.Last("--hierarchical-context-parallel-sizes"); a != nullptr) {
    int64_t product = 1;
    for (const std::string& v : a->values) product *= std::max<int64_t>(1, std::atoll(v.c_str()));
    if (product != p.cp) {
      r.Add(Severity::kError, "--hierarchical-context-parallel-sizes",
            fmt::format("assert args.context_parallel_size == prod(args."
                        "hierarchical_context_parallel_sizes): {} != {}",
                        p.cp, product),
            "give sizes whose product is --context-parallel-size");
    }
  }
  if (auto g = r.Int("--microbatch-group-size-per-virtual-pipeline-stage")) {
    c.microbatch_group_size = ToInt(*g);
  }
  CheckExpertParallelOverlap(r, c);
  CheckFsdp2AndDeterminism(r, c);
  CheckDeviceConnections(r, c, environment_complete);
}

}  // namespace

std::span<const KnownFlag> MegatronFlags() { return kMegatronFlags; }
std::span<const KnownFlag> LauncherFlags() { return kLauncherFlags; }

std::string MegatronTableVersion() {
  return fmt::format("Megatron-LM option table: NVIDIA/Megatron-LM commit {} ({}), {} options",
                     PTDP_MEGATRON_COMMIT, PTDP_MEGATRON_COMMIT_DATE, std::size(kMegatronFlags));
}

bool MegatronCommand::has_errors() const {
  return std::any_of(findings.begin(), findings.end(),
                     [](const MegatronFinding& f) { return f.severity == Severity::kError; });
}

MegatronCommand ReadMegatronCommand(std::string_view text, const std::string& source,
                                    const MegatronReadOptions& read) {
  Lexed lexed = Lex(text, source, read);
  MegatronCommand c;
  c.findings = std::move(lexed.findings);
  const Launch& launch = TrainingCommand(lexed, source, c);
  ReadArgs(launch.words, launch.script_at, c);
  Reader r(c);
  const std::vector<int> hybrid_segments = ReadModel(r, c);
  ReadLayout(r, c, hybrid_segments);
  ReadRecomputeAndSharding(r, c);
  ReadCostOptions(r, c);
  ReadTraining(r, c);
  ReadStartUpChecks(r, c, read.environment_complete);
  WarnAboutWhatIsNotSimulated(r, c);
  return c;
}

void ResolveWorldSize(MegatronCommand& c, int64_t world) {
  c.world_size = world;
  ParallelConfig& p = c.parallel;
  const int64_t model = int64_t{p.tp} * p.pp * p.cp;
  if (world % model != 0) {
    // CheckParallelConfig reports it, in Megatron's words; dp stays 1 meanwhile.
    if (c.training.global_batch_size == 0) c.training.global_batch_size = p.micro_batch_size;
    return;
  }
  p.dp = static_cast<int>(world / model);
  if (c.training.global_batch_size == 0) {
    c.training.global_batch_size = int64_t{p.micro_batch_size} * p.dp;
  }
  // A --num-microbatches that Megatron would refuse: say what Megatron derives instead.
  for (MegatronFinding& f : c.findings) {
    if (f.flag != "--num-microbatches") continue;
    const int64_t per_step = int64_t{p.micro_batch_size} * p.dp;
    if (c.training.global_batch_size % per_step != 0) continue;
    const int64_t derived = c.training.global_batch_size / per_step;
    std::string given;
    for (const auto& a : c.args) {
      if (a.flag == "--num-microbatches" && !a.values.empty()) given = a.values.front();
    }
    f.message +=
        fmt::format("; here {} / ({} x {}) = {}{}", c.training.global_batch_size,
                    p.micro_batch_size, p.dp, derived,
                    given.empty()                      ? ""
                    : given == std::to_string(derived) ? ", the value given"
                                                       : fmt::format(", not the {} given", given));
  }
}

std::vector<std::string> MegatronArgs(const Plan& plan) {
  const ModelSpec& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  std::vector<std::string> a;
  auto add = [&](std::string flag, auto value) {
    a.push_back(std::move(flag));
    a.push_back(fmt::format("{}", value));
  };
  add("--tensor-model-parallel-size", p.tp);
  add("--pipeline-model-parallel-size", p.pp);
  if (p.cp > 1) {
    add("--context-parallel-size", p.cp);
    add("--cp-comm-type", Name(p.cp_comm));
  }
  if (m.moe()) {
    add("--expert-model-parallel-size", p.ep);
    add("--expert-tensor-parallel-size", p.expert_tp());
  }
  if (p.first_stage_layers > 0) add("--decoder-first-pipeline-num-layers", p.first_stage_layers);
  if (p.last_stage_layers > 0) add("--decoder-last-pipeline-num-layers", p.last_stage_layers);
  if (p.account_for_embedding) a.push_back("--account-for-embedding-in-pipeline-split");
  if (p.account_for_loss) a.push_back("--account-for-loss-in-pipeline-split");
  if (!p.layout.empty() && m.hybrid()) {
    // Written as '|' in the hybrid pattern below.
  } else if (!p.layout.empty()) {
    add("--pipeline-model-parallel-layout",
        fmt::format("'{}'", PipelineLayoutText(p.layout, m.mtp_num_layers)));
  } else if (p.schedule == Schedule::kInterleaved) {
    // Megatron takes the chunk count directly when the split is uneven.
    if (UnevenSplit(p)) {
      add("--num-virtual-stages-per-pipeline-rank", p.virtual_stages);
    } else {
      add("--num-layers-per-virtual-pipeline-stage", m.num_layers / p.pp / p.virtual_stages);
    }
  }
  add("--micro-batch-size", p.micro_batch_size);
  add("--global-batch-size", plan.training.global_batch_size);
  if (p.sequence_parallel) a.push_back("--sequence-parallel");
  if (p.recompute == Recompute::kSelective) {
    add("--recompute-granularity", "selective");
    if (p.recompute_modules != kRecomputeCoreAttn) {
      a.push_back("--recompute-modules");
      for (const auto& n : kRecomputeModuleNames) {
        if (p.recompute_modules & n.value) a.emplace_back(n.name);
      }
    }
  } else if (p.recompute == Recompute::kFull) {
    add("--recompute-granularity", "full");
    if (p.recompute_num_layers > 0) {
      add("--recompute-method", "block");
      add("--recompute-num-layers", p.recompute_num_layers);
    } else {
      add("--recompute-method", "uniform");
      add("--recompute-num-layers", 1);
    }
  }
  if (p.distributed_optimizer) a.push_back("--use-distributed-optimizer");
  if (p.fsdp != Fsdp::kNone) {
    a.push_back("--use-megatron-fsdp");
    add("--data-parallel-sharding-strategy", Name(p.fsdp));
    add("--ckpt-format", "fsdp_dtensor");
  }
  // The software options, as today's Megatron-Core names them (plans of older stacks describe
  // published runs; their flags are not written).
  const CostOptions& o = plan.options;
  if (o.stack == SoftwareStack::kCore) {
    // fp32 has no flash-style kernels: Megatron's default (auto) picks what runs.
    if (plan.training.precision != Precision::kFp32) add("--attention-backend", Name(o.attention));
    if (o.overlap_grad_reduce) a.push_back("--overlap-grad-reduce");
    if (o.overlap_param_gather) a.push_back("--overlap-param-gather");
    if (o.ddp_bucket_size > 0) add("--ddp-bucket-size", o.ddp_bucket_size);
    if (o.tp_comm_overlap) a.push_back("--tp-comm-overlap");
    // Megatron overlaps the interleaved schedule's sends unless told not to (arguments.py:
    // --no-overlap-p2p-communication, dest overlap_p2p_comm, default True).
    if (p.virtual_stages > 1 && !o.overlap_p2p_communication) {
      a.push_back("--no-overlap-p2p-communication");
    }
  }
  add("--num-layers", m.num_layers);
  add("--hidden-size", m.hidden_size);
  add("--num-attention-heads", m.num_attention_heads);
  if (m.num_query_groups != m.num_attention_heads) {
    a.push_back("--group-query-attention");
    add("--num-query-groups", m.num_query_groups);
  }
  if (m.kv_channels * m.num_attention_heads != m.hidden_size) add("--kv-channels", m.kv_channels);
  if (m.ffn_hidden_size != DefaultFfnHiddenSize(m.hidden_size, m.activation)) {
    add("--ffn-hidden-size", m.ffn_hidden_size);
  }
  add("--seq-length", m.seq_length);
  add("--max-position-embeddings", m.max_position_embeddings);
  if (m.activation == Activation::kSwiglu) a.push_back("--swiglu");
  if (m.activation == Activation::kSquaredRelu) a.push_back("--squared-relu");
  if (m.normalization == Normalization::kRmsNorm) add("--normalization", "RMSNorm");
  if (m.position_embedding == PositionEmbedding::kRope) add("--position-embedding-type", "rope");
  if (m.position_embedding == PositionEmbedding::kNone) add("--position-embedding-type", "none");
  if (!m.tied_embeddings) a.push_back("--untie-embeddings-and-output-weights");
  if (!m.add_bias_linear) a.push_back("--disable-bias-linear");
  if (m.hidden_dropout != 0.1) add("--hidden-dropout", m.hidden_dropout);
  if (m.attention_dropout != 0.1) add("--attention-dropout", m.attention_dropout);
  if (m.make_vocab_size_divisible_by != 128) {
    add("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  }
  if (m.qk_layernorm) a.push_back("--qk-layernorm");
  if (m.mtp_num_layers > 0) add("--mtp-num-layers", m.mtp_num_layers);
  if (m.hybrid()) {
    // pretrain_mamba.py's options; the pattern quoted for the shell ('*' is a glob).
    std::string pattern = m.hybrid_layer_pattern;
    if (!p.layout.empty()) {
      pattern.clear();
      size_t at = 0;
      for (size_t vs = 0; vs < p.layout.size(); ++vs) {
        if (vs > 0) pattern += '|';
        pattern += m.hybrid_layer_pattern.substr(at, p.layout[vs]);
        at += p.layout[vs];
      }
    }
    add("--hybrid-override-pattern", fmt::format("'{}'", pattern));
    if (m.mamba_num_heads > 0) add("--mamba-num-heads", m.mamba_num_heads);
    add("--mamba-head-dim", m.mamba_head_dim);
    add("--mamba-state-dim", m.mamba_state_dim);
    add("--mamba-num-groups", m.mamba_num_groups);
  }
  if (m.multi_latent_attention) {
    a.push_back("--multi-latent-attention");
    if (m.q_lora_rank > 0) add("--q-lora-rank", m.q_lora_rank);
    add("--kv-lora-rank", m.kv_lora_rank);
    add("--qk-head-dim", m.qk_head_dim);
    add("--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim);
    add("--v-head-dim", m.v_head_dim);
  }
  if (m.moe()) {
    add("--num-experts", m.num_experts);
    add("--moe-router-topk", m.moe_router_topk);
    add("--moe-ffn-hidden-size", m.moe_ffn_hidden_size);
    if (m.moe_shared_expert_intermediate_size > 0) {
      add("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size);
    }
    if (m.moe_first_dense_layers > 0) {
      // The list form, quoted for the shell: the dense layers, then every layer or the pattern.
      std::string rest;
      for (int l = m.moe_first_dense_layers; l < m.num_layers; ++l) {
        rest += fmt::format("{}{}", rest.empty() ? "" : ",", m.IsMoeLayer(l) ? 1 : 0);
      }
      add("--moe-layer-freq", m.moe_layer_freq == 1
                                  ? fmt::format("'([0]*{}+[1]*{})'", m.moe_first_dense_layers,
                                                m.num_layers - m.moe_first_dense_layers)
                                  : fmt::format("'([0]*{}+[{}])'", m.moe_first_dense_layers, rest));
    } else if (m.moe_layer_freq != 1) {
      add("--moe-layer-freq", m.moe_layer_freq);
    }
    add("--moe-router-load-balancing-type", Name(m.moe_router_load_balancing_type));
    if (m.moe_expert_capacity_factor > 0) {
      add("--moe-expert-capacity-factor", m.moe_expert_capacity_factor);
    }
    a.push_back("--moe-grouped-gemm");
    add("--moe-token-dispatcher-type", Name(plan.options.moe_token_dispatcher));
  }
  const TrainingSpec& t = plan.training;
  if (t.precision == Precision::kBf16 || t.precision == Precision::kFp8) a.push_back("--bf16");
  if (t.precision == Precision::kFp16) a.push_back("--fp16");
  if (t.precision == Precision::kFp8) {
    add("--fp8-format", "hybrid");
    add("--fp8-recipe", Name(t.fp8_recipe));
    if (t.fp8_bf16_layers_at_start > 0 || t.fp8_bf16_layers_at_end > 0) {
      a.push_back("--first-last-layers-bf16");
      add("--num-layers-at-start-in-bf16", t.fp8_bf16_layers_at_start);
      add("--num-layers-at-end-in-bf16", t.fp8_bf16_layers_at_end);
    }
    if (t.fp8_param_gather) a.push_back("--fp8-param-gather");
  }
  return a;
}

std::string MegatronArgsLine(const Plan& plan) {
  return fmt::format("{}", fmt::join(MegatronArgs(plan), " "));
}

}  // namespace ptdp
