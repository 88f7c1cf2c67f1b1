// Minimal JSON text helpers for ptdp's machine-readable output (no DOM, no parsing).
#pragma once

#include <string>
#include <string_view>

namespace ptdp {

// A JSON string literal with quotes, escaping quotes, backslashes and control characters (C0,
// DEL and C1, as \u escapes); a byte that is not UTF-8 becomes the text \xNN.
std::string JsonString(std::string_view text);

// A JSON number: shortest round-trip form; non-finite values become null.
std::string JsonNumber(double value);

}  // namespace ptdp
