#include "core/megatron_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include "core/error.h"
#include "core/limits.h"
#include "core/megatron_flags.inc"
#include "core/megatron_rules.h"
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

// ---- Lexing: lines -> commands of tokens -------------------------------------------------

struct Lexed {
  std::vector<std::vector<Token>> commands;
  std::vector<MegatronFinding> findings;
};

std::string Substitute(const std::string& word, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] != '$' || i + 1 >= word.size()) {
      out += word[i];
      continue;
    }
    size_t start = i + 1, end;
    const bool braced = word[start] == '{';
    if (braced) ++start;
    end = start;
    while (end < word.size() &&
           (std::isalnum(static_cast<unsigned char>(word[end])) || word[end] == '_')) {
      ++end;
    }
    const std::string name = word.substr(start, end - start);
    const auto it = vars.find(name);
    if (name.empty() || it == vars.end() || (braced && (end >= word.size() || word[end] != '}'))) {
      out += word[i];
      continue;
    }
    out += it->second;
    i = braced ? end : end - 1;
  }
  return out;
}

// Splits the text into commands (a newline ends a command unless the line ends with a
// backslash; `;`, `&&` and `||` end one too) of shell words with their lines. Comment lines
// inside a continued command are skipped with a warning: in a real shell they end it.
Lexed Lex(std::string_view text, const std::string& source) {
  Lexed out;
  std::vector<Token> current;
  std::map<std::string, std::string> vars;
  bool continuing = false;
  int line_no = 0, last_comment_line = -1;
  constexpr std::string_view kCommentFix =
      "move the comment above the command, or end the line before it without \\";
  auto finish = [&]() {
    if (current.empty()) return;
    // A command made only of NAME=value words (optionally after `export`) defines variables.
    size_t first = current[0].text == "export" ? 1 : 0;
    bool all_assignments = first < current.size();
    for (size_t i = first; i < current.size(); ++i) {
      const size_t eq = current[i].text.find('=');
      if (eq == std::string::npos || eq == 0 || current[i].text[0] == '-') all_assignments = false;
    }
    if (all_assignments) {
      for (size_t i = first; i < current.size(); ++i) {
        const size_t eq = current[i].text.find('=');
        vars[current[i].text.substr(0, eq)] = current[i].text.substr(eq + 1);
      }
    } else {
      out.commands.push_back(std::move(current));
    }
    current.clear();
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first_char = line.find_first_not_of(" \t");
    if (first_char != std::string_view::npos && line[first_char] == '#') {
      if (continuing) {
        // One finding per run of comment lines.
        auto& f = out.findings;
        if (!f.empty() && f.back().flag.empty() && f.back().line > 0 &&
            f.back().message.starts_with("comment line") && f.back().fix == kCommentFix &&
            last_comment_line == line_no - 1) {
          f.back().message = fmt::format(
              "comment lines {}-{} inside a command continued with \\ end the command in a "
              "real shell: the flags after them never reach Megatron",
              f.back().line, line_no);
        } else {
          f.push_back({Severity::kWarning, "", line_no,
                       fmt::format("comment line {} inside a command continued with \\ ends "
                                   "the command in a real shell: the flags after it never "
                                   "reach Megatron",
                                   line_no),
                       std::string(kCommentFix)});
        }
        last_comment_line = line_no;
      }
      continue;  // ptdp reads on, as the author meant
    }
    std::string word;
    bool in_word = false, ends_with_backslash = false;
    char quote = 0;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quote != 0) {
        if (c == quote) {
          quote = 0;
        } else if (c == '\\' && quote == '"' && i + 1 < line.size()) {
          word += line[++i];
        } else {
          word += c;
        }
        continue;
      }
      if (c == '\'' || c == '"') {
        quote = c;
        in_word = true;
      } else if (c == '\\') {
        if (i + 1 == line.size()) {
          ends_with_backslash = true;
        } else {
          word += line[++i];
          in_word = true;
        }
      } else if (c == ' ' || c == '\t') {
        if (in_word) current.push_back({Substitute(word, vars), line_no});
        word.clear();
        in_word = false;
      } else if (c == '#' && !in_word) {
        break;  // comment to the end of the line
      } else if (c == ';' || ((c == '&' || c == '|') && i + 1 < line.size() && line[i + 1] == c)) {
        if (in_word) current.push_back({Substitute(word, vars), line_no});
        word.clear();
        in_word = false;
        finish();
        if (c != ';') ++i;
      } else {
        word += c;
        in_word = true;
      }
    }
    if (quote != 0) {
      throw InputError({source, line_no, ""}, fmt::format("unclosed {} quote", quote),
                       "ptdp reads one command line; close the quote on the same line");
    }
    if (in_word) current.push_back({Substitute(word, vars), line_no});
    continuing = ends_with_backslash;
    if (!continuing) finish();
  }
  finish();
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

