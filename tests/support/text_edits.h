// Helpers for tests that edit a file's text and check the exact message a parser gives.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace ptdp {

// The message a parser throws for `text`, or "" when it parses.
template <typename Parse>
std::string ErrorOf(Parse parse, const std::string& text) {
  try {
    parse(text, "m.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The 1-based line of the first line of `text` that starts with `prefix`.
inline int LineOf(const std::string& text, const std::string& prefix) {
  int line = 1;
  for (size_t pos = 0; pos < text.size(); ++line) {
    if (text.compare(pos, prefix.size(), prefix) == 0) return line;
    pos = text.find('\n', pos);
    if (pos == std::string::npos) break;
    ++pos;
  }
  return 0;
}

// `text` with the first `from` replaced by `to` (a test failure when there is none).
inline std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

}  // namespace ptdp
