#include "cli/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "core/error.h"
#include "core/text.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

std::string FlagName(std::string_view name) {
  return name.starts_with("-") ? std::string(name) : "--" + std::string(name);
}

// Megatron-LM's names for the flags that mean the same thing in ptdp
// (megatron/training/arguments.py), accepted wherever the command has the ptdp flag.
struct MegatronAlias {
  std::string_view megatron;
  std::string_view ptdp;
  std::string_view value;  // for a Megatron switch that is a value of a ptdp flag; else empty
};
constexpr MegatronAlias kMegatronAliases[] = {
    {"tensor-model-parallel-size", "tp", ""},
    {"pipeline-model-parallel-size", "pp", ""},
    {"context-parallel-size", "cp", ""},
    {"cp-comm-type", "cp-comm", ""},
    {"expert-model-parallel-size", "ep", ""},
    {"expert-tensor-parallel-size", "etp", ""},
    {"micro-batch-size", "micro-batch", ""},
    {"global-batch-size", "global-batch", ""},
    {"virtual-pipeline-model-parallel-size", "virtual-stages", ""},
    {"num-virtual-stages-per-pipeline-rank", "virtual-stages", ""},
    {"use-distributed-optimizer", "distributed-optimizer", ""},
    {"recompute-granularity", "recompute", ""},
    {"bf16", "precision", "bf16"},
    {"fp16", "precision", "fp16"},
};

// An alias applies to a command that has the ptdp flag and no flag of the Megatron name.
bool Applies(const MegatronAlias& a, const po::options_description& options) {
  return options.find_nothrow(std::string(a.megatron), false) == nullptr &&
         options.find_nothrow(std::string(a.ptdp), false) != nullptr;
}

// The words with Megatron's flag names replaced by ptdp's, where the alias Applies; `given_as`
// records each replacement (ptdp name -> the word typed).
std::vector<std::string> TranslateMegatronNames(const std::vector<std::string>& words,
                                                const po::options_description& options,
                                                std::map<std::string, std::string>& given_as) {
  std::vector<std::string> out;
  for (const std::string& word : words) {
    if (!word.starts_with("--")) {
      out.push_back(word);
      continue;
    }
    const size_t equals = word.find('=');
    const std::string name = word.substr(2, equals == std::string::npos ? equals : equals - 2);
    const MegatronAlias* alias = nullptr;
    for (const MegatronAlias& a : kMegatronAliases) {
      if (a.megatron == name) alias = &a;
    }
    if (alias == nullptr || !Applies(*alias, options)) {
      out.push_back(word);
      continue;
    }
    given_as[std::string(alias->ptdp)] = "--" + name;
    const std::string rest = equals == std::string::npos ? "" : word.substr(equals);
    out.push_back("--" + std::string(alias->ptdp) + rest);
    if (!alias->value.empty()) out.push_back(std::string(alias->value));
  }
  return out;
}

// The hint for an unknown flag (the name as boost reports it, "--gpu"); `words` are the
// command's words as parsed.
std::string UnknownFlagHintFor(const std::string& typed, const std::vector<std::string>& words,
                               const po::options_description& options, const std::string& command,
                               UnknownFlagHint unknown_flag_hint) {
  const std::string see = fmt::format("see `ptdp {} --help`", command);
  std::string name = typed;
  while (name.starts_with("-")) name.erase(0, 1);
  // The word after the flag (or after its "="), when it is not another flag.
  std::string value;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == typed) {
      if (i + 1 < words.size() && !words[i + 1].starts_with("-")) value = words[i + 1];
      break;
    }
    if (words[i].starts_with(typed + "=")) {
      value = words[i].substr(typed.size() + 1);
      break;
    }
  }
  if (unknown_flag_hint != nullptr) {
    // A Megatron-LM name whose ptdp flag this command does not have: the command's hint for
    // the ptdp name.
    std::string ptdp_name = name, ptdp_value = value;
    for (const MegatronAlias& a : kMegatronAliases) {
      if (a.megatron != name) continue;
      ptdp_name = std::string(a.ptdp);
      if (!a.value.empty()) ptdp_value = std::string(a.value);
    }
    if (std::string hint = unknown_flag_hint(ptdp_name, ptdp_value); !hint.empty()) return hint;
  }
  std::vector<std::string> names;
  for (const auto& option : options.options()) names.push_back(option->long_name());
  for (const MegatronAlias& a : kMegatronAliases) {
    if (Applies(a, options)) names.emplace_back(a.megatron);
  }
  const std::string near = ClosestName(name, names);
  if (near.empty() || !typed.starts_with("--")) return see;
  return fmt::format("did you mean --{}? {}", near, see);
}

}  // namespace

std::string MegatronNamesHelp(const po::options_description& options) {
  std::vector<std::string> pairs;
  for (const MegatronAlias& a : kMegatronAliases) {
    if (!Applies(a, options)) continue;
    pairs.push_back(a.value.empty() ? fmt::format("--{} for --{}", a.megatron, a.ptdp)
                                    : fmt::format("--{} for --{} {}", a.megatron, a.ptdp, a.value));
  }
  if (pairs.empty()) return "";
  return fmt::format("Megatron-LM's names are accepted too: {}.", fmt::join(pairs, ", "));
}

