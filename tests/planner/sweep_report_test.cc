// The pictures of a sweep, read back as text: the SVG is well-formed XML with a line per cluster
// and precision, the Pareto front ringed, the points without a plan said under the chart and
// every word from the user's files escaped; the HTML page holds the table, the flags and the
// summary, and no script.
#include "planner/sweep_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/presets.h"
#include "megatron/write_flags.h"
#include "planner/planner.h"

namespace ptdp {
namespace {

// What is wrong with `xml` as XML ("" when nothing): every element closed in order, one root,
// attribute values quoted, no raw '<' in text or values, every '&' an entity. Enough for the
// charts; no DTDs, CDATA or namespaces checked.
std::string XmlProblem(std::string_view xml) {
  std::vector<std::string_view> open;
  int roots = 0;
  const auto bad_text = [](std::string_view text) -> std::string {
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '<') return "a raw '<' in \"" + std::string(text) + "\"";
      if (text[i] != '&') continue;
      const size_t end = text.find(';', i);
      const std::string_view entity =
          end == std::string_view::npos ? text.substr(i) : text.substr(i, end - i + 1);
      const bool known = entity == "&amp;" || entity == "&lt;" || entity == "&gt;" ||
                         entity == "&quot;" || entity == "&apos;" ||
                         (entity.size() > 3 && entity[1] == '#');
      if (!known) return "a raw '&' in \"" + std::string(text) + "\"";
    }
    return "";
  };
  const auto is_name = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':';
  };
  for (size_t i = 0; i < xml.size();) {
    const size_t lt = xml.find('<', i);
    const std::string_view text = xml.substr(i, lt - i);
    if (std::string e = bad_text(text); !e.empty()) return e;
    if (!open.empty() || text.find_first_not_of(" \n\t") == std::string_view::npos) {
    } else {
      return "text outside the root: " + std::string(text);
    }
    if (lt == std::string_view::npos) break;
    if (xml.substr(lt, 4) == "<!--" || xml.substr(lt, 2) == "<?") {
      const std::string_view close = xml[lt + 1] == '!' ? "-->" : "?>";
      const size_t end = xml.find(close, lt);
      if (end == std::string_view::npos) return "an unclosed comment";
      i = end + close.size();
      continue;
    }
    size_t at = lt + 1;
    const bool closing = at < xml.size() && xml[at] == '/';
    at += closing;
    const size_t name_start = at;
    while (at < xml.size() && is_name(xml[at])) ++at;
    const std::string_view name = xml.substr(name_start, at - name_start);
    if (name.empty()) return "a tag without a name at " + std::to_string(lt);
    if (closing) {
      if (open.empty() || open.back() != name) {
        return "</" + std::string(name) + "> closes " +
               (open.empty() ? std::string("nothing") : "<" + std::string(open.back()) + ">");
      }
      open.pop_back();
      if (at >= xml.size() || xml[at] != '>') return "a bad closing tag </" + std::string(name);
      i = at + 1;
      continue;
    }
    // Attributes, then '>' or "/>".
    for (;;) {
      while (at < xml.size() && std::isspace(static_cast<unsigned char>(xml[at]))) ++at;
      if (at >= xml.size()) return "an unclosed tag <" + std::string(name);
      if (xml[at] == '>' || xml.substr(at, 2) == "/>") break;
      const size_t attr = at;
      while (at < xml.size() && is_name(xml[at])) ++at;
      if (at == attr || xml.substr(at, 2) != "=\"") {
        return "a bad attribute in <" + std::string(name) + "> at " + std::to_string(attr);
      }
      const size_t value_end = xml.find('"', at + 2);
      if (value_end == std::string_view::npos) return "an unclosed attribute value";
      if (std::string e = bad_text(xml.substr(at + 2, value_end - at - 2)); !e.empty()) return e;
      at = value_end + 1;
    }
    if (open.empty() && ++roots > 1) return "a second root <" + std::string(name) + ">";
    if (xml[at] == '>') {
      open.push_back(name);
      i = at + 1;
    } else {
      i = at + 2;
    }
  }
  if (!open.empty()) return "<" + std::string(open.back()) + "> is never closed";
  return roots == 1 ? "" : "no root element";
}

