// The vTrain replay as a person reads it: markdown tables and a scatter plot (vtrain.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "validation/vtrain.h"

namespace ptdp {
namespace {

bool IsMulti(const VtrainResult& r) { return r.row.params_billion > 0; }
bool Simulated(const VtrainResult& r) { return r.rejected.empty(); }

struct Group {
  int rows = 0;
  double abs_sum = 0, signed_sum = 0, worst = 0;
  int within10 = 0;
  void Add(double error) {
    ++rows;
    abs_sum += std::abs(error);
    signed_sum += error;
    within10 += std::abs(error) <= 0.10;
    if (std::abs(error) > std::abs(worst)) worst = error;
  }
  double mape() const { return rows ? abs_sum / rows : 0; }
  double bias() const { return rows ? signed_sum / rows : 0; }
};

std::string Percent(double x) { return fmt::format("{:.1f}%", 100 * x); }
std::string SignedPercent(double x) { return fmt::format("{:+.1f}%", 100 * x); }

// One table of groups, in the order of `order` (first appearance in the results).
std::string GroupTable(const std::string& title, const std::vector<std::string>& order,
                       const std::map<std::string, Group>& groups) {
  std::string out = fmt::format("| {} | rows | MAPE | mean error | within 10% | worst |\n", title);
  out += "|---|---:|---:|---:|---:|---:|\n";
  for (const std::string& key : order) {
    const Group& g = groups.at(key);
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", key, g.rows, Percent(g.mape()),
                       SignedPercent(g.bias()), g.within10, SignedPercent(g.worst));
  }
  return out;
}

std::string Layout(const VtrainRow& r) {
  return fmt::format("t{} d{} p{} b{} B{}", r.tp, r.dp, r.pp, r.micro_batch, r.global_batch);
}

// Summary per file (single-node rows have no parameter column, multi-node rows do).
std::string SummaryTable(std::span<const VtrainResult> results) {
  std::string out =
      "| file | rows | simulated | rejected | over memory | MAPE | mean error | within 10% | "
      "worst |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const bool multi : {false, true}) {
    Group g;
    int total = 0, rejected = 0, over_memory = 0;
    for (const VtrainResult& r : results) {
      if (IsMulti(r) != multi) continue;
      ++total;
      if (!Simulated(r)) {
        ++rejected;
        continue;
      }
      over_memory += !r.memory_problem.empty();
      g.Add(r.error());
    }
    if (total == 0) continue;
    out +=
        fmt::format("| {} | {} | {} | {} | {} | **{}** | {} | {} | {} |\n",
                    multi ? "multi-node" : "single-node", total, g.rows, rejected, over_memory,
                    Percent(g.mape()), SignedPercent(g.bias()), g.within10, SignedPercent(g.worst));
  }
  return out;
}

// The single-node or multi-node rows' errors per model size and per layout family.
std::string FamilyTables(std::span<const VtrainResult> results, int gpus_per_node, bool multi) {
  std::vector<std::string> model_order, layout_order;
  std::map<std::string, Group> models, layouts;
  std::vector<const VtrainRow*> model_rows;
  for (const VtrainResult& r : results) {
    if (!Simulated(r) || IsMulti(r) != multi) continue;
    const std::string model = ModelFamily(r.row);
    const std::string layout = LayoutFamily(r.row, gpus_per_node);
    if (!models.count(model)) model_order.push_back(model), model_rows.push_back(&r.row);
    if (!layouts.count(layout)) layout_order.push_back(layout);
    models[model].Add(r.error());
    layouts[layout].Add(r.error());
  }
  if (models.empty()) return "";
  // Models by size, layouts by name.
  std::vector<size_t> index(model_order.size());
  for (size_t i = 0; i < index.size(); ++i) index[i] = i;
  std::sort(index.begin(), index.end(), [&](size_t a, size_t b) {
    const VtrainRow &x = *model_rows[a], &y = *model_rows[b];
    return std::tie(x.params_billion, x.hidden, x.layers) <
           std::tie(y.params_billion, y.hidden, y.layers);
  });
  std::vector<std::string> sorted_models;
  for (size_t i : index) sorted_models.push_back(model_order[i]);
  std::sort(layout_order.begin(), layout_order.end());
  const char* name = multi ? "Multi-node" : "Single-node";
  std::string out = fmt::format("\n{} rows per model size:\n\n", name) +
                    GroupTable("model", sorted_models, models);
  out += fmt::format(
             "\n{} rows per layout family (which of tensor, data and pipeline parallelism "
             "exceed 1; x-node: the tensor-parallel group spans nodes):\n\n",
             name) +
         GroupTable("layout", layout_order, layouts);
  return out;
}

