#include "planner/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "core/cluster_override.h"
#include "core/text.h"
#include "megatron/rules.h"
#include "megatron/write_flags.h"
#include "simulator/timeline.h"

namespace ptdp {
namespace {

// Text's box in the chart (12 px sans-serif: about 0.62 em a character, 12 px high).
struct Box {
  double x0, y0, x1, y1;
  bool Overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};
Box TextBox(double x, double baseline, std::string_view text, double font) {
  return {x, baseline - font, x + 0.62 * font * static_cast<double>(text.size()), baseline + 2};
}

// Labels "#1", "#2", ... for the first `labelled` top plans, at their markers `at` (cx, cy;
// every top plan's): plans whose markers all but coincide share one label ("#1 #2"). Each label
// takes the nearest of the places around its marker (right, left, then further up and down, with
// a leader line) inside the plot where it overlaps no label placed before it and no marker; where
// markers crowd every place, the nearest that overlaps no label. Returns the SVG elements.
std::string TopPlanLabels(const std::vector<std::pair<double, double>>& at, size_t labelled,
                          double left, double right, double top, double bottom) {
  constexpr double kFont = 11;
  std::vector<std::pair<std::string, std::pair<double, double>>> groups;
  for (size_t i = 0; i < at.size() && i < labelled; ++i) {
    bool joined = false;
    for (auto& [text, where] : groups) {
      if (std::hypot(at[i].first - where.first, at[i].second - where.second) < 4) {
        text += fmt::format(" #{}", i + 1), joined = true;
        break;
      }
    }
    if (!joined) groups.push_back({fmt::format("#{}", i + 1), at[i]});
  }
  std::vector<Box> labels, markers;
  for (const auto& [cx, cy] : at) markers.push_back({cx - 5, cy - 5, cx + 5, cy + 5});
  const auto free_of = [](const std::vector<Box>& boxes, const Box& box) {
    return std::none_of(boxes.begin(), boxes.end(), [&](const Box& b) { return b.Overlaps(box); });
  };
  std::string svg;
  for (const auto& [text, where] : groups) {
    const auto [cx, cy] = where;
    const double w = 0.62 * kFont * static_cast<double>(text.size());
    // Baselines from just above the marker outwards, each to the right, then to the left.
    std::vector<Box> places;
    for (double dy : {-6.0, 13.0, -19.0, 26.0, -32.0, 39.0, -45.0, 52.0, -58.0, 65.0}) {
      for (double dx : {7.0, -7.0 - w}) {
        const Box box = TextBox(cx + dx, cy + dy, text, kFont);
        if (box.x0 >= left && box.x1 <= right && box.y0 >= top && box.y1 <= bottom) {
          places.push_back(box);
        }
      }
    }
    auto it = std::find_if(places.begin(), places.end(),
                           [&](const Box& b) { return free_of(labels, b) && free_of(markers, b); });
    if (it == places.end()) {
      it = std::find_if(places.begin(), places.end(),
                        [&](const Box& b) { return free_of(labels, b); });
    }
    if (it == places.end()) continue;  // nowhere: the marker's tooltip still names it
    const Box box = *it;
    labels.push_back(box);
    if (box.y1 < cy - 8 || box.y0 > cy + 8) {  // away from its marker: a leader line to it
      const double ly = box.y1 < cy ? box.y1 : box.y0;
      const double lx = std::clamp(cx, box.x0, box.x1);
      svg += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#777\" "
          "stroke-width=\"0.7\"/>\n",
          cx, cy + (ly < cy ? -5 : 5), lx, ly);
    }
    svg += fmt::format(
        "<text class=\"top-label\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\">{}</text>\n", box.x0,
        box.y1 - 2, kFont, text);
  }
  return svg;
}

// When nothing fits: the plot says why (the rules' rejections, the closest miss) in a box at its
// left, in the half (upper or lower) away from the closest miss' ring at height avoid_y.
std::string NothingFitsNote(const PlanSearchResult& res, MemoryUnit unit, double left, double right,
                            double top, double bottom, double avoid_y) {
  std::vector<std::string> lines;
  if (res.valid == 0) {
    lines.push_back(
        fmt::format("Nothing to plot: none of the {} configurations searched passes "
                    "Megatron-LM's rules.",
                    GroupThousands(res.examined)));
  } else {
    lines.push_back(
        fmt::format("No configuration fits: {} pass Megatron-LM's rules, none fits "
                    "in {} per GPU.",
                    GroupThousands(res.valid), Memory(res.memory_limit_bytes, unit)));
  }
  if (res.closest_out_of_memory) {
    lines.push_back(
        fmt::format("Closest to fitting (ringed): {}, {:.0f}% of what is available.",
                    Memory(res.closest_out_of_memory->peak_memory_bytes, unit),
                    100 * res.closest_out_of_memory->peak_memory_bytes / res.memory_limit_bytes));
  }
  // The most frequent rejections.
  std::vector<std::pair<std::string, int64_t>> reasons(res.rejected.counts.begin(),
                                                       res.rejected.counts.end());
  std::stable_sort(reasons.begin(), reasons.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::erase_if(reasons, [](const auto& r) { return r.first == "out-of-memory"; });  // said above
  if (!reasons.empty()) lines.push_back("Rejected most often by Megatron-LM's rules:");
  for (size_t i = 0; i < reasons.size() && i < 3; ++i) {
    std::string reason = reasons[i].first;
    if (reason.size() > 90) reason = reason.substr(0, 87) + "...";
    lines.push_back(fmt::format("{} x {}", GroupThousands(reasons[i].second), reason));
  }
  lines.push_back("See \"No valid plan\" above for what would make one fit.");
  // About 0.6 em a character at 13 px (bold: 0.65).
  double width = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    width = std::max(width, (i == 0 ? 0.65 : 0.6) * 13 * static_cast<double>(lines[i].size()));
  }
  width = std::min(width + 24, right - left - 20);
  const double height = 20.0 * static_cast<double>(lines.size()) + 10;
  const double box_y =
      avoid_y < (top + bottom) / 2 ? bottom - 12 - height : top + 22;  // away from the ring
  std::string svg = fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"white\" "
      "fill-opacity=\"0.92\" stroke=\"#c0392b\" rx=\"6\"/>\n",
      left + 10, box_y, width, height);
  for (size_t i = 0; i < lines.size(); ++i) {
    svg += fmt::format(
        "<text class=\"nothing-fits\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"13\"{}>{}</text>\n",
        left + 22, box_y + 20 + 20.0 * static_cast<double>(i),
        i == 0 ? " font-weight=\"bold\"" : "", XmlEscape(lines[i]));
  }
  return svg;
}

