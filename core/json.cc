#include "core/json.h"

#include <fmt/format.h>

#include <cmath>

#include "core/text.h"

namespace ptdp {

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = DecodeUtf8(text.substr(i));
    if (c.length == 0) {
      // Not UTF-8, which JSON text must be: the byte as the text `\xNN` (as PrintableText
      // writes it), so that the document stays valid and says what was there.
      out += fmt::format("\\\\x{:02x}", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    switch (c.code) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        // Control characters as \u escapes: C0 (JSON requires it), DEL and C1 too, so that
        // the JSON printed on a terminal never carries one raw.
        if (c.code < 0x20 || IsControlCharacter(c.code)) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c.code));
        } else {
          out.append(text.substr(i, c.length));
        }
    }
    i += c.length;
  }
  return out + "\"";
}

std::string JsonNumber(double value) {
  return std::isfinite(value) ? fmt::format("{}", value) : "null";
}

}  // namespace ptdp