// The `worst_rows` worst rows with where their simulated time goes.
std::string WorstRows(std::span<const VtrainResult> results, int worst_rows) {
  std::vector<const VtrainResult*> sorted;
  for (const VtrainResult& r : results) {
    if (Simulated(r)) sorted.push_back(&r);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return std::abs(a->error()) > std::abs(b->error());
  });
  const size_t worst = std::min<size_t>(sorted.size(), std::max(0, worst_rows));
  if (worst == 0) return "";
  std::string out = fmt::format(
      "\nThe {} worst rows, with the simulator's breakdown (seconds per step on the average "
      "pipeline stage: compute includes recomputation and, in parentheses, the time the GPU "
      "waits for the host to launch kernels; TP, PP and DP are communication; bubble is "
      "pipeline idle time):\n\n",
      worst);
  out +=
      "| line | model | layout | measured s | simulated s | error | compute (host) | TP | PP | "
      "DP | optimizer | bubble |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (size_t i = 0; i < worst; ++i) {
    const VtrainResult& r = *sorted[i];
    const StepBreakdown& b = r.breakdown;
    out += fmt::format(
        "| {}{} | {} | {} | {:.3f} | {:.3f} | {} | {:.3f} ({:.3f}) | {:.3f} | {:.3f} | {:.3f} | "
        "{:.3f} | {:.3f} |\n",
        IsMulti(r) ? "m" : "s", r.row.line, ModelFamily(r.row), Layout(r.row), r.row.measured_s,
        r.simulated_s, SignedPercent(r.error()), b.compute_s, r.host_overhead_s, b.tp_comm_s,
        b.pp_comm_s, b.dp_comm_s, b.optimizer_s, b.bubble_s);
  }
  out += "\n(line: s = single-node file, m = multi-node file, then the line number.)\n";
  return out;
}

// The rows ptdp rejects or that exceed the GPU's memory.
std::string ProblemRows(std::span<const VtrainResult> results) {
  std::string problems;
  for (const VtrainResult& r : results) {
    if (!Simulated(r)) {
      problems += fmt::format("- {}{} {} {}: rejected: {}\n", IsMulti(r) ? "m" : "s", r.row.line,
                              ModelFamily(r.row), Layout(r.row), r.rejected);
    } else if (!r.memory_problem.empty()) {
      problems += fmt::format("- {}{} {} {}: simulated {:.3f} s, but does not fit: {}\n",
                              IsMulti(r) ? "m" : "s", r.row.line, ModelFamily(r.row), Layout(r.row),
                              r.simulated_s, r.memory_problem);
    }
  }
  return "\nRows ptdp rejects or that exceed the GPU's memory: " +
         (problems.empty() ? std::string("none.\n") : "\n\n" + problems);
}

}  // namespace

std::string VtrainMarkdown(std::span<const VtrainResult> results, int gpus_per_node,
                           const VtrainReportOptions& options) {
  std::string out = SummaryTable(results);
  for (const bool multi : {false, true}) out += FamilyTables(results, gpus_per_node, multi);
  out += WorstRows(results, options.worst_rows);
  return out + ProblemRows(results);
}

namespace {

// The nice axis values 1, 2, 5 x 10^k.
double NiceBelow(double v) {
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (const double k : {5.0, 2.0, 1.0}) {
    if (k * p <= v) return k * p;
  }
  return p;
}
double NiceAbove(double v) {
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (const double k : {1.0, 2.0, 5.0, 10.0}) {
    if (k * p >= v) return k * p;
  }
  return 10 * p;
}

// Colour-blind-safe colours (Okabe and Ito 2008; wine from Paul Tol's), no black or yellow.
constexpr const char* kColours[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                    "#D55E00", "#56B4E9", "#882255", "#999999"};

// One log-log panel of `results` (simulated ones) at (left, top), `size` pixels square.
std::string Panel(std::span<const VtrainResult* const> results, const std::string& title,
                  double left, double top, double size,
                  const std::function<const char*(const VtrainResult&)>& colour) {
  double lo = INFINITY, hi = 0;
  for (const VtrainResult* r : results) {
    lo = std::min({lo, r->row.measured_s, r->simulated_s});
    hi = std::max({hi, r->row.measured_s, r->simulated_s});
  }
  lo = NiceBelow(lo / 1.05), hi = NiceAbove(hi * 1.05);
  const double l0 = std::log10(lo), l1 = std::log10(hi);
  const auto x = [&](double s) { return left + (std::log10(s) - l0) / (l1 - l0) * size; };
  const auto y = [&](double s) { return top + size - (std::log10(s) - l0) / (l1 - l0) * size; };
  std::string svg = fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\n",
      left + size / 2, top - 10, title);
  // Grid at 1, 2, 5 x 10^k; labels where the grid is not too dense.
  for (int d = static_cast<int>(std::floor(l0)); d <= static_cast<int>(std::ceil(l1)); ++d) {
    for (const int k : {1, 2, 5}) {
      const double v = k * std::pow(10.0, d);
      if (v < lo * 0.999 || v > hi * 1.001) continue;
      const bool label = k == 1 || (l1 - l0) < 2.5;
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\"/>\n"
          "<line x1=\"{4:.1f}\" y1=\"{5:.1f}\" x2=\"{6:.1f}\" y2=\"{5:.1f}\" stroke=\"{3}\"/>\n",
          x(v), top, top + size, k == 1 ? "#bbbbbb" : "#e3e3e3", left, y(v), left + size);
      if (label) {
        svg += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n"
            "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
            x(v), top + size + 18, v, left - 6, y(v) + 4, v);
      }
    }
  }
  // The +-10% band and the y = x line.
  svg += fmt::format(
      "<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" "
      "fill=\"#777777\" fill-opacity=\"0.22\"/>\n"
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#444444\" "
      "stroke-dasharray=\"6,4\"/>\n",
      x(lo), y(lo * 1.1), x(hi / 1.1), y(hi), x(hi), y(hi / 1.1), x(lo * 1.1), y(lo), x(lo), y(lo),
      x(hi), y(hi));
  for (const VtrainResult* r : results) {
    const double px = x(r->row.measured_s), py = y(r->simulated_s);
    const char* stroke = r->memory_problem.empty() ? "#333333" : "#ff0000";
    if (IsMulti(*r)) {
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"8\" height=\"8\" fill=\"{}\" "
          "fill-opacity=\"0.9\" stroke=\"{}\" stroke-width=\"0.6\"/>\n",
          px - 4, py - 4, colour(*r), stroke);
    } else {
      svg += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\" fill-opacity=\"0.6\"{}/>\n", px,
          py, colour(*r), r->memory_problem.empty() ? "" : " stroke=\"#ff0000\"");
    }
  }
  svg += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"#555555\"/>\n"
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">measured iteration time (s)</text>\n"
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.1f} "
      "{:.1f})\">simulated iteration time (s)</text>\n",
      left, top, size, size, left + size / 2, top + size + 40, left - 48, top + size / 2, left - 48,
      top + size / 2);
  return svg;
}

}  // namespace

