// Command-line flags of one subcommand, read strictly: every value arrives as text and is
// converted here, so each mistake becomes an InputError naming the flag (`--gpus: expected a
// positive integer, got "eight"`). Abbreviated flags are not accepted.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/enum_names.h"

namespace ptdp::cli {

// "Megatron-LM's names are accepted too: --tensor-model-parallel-size for --tp, ..." for the
// flags `options` has (empty when none), for the help text.
std::string MegatronNamesHelp(const boost::program_options::options_description& options);

// A command's pointer from a flag it does not have to what it takes instead (`plan --tp 3`:
// "--fix tp=3"): given the flag's name without its dashes (a Megatron-LM name already read as
// ptdp's) and the word after it ("" when none or another flag), the hint, or "" for none.
using UnknownFlagHint = std::string (*)(std::string_view name, std::string_view value);

class Flags {
 public:
  // Parses `args` (the words after the subcommand; everything after a lone "--" is kept aside
  // as passthrough()). `command` names the subcommand in hints ("see ptdp plan --help").
  // Megatron-LM's names for the same flags are read as ptdp's (MegatronNamesHelp), and errors
  // name the flag as it was typed. An unknown flag is an InputError whose hint is
  // `unknown_flag_hint`'s, else "did you mean --X?" for the command's closest flag (ClosestName),
  // else the command's help.
  static Flags Parse(const std::vector<std::string>& args,
                     const boost::program_options::options_description& options,
                     const std::string& command, UnknownFlagHint unknown_flag_hint = nullptr);

  bool Has(std::string_view flag) const;  // given on the command line (or defaulted)
  bool Switch(std::string_view flag) const;
  std::string String(std::string_view flag) const;  // required
  std::optional<std::string> OptionalString(std::string_view flag) const;
  // Every value of a flag declared with po::value<std::vector<std::string>>()->composing().
  std::vector<std::string> Strings(std::string_view flag) const;
  // Positive integers of at most `max` (by default what an int holds: the sizes and counts
  // below are ints); a larger value is refused naming the flag, never truncated.
  static constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  int64_t PositiveInt(std::string_view flag, int64_t max = kIntMax) const;  // required
  std::optional<int64_t> OptionalPositiveInt(std::string_view flag, int64_t max = kIntMax) const;

  // The flag's value must be one of the names; absent -> `default_value`.
  template <typename E, size_t N>
  E Enum(std::string_view flag, const EnumName<E> (&names)[N], E default_value) const;

  const std::vector<std::string>& passthrough() const { return passthrough_; }
  // Every flag given with one string value, as (flag, value), in flag order.
  std::vector<std::pair<std::string, std::string>> StringValues() const;
  // The flags given on the command line (not defaulted, switches only when on), by ptdp's name.
  std::vector<std::string> Given() const;
  bool help() const { return Switch("help"); }

  [[noreturn]] void Fail(std::string_view flag, std::string message, std::string hint = "") const;

 private:
  boost::program_options::variables_map values_;
  // Flags given by Megatron-LM's name (--tensor-model-parallel-size for --tp): ptdp's name -> the
  // name typed, which errors use.
  std::map<std::string, std::string> given_as_;
  std::vector<std::string> passthrough_;
  std::string command_;
};

template <typename E, size_t N>
E Flags::Enum(std::string_view flag, const EnumName<E> (&names)[N], E default_value) const {
  const auto got = OptionalString(flag);
  if (!got) return default_value;
  if (auto value = ValueOf<E>(names, *got)) return *value;
  Fail(flag, UnknownValueMessage<E>(names, *got));
}

}  // namespace ptdp::cli
