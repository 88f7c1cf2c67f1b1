// Small text helpers shared by parsers (suggestions), reports and pictures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ptdp {

// Levenshtein distance, for did-you-mean suggestions.
size_t EditDistance(std::string_view a, std::string_view b);

// Text safe inside XML/HTML (SVG and the HTML report): & < > " escaped.
std::string XmlEscape(std::string_view text);

// 1315819520 -> "1,315,819,520".
std::string GroupThousands(int64_t n);

// Durations and sizes for people: "1.23 s", "45.6 ms", "789 us"; "23.4 GB" (GB = 1e9 bytes).
std::string Seconds(double s);
std::string Gigabytes(double bytes);

// A tick step of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `span` (> 0).
double NiceTickStep(double span, int ticks);

}  // namespace ptdp