std::string VtrainScatterSvg(std::span<const VtrainResult> results, int gpus_per_node,
                             const std::string& title) {
  // One panel per file present: single-node rows, multi-node rows.
  std::vector<const VtrainResult*> single, multi;
  std::vector<std::string> families;
  for (const VtrainResult& r : results) {
    if (!Simulated(r)) continue;
    (IsMulti(r) ? multi : single).push_back(&r);
    const std::string f = LayoutFamily(r.row, gpus_per_node);
    if (std::find(families.begin(), families.end(), f) == families.end()) families.push_back(f);
  }
  std::sort(families.begin(), families.end());
  const auto colour = [&](const VtrainResult& r) {
    const std::string f = LayoutFamily(r.row, gpus_per_node);
    const size_t i = std::find(families.begin(), families.end(), f) - families.begin();
    return kColours[i % std::size(kColours)];
  };
  const auto count_and_mape = [](const std::vector<const VtrainResult*>& rs) {
    double sum = 0;
    for (const VtrainResult* r : rs) sum += std::abs(r->error());
    return fmt::format("{} rows, MAPE {:.1f}%", rs.size(), rs.empty() ? 0 : 100 * sum / rs.size());
  };
  std::vector<std::pair<std::string, const std::vector<const VtrainResult*>*>> panels;
  if (!single.empty()) panels.emplace_back("single node: " + count_and_mape(single), &single);
  if (!multi.empty()) panels.emplace_back("multi node: " + count_and_mape(multi), &multi);

  constexpr double kLeft = 80, kTop = 70, kSize = 440, kGap = 100, kLegend = 200;
  const double n = std::max<size_t>(panels.size(), 1);
  const double width = kLeft + n * kSize + (n - 1) * kGap + 40 + kLegend;
  const double height = kTop + kSize + 60;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"13\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"26\" font-size=\"16\" font-weight=\"bold\">{3}</text>\n",
      width, height, kLeft - 50, title);
  for (size_t i = 0; i < panels.size(); ++i) {
    svg +=
        Panel(*panels[i].second, panels[i].first, kLeft + i * (kSize + kGap), kTop, kSize, colour);
  }
  // Legend.
  const double lx = kLeft + n * kSize + (n - 1) * kGap + 30;
  double ly = kTop + 10;
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">layout family</text>\n", lx, ly);
  for (const std::string& f : families) {
    ly += 20;
    const size_t i = std::find(families.begin(), families.end(), f) - families.begin();
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        lx, ly - 10, kColours[i % std::size(kColours)], lx + 18, ly, f);
  }
  ly += 34;
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#444444\" "
      "stroke-dasharray=\"6,4\"/><text x=\"{3}\" y=\"{4}\">simulated = measured</text>\n"
      "<rect x=\"{0}\" y=\"{5}\" width=\"14\" height=\"10\" fill=\"#777777\" "
      "fill-opacity=\"0.3\"/><text x=\"{3}\" y=\"{6}\">within 10%</text>\n"
      "<rect x=\"{0}\" y=\"{7}\" width=\"10\" height=\"10\" fill=\"white\" stroke=\"#ff0000\"/>"
      "<text x=\"{3}\" y=\"{8}\">over memory</text>\n",
      lx, ly - 4, lx + 14, lx + 20, ly, ly + 12, ly + 21, ly + 28, ly + 37);
  svg += "</svg>\n";
  return svg;
}

}  // namespace ptdp