// Megatron-LM flags, each flag with its values in a span that does not wrap inside: a long
// line wraps between flags.
std::string FlagsHtml(const std::vector<std::string>& args) {
  std::string html, group;
  const auto flush = [&] {
    if (group.empty()) return;
    html += (html.empty() ? "" : " ") + std::string("<span class=\"flag\">") + XmlEscape(group) +
            "</span>";
    group.clear();
  };
  for (const std::string& a : args) {
    if (a.rfind("--", 0) == 0) flush();
    group += (group.empty() ? "" : " ") + a;
  }
  flush();
  return html;
}

// The chart's frame: its size and margins, its ranges of memory (clamped: the fitting region
// readable, and with nothing fitting the closest miss in view) and of tokens per second, and its
// scales.
struct ChartFrame {
  MemoryUnit unit;
  double tokens;  // per step
  double w = 900, h = 480, left = 80, right = 20, top = 40, bottom = 50;
  double max_mem, max_tps, clamp_mem, x_scale, y_scale;
  double X(double bytes) const {
    return left + InMemoryUnit(std::min(bytes, max_mem), unit) * x_scale;
  }
  double Y(double tps) const { return h - bottom - tps * y_scale; }
};

ChartFrame MakeChartFrame(const PlanRequest& req, const PlanSearchResult& res) {
  ChartFrame f;
  f.unit = req.memory_unit;
  f.tokens = static_cast<double>(req.training.global_batch_size) * req.model.seq_length;
  f.max_mem = res.memory_limit_bytes * 1.05, f.max_tps = 0;
  for (const CandidatePoint& p : res.points) {
    f.max_mem = std::max(f.max_mem, p.peak_memory_bytes);
    f.max_tps = std::max(f.max_tps, f.tokens / p.step_lower_bound_s);
  }
  // Keep the fitting region readable; with nothing fitting, keep the closest miss in view.
  f.clamp_mem = 3 * res.memory_limit_bytes;
  if (res.plans.empty() && res.closest_out_of_memory) {
    f.clamp_mem = std::max(f.clamp_mem, 1.15 * res.closest_out_of_memory->peak_memory_bytes);
  }
  f.max_mem = std::min(f.max_mem, f.clamp_mem);
  if (f.max_tps <= 0) f.max_tps = 1;
  f.x_scale = (f.w - f.left - f.right) / (InMemoryUnit(f.max_mem, f.unit));
  f.y_scale = (f.h - f.top - f.bottom) / (f.max_tps * 1.05);
  return f;
}

