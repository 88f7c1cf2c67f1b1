#include "planner/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/megatron_args.h"
#include "core/text.h"
#include "simulator/timeline.h"

namespace ptdp {
namespace {

// Tokens per second against peak memory per GPU for every valid candidate: the cost model's
// bound for all of them (an upper bound on throughput), the simulated figure for the top plans.
std::string Chart(const PlanRequest& req, const PlanSearchResult& res) {
  const double tokens = static_cast<double>(req.training.global_batch_size) * req.model.seq_length;
  const double w = 900, h = 480, left = 80, right = 20, top = 40, bottom = 50;
  double max_mem = res.memory_limit_bytes * 1.05, max_tps = 0;
  for (const CandidatePoint& p : res.points) {
    max_mem = std::max(max_mem, p.peak_memory_bytes);
    max_tps = std::max(max_tps, tokens / p.step_lower_bound_s);
  }
  max_mem = std::min(max_mem, 3 * res.memory_limit_bytes);  // keep the fitting region readable
  if (max_tps <= 0) max_tps = 1;
  const double x_scale = (w - left - right) / (max_mem / 1e9);
  const double y_scale = (h - top - bottom) / (max_tps * 1.05);
  auto X = [&](double bytes) { return left + std::min(bytes, max_mem) / 1e9 * x_scale; };
  auto Y = [&](double tps) { return h - bottom - tps * y_scale; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n",
      w, h);
  // Axes and grid.
  const double gx = NiceTickStep(max_mem / 1e9, 6), gy = NiceTickStep(max_tps, 6);
  for (double g = 0; g <= max_mem / 1e9 + 1e-9; g += gx) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
        left + g * x_scale, top, h - bottom, h - bottom + 16, g);
  }
  for (double g = 0; g <= max_tps * 1.05 + 1e-9; g += gy) {
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{3}\" y=\"{1:.1f}\" text-anchor=\"end\" dominant-baseline=\"middle\">{4}"
        "</text>\n",
        left, Y(g), w - right, left - 6, GroupThousands(static_cast<int64_t>(g)));
  }
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">peak memory per GPU (GB)</text>\n"
      "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">tokens per "
      "second</text>\n",
      (left + w - right) / 2, h - 18, (top + h - bottom) / 2);
  const double limit_x = X(res.memory_limit_bytes);
  svg += fmt::format(
      "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#c0392b\" "
      "stroke-dasharray=\"5 4\"/><text x=\"{3:.1f}\" y=\"{4}\" fill=\"#c0392b\">memory "
      "available</text>\n",
      limit_x, top, h - bottom, limit_x - 4, top + 12);
  // Every candidate (thinned to at most ~20,000 points), then the ranked plans on top.
  const size_t stride = std::max<size_t>(1, res.points.size() / 20000);
  for (size_t i = 0; i < res.points.size(); i += stride) {
    const CandidatePoint& p = res.points[i];
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.2\" fill=\"{}\" "
        "fill-opacity=\"0.45\"/>\n",
        X(p.peak_memory_bytes), Y(tokens / p.step_lower_bound_s), p.fits ? "#4c78a8" : "#aaaaaa");
  }
  for (size_t i = 0; i < res.plans.size(); ++i) {
    const SimulationReport& r = res.plans[i].report;
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"#f28e2b\" stroke=\"#333\" "
        "stroke-width=\"0.8\"><title>#{} {:.3g} s/step, {:.1f} GB</title></circle>\n",
        X(r.peak_memory_bytes), Y(r.tokens_per_s), i + 1, r.step_time_s, r.peak_memory_bytes / 1e9);
    if (i < 3) {
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">#{}</text>\n",
                         X(r.peak_memory_bytes) + 7, Y(r.tokens_per_s) - 6, i + 1);
    }
  }
  // Legend, above the plot.
  svg += fmt::format(
      "<circle cx=\"{0}\" cy=\"14\" r=\"4\" fill=\"#4c78a8\"/><text x=\"{1}\" y=\"18\">fits "
      "(cost-model bound)</text>"
      "<circle cx=\"{2}\" cy=\"14\" r=\"4\" fill=\"#aaaaaa\"/><text x=\"{3}\" y=\"18\">does "
      "not fit (memory axis clamped at 3x what is available)</text>"
      "<circle cx=\"{4}\" cy=\"14\" r=\"5\" fill=\"#f28e2b\" stroke=\"#333\"/><text x=\"{5}\" "
      "y=\"18\">top plans (simulated)</text>\n",
      left + 4, left + 12, left + 170, left + 178, left + 540, left + 548);
  return svg + "</svg>\n";
}

}  // namespace