TEST(XmlProblem, FindsWhatIsWrong) {
  EXPECT_EQ(XmlProblem("<svg a=\"1\"><g><text>x &amp; y</text></g><line/></svg>\n"), "");
  EXPECT_NE(XmlProblem("<svg><g></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a < b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg a=1></svg>"), "");
  EXPECT_NE(XmlProblem("<svg></svg><svg></svg>"), "");
  EXPECT_NE(XmlProblem("<svg>"), "");
}

// How often `needle` occurs in `hay`.
size_t Count(std::string_view hay, std::string_view needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string_view::npos;
       at = hay.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// The value of attribute `name` in the element text `element` (0 if absent).
double NumberAttr(const std::string& element, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = element.find(key);
  return at == std::string::npos ? 0 : std::stod(element.substr(at + key.size()));
}

// The example sweep: seed-example in bf16 on dgx-h100 (priced, and changed by an override) and
// dgx-a100-80gb (no price) at 8 to 64 GPUs, a global batch of 128; dgx-a100-80gb at 8 GPUs
// without a plan. The figures are those the engine derives from each point's best plan.
struct Example {
  SweepRequest request;
  SweepResult result;
};

Example MakeExample() {
  Example e;
  SweepRequest& req = e.request;
  req.model = ModelPreset("seed-example");
  req.clusters = {ClusterPreset("dgx-h100"), ClusterPreset("dgx-a100-80gb")};
  req.clusters[0].overrides = {"nic_gb_per_s=x2"};
  req.gpu_counts = {8, 16, 32, 64};
  req.trainings = {TrainingSpec{}};
  req.batches = {SweepBatch{.sequences = 128}};
  req.tokens = 20e9;
  req.price_per_gpu_hour["dgx-h100"] = 2.5;
  for (const ClusterSpec& cluster : req.clusters) {
    std::map<int64_t, double> first_per_gpu;
    for (const int64_t gpus : req.gpu_counts) {
      SweepPoint p{.cluster = cluster.name, .gpus = gpus, .global_batch = 128};
      if (cluster.name == "dgx-a100-80gb" && gpus == 8) {
        p.problem = "no layout fits in < 80 GiB & more: try --gpus 16";
        e.result.points.push_back(p);
        continue;
      }
      if (gpus == 64) p.batch_note = "a batch of 128 on 64 GPUs: 2 sequences per GPU";
      PlanRequest plan;
      plan.model = req.model, plan.cluster = cluster, plan.gpus = gpus;
      plan.training.global_batch_size = p.global_batch;
      plan.top_k = 1;
      const PlanSearchResult found = SearchPlans(plan);
      EXPECT_FALSE(found.plans.empty());
      if (found.plans.empty()) continue;
      p.best = found.plans.front();
      p.best_rank = 1;
      const SimulationReport& r = p.best->report;
      p.tokens_per_s = r.tokens_per_s;
      p.tokens_per_s_per_gpu = r.tokens_per_s / static_cast<double>(gpus);
      p.mfu = r.mfu;
      p.peak_memory_bytes = r.peak_memory_bytes;
      p.headroom = 1 - r.peak_memory_bytes / static_cast<double>(cluster.gpu.hbm_bytes);
      p.time_to_train_s = req.tokens / p.tokens_per_s;
      p.gpu_hours = p.time_to_train_s * static_cast<double>(gpus) / 3600;
      if (const auto price = req.price_per_gpu_hour.find(cluster.name);
          price != req.price_per_gpu_hour.end()) {
        p.cost_usd = p.gpu_hours * price->second;
      }
      if (first_per_gpu.empty()) first_per_gpu[gpus] = p.tokens_per_s_per_gpu;
      p.scaling_efficiency = p.tokens_per_s_per_gpu / first_per_gpu.begin()->second;
      e.result.points.push_back(p);
    }
  }
  // Not every cluster has a price: the front is of time to train and GPU-hours.
  for (SweepPoint& p : e.result.points) {
    p.pareto =
        p.best &&
        std::none_of(e.result.points.begin(), e.result.points.end(), [&](const SweepPoint& q) {
          return q.best && q.time_to_train_s <= p.time_to_train_s && q.gpu_hours <= p.gpu_hours &&
                 (q.time_to_train_s < p.time_to_train_s || q.gpu_hours < p.gpu_hours);
        });
  }
  e.result.total_s = 1.5;
  return e;
}

const Example& TheExample() {
  static const Example e = MakeExample();
  return e;
}

TEST(SweepSvg, IsWellFormedWithALinePerClusterAndPrecisionInEachPanel) {
  const Example& e = TheExample();
  const std::string svg = SweepSvg(e.request, e.result);
  EXPECT_EQ(XmlProblem(svg), "") << svg;
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  for (const char* series : {"dgx-h100 bf16", "dgx-a100-80gb bf16"}) {
    EXPECT_EQ(Count(svg, std::string(">") + series + "</text>"), 1u) << series << " in the legend";
  }
  // Each series' colour (Okabe-Ito's first two) strokes a line in both panels and its legend.
  for (const char* colour : {"#0072b2", "#e69f00"}) {
    const std::string stroke = std::string("stroke=\"") + colour + "\" stroke-width=\"2\"";
    EXPECT_EQ(Count(svg, stroke), 3u) << colour;
  }
  // Prices on one cluster only: time to train against GPU-hours, and the note says why.
  EXPECT_NE(svg.find("Time to train against GPU-hours"), std::string::npos);
  EXPECT_NE(svg.find("none for dgx-a100-80gb; the left panel shows GPU-hours"), std::string::npos);
  // Less than two days everywhere: in hours.
  EXPECT_NE(svg.find(">hours to train 20B tokens</text>"), std::string::npos);
  EXPECT_NE(svg.find("Prices: dgx-h100 $2.50/GPU-hour, dgx-a100-80gb no price."),
            std::string::npos);
}

TEST(SweepSvg, RingsEveryParetoPointAndLabelsDoNotOverlap) {
  const Example& e = TheExample();
  const std::string svg = SweepSvg(e.request, e.result);
  const size_t front =
      static_cast<size_t>(std::count_if(e.result.points.begin(), e.result.points.end(),
                                        [](const SweepPoint& p) { return p.pareto; }));
  ASSERT_GE(front, 1u);
  EXPECT_EQ(Count(svg, "<circle class=\"pareto\""), front);
  EXPECT_NE(svg.find(">Pareto front: none faster for fewer GPU-hours</text>"), std::string::npos);
  // The GPU counts beside the points and the efficiencies at the lines' ends: boxes (0.62 em a
  // character) apart.
  struct Box {
    double x0, y0, x1, y1;
  };
  std::vector<Box> boxes;
  size_t efficiencies = 0;
  for (const std::string mark : {"<text class=\"count\"", "<text class=\"efficiency\""}) {
    for (size_t at = svg.find(mark); at != std::string::npos; at = svg.find(mark, at + 1)) {
      const std::string element = svg.substr(at, svg.find("</text>", at) - at);
      const std::string text = element.substr(element.find('>') + 1);
      const double x = NumberAttr(element, "x"), y = NumberAttr(element, "y");
      const double font = NumberAttr(element, "font-size");
      boxes.push_back({x, y - font, x + 0.62 * font * static_cast<double>(text.size()), y + 2});
      efficiencies += mark.find("efficiency") != std::string::npos;
    }
  }
  // Room for every one: a label per point with a plan and per line.
  EXPECT_EQ(boxes.size(), 7u + 2u);
  EXPECT_EQ(efficiencies, 2u);
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      const Box &a = boxes[i], &b = boxes[j];
      EXPECT_FALSE(a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1)
          << "labels " << i << " and " << j << " overlap";
    }
  }
}