// Axes and grid, the axes' titles, and the line of the memory available.
std::string ChartAxes(const ChartFrame& f, const PlanSearchResult& res) {
  const double w = f.w, h = f.h, left = f.left, right = f.right, top = f.top, bottom = f.bottom;
  std::string svg;
  const double gx = NiceTickStep(InMemoryUnit(f.max_mem, f.unit), 6),
               gy = NiceTickStep(f.max_tps, 6);
  for (double g = 0; g <= InMemoryUnit(f.max_mem, f.unit) + 1e-9; g += gx) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
        left + g * f.x_scale, top, h - bottom, h - bottom + 16, g);
  }
  for (double g = 0; g <= f.max_tps * 1.05 + 1e-9; g += gy) {
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{3}\" y=\"{1:.1f}\" text-anchor=\"end\" dominant-baseline=\"middle\">{4}"
        "</text>\n",
        left, f.Y(g), w - right, left - 6,
        res.points.empty() ? "" : GroupThousands(static_cast<int64_t>(g)));  // none: no scale
  }
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">peak memory per GPU ({})</text>\n"
      "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">tokens per "
      "second</text>\n",
      (left + w - right) / 2, h - 18, MemoryUnitName(f.unit), (top + h - bottom) / 2);
  const double limit_x = f.X(res.memory_limit_bytes);
  svg += fmt::format(
      "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#c0392b\" "
      "stroke-dasharray=\"5 4\"/><text x=\"{3:.1f}\" y=\"{4}\" fill=\"#c0392b\"{5}>memory "
      "available</text>\n",
      limit_x, top, h - bottom, limit_x - 4, top + 12,
      // Near the right edge, the label ends at the line instead of starting there.
      limit_x + 120 > w - right ? " text-anchor=\"end\"" : "");
  return svg;
}

// Every candidate (thinned to at most ~20,000 points), then the ranked plans on top with their
// labels.
std::string ChartPoints(const ChartFrame& f, const PlanSearchResult& res) {
  std::string svg;
  const size_t stride = std::max<size_t>(1, res.points.size() / 20000);
  for (size_t i = 0; i < res.points.size(); i += stride) {
    const CandidatePoint& p = res.points[i];
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.2\" fill=\"{}\" "
        "fill-opacity=\"0.45\"/>\n",
        f.X(p.peak_memory_bytes), f.Y(f.tokens / p.step_lower_bound_s),
        p.fits ? "#4c78a8" : "#aaaaaa");
  }
  std::vector<std::pair<double, double>> markers;  // the top plans'
  for (size_t i = 0; i < res.plans.size(); ++i) {
    const SimulationReport& r = res.plans[i].report;
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"#f28e2b\" stroke=\"#333\" "
        "stroke-width=\"0.8\"><title>#{} {:.3g} s/step, {}</title></circle>\n",
        f.X(r.peak_memory_bytes), f.Y(r.tokens_per_s), i + 1, r.step_time_s,
        Memory(r.peak_memory_bytes, f.unit));
    markers.push_back({f.X(r.peak_memory_bytes), f.Y(r.tokens_per_s)});
  }
  svg += TopPlanLabels(markers, 3, f.left, f.w - f.right, f.top, f.h - f.bottom);
  return svg;
}

// When nothing fits: the closest miss ringed, and the note saying why.
std::string ChartNothingFits(const ChartFrame& f, const PlanRequest& req,
                             const PlanSearchResult& res) {
  std::string svg;
  double ring_y = f.top + f.h;  // none: below the plot
  if (res.closest_out_of_memory) {
    const CandidatePoint& p = *res.closest_out_of_memory;
    ring_y = f.Y(f.tokens / p.step_lower_bound_s);
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"7\" fill=\"none\" stroke=\"#c0392b\" "
        "stroke-width=\"2\"><title>closest to fitting: {}</title></circle>\n",
        f.X(p.peak_memory_bytes), f.Y(f.tokens / p.step_lower_bound_s),
        Memory(p.peak_memory_bytes, f.unit));
  }
  return svg + NothingFitsNote(res, req.memory_unit, f.left, f.w - f.right, f.top, f.h - f.bottom,
                               ring_y);
}