std::string PlanReportHtml(const PlanRequest& req, const PlanSearchResult& res) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>ptdp plan: {} on {} x {}</title>\n"
      "<style>body{{font-family:'DejaVu Sans',Arial,sans-serif;margin:24px 32px;color:#222;"
      "max-width:1250px}} h1{{font-size:22px}} h2{{font-size:17px;margin-top:28px}} "
      "table{{border-collapse:collapse;font-size:13px}} th,td{{padding:4px 9px;border-bottom:"
      "1px solid #ddd;text-align:right}} th{{background:#f4f4f4}} td.l,th.l{{text-align:left}}"
      " .note{{color:#555;font-size:13px}} code{{background:#f4f4f4;padding:2px 4px;"
      "font-size:12px;word-break:break-all}}</style></head><body>\n",
      XmlEscape(req.model.name), req.gpus, XmlEscape(req.cluster.name));
  html += fmt::format(
      "<h1>ptdp plan: {} on {} x {}, global batch {}, {}</h1>\n<p>Searched {} configurations: "
      "{} pass Megatron-LM's rules, {} fit in {:.1f} GB per GPU; the ranking simulated {} of "
      "them (exact: the same as simulating all).</p>\n",
      XmlEscape(req.model.name), req.gpus, XmlEscape(req.cluster.name),
      req.training.global_batch_size, Name(req.training.precision), GroupThousands(res.examined),
      GroupThousands(res.valid), GroupThousands(res.fits), res.memory_limit_bytes / 1e9,
      GroupThousands(res.simulated));

  if (res.plans.empty()) {
    html += "<h2>No valid plan</h2><ul>";
    for (const std::string& hint : UnblockHints(req, res))
      html += "<li>" + XmlEscape(hint) + "</li>";
    html += "</ul>\n";
  } else {
    html +=
        "<h2>Top plans</h2>\n<table><tr><th>#</th><th class=\"l\">layout</th><th>mbs</th>"
        "<th class=\"l\">schedule</th><th>SP</th><th class=\"l\">recompute</th><th "
        "class=\"l\">sharding</th><th class=\"l\">layers</th><th>step "
        "(s)</th><th>tokens/s</th><th>TFLOP/s per GPU</th><th>MFU</th><th>"
        "bubble</th><th>peak memory (GB)</th></tr>\n";
    for (size_t i = 0; i < res.plans.size(); ++i) {
      const ParallelConfig& p = res.plans[i].plan.parallel;
      const SimulationReport& r = res.plans[i].report;
      html += fmt::format(
          "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">"
          "{}{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td "
          "class=\"l\">{}</td>"
          "<td>{:.3f}</td><td>{}</td>"
          "<td>{:.1f}</td><td>{:.1f}%</td><td>{:.1f}%</td><td>{:.1f}</td></tr>\n",
          i + 1, SizesText(p), p.micro_batch_size, Name(p.schedule),
          p.schedule == Schedule::kInterleaved ? fmt::format(" v={}", p.virtual_stages) : "",
          p.sequence_parallel ? "yes" : "-", Name(p.recompute), ShardingText(p),
          SplitText(res.plans[i].plan), r.step_time_s,
          GroupThousands(static_cast<int64_t>(r.tokens_per_s)), r.model_tflops_per_gpu, 100 * r.mfu,
          100 * r.bubble_fraction, r.peak_memory_bytes / 1e9);
    }
    html += "</table>\n";
    html += fmt::format("<p>Best plan as Megatron-LM flags:<br><code>{}</code></p>\n",
                        XmlEscape(MegatronArgsLine(res.plans.front().plan)));
  }
  if (res.reference) {
    const ReferenceResult& ref = *res.reference;
    html += "<p><b>Compared layout</b>: ";
    if (ref.rank > 0 && !res.plans.empty()) {
      const SimulationReport& r = ref.simulated->report;
      html += fmt::format(
          "{}, micro-batch {}, {}: {:.3f} s per step, {:.1f} GB, rank {} of "
          "{} ({:.2f}x the best's step time).",
          SizesText(ref.parallel), ref.parallel.micro_batch_size, Name(ref.parallel.schedule),
          r.step_time_s, r.peak_memory_bytes / 1e9, GroupThousands(ref.rank),
          GroupThousands(res.fits), r.step_time_s / res.plans.front().report.step_time_s);
    } else {
      html += "not a valid plan: " + XmlEscape(ref.problem);
    }
    html += "</p>\n";
  }

  html += "<h2>Throughput against memory, every valid configuration</h2>\n";
  html +=
      "<p class=\"note\">Each dot is one configuration that passes Megatron-LM's rules. Its "
      "height is the throughput at the cost model's lower bound on its step time (an upper "
      "bound on tokens per second); the top plans are placed at their simulated figures.</p>\n";
  html += Chart(req, res);

  if (!res.plans.empty()) {
    const RankedPlan& best = res.plans.front();
    html += "<h2>Timeline of the best plan</h2>\n";
    const TimelineTitle title{
        "Best plan: " + Describe(best.plan.parallel),
        fmt::format("step {:.3f} s, bubble {:.1f}%, MFU {:.1f}%", best.report.step_time_s,
                    100 * best.report.bubble_fraction, 100 * best.report.mfu)};
    html += TimelineSvg(best.report.schedule, best.report.sim, title);
  }

  html +=
      "<h2>Why the others were rejected</h2>\n<table><tr><th class=\"l\">reason (first "
      "Megatron-LM rule broken)</th><th>count</th><th class=\"l\">example</th></tr>\n";
  for (const auto& [reason, count] : res.rejected.counts) {
    html += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>\n",
                        XmlEscape(reason), GroupThousands(count),
                        XmlEscape(res.rejected.examples.at(reason)));
  }
  html += "</table>\n";
  if (res.closest_out_of_memory) {
    html += fmt::format("<p>Closest to fitting: {}</p>\n",
                        XmlEscape(res.closest_out_of_memory_problem));
  }
  html += "<p class=\"note\">Generated by ptdp plan.</p>\n</body></html>\n";
  return html;
}

}  // namespace ptdp
