// The small text helpers the parsers and reports share (core/text.h).
#include "core/text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

}  // namespace
}  // namespace ptdp