TEST(SweepSvg, ListsThePointsWithoutAPlanAndEscapesTheUsersWords) {
  Example e = TheExample();
  e.request.model.name = "<a&b>";
  const std::string svg = SweepSvg(e.request, e.result);
  EXPECT_EQ(XmlProblem(svg), "");
  EXPECT_NE(svg.find("&lt;a&amp;b&gt;: training 20B tokens"), std::string::npos);
  EXPECT_EQ(svg.find("<a&b>"), std::string::npos);
  EXPECT_NE(svg.find("<text class=\"note\" x=\"20\""), std::string::npos);
  EXPECT_NE(svg.find("dgx-a100-80gb bf16 at 8 GPUs: no plan (no layout fits in &lt; 80 GiB "
                     "&amp; more: try --gpus 16)"),
            std::string::npos)
      << svg;
}

TEST(SweepSvg, WithoutTokensShowsThroughputAgainstGpus) {
  Example e = TheExample();
  e.request.tokens = 0;
  for (SweepPoint& p : e.result.points) {
    p.time_to_train_s = p.gpu_hours = 0, p.cost_usd.reset();
  }
  const std::string svg = SweepSvg(e.request, e.result);
  EXPECT_EQ(XmlProblem(svg), "");
  EXPECT_NE(svg.find(">Throughput</text>"), std::string::npos);
  EXPECT_EQ(svg.find("days"), std::string::npos);
  EXPECT_EQ(svg.find("GPU-hours"), std::string::npos);
  EXPECT_NE(svg.find(">GPUs (log2 scale)</text>"), std::string::npos);
}

