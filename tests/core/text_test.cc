// The small text helpers the parsers and reports share (core/text.h).
#include "core/text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/json.h"

namespace ptdp {
namespace {

TEST(Text, SplitOnKeepsEveryFieldEmptyOnesToo) {
  using Fields = std::vector<std::string_view>;
  EXPECT_EQ(SplitOn("a,,b", ','), (Fields{"a", "", "b"}));
  EXPECT_EQ(SplitOn("a\tb\t", '\t'), (Fields{"a", "b", ""}));
  EXPECT_EQ(SplitOn("", ','), (Fields{""}));
  EXPECT_EQ(SplitOn("one", ','), (Fields{"one"}));
}

TEST(Text, AMarkdownCellEscapesEveryBar) {
  EXPECT_EQ(MarkdownCell("Et|(tt|)*30mL"), "Et\\|(tt\\|)*30mL");
  EXPECT_EQ(MarkdownCell("||"), "\\|\\|");
  EXPECT_EQ(MarkdownCell("plain"), "plain");
}

// issue 35: a launch script's words reach the terminal only as printable text.
TEST(Text, PrintableTextEscapesControlCharactersAndBytesThatAreNotUtf8) {
  // The terminal-title sequence of a flag named --$'\e]0;TITLE\a\e[2J'.
  EXPECT_EQ(PrintableText("--\x1b]0;TITLE\x07\x1b[2J"), "--\\x1b]0;TITLE\\x07\\x1b[2J");
  EXPECT_EQ(PrintableText("a\tb\nc\rd\x7f"), "a\tb\nc\\x0dd\\x7f");
  EXPECT_EQ(PrintableText("a\tb\nc", true), "a\\tb\\nc");
  // C1 controls (CSI is U+009B) as \u escapes; invalid bytes as \xNN; letters as they are.
  EXPECT_EQ(PrintableText("\xc2\x9b"
                          "2J"),
            "\\u009b2J");
  EXPECT_EQ(PrintableText("caf\xc3\xa9 \xe2\x80\xa6 \xf0\x9f\x99\x82"),
            "caf\xc3\xa9 \xe2\x80\xa6 \xf0\x9f\x99\x82");
  EXPECT_EQ(PrintableText("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(PrintableText("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(PrintableText("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(PrintableText("\xe2\x80"), "\\xe2\\x80");           // cut short
  EXPECT_TRUE(DecodeUtf8("\xe2\x80").truncated);
  EXPECT_FALSE(DecodeUtf8("\xe2\x41").truncated);
  EXPECT_EQ(XmlEscape("<a\x1b>"), "&lt;a\\x1b&gt;");
}

TEST(Text, JsonStringsAreValidJsonWhateverTheBytes) {
  // Control characters as \u escapes (DEL and C1 too); a byte that is not UTF-8 as the text
  // \xNN, so that the document parses; other letters as they are.
  EXPECT_EQ(JsonString("a\x1b\x7f\xc2\x9b\xff\"\\\n\xc3\xa9"),
            "\"a\\u001b\\u007f\\u009b\\\\xff\\\"\\\\\\n\xc3\xa9\"");
}

TEST(Text, LongWordsAreQuotedByTheirStartAndSize) {
  const std::string huge = "--" + std::string(1'000'000, 'x');
  const std::string start = "--" + std::string(58, 'x');
  EXPECT_EQ(ShortWord(huge), start + "... (1000002 bytes)");
  EXPECT_EQ(ShortWord("--short"), "--short");
  EXPECT_EQ(ShortWord(std::string(200, 'y')), std::string(200, 'y'));  // a long path stays
  EXPECT_EQ(QuotedWord("a\nb"), "a\\nb");
  EXPECT_EQ(ShortenLongWords("unrecognized arguments: " + huge + " --b"),
            "unrecognized arguments: " + start + "... (1000002 bytes) --b");
  EXPECT_EQ(ShortenLongWords("flags (" + huge + "): x"),
            "flags (" + start.substr(0, 59) + "... (1000003 bytes)): x");
  // Never inside a character: 59 ASCII bytes, then two-byte letters.
  std::string letters = std::string(59, 'a');
  for (int i = 0; i < 100; ++i) letters += "\xc3\xa9";
  EXPECT_EQ(ShortWord(letters), std::string(59, 'a') + "... (259 bytes)");
}

}  // namespace
}  // namespace ptdp