// Legend, above the plot: each entry after the one before (about 0.6 em a character).
std::string ChartLegend(const ChartFrame& f, const PlanSearchResult& res) {
  std::string svg;
  double lx = f.left + 4;
  const auto entry = [&](std::string_view circle, std::string_view text) {
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"14\" {}/><text x=\"{:.1f}\" y=\"18\">{}</text>",
                       lx, circle, lx + 8, text);
    lx += 8 + 0.6 * 12 * static_cast<double>(text.size()) + 18;
  };
  entry("r=\"4\" fill=\"#4c78a8\"", "fits (cost-model bound)");
  entry("r=\"4\" fill=\"#aaaaaa\"",
        fmt::format("does not fit (memory axis clamped at {:.3g}x what is available)",
                    f.clamp_mem / res.memory_limit_bytes));
  entry("r=\"5\" fill=\"#f28e2b\" stroke=\"#333\"", "top plans (simulated)");
  return svg + "\n";
}

// Tokens per second against peak memory per GPU for every valid candidate: the cost model's
// bound for all of them (an upper bound on throughput), the simulated figure for the top plans.
std::string Chart(const PlanRequest& req, const PlanSearchResult& res) {
  const ChartFrame f = MakeChartFrame(req, res);
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n",
      f.w, f.h);
  svg += ChartAxes(f, res);
  svg += ChartPoints(f, res);
  if (res.plans.empty()) svg += ChartNothingFits(f, req, res);
  svg += ChartLegend(f, res);
  return svg + "</svg>\n";
}

// The page's head (title, style) and the search's summary.
std::string HtmlHead(const PlanRequest& req, const PlanSearchResult& res) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>ptdp plan: {} on {} x {}</title>\n"
      "<style>body{{font-family:'DejaVu Sans',Arial,sans-serif;margin:24px 32px;color:#222;"
      "max-width:1250px}} h1{{font-size:22px}} h2{{font-size:17px;margin-top:28px}} "
      "table{{border-collapse:collapse;font-size:13px}} th,td{{padding:4px 9px;border-bottom:"
      "1px solid #ddd;text-align:right}} th{{background:#f4f4f4}} td.l,th.l{{text-align:left}}"
      " .note{{color:#555;font-size:13px}} code{{background:#f4f4f4;padding:2px 4px;"
      "font-size:12px;line-height:1.7}} .flag{{white-space:nowrap}}</style></head><body>\n",
      XmlEscape(req.model.name), req.gpus, XmlEscape(req.cluster.name));
  html += fmt::format(
      "<h1>ptdp plan: {} on {} x {}, global batch {}, {}</h1>\n<p>Searched {} configurations: "
      "{} pass Megatron-LM's rules, {} fit in {} per GPU; the ranking simulated {} of "
      "them (exact: the same as simulating all).</p>\n",
      XmlEscape(req.model.name), req.gpus, XmlEscape(req.cluster.name),
      req.training.global_batch_size, Name(req.training.precision), GroupThousands(res.examined),
      GroupThousands(res.valid), GroupThousands(res.fits),
      Memory(res.memory_limit_bytes, req.memory_unit), GroupThousands(res.simulated));
  if (const std::string changed = ClusterOverridesLine(req.cluster); !changed.empty()) {
    html += "<p><b>What-if hardware:</b> " + XmlEscape(changed) + "</p>\n";
  }
  return html;
}

// The flags of the best plan Megatron-LM can run (BestRunnable; zero-bubble plans are ranked,
// not run), and what to know before using them: another checkpoint format, little memory left.
std::string RunnableFlagsHtml(const PlanRequest& req, const PlanSearchResult& res,
                              const RunnablePlan& runnable) {
  const Plan& plan = runnable.plan.plan;
  std::string html;
  if (runnable.rank < 0) {
    html += fmt::format(
        "<p>Best plan as flags, for a zero-bubble implementation (Megatron-LM cannot run "
        "zb-h1, and no plan with a schedule it has was found):<br><code>{}</code></p>\n",
        FlagsHtml(MegatronArgs(plan)));
  } else {
    std::string which;
    if (runnable.rank > 1) {
      which = fmt::format(" (#{}: the plans above it are zero-bubble)", runnable.rank);
    } else if (runnable.rank == 0) {
      which = fmt::format(
          " ({}, micro-batch {}: the table's plans are all zero-bubble; {:.1f}% slower than #1)",
          SizesText(plan.parallel), plan.parallel.micro_batch_size,
          100 * (runnable.plan.report.step_time_s / res.plans.front().report.step_time_s - 1));
    }
    html += fmt::format(
        "<p>Best plan Megatron-LM can run{}, as Megatron-LM flags:<br><code>{}</code></p>\n",
        XmlEscape(which), FlagsHtml(MegatronArgs(plan)));
  }
  std::vector<std::string> notes;
  notes.push_back(
      CheckpointFormatNote(plan, kDefaultCheckpointFormat, "--fix fsdp=none keeps torch_dist"));
  if (req.memory_headroom == 0) {
    notes.push_back(LowHeadroomNote(plan, runnable.plan.report, req.memory_unit));
  }
  for (const std::string& note : notes) {
    if (!note.empty()) html += "<p class=\"note\">Note: " + XmlEscape(note) + ".</p>\n";
  }
  return html;
}