TEST(SweepSvg, NoPlanAnywhereStillDrawsAFrameAndSaysSo) {
  Example e = TheExample();
  for (SweepPoint& p : e.result.points) {
    p.best.reset(), p.pareto = false, p.problem = "nothing fits";
  }
  const std::string svg = SweepSvg(e.request, e.result);
  EXPECT_EQ(XmlProblem(svg), "");
  EXPECT_EQ(Count(svg, ">No point has a plan.</text>"), 2u);
  EXPECT_NE(svg.find("dgx-h100 bf16 at 8 to 64 GPUs (4 counts): no plan (nothing fits)"),
            std::string::npos);
  EXPECT_EQ(svg.find("<circle class=\"pareto\""), std::string::npos);
}

TEST(SweepReportHtml, HoldsTheSummaryTableFlagsOverridesAndNotesAndNoScript) {
  Example e = TheExample();
  e.request.model.name = "<a&b>";
  const std::string html = SweepReportHtml(e.request, e.result);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<a&b>"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);  // nothing external
  EXPECT_EQ(html.find("href="), std::string::npos);
  // The summary.
  EXPECT_NE(html.find("<h1>ptdp sweep: &lt;a&amp;b&gt;, 20B tokens</h1>"), std::string::npos);
  EXPECT_NE(html.find("on dgx-h100 and dgx-a100-80gb, in bf16, at 8 to 64 GPUs (4 counts), "
                      "global batch 128 sequences."),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("prices per GPU-hour: dgx-h100 $2.50 and dgx-a100-80gb none."),
            std::string::npos);
  EXPECT_NE(html.find("8 points, 7 with a plan"), std::string::npos);
  // The chart, well-formed inside the page.
  const size_t svg = html.find("<svg"), svg_end = html.find("</svg>");
  ASSERT_NE(svg, std::string::npos);
  EXPECT_EQ(XmlProblem(html.substr(svg, svg_end + 6 - svg)), "");
  // The table: a header and a row per point; the point without a plan says why.
  const size_t table = html.find("<table class=\"points\">");
  ASSERT_NE(table, std::string::npos);
  const std::string rows = html.substr(table, html.find("</table>", table) - table);
  EXPECT_EQ(Count(rows, "<tr>"), e.result.points.size() + 1);
  EXPECT_NE(rows.find("no plan: no layout fits in &lt; 80 GiB &amp; more"), std::string::npos);
  for (const SweepPoint& p : e.result.points) {
    if (!p.best) continue;
    EXPECT_NE(rows.find(SizesText(p.best->plan.parallel)), std::string::npos);
    EXPECT_EQ(Count(rows, "<td>" + std::to_string(p.gpus) + "</td><td>128</td>"), 2u);
  }
  EXPECT_EQ(Count(rows, "&#10003;"),
            static_cast<size_t>(std::count_if(e.result.points.begin(), e.result.points.end(),
                                              [](const SweepPoint& p) { return p.pareto; })));
  // Best per cluster, the flags of every point with a plan (collapsed), the override, the notes.
  EXPECT_NE(html.find("<h2>Best per cluster</h2>"), std::string::npos);
  EXPECT_EQ(Count(html, "<details>"), 7u);
  EXPECT_EQ(Count(html, "<span class=\"flag\">--tensor-model-parallel-size "), 7u);
  EXPECT_NE(html.find(MegatronArgs(e.result.points.front().best->plan)[2]), std::string::npos);
  EXPECT_NE(html.find("<li>dgx-h100: <code>nic_gb_per_s=x2</code></li>"), std::string::npos);
  // The batch's note once, though both clusters have it.
  EXPECT_EQ(Count(html, "<li>At 64 GPUs: a batch of 128 on 64 GPUs: 2 sequences per GPU</li>"), 1u);
}

}  // namespace
}  // namespace ptdp