bool IsScript(std::string_view word) { return word.size() > 3 && word.ends_with(".py"); }

// ---- Reading the values ------------------------------------------------------------------

class Reader {
 public:
  explicit Reader(MegatronCommand& c) : c_(c) {}

  const MegatronCommand::Arg* Last(std::string_view flag) const {
    const MegatronCommand::Arg* found = nullptr;
    for (const auto& a : c_.args) {
      if (a.flag == flag) found = &a;
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
      Error(*a, fmt::format("argument {}: invalid int value: '{}'", flag, v),
            v.find('$') != std::string::npos ? "define the shell variable in the pasted text, or "
                                               "write the number"
                                             : "");
      return std::nullopt;
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
      Error(*a, fmt::format("argument {}: invalid float value: '{}'", flag, v), "");
      return std::nullopt;
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

 private:
  MegatronCommand& c_;
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
    for (const char* flag :
         {"--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
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
        r.Add(Severity::kError, "--moe-layer-freq",
              "ptdp models MoE layer patterns of some dense layers first, then every n-th layer",
              "");
      }
    }
  }
  if (auto type = r.String("--moe-router-load-balancing-type")) {
    if (auto b = ValueOf<MoeLoadBalancing>(kMoeLoadBalancingNames, *type)) {
      m.moe_router_load_balancing_type = *b;
    } else {
      r.Add(Severity::kError, "--moe-router-load-balancing-type",
            UnknownValueMessage<MoeLoadBalancing>(kMoeLoadBalancingNames, *type), "");
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
  const auto pattern = r.String("--hybrid-override-pattern");
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
  const std::string problem = HybridModelProblem(m);
  if (!problem.empty()) {
    const bool mixer = problem.starts_with("nheads") || problem.starts_with("mamba_");
    r.Add(Severity::kError, mixer ? "--mamba-num-heads" : "--hybrid-override-pattern", problem, "");
  }
  return segments;
}

}  // namespace

std::span<const KnownFlag> MegatronFlags() { return kMegatronFlags; }
std::span<const KnownFlag> LauncherFlags() { return kLauncherFlags; }

bool MegatronCommand::has_errors() const {
  return std::any_of(findings.begin(), findings.end(),
                     [](const MegatronFinding& f) { return f.severity == Severity::kError; });
}

MegatronCommand ReadMegatronCommand(std::string_view text, const std::string& source) {
  Lexed lexed = Lex(text, source);
  MegatronCommand c;
  c.findings = std::move(lexed.findings);

  // The command that runs a Python script; the last one when there are several.
  const std::vector<Token>* command = nullptr;
  size_t script_at = 0;
  for (const auto& cmd : lexed.commands) {
    for (size_t i = 0; i < cmd.size(); ++i) {
      if (IsScript(cmd[i].text)) {
        command = &cmd;
        script_at = i;
        break;
      }
    }
  }
  if (command == nullptr) {
    throw InputError({source, 0, ""}, "no Megatron-LM command found: no word ends in .py",
                     "paste the command that runs pretrain_gpt.py (python or torchrun)");
  }
  const std::vector<Token>& words = *command;
  c.script = words[script_at].text;

  // Launcher words before the script: torchrun's --nproc-per-node and --nnodes give the world.
  std::optional<int64_t> nproc, nnodes;
  for (size_t i = 0; i < script_at; ++i) {
    std::string flag = words[i].text, value;
    if (!flag.starts_with("--")) continue;
    const size_t eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < script_at && !words[i + 1].text.starts_with("-")) {
      const KnownFlag* known = Find(kLauncherFlags, flag);
      if (known == nullptr || known->arity != FlagArity::kSwitch) value = words[++i].text;
    }
    std::string dashed = flag;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    int64_t n = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    const bool numeric = ec == std::errc() && ptr == value.data() + value.size() && n > 0;
    if (dashed == "--nproc-per-node" && numeric) nproc = n;
    if (dashed == "--nnodes" && numeric) nnodes = n;
  }
  if (nproc) c.world_size = *nproc * nnodes.value_or(1);

  // Megatron's own flags after the script.
  for (size_t i = script_at + 1; i < words.size(); ++i) {
    const Token& w = words[i];
    if (!w.text.starts_with("-")) {
      c.findings.push_back({Severity::kError, "", w.line,
                            fmt::format("unrecognized arguments: {}", w.text),
                            "every value follows the flag it belongs to"});
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

  // What the flags mean, with Megatron's defaults and required arguments.
  Reader r(c);
  ModelSpec& m = c.model;
  const auto layers = r.Int("--num-layers"), hidden = r.Int("--hidden-size"),
             heads = r.Int("--num-attention-heads"), seq = r.Int("--seq-length"),
             max_pos = r.Int("--max-position-embeddings");
  for (auto [flag, value] : {std::pair{"--num-layers", layers},
                             {"--hidden-size", hidden},
                             {"--num-attention-heads", heads},
                             {"--max-position-embeddings", max_pos}}) {
    if (!value && !r.Has(flag)) {
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
  } else if (pos_type && *pos_type != "learned_absolute") {
    r.Add(Severity::kError, "--position-embedding-type",
          fmt::format("ptdp models learned_absolute, rope and none positions, not {}", *pos_type),
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

  // Layout.
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
  // --cp-comm-type: one type for every layer, or one per layer (ptdp models one for all).
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
  p.micro_batch_size = std::max(p.micro_batch_size, 1);
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
        r.Add(Severity::kWarning, "--recompute-granularity",
              "full recompute without --recompute-method: Megatron recomputes nothing",
              "add --recompute-method uniform --recompute-num-layers 1");
        p.recompute = Recompute::kNone;
      } else if (*method == "block") {
        // The first N layers of each model chunk recompute, the rest keep their activations.
        if (count.value_or(0) <= 0) {
          r.Add(Severity::kError, "--recompute-num-layers",
                "the block method needs --recompute-num-layers N > 0", "");
        } else {
          p.recompute_num_layers = ToInt(*count);
        }
      } else if (*method != "uniform") {
        r.Add(Severity::kError, "--recompute-method",
              fmt::format("argument --recompute-method: invalid choice: '{}' (choose from "
                          "'uniform', 'block')",
                          *method),
              "");
      } else if (count.value_or(1) != 1) {
        r.Add(Severity::kWarning, "--recompute-num-layers",
              "uniform recompute in groups of several layers keeps one input per group; ptdp "
              "simulates groups of one layer (a little more memory, the same time)",
              "");
      }
    } else if (*granularity == "selective") {
      p.recompute = Recompute::kSelective;
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
    const std::string strategy = r.String("--data-parallel-sharding-strategy").value_or("no_shard");
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

  // What changes costs but not the layout.
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
  o.overlap_p2p_communication = r.Has("--overlap-p2p-communication");
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

  // Training.
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
    } else {
      r.Add(Severity::kError, "--fp8-recipe",
            fmt::format("argument --fp8-recipe: invalid choice: '{}' (choose from 'tensorwise', "
                        "'delayed', 'mxfp8', 'blockwise', 'custom')",
                        *recipe),
            "");
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

  if (auto world = r.Int("--world-size")) c.world_size = *world;
  if (p.fsdp != Fsdp::kNone || r.Has("--use-megatron-fsdp")) {
    r.Add(Severity::kWarning, "--use-megatron-fsdp",
          "Megatron-FSDP asserts that CUDA_DEVICE_MAX_CONNECTIONS is not 1 (it needs several "
          "streams)",
          "leave CUDA_DEVICE_MAX_CONNECTIONS unset (or above 1) when launching");
  } else if (p.tp > 1) {
    r.Add(Severity::kWarning, "--tensor-model-parallel-size",
          "with tensor parallelism Megatron-LM asserts the environment variable "
          "CUDA_DEVICE_MAX_CONNECTIONS=1 on GPUs before Blackwell",
          "export CUDA_DEVICE_MAX_CONNECTIONS=1 before launching");
  }
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
    if (o.overlap_p2p_communication) a.push_back("--overlap-p2p-communication");
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