// The top plans' table, with the best plan Megatron-LM can run as its flags.
std::string TopPlansHtml(const PlanRequest& req, const PlanSearchResult& res,
                         const RunnablePlan& runnable) {
  const MemoryUnit unit = req.memory_unit;
  std::string html =
      "<h2>Top plans</h2>\n<table><tr><th>#</th><th class=\"l\">layout</th><th>mbs</th>"
      "<th class=\"l\">schedule</th><th>SP</th><th class=\"l\">recompute</th><th "
      "class=\"l\">sharding</th><th class=\"l\">layers</th><th>step "
      "(s)</th><th>tokens/s</th><th>TFLOP/s per GPU</th><th>MFU</th><th>"
      "bubble</th><th>peak memory (" +
      std::string(MemoryUnitName(unit)) + ")</th></tr>\n";
  for (size_t i = 0; i < res.plans.size(); ++i) {
    const ParallelConfig& p = res.plans[i].plan.parallel;
    const SimulationReport& r = res.plans[i].report;
    html += fmt::format(
        "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">"
        "{}{}{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td "
        "class=\"l\">{}</td>"
        "<td>{:.3f}</td><td>{}</td>"
        "<td>{:.1f}</td><td>{:.1f}%</td><td>{:.1f}%</td><td>{:.1f}</td></tr>\n",
        i + 1, SizesText(p), p.micro_batch_size, Name(p.schedule),
        p.schedule == Schedule::kInterleaved ? fmt::format(" v={}", p.virtual_stages) : "",
        RunsInMegatron(p) ? "" : " *", p.sequence_parallel ? "yes" : "-", Name(p.recompute),
        ShardingText(p), SplitText(res.plans[i].plan), r.step_time_s,
        GroupThousands(static_cast<int64_t>(r.tokens_per_s)), r.model_tflops_per_gpu, 100 * r.mfu,
        100 * r.bubble_fraction, InMemoryUnit(r.peak_memory_bytes, unit));
  }
  html += "</table>\n";
  if (std::any_of(res.plans.begin(), res.plans.end(),
                  [](const RankedPlan& r) { return !RunsInMegatron(r.plan.parallel); })) {
    html +=
        "<p class=\"note\">* not in Megatron-LM (a zero-bubble schedule: ptdp models it, "
        "Megatron-LM cannot run it)</p>\n";
  }
  return html + RunnableFlagsHtml(req, res, runnable);
}

// The layout the user compared (--compare): its rank, or why it is not a plan.
std::string ReferenceHtml(const PlanSearchResult& res, MemoryUnit unit) {
  const ReferenceResult& ref = *res.reference;
  std::string html = "<p><b>Compared layout</b>: ";
  if (ref.rank > 0 && !res.plans.empty()) {
    const SimulationReport& r = ref.simulated->report;
    html += fmt::format(
        "{}, micro-batch {}, {}: {:.3f} s per step, {}, rank {} of "
        "{} ({:.2f}x the best's step time).",
        SizesText(ref.parallel), ref.parallel.micro_batch_size, Name(ref.parallel.schedule),
        r.step_time_s, Memory(r.peak_memory_bytes, unit), GroupThousands(ref.rank),
        GroupThousands(res.fits), r.step_time_s / res.plans.front().report.step_time_s);
  } else {
    html += "not a valid plan: " + XmlEscape(ref.problem);
  }
  return html + "</p>\n";
}

// The rejections per rule with an example each, and the closest miss.
std::string RejectionsHtml(const PlanSearchResult& res) {
  std::string html =
      "<h2>Why the others were rejected</h2>\n<table><tr><th class=\"l\">reason (first "
      "Megatron-LM rule broken)</th><th>count</th><th class=\"l\">example</th></tr>\n";
  for (const auto& [reason, count] : res.rejected.counts) {
    html += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>\n",
                        XmlEscape(reason), GroupThousands(count),
                        XmlEscape(res.rejected.examples.at(reason)));
  }
  html += "</table>\n";
  // Only when nothing fits: beside plans that fit, the closest miss is no news.
  if (res.closest_out_of_memory && res.fits == 0) {
    html += fmt::format("<p>Closest to fitting: {}</p>\n",
                        XmlEscape(res.closest_out_of_memory_problem));
  }
  return html;
}

