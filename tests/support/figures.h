// Checks of the figures a command prints: in ptdp's plan and simulate output every time, rate,
// fraction, count and size is finite and non-negative, so a negative or non-finite one is a bug
// (an overflow, a reader missing a bound), never an answer. Tests of absurd input use these to
// tell "a refusal or sane figures" from "exit 0 with a wrong answer".
#pragma once

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace ptdp {

// The numbers of a JSON text that are not finite and non-negative, each as "key: text" (the
// nearest key before it; "[]" inside a list of numbers). ptdp's JSON writer turns a non-finite
// number into null (core/json.h), so a null is reported too, as are nan / inf spelt out.
inline std::vector<std::string> BadJsonFigures(std::string_view json) {
  std::vector<std::string> bad;
  std::string key;
  for (size_t i = 0; i < json.size();) {
    const char c = json[i];
    if (c == '"') {  // a string: a key when a colon follows
      size_t end = i + 1;
      while (end < json.size() && json[end] != '"') end += json[end] == '\\' ? 2 : 1;
      const std::string text(json.substr(i + 1, end - i - 1));
      size_t next = end + 1;
      while (next < json.size() && std::isspace(static_cast<unsigned char>(json[next]))) ++next;
      if (next < json.size() && json[next] == ':') key = text;
      i = end + 1;
      continue;
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c)) || std::isalpha(c)) {
      size_t end = i;
      while (end < json.size() && (std::isalnum(static_cast<unsigned char>(json[end])) ||
                                   json[end] == '-' || json[end] == '+' || json[end] == '.')) {
        ++end;
      }
      const std::string_view word = json.substr(i, end - i);
      if (word != "true" && word != "false") {
        const bool negative = word.starts_with('-');
        const bool literal = word == "null" || word.find("nan") != std::string_view::npos ||
                             word.find("inf") != std::string_view::npos;
        if (negative || literal) bad.push_back(key + ": " + std::string(word));
      }
      i = end;
      continue;
    }
    ++i;
  }
  return bad;
}

// The words of a text report that spell a negative or non-finite figure: "nan", "-nan", "inf",
// "-inf" (any case, as printf writes them), and a minus sign before a digit at the start of a
// word ("-6.71e+07 us", "-92.4%"). Flags ("--pp") and ranges ("2-8") are not figures.
inline std::vector<std::string> BadTextFigures(std::string_view text) {
  const auto separator = [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) || c == '(' || c == ')' || c == '|' ||
           c == ',' || c == '[' || c == ']';
  };
  std::vector<std::string> bad;
  for (size_t i = 0; i < text.size();) {
    if (separator(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !separator(text[end])) ++end;
    const std::string word(text.substr(i, end - i));
    i = end;
    std::string lower;
    for (char ch : word) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    while (!lower.empty() && (lower.back() == '%' || lower.back() == '.' || lower.back() == ':')) {
      lower.pop_back();
    }
    const std::string_view bare = std::string_view(lower).substr(lower.starts_with('-') ? 1 : 0);
    const bool non_finite = bare == "nan" || bare == "inf" || bare == "infinity";
    const bool negative =
        word.size() > 1 && word[0] == '-' && std::isdigit(static_cast<unsigned char>(word[1]));
    if (non_finite || negative) bad.push_back(word);
  }
  return bad;
}

}  // namespace ptdp
