// Plain-text tables for terminal output: a header row, a rule, then rows; numbers right-aligned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/text.h"  // GroupThousands, for the tables' numbers

namespace ptdp {

class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
  };

  explicit Table(std::vector<Column> columns);
  void AddRow(std::vector<std::string> cells);  // as many cells as columns
  std::string Render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// "1.31B", "124.4M", "6.74B", "1.01T": parameter and token counts for people.
std::string HumanCount(double count);

}  // namespace ptdp
