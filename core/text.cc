#include "core/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/units.h"

namespace ptdp {

size_t EditDistance(std::string_view a, std::string_view b, size_t limit) {
  const size_t gap = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (gap > limit) return limit + 1;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string ClosestName(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = 3, best_prefix = 0;
  for (const std::string& name : names) {
    const size_t prefix = static_cast<size_t>(
        std::mismatch(word.begin(), word.end(), name.begin(), name.end()).first - word.begin());
    // One a prefix of the other: as close as a distance of 2.
    const bool extends = prefix >= 3 && (prefix == word.size() || prefix == name.size());
    const size_t d = extends ? std::min<size_t>(2, EditDistance(word, name, 2))
                             : EditDistance(word, name, best_distance);
    if (d < best_distance || (d == best_distance && !best.empty() && prefix > best_prefix)) {
      best_distance = d, best_prefix = prefix, best = name;
    }
  }
  return best;
}

std::string WrapWords(std::string_view text, size_t width) {
  std::string out;
  size_t line = 0;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(' ', at), text.size());
    const std::string_view word = text.substr(at, end - at);
    if (!word.empty()) {
      if (line > 0 && line + 1 + word.size() > width) {
        out += '\n';
        line = 0;
      } else if (line > 0) {
        out += ' ';
        ++line;
      }
      out += word;
      line += word.size();
    }
    at = end + 1;
  }
  return out;
}

std::string MarkdownCell(std::string text) {
  for (size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2)) {
    text.insert(at, "\\");
  }
  return text;
}

std::vector<std::string_view> SplitOn(std::string_view line, char separator) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t at = line.find(separator, start);
    out.push_back(line.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  // XML 1.0 allows no C0 control but tab and newline, and only UTF-8 text.
  return PrintableText(out);
}

Utf8Char DecodeUtf8(std::string_view text) {
  if (text.empty()) return {};
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char first = byte(0);
  if (first < 0x80) return {1, first, false};
  size_t length = 0;
  char32_t code = 0, least = 0;
  if (first >= 0xC2 && first <= 0xDF) {
    length = 2, code = first & 0x1F, least = 0x80;
  } else if (first >= 0xE0 && first <= 0xEF) {
    length = 3, code = first & 0x0F, least = 0x800;
  } else if (first >= 0xF0 && first <= 0xF4) {
    length = 4, code = first & 0x07, least = 0x10000;
  } else {
    return {};  // a continuation byte, 0xC0/0xC1 (always overlong) or 0xF5-0xFF
  }
  for (size_t i = 1; i < length; ++i) {
    if (i >= text.size()) return {0, 0, true};
    if ((byte(i) & 0xC0) != 0x80) return {};
    code = (code << 6) | (byte(i) & 0x3F);
    // Overlong forms, surrogates and code points past U+10FFFF show in the second byte: refuse
    // them there, so that a truncated prefix is never one that cannot become valid.
    if (i == 1 && length > 2) {
      const char32_t top = code << (6 * (length - 2));
      if (top < least || (top >= 0xD800 && top <= 0xDFFF) || top > 0x10FFFF) return {};
    }
  }
  return {length, code, false};
}

bool IsControlCharacter(char32_t code) {
  return (code < 0x20 && code != '\n' && code != '\t') || (code >= 0x7F && code <= 0x9F);
}

std::string PrintableText(std::string_view text, bool one_line) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = DecodeUtf8(text.substr(i));
    if (c.length == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (one_line && c.code == '\n') {
      out += "\\n";
    } else if (one_line && c.code == '\t') {
      out += "\\t";
    } else if (IsControlCharacter(c.code)) {
      out += c.code < 0x80 ? fmt::format("\\x{:02x}", static_cast<unsigned>(c.code))
                           : fmt::format("\\u{:04x}", static_cast<unsigned>(c.code));
    } else {
      out.append(text.substr(i, c.length));
    }
    i += c.length;
  }
  return out;
}

std::string ShortWord(std::string_view word) {
  if (word.size() <= kLongWordBytes) return std::string(word);
  size_t cut = kShortWordBytes;
  // Not inside a character: back up over continuation bytes (at most 3).
  for (int k = 0; k < 3 && cut > 0 && (static_cast<unsigned char>(word[cut]) & 0xC0) == 0x80; ++k) {
    --cut;
  }
  return fmt::format("{}... ({} bytes)", word.substr(0, cut), word.size());
}

std::string QuotedWord(std::string_view word) { return PrintableText(ShortWord(word), true); }

std::string ShortenLongWords(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t end = std::min(text.find_first_of(" \t\n", i), text.size());
    if (end == i) {
      out += text[i++];
      continue;
    }
    // Punctuation after a long word ("(--xxx...):") stays after its shortened form.
    std::string_view word = text.substr(i, end - i);
    size_t tail = 0;
    while (tail < 3 && word.size() > tail &&
           std::string_view(")]}>:;,.'\"").find(word[word.size() - 1 - tail]) !=
               std::string_view::npos) {
      ++tail;
    }
    if (word.size() > kLongWordBytes) {
      out += ShortWord(word.substr(0, word.size() - tail));
      out.append(word.substr(word.size() - tail));
    } else {
      out.append(word);
    }
    i = end;
  }
  return out;
}

std::string GroupThousands(int64_t n) {
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

double NiceTickStep(double span, int ticks) {
  const double raw = span / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0}) {
    if (raw <= f * power) return f * power;
  }
  return 10 * power;
}

std::string Seconds(double s) {
  if (s >= 1.0) return fmt::format("{:.3g} s", s);
  if (s >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} us", s * 1e6);
}

double InMemoryUnit(double bytes, MemoryUnit unit) {
  return bytes / (unit == MemoryUnit::kGiB ? units::kGiB : units::kGB);
}

std::string_view MemoryUnitName(MemoryUnit unit) {
  return NameOf<MemoryUnit>(kMemoryUnitNames, unit);
}

std::string MemoryNumber(double bytes, MemoryUnit unit) {
  return fmt::format("{:.1f}", InMemoryUnit(bytes, unit));
}

std::string Memory(double bytes, MemoryUnit unit) {
  return fmt::format("{} {}", MemoryNumber(bytes, unit), MemoryUnitName(unit));
}

}  // namespace ptdp
