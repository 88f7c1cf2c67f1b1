// One name table per enumeration, shared by YAML files, command-line flags and output, so
// that a value is spelled the same everywhere and a new value is added in one place.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ptdp {

template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};

template <typename E>
constexpr std::string_view NameOf(std::span<const EnumName<E>> names, E value) {
  for (const auto& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

template <typename E>
constexpr std::optional<E> ValueOf(std::span<const EnumName<E>> names, std::string_view name) {
  for (const auto& n : names) {
    if (n.name == name) return n.value;
  }
  return std::nullopt;
}

// "unknown value \"relu\" (expected one of: gelu, swiglu)"
template <typename E>
std::string UnknownValueMessage(std::span<const EnumName<E>> names, std::string_view got) {
  std::string text = "unknown value \"" + std::string(got) + "\" (expected one of: ";
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i > 0 ? ", " : "") + std::string(names[i].name);
  }
  return text + ")";
}

}  // namespace ptdp
