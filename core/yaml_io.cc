#include "core/yaml_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/json.h"
#include "core/text.h"

namespace ptdp {
namespace {

bool IsQuoted(const YAML::Node& node) { return node.Tag() == "!"; }

std::string Describe(const YAML::Node& node) {
  if (node.IsNull()) return "nothing (null)";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  if (IsQuoted(node)) return fmt::format("the quoted string \"{}\"", node.Scalar());
  return fmt::format("\"{}\"", node.Scalar());
}

// The integer an unquoted scalar spells ("+" allowed), or nothing.
std::optional<int64_t> IntegerOf(const YAML::Node& node) {
  if (!node.IsScalar() || IsQuoted(node)) return std::nullopt;
  const std::string& s = node.Scalar();
  const char* end = s.data() + s.size();
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

}  // namespace

YAML::Node ParseYamlDocument(std::string_view text, const std::string& source) {
  // Old Mac line ends (a lone CR): yaml-cpp reads none of them as a line break, so a whole file
  // was one comment or one key ("the file is empty"). YAML counts CR, LF and CRLF alike as a
  // break; so does ptdp, the line numbers of its messages included.
  std::string document(text);
  for (size_t i = document.find('\r'); i != std::string::npos; i = document.find('\r', i + 1)) {
    if (i + 1 == document.size() || document[i + 1] != '\n') document[i] = '\n';
  }
  YAML::Node root;
  try {
    root = YAML::Load(document);
  } catch (const YAML::Exception& e) {
    const bool json = source.ends_with(".json");
    throw InputError({source, e.mark.line + 1, ""},
                     (json ? "invalid JSON: " : "invalid YAML: ") + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) throw InputError({source, 0, ""}, "the file is empty");
  return root;
}

std::string ReadTextFile(const std::string& path) {
  if (path == "-") {
    std::ostringstream buffer;
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError({path, 0, ""}, fmt::format("cannot read file: {}", std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

YamlMap::YamlMap(const YAML::Node& node, std::string source, std::string path, int line)
    : source_(std::move(source)), path_(std::move(path)), line_(line) {
  if (!node.IsMap()) {
    throw InputError({source_, line_, path_},
                     fmt::format("expected a map of keys, got {}", Describe(node)));
  }
  // Each key's first line, by key: a file of many keys is read in linear time (a scan of the
  // keys before each took 49 s for 200,000 keys).
  std::unordered_map<std::string, int> first_line;
  first_line.reserve(node.size());
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) {
      throw InputError({source_, it->first.Mark().line + 1, path_}, "keys must be plain names");
    }
    Entry entry{it->first.Scalar(), it->second, it->first.Mark().line + 1};
    if (const auto [seen, added] = first_line.emplace(entry.key, entry.line); !added) {
      throw InputError({source_, entry.line, PathOf(entry.key)},
                       fmt::format("duplicate key (first at line {})", seen->second));
    }
    entries_.push_back(std::move(entry));
  }
}

const YamlMap::Entry* YamlMap::Find(std::string_view key) const {
  known_.emplace(key);
  for (const Entry& e : entries_) {
    if (e.key == key) return e.value.IsNull() ? nullptr : &e;
  }
  return nullptr;
}

const YamlMap::Entry& YamlMap::Require(std::string_view key) const {
  const Entry* e = Find(key);
  if (e != nullptr) return *e;
  std::vector<std::string> unknown;
  for (const Entry& present : entries_) {
    if (present.key == key) Fail(key, "has no value");
    if (known_.count(present.key) == 0) unknown.push_back(present.key);
  }
  // A misspelt key is more likely than a forgotten one: name it where it stands.
  const std::string near = ClosestName(key, unknown);
  if (!near.empty()) {
    throw InputError({source_, LineOf(near), PathOf(key)}, "missing required key",
                     fmt::format("this file has {} here: did you mean {}?", near, key));
  }
  Fail(key, "missing required key");
}

bool YamlMap::Has(std::string_view key) const { return Find(key) != nullptr; }

int YamlMap::LineOf(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.key == key) return e.line;
  }
  return line_;
}

std::string YamlMap::PathOf(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void YamlMap::Fail(std::string_view key, std::string message, std::string hint) const {
  throw InputError({source_, LineOf(key), PathOf(key)}, std::move(message), std::move(hint));
}

int64_t YamlMap::Int(std::string_view key) const {
  const Entry& e = Require(key);
  const std::optional<int64_t> value = IntegerOf(e.value);
  if (!value) Fail(key, fmt::format("expected an integer, got {}", Describe(e.value)));
  return *value;
}

int64_t YamlMap::PositiveInt(std::string_view key) const {
  const int64_t value = Int(key);
  if (value <= 0) Fail(key, fmt::format("must be positive, got {}", value));
  return value;
}

double YamlMap::Number(std::string_view key) const {
  const Entry& e = Require(key);
  const std::string& s = e.value.IsScalar() ? e.value.Scalar() : std::string();
  double value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (!e.value.IsScalar() || IsQuoted(e.value) || s.empty() || ec != std::errc() ||
      ptr != s.data() + s.size() || !std::isfinite(value)) {
    Fail(key, fmt::format("expected a number, got {}", Describe(e.value)));
  }
  return value;
}

double YamlMap::PositiveNumber(std::string_view key) const {
  const double value = Number(key);
  if (!(value > 0)) Fail(key, fmt::format("must be positive, got {}", YamlNumber(value)));
  return value;
}

double YamlMap::NonNegativeNumber(std::string_view key) const {
  const double value = Number(key);
  if (value < 0) Fail(key, fmt::format("must not be negative, got {}", YamlNumber(value)));
  return value;
}

std::string YamlMap::String(std::string_view key) const {
  const Entry& e = Require(key);
  if (!e.value.IsScalar()) Fail(key, fmt::format("expected a string, got {}", Describe(e.value)));
  return e.value.Scalar();
}

bool YamlMap::Bool(std::string_view key) const {
  const Entry& e = Require(key);
  if (e.value.IsScalar() && !IsQuoted(e.value)) {
    if (e.value.Scalar() == "true") return true;
    if (e.value.Scalar() == "false") return false;
  }
  Fail(key, fmt::format("expected true or false, got {}", Describe(e.value)));
}

YamlMap YamlMap::Map(std::string_view key) const {
  const Entry& e = Require(key);
  return YamlMap(e.value, source_, PathOf(key), e.line);
}

std::vector<YamlMap> YamlMap::MapList(std::string_view key) const {
  const Entry& e = Require(key);
  if (!e.value.IsSequence() || e.value.size() == 0) {
    Fail(key, fmt::format("expected a non-empty list, got {}",
                          e.value.IsSequence() ? "an empty list" : Describe(e.value)));
  }
  std::vector<YamlMap> items;
  items.reserve(e.value.size());
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    items.emplace_back(item, source_, fmt::format("{}[{}]", PathOf(key), i),
                       item.Mark().line >= 0 ? item.Mark().line + 1 : e.line);
  }
  return items;
}

std::vector<int64_t> YamlMap::IntList(std::string_view key) const {
  const Entry& e = Require(key);
  if (!e.value.IsSequence()) Fail(key, fmt::format("expected a list, got {}", Describe(e.value)));
  std::vector<int64_t> values;
  values.reserve(e.value.size());
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    const std::optional<int64_t> value = IntegerOf(item);
    if (!value) {
      throw InputError({source_, item.Mark().line >= 0 ? item.Mark().line + 1 : e.line,
                        fmt::format("{}[{}]", PathOf(key), i)},
                       fmt::format("expected an integer, got {}", Describe(item)));
    }
    values.push_back(*value);
  }
  return values;
}

std::vector<std::string> YamlMap::StringList(std::string_view key) const {
  const Entry& e = Require(key);
  if (!e.value.IsSequence()) Fail(key, fmt::format("expected a list, got {}", Describe(e.value)));
  std::vector<std::string> values;
  values.reserve(e.value.size());
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    if (!item.IsScalar()) {
      throw InputError({source_, item.Mark().line >= 0 ? item.Mark().line + 1 : e.line,
                        fmt::format("{}[{}]", PathOf(key), i)},
                       fmt::format("expected a string, got {}", Describe(item)));
    }
    values.push_back(item.Scalar());
  }
  return values;
}

std::optional<int64_t> YamlMap::OptionalPositiveInt(std::string_view key) const {
  if (!Has(key)) return std::nullopt;
  return PositiveInt(key);
}

std::optional<std::string> YamlMap::OptionalString(std::string_view key) const {
  if (!Has(key)) return std::nullopt;
  return String(key);
}

bool YamlMap::Bool(std::string_view key, bool default_value) const {
  return Has(key) ? Bool(key) : default_value;
}

double YamlMap::PositiveNumber(std::string_view key, double default_value) const {
  return Has(key) ? PositiveNumber(key) : default_value;
}

double YamlMap::NonNegativeNumber(std::string_view key, double default_value) const {
  return Has(key) ? NonNegativeNumber(key) : default_value;
}

void YamlMap::RejectUnknownKeys() const {
  for (const Entry& e : entries_) {
    if (known_.count(e.key) != 0) continue;
    // Suggest the closest known key (ClosestName).
    const std::string best = ClosestName(e.key, {known_.begin(), known_.end()});
    std::string hint = best.empty() ? fmt::format("known keys: {}", fmt::join(known_, ", "))
                                    : fmt::format("did you mean {}?", best);
    throw InputError({source_, e.line, PathOf(e.key)}, "unknown key", std::move(hint));
  }
}

// A JSON string literal is a valid YAML double-quoted scalar with the same meaning.
std::string YamlQuote(std::string_view text) { return JsonString(text); }

std::string YamlNumber(double value) { return fmt::format("{}", value); }

std::string YamlScaled(double value_si, double scale) {
  const double candidate = value_si / scale;
  // Division and multiplication each round once, so the decimal that produced value_si lies
  // within a few ulps of value_si / scale. Of the nearby doubles that map back exactly, write
  // the one with the shortest decimal form (the candidate itself when it works).
  std::string best;
  double up = candidate, down = candidate;
  for (int step = 0; step <= 4; ++step) {
    for (double probe : {down, up}) {
      if (probe * scale != value_si) continue;
      std::string text = YamlNumber(probe);
      if (best.empty() || text.size() < best.size()) best = std::move(text);
    }
    up = std::nextafter(up, INFINITY);
    down = std::nextafter(down, -INFINITY);
  }
  return best.empty() ? YamlNumber(candidate) : best;
}

void YamlWriter::Line(std::string_view key, std::string_view value, std::string_view comment) {
  text_ += fmt::format("{:{}}{}: {}", "", indent_ * 2, key, value);
  if (!comment.empty()) text_ += fmt::format("  # {}", comment);
  text_ += '\n';
}

void YamlWriter::Begin(std::string_view key) {
  text_ += fmt::format("{:{}}{}:\n", "", indent_ * 2, key);
  ++indent_;
}

void YamlWriter::Item(std::string_view value) {
  text_ += fmt::format("{:{}}- {}\n", "", indent_ * 2, value);
}

void YamlWriter::End() { --indent_; }

void YamlWriter::Comment(std::string_view text) {
  text_ += fmt::format("{:{}}# {}\n", "", indent_ * 2, text);
}

}  // namespace ptdp
