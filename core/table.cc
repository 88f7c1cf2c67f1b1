#include "core/table.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/text.h"

namespace ptdp {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::AddRow(std::vector<std::string> cells) {
  PTDP_CHECK(cells.size() == columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].header.size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool last = c + 1 == cells.size();
      if (columns_[c].align == Align::kRight) {
        text += fmt::format("{:>{}}", cells[c], width[c]);
      } else {
        text += last ? cells[c] : fmt::format("{:<{}}", cells[c], width[c]);
      }
      if (!last) text += "  ";
    }
    return text + "\n";
  };
  std::vector<std::string> headers;
  size_t total = 0;
  for (size_t c = 0; c < columns_.size(); ++c) {
    headers.push_back(columns_[c].header);
    total += width[c] + (c + 1 < columns_.size() ? 2 : 0);
  }
  std::string text = line(headers) + std::string(total, '-') + "\n";
  for (const auto& row : rows_) text += line(row);
  return text;
}

std::string HumanCount(double count) {
  if (count >= 1e12) return fmt::format("{:.2f}T", count / 1e12);
  if (count >= 1e9) return fmt::format("{:.2f}B", count / 1e9);
  if (count >= 1e6) return fmt::format("{:.1f}M", count / 1e6);
  if (count >= 1e3) return fmt::format("{:.1f}K", count / 1e3);
  return fmt::format("{:.0f}", count);
}

}  // namespace ptdp
