// Small text helpers shared by parsers (suggestions), reports and pictures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.h"

namespace ptdp {

// Levenshtein distance, for did-you-mean suggestions. Beyond `limit` it answers limit + 1 without
// the full computation when the lengths alone tell (a pasted megabyte-long word is compared in
// O(1), not O(length) per candidate).
size_t EditDistance(std::string_view a, std::string_view b, size_t limit = SIZE_MAX);

// For "did you mean": the name among `names` closest to `word`, when it is close (an edit
// distance of at most 2, or one a prefix of the other sharing at least 3 characters: seq_len for
// seq_length); ties go to the longer common prefix ("tpp" gives tp rather than pp). Empty when
// none is close.
std::string ClosestName(std::string_view word, const std::vector<std::string>& names);

// `text` broken into lines of at most `width` characters between words (a longer word stands
// alone on its line).
std::string WrapWords(std::string_view text, size_t width);

// Text safe inside XML/HTML (SVG and the HTML report): & < > " escaped; a control character
// XML does not allow, or a byte that is not UTF-8, as PrintableText writes it.
std::string XmlEscape(std::string_view text);

// The UTF-8 character `text` starts with: its length in bytes (1 to 4) and code point. The
// length is 0 when the first byte starts no valid character (a lone continuation byte, an
// overlong form, a surrogate, a code point past U+10FFFF), and `truncated` is set when `text`
// ends inside a character that may yet be valid (a stream cut mid-character).
struct Utf8Char {
  size_t length = 0;
  char32_t code = 0;
  bool truncated = false;
};
Utf8Char DecodeUtf8(std::string_view text);

// Whether a character must not reach a terminal raw: C0 controls (all but `\n` and `\t`, which
// are layout), DEL and the C1 controls U+0080-U+009F (ESC and CSI start terminal commands).
bool IsControlCharacter(char32_t code);

// Text safe to print on a terminal (issue 35: a script's words must not retitle or clear it):
// control characters (IsControlCharacter) as \xNN, C1 controls as \u0080-\u009f, and a byte
// that is not UTF-8 as \xNN; the rest, other languages' letters included, as is. With
// `one_line`, newlines and tabs are escaped too (\n, \t), so that a word stays on its line.
std::string PrintableText(std::string_view text, bool one_line = false);

// Words from the user's input in messages are bounded (issue 35: a megabyte-long flag must not
// fill the terminal, twice): one up to kLongWordBytes stands whole (a long path), a longer one
// as its first kShortWordBytes bytes (never cutting a character) and "... (N bytes)".
inline constexpr size_t kLongWordBytes = 200;
inline constexpr size_t kShortWordBytes = 60;
std::string ShortWord(std::string_view word);

// A word from the input quoted in a message: ShortWord, then PrintableText on one line.
std::string QuotedWord(std::string_view word);

// `text` with every word in it (a run of characters between blanks and newlines) longer than
// kLongWordBytes shortened as ShortWord does: messages that quote what they were given stay
// short, whichever word is long. Nothing is escaped.
std::string ShortenLongWords(std::string_view text);

// Text safe inside a Markdown table cell: every '|' escaped.
std::string MarkdownCell(std::string text);

// The fields of one line of a delimited file, split at every `separator` (no quoting): "a,,b"
// gives "a", "", "b"; an empty line gives one empty field.
std::vector<std::string_view> SplitOn(std::string_view line, char separator);

// 1315819520 -> "1,315,819,520".
std::string GroupThousands(int64_t n);

// Durations for people: "1.23 s", "45.6 ms", "789 us".
std::string Seconds(double s);

// The unit memory is shown in: GiB (2^30 bytes) by default, as PyTorch
// (torch.cuda.memory_allocated / 2**30), Megatron-LM's memory report and nvidia-smi's MiB count
// it, or GB (1e9 bytes) on request (`--memory-unit GB`).
enum class MemoryUnit { kGiB, kGB };
inline constexpr EnumName<MemoryUnit> kMemoryUnitNames[] = {{"GiB", MemoryUnit::kGiB},
                                                            {"GB", MemoryUnit::kGB}};
double InMemoryUnit(double bytes, MemoryUnit unit);
std::string_view MemoryUnitName(MemoryUnit unit);  // "GiB" | "GB"
// "23.4" in `unit` (one decimal), for a table whose header names the unit.
std::string MemoryNumber(double bytes, MemoryUnit unit);
// "23.4 GiB".
std::string Memory(double bytes, MemoryUnit unit);

// A tick step of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `span` (> 0).
double NiceTickStep(double span, int ticks);

}  // namespace ptdp
