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
