// Strict YAML reading and plain YAML writing shared by every ptdp file format.
//
// Reading is strict: each map is read through a YamlMap, which turns every problem into an
// InputError naming the source, the line and the dotted key: a missing required key, a key
// nobody asked for, a duplicate key, a value of the wrong type (a quoted "24" is a string, not
// a number; booleans are only true/false), a non-positive size, an unknown enumeration value.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/enum_names.h"

namespace ptdp {

// Parses one YAML (or JSON) document; a syntax error or an empty document is an InputError.
YAML::Node ParseYamlDocument(std::string_view text, const std::string& source);

// Reads a whole file ("-": standard input); a missing or unreadable file is an InputError naming
// the path.
std::string ReadTextFile(const std::string& path);

class YamlMap {
 public:
  // `node` must be a map (else InputError at `line`, naming `path`). `path` is the dotted key
  // of this map ("" at the top level, "model" inside a plan); `line` is 1-based.
  YamlMap(const YAML::Node& node, std::string source, std::string path, int line);

  bool Has(std::string_view key) const;

  // Required values (missing -> error). Positive* also reject zero and negatives.
  int64_t Int(std::string_view key) const;
  int64_t PositiveInt(std::string_view key) const;
  double Number(std::string_view key) const;  // integers accepted
  double PositiveNumber(std::string_view key) const;
  double NonNegativeNumber(std::string_view key) const;
  std::string String(std::string_view key) const;
  bool Bool(std::string_view key) const;
  YamlMap Map(std::string_view key) const;
  // A non-empty list of maps; element i has the dotted path "key[i]" and its own line.
  std::vector<YamlMap> MapList(std::string_view key) const;
  // A list of integers, possibly empty; a bad element is reported as "key[i]" at its own line.
  std::vector<int64_t> IntList(std::string_view key) const;
  // A list of strings (scalars), possibly empty; a bad element is reported as "key[i]".
  std::vector<std::string> StringList(std::string_view key) const;

  // Enumerations: the value must be one of the names; absent -> `default_value`.
  template <typename E, size_t N>
  E Enum(std::string_view key, const EnumName<E> (&names)[N], E default_value) const;

  // Optional forms: nullopt (or the default) when the key is absent or null.
  std::optional<int64_t> OptionalPositiveInt(std::string_view key) const;
  std::optional<std::string> OptionalString(std::string_view key) const;
  bool Bool(std::string_view key, bool default_value) const;
  double PositiveNumber(std::string_view key, double default_value) const;
  double NonNegativeNumber(std::string_view key, double default_value) const;

  // Throws for the first key no accessor asked about (with a did-you-mean hint).
  void RejectUnknownKeys() const;

  // The line of `key`'s value (of the map itself when absent), and its dotted path.
  int LineOf(std::string_view key) const;
  std::string PathOf(std::string_view key) const;
  const std::string& source() const { return source_; }

  [[noreturn]] void Fail(std::string_view key, std::string message, std::string hint = "") const;

 private:
  struct Entry {
    std::string key;
    YAML::Node value;
    int line;
  };
  const Entry* Find(std::string_view key) const;  // marks the key as known
  const Entry& Require(std::string_view key) const;

  std::string source_;
  std::string path_;
  int line_;
  std::vector<Entry> entries_;
  mutable std::set<std::string, std::less<>> known_;
};

template <typename E, size_t N>
E YamlMap::Enum(std::string_view key, const EnumName<E> (&names)[N], E default_value) const {
  if (!Has(key)) return default_value;
  const std::string got = String(key);
  if (auto value = ValueOf<E>(names, got)) return *value;
  Fail(key, UnknownValueMessage<E>(names, got));
}

// Writing. Strings are always double-quoted (so any text round-trips); numbers use the
// shortest form that reads back to the same double.
std::string YamlQuote(std::string_view text);
std::string YamlNumber(double value);
// `value_si / scale`, written so that reading it back and multiplying by `scale` gives exactly
// `value_si` whenever such a decimal exists (it does for every value read from a file).
std::string YamlScaled(double value_si, double scale);

// A tiny indenting writer: Line("key", value) appends "<indent>key: value<  # comment>".
class YamlWriter {
 public:
  void Line(std::string_view key, std::string_view value, std::string_view comment = "");
  void Begin(std::string_view key);   // "key:" and indent what follows
  void Item(std::string_view value);  // "- value", a list element under the last Begin
  void End();
  void Comment(std::string_view text);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  int indent_ = 0;
};

}  // namespace ptdp