// Beyond this many operations on a stage a timeline of the whole step is a barcode: the
// report adds a window of its end.
constexpr size_t kReadableOps = 48;
// The operations per stage that window shows.
constexpr size_t kWindowOps = 24;

// The timeline of the plan whose flags the report prints; with many micro-batches, the whole
// step and a window of its end (the last operations of every stage, the pipeline's drain, the
// data-parallel communication and the optimizer) where each operation is readable.
std::string TimelineHtml(const RunnablePlan& runnable) {
  const RankedPlan& shown = runnable.plan;
  const SimulationReport& r = shown.report;
  const std::string which = runnable.rank > 0    ? fmt::format("#{}", runnable.rank)
                            : runnable.rank == 0 ? "not in the table"
                                                 : "#1, zero-bubble";
  std::string html =
      fmt::format("<h2>Timeline of the plan whose flags are above ({})</h2>\n", XmlEscape(which));
  const std::string name = runnable.rank > 0    ? fmt::format("Plan #{}", runnable.rank)
                           : runnable.rank == 0 ? "Best plan Megatron-LM runs (not in the table)"
                                                : "Plan #1 (zero-bubble)";
  TimelineTitle title{fmt::format("{}: {}", name, Describe(shown.plan.parallel)),
                      fmt::format("step {:.3f} s, bubble {:.1f}%, MFU {:.1f}%", r.step_time_s,
                                  100 * r.bubble_fraction, 100 * r.mfu)};
  // Each stage's operations, in time order.
  std::vector<std::vector<double>> starts(r.schedule.stages);
  for (const SimulatedOp& o : r.sim.ops) starts[o.stage].push_back(o.start_s);
  size_t most = 0;
  for (std::vector<double>& st : starts) {
    std::sort(st.begin(), st.end());
    most = std::max(most, st.size());
  }
  if (most <= kReadableOps) return html + TimelineSvg(r.schedule, r.sim, title);
  html += fmt::format(
      "<p class=\"note\">The whole step: {} micro-batches, {} operations on a stage, too many to "
      "tell apart; below it, the step's end.</p>\n",
      NumMicrobatches(shown.plan.training, shown.plan.parallel), most);
  html += TimelineSvg(r.schedule, r.sim, title);
  // The window: from the earliest start of a stage's last kWindowOps operations to the end.
  double from = r.sim.step_time_s;
  for (const std::vector<double>& st : starts) {
    if (!st.empty()) from = std::min(from, st[st.size() - std::min(st.size(), kWindowOps)]);
  }
  title.window_start_s = from;
  html += fmt::format(
      "<p class=\"note\">The step's end: each stage's last {} operations, then the "
      "data-parallel communication and the optimizer.</p>\n",
      kWindowOps);
  return html + TimelineSvg(r.schedule, r.sim, title);
}

}  // namespace

std::string PlanReportHtml(const PlanRequest& req, const PlanSearchResult& res) {
  std::string html = HtmlHead(req, res);
  std::optional<RunnablePlan> runnable;  // the plan whose flags the report prints
  if (res.plans.empty()) {
    html += "<h2>No valid plan</h2><ul>";
    for (const std::string& hint : UnblockHints(req, res))
      html += "<li>" + XmlEscape(hint) + "</li>";
    html += "</ul>\n";
  } else {
    runnable = BestRunnable(req, res);
    html += TopPlansHtml(req, res, *runnable);
  }
  if (res.reference) html += ReferenceHtml(res, req.memory_unit);

  html += "<h2>Throughput against memory, every valid configuration</h2>\n";
  html +=
      "<p class=\"note\">Each dot is one configuration that passes Megatron-LM's rules. Its "
      "height is the throughput at the cost model's lower bound on its step time (an upper "
      "bound on tokens per second); the top plans are placed at their simulated figures.</p>\n";
  html += Chart(req, res);

  if (runnable) html += TimelineHtml(*runnable);
  html += RejectionsHtml(res);
  html += "<p class=\"note\">Generated by ptdp plan.</p>\n</body></html>\n";
  return html;
}

}  // namespace ptdp