Flags Flags::Parse(const std::vector<std::string>& args, const po::options_description& options,
                   const std::string& command, UnknownFlagHint unknown_flag_hint) {
  Flags flags;
  flags.command_ = command;
  std::vector<std::string> own;
  bool after_separator = false;
  for (const std::string& a : args) {
    if (after_separator) {
      flags.passthrough_.push_back(a);
    } else if (a == "--") {
      after_separator = true;
    } else {
      own.push_back(a);
    }
  }
  own = TranslateMegatronNames(own, options, flags.given_as_);
  const std::string hint = fmt::format("see `ptdp {} --help`", command);
  try {
    const int style = po::command_line_style::unix_style ^ po::command_line_style::allow_guessing;
    // Words that are not flags are collected under a hidden name and refused below.
    po::options_description all;
    all.add(options).add_options()("positional-words", po::value<std::vector<std::string>>());
    po::positional_options_description positionals;
    positionals.add("positional-words", -1);
    po::store(po::command_line_parser(own).options(all).positional(positionals).style(style).run(),
              flags.values_);
    po::notify(flags.values_);
  } catch (const po::unknown_option& e) {
    // Boost names "--x=1" with its value: the flag is "--x".
    const std::string typed = e.get_option_name().substr(0, e.get_option_name().find('='));
    if (command == "check" || command == "simulate") {
      // `ptdp check torchrun ... pretrain_gpt.py --num-layers 24`: the lone -- was forgotten.
      const bool pasted = std::any_of(own.begin(), own.end(), [](const std::string& w) {
        const std::string base = w.substr(w.rfind('/') + 1);
        return (base.size() > 3 && base.ends_with(".py")) || base == "python" ||
               base == "python3" || base == "torchrun" || base == "deepspeed";
      });
      if (pasted) {
        throw InputError({"", 0, typed}, "unknown flag: it belongs to the Megatron-LM command",
                         fmt::format("put the command after a lone --: ptdp {} [--cluster C] -- "
                                     "torchrun ... pretrain_gpt.py ...",
                                     command));
      }
    }
    throw InputError({"", 0, typed}, "unknown flag",
                     UnknownFlagHintFor(typed, own, options, command, unknown_flag_hint));
  } catch (const po::multiple_occurrences& e) {
    throw InputError({"", 0, e.get_option_name()}, "given more than once", hint);
  } catch (const po::invalid_command_line_syntax& e) {
    const std::string name = e.get_option_name();
    if (e.kind() == po::invalid_syntax::missing_parameter) {
      throw InputError({"", 0, name}, "needs a value", hint);
    }
    throw InputError({"", 0, name}, e.what(), hint);
  } catch (const po::error_with_option_name& e) {
    throw InputError({"", 0, e.get_option_name()}, e.what(), hint);
  } catch (const po::error& e) {
    throw InputError({"", 0, ""}, e.what(), hint);
  }
  if (const auto it = flags.values_.find("positional-words"); it != flags.values_.end()) {
    const auto& words = it->second.as<std::vector<std::string>>();
    throw InputError(
        {"", 0, ""}, fmt::format("unexpected argument \"{}\"", words.front()),
        command == "check" ? "put the Megatron-LM command line after a lone --" : hint);
  }
  return flags;
}

bool Flags::Has(std::string_view flag) const { return values_.count(std::string(flag)) != 0; }

bool Flags::Switch(std::string_view flag) const {
  const auto it = values_.find(std::string(flag));
  return it != values_.end() && it->second.as<bool>();
}

std::optional<std::string> Flags::OptionalString(std::string_view flag) const {
  const auto it = values_.find(std::string(flag));
  if (it == values_.end()) return std::nullopt;
  return it->second.as<std::string>();
}

std::vector<std::pair<std::string, std::string>> Flags::StringValues() const {
  std::vector<std::pair<std::string, std::string>> result;
  for (const auto& [flag, value] : values_) {
    if (const auto* text = boost::any_cast<std::string>(&value.value())) {
      result.emplace_back(flag, *text);
    }
  }
  return result;
}

std::vector<std::string> Flags::Given() const {
  std::vector<std::string> given;
  for (const auto& [flag, value] : values_) {
    if (value.defaulted()) continue;
    if (const bool* on = boost::any_cast<bool>(&value.value()); on != nullptr && !*on) continue;
    given.push_back(flag);
  }
  return given;
}

std::vector<std::string> Flags::Strings(std::string_view flag) const {
  const auto it = values_.find(std::string(flag));
  if (it == values_.end()) return {};
  return it->second.as<std::vector<std::string>>();
}

std::string Flags::String(std::string_view flag) const {
  auto value = OptionalString(flag);
  if (!value) Fail(flag, "is required");
  return *value;
}

std::optional<int64_t> Flags::OptionalPositiveInt(std::string_view flag, int64_t max) const {
  const auto text = OptionalString(flag);
  if (!text) return std::nullopt;
  int64_t value = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    // A whole number beyond int64: too large, or below zero.
    Fail(flag, (*text)[0] == '-' ? fmt::format("must be positive, got {}", *text)
                                 : fmt::format("at most {}, got {}", max, *text));
  }
  if (text->empty() || ec != std::errc() || ptr != end) {
    Fail(flag, fmt::format("expected a positive integer, got \"{}\"", *text));
  }
  if (value <= 0) Fail(flag, fmt::format("must be positive, got {}", value));
  if (value > max) Fail(flag, fmt::format("at most {}, got {}", max, value));
  return value;
}

int64_t Flags::PositiveInt(std::string_view flag, int64_t max) const {
  auto value = OptionalPositiveInt(flag, max);
  if (!value) Fail(flag, "is required");
  return *value;
}

void Flags::Fail(std::string_view flag, std::string message, std::string hint) const {
  if (hint.empty()) hint = fmt::format("see `ptdp {} --help`", command_);
  const auto typed = given_as_.find(std::string(flag.starts_with("--") ? flag.substr(2) : flag));
  throw InputError({"", 0, typed != given_as_.end() ? typed->second : FlagName(flag)},
                   std::move(message), std::move(hint));
}

}  // namespace ptdp::cli
