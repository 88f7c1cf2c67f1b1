#include "planner/sweep_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/text.h"
#include "megatron/write_flags.h"

namespace ptdp {
namespace {

// Okabe and Ito's colour-blind safe palette (its yellow left out: unreadable on white); beyond
// seven series the colours repeat, the markers and dashes still tell them apart.
constexpr std::string_view kPalette[] = {"#0072b2", "#e69f00", "#009e73", "#cc79a7",
                                         "#56b4e9", "#d55e00", "#000000"};
// A marker shape per cluster and a dash per precision: series stay apart in grey print.
enum class Shape { kCircle, kSquare, kDiamond, kTriangle, kTriangleDown };
constexpr Shape kShapes[] = {Shape::kCircle, Shape::kSquare, Shape::kDiamond, Shape::kTriangle,
                             Shape::kTriangleDown};
std::string_view Dash(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "";
    case Precision::kFp8:
      return "7 4";
    case Precision::kFp16:
      return "2 3";
    case Precision::kFp32:
      return "9 3 2 3";
  }
  return "";
}

// v rounded to `digits` significant digits.
double RoundSig(double v, int digits) {
  if (v == 0 || !std::isfinite(v)) return v;
  const double p = std::pow(10.0, digits - 1 - std::floor(std::log10(std::abs(v))));
  return std::round(v * p) / p;
}

// 1234567 -> "1.23M": `digits` significant digits, k, M, B, T.
std::string Compact(double v, int digits = 3) {
  const double r = RoundSig(v, digits);
  for (const auto& [scale, suffix] :
       {std::pair{1e12, "T"}, std::pair{1e9, "B"}, std::pair{1e6, "M"}, std::pair{1e3, "k"}}) {
    if (std::abs(r) >= scale) return fmt::format("{:g}{}", r / scale, suffix);
  }
  return fmt::format("{:g}", r);
}
std::string Usd(double v, int digits = 3) { return "$" + Compact(v, digits); }
double Days(double s) { return s / 86400; }
// Days for tables: "1595.5", "36.5", "0.528".
std::string DaysNumber(double s) {
  return Days(s) >= 10 ? fmt::format("{:.1f}", Days(s)) : fmt::format("{:.3g}", Days(s));
}

// "a, b and c".
std::string JoinWords(const std::vector<std::string>& words) {
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == words.size() ? " and " : ", ") + words[i];
  }
  return text;
}

// One line of the chart: the points of one cluster, precision and batch rule, by GPU count
// (those without a plan too: a line breaks there).
struct Series {
  std::string name;  // "dgx-h100 bf16", and the batch rule when the sweep has several
  std::string_view colour;
  Shape shape = Shape::kCircle;
  std::string_view dash;
  bool hollow = false;
  std::vector<const SweepPoint*> points;
  bool Drawn() const {
    return std::any_of(points.begin(), points.end(), [](const SweepPoint* p) { return p->best; });
  }
};

// The series in the result's order (cluster, precision, batch rule, GPU count).
std::vector<Series> SeriesOf(const SweepRequest& req, const SweepResult& res) {
  std::vector<Series> series;
  std::vector<std::string> clusters;
  for (const SweepPoint& p : res.points) {
    const SweepPoint* last = series.empty() ? nullptr : series.back().points.back();
    if (last && last->cluster == p.cluster && last->precision == p.precision &&
        last->batch_rule == p.batch_rule) {
      series.back().points.push_back(&p);
      continue;
    }
    auto cluster = std::find(clusters.begin(), clusters.end(), p.cluster);
    if (cluster == clusters.end()) cluster = clusters.insert(clusters.end(), p.cluster);
    Series s;
    s.name = fmt::format("{} {}", p.cluster, Name(p.precision));
    if (req.batches.size() > 1 && p.batch_rule < req.batches.size()) {
      s.name += ", batch " + req.batches[p.batch_rule].Text();
    }
    s.shape = kShapes[(cluster - clusters.begin()) % std::size(kShapes)];
    s.dash = Dash(p.precision);
    s.points.push_back(&p);
    series.push_back(std::move(s));
  }
  // A colour per cluster and precision, in order among those drawn (the first ones get the
  // clearest); their batch rules after the first have hollow markers and thinner lines.
  std::vector<std::pair<std::string, Precision>> coloured;
  for (Series& s : series) {
    if (!s.Drawn()) continue;
    const std::pair<std::string, Precision> key{s.points.front()->cluster,
                                                s.points.front()->precision};
    auto it = std::find(coloured.begin(), coloured.end(), key);
    if (it == coloured.end()) it = coloured.insert(coloured.end(), key);
    s.colour = kPalette[(it - coloured.begin()) % std::size(kPalette)];
    s.hollow = s.points.front()->batch_rule > 0;
  }
  return series;
}

// A marker of `shape` at (cx, cy), radius about r, filled or hollow, with a tooltip.
std::string Marker(Shape shape, bool hollow, double cx, double cy, double r,
                   std::string_view colour, std::string_view tooltip) {
  const std::string paint =
      hollow ? fmt::format("fill=\"white\" stroke=\"{}\" stroke-width=\"1.6\"><title>{}</title>",
                           colour, XmlEscape(tooltip))
             : fmt::format("fill=\"{}\" stroke=\"white\" stroke-width=\"1\"><title>{}</title>",
                           colour, XmlEscape(tooltip));
  switch (shape) {
    case Shape::kCircle:
      return fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" {}</circle>", cx, cy, r,
                         paint);
    case Shape::kSquare:
      return fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" {}</rect>",
          cx - 0.9 * r, cy - 0.9 * r, 1.8 * r, 1.8 * r, paint);
    case Shape::kDiamond:
      return fmt::format(
          "<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" "
          "{}</polygon>",
          cx, cy - 1.25 * r, cx + 1.25 * r, cy, cx, cy + 1.25 * r, cx - 1.25 * r, cy, paint);
    case Shape::kTriangle:
    case Shape::kTriangleDown: {
      const double s = shape == Shape::kTriangle ? 1 : -1;
      return fmt::format(
          "<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" {}</polygon>", cx,
          cy - s * 1.3 * r, cx + 1.2 * r, cy + s * 0.8 * r, cx - 1.2 * r, cy + s * 0.8 * r, paint);
    }
  }
  return "";
}

// A legend's swatch: the series' line, dash and marker, 24 px wide from x.
std::string Swatch(const Series& s, double x, double y) {
  return fmt::format(
             "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
             "stroke-width=\"{}\" stroke-dasharray=\"{}\"/>",
             x, y, x + 24, y, s.colour, s.hollow ? 1.3 : 2, s.dash.empty() ? "none" : s.dash) +
         Marker(s.shape, s.hollow, x + 12, y, 4, s.colour, s.name);
}

// Text's box (about 0.62 em a character, as report_html.cc estimates it).
struct Box {
  double x0, y0, x1, y1;
  bool Overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};
double TextWidth(std::string_view text, double font) {
  return 0.62 * font * static_cast<double>(text.size());
}

// Small labels beside markers: each at the first of the places around its marker (`gap` px from
// its centre) that stays in `area` and overlaps no marker and no label placed before; one with
// no such place is left out (its marker's tooltip still says it).
class LabelPlacer {
 public:
  LabelPlacer(Box area, std::vector<Box> taken) : area_(area), taken_(std::move(taken)) {}

  std::string Place(double cx, double cy, double gap, std::string_view text, double font,
                    std::string_view fill, std::string_view css_class) {
    const double w = TextWidth(text, font);
    // Left edge and baseline: right (level, then a little higher or lower), left, above, below,
    // then the corners.
    const double mid = cy + font / 3, g = gap, c = gap - 2;
    const std::pair<double, double> places[] = {
        {cx + g, mid},           {cx + g, mid - 5},           {cx + g, mid + 5},
        {cx + g, mid - 10},      {cx + g, mid + 10},          {cx - g - w, mid},
        {cx - w / 2, cy - g},    {cx - w / 2, cy + g + font}, {cx + c, cy - c},
        {cx + c, cy + c + font}, {cx - c - w, cy - c},        {cx - c - w, cy + c + font}};
    for (const auto& [x, baseline] : places) {
      const Box box{x, baseline - font, x + w, baseline + 2};
      if (box.x0 < area_.x0 || box.x1 > area_.x1 || box.y0 < area_.y0 || box.y1 > area_.y1) {
        continue;
      }
      if (std::any_of(taken_.begin(), taken_.end(),
                      [&](const Box& b) { return b.Overlaps(box); })) {
        continue;
      }
      taken_.push_back(box);
      return fmt::format(
          "<text class=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" fill=\"{}\" "
          "stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">{}</text>\n",
          css_class, x, baseline, font, fill, XmlEscape(text));
    }
    return "";
  }

 private:
  Box area_;
  std::vector<Box> taken_;
};

// One axis: the range shown, linear or logarithmic, its pixels, its ticks.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double p0 = 0, p1 = 1;  // pixels at lo and at hi
  std::vector<double> ticks;
  double At(double v) const {
    const double f = log ? std::log(v / lo) / std::log(hi / lo) : (v - lo) / (hi - lo);
    return p0 + f * (p1 - p0);
  }
};

// An axis over `values` (positive): logarithmic where they span more than 10x, ticks at 1, 2
// and 5 x 10^k (only 10^k where those are many); else linear, from zero when `from_zero`, ticks
// at NiceTickStep.
Axis ValueAxis(std::vector<double> values, double p0, double p1, bool from_zero) {
  Axis a;
  a.p0 = p0, a.p1 = p1;
  std::erase_if(values, [](double v) { return !(v > 0) || !std::isfinite(v); });
  if (values.empty()) return a;  // nothing to show: no ticks
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const double mn = *lo, mx = *hi;
  if (mx > 10 * mn) {
    a.log = true;
    const double pad = std::pow(mx / mn, 0.06);
    a.lo = mn / pad, a.hi = mx * pad;
    for (const bool decades : {false, true}) {
      a.ticks.clear();
      for (int e = static_cast<int>(std::floor(std::log10(a.lo)));
           e <= static_cast<int>(std::ceil(std::log10(a.hi))); ++e) {
        for (const double m : {1.0, 2.0, 5.0}) {
          const double v = m * std::pow(10.0, e);
          if ((!decades || m == 1) && v >= a.lo && v <= a.hi) a.ticks.push_back(v);
        }
      }
      if (a.ticks.size() <= 9) break;
    }
    return a;
  }
  const double span = mx - mn > 1e-6 * mx ? mx - mn : 0.4 * mx;
  a.lo = from_zero ? 0 : std::max(0.0, mn - 0.1 * span);
  a.hi = mx + 0.1 * span;
  const double step = NiceTickStep(a.hi - a.lo, 7);
  for (double k = std::ceil(a.lo / step); k * step <= a.hi * (1 + 1e-9); ++k) {
    a.ticks.push_back(RoundSig(k * step, 6));
  }
  return a;
}

// A log2 axis of GPU counts, a tick at each.
Axis GpuAxis(std::vector<int64_t> counts, double p0, double p1) {
  Axis a;
  a.p0 = p0, a.p1 = p1, a.log = true;
  if (counts.empty()) counts = {1};
  std::sort(counts.begin(), counts.end());
  const double mn = static_cast<double>(counts.front()), mx = static_cast<double>(counts.back());
  const double pad = mx > mn ? std::pow(mx / mn, 0.06) : 2;
  a.lo = mn / pad, a.hi = mx * pad;
  for (int64_t c : counts) a.ticks.push_back(static_cast<double>(c));
  return a;
}

// A plot's area on the page, its axes and what their ticks and titles say.
struct Plot {
  Box area;
  Axis x, y;
  std::function<std::string(double)> x_tick, y_tick;
  std::string title, x_title, y_title;
};

// The plot's title, grid, ticks (a label that would overlap the one before it is left out) and
// axis titles.
std::string PlotFrame(const Plot& p) {
  const Box& a = p.area;
  std::string svg = fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"13\" font-weight=\"bold\">{}</text>\n", a.x0,
      a.y0 - 10, XmlEscape(p.title));
  svg += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"#ccc\"/>\n",
      a.x0, a.y0, a.x1 - a.x0, a.y1 - a.y0);
  double last_x1 = -1e9;
  for (double t : p.x.ticks) {
    const double x = p.x.At(t);
    const std::string label = p.x_tick(t);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>\n", x,
        a.y0, a.y1);
    const double w = TextWidth(label, 12);
    if (x - w / 2 < last_x1 + 6) continue;
    last_x1 = x + w / 2;
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x,
                       a.y1 + 16, XmlEscape(label));
  }
  double last_y = 1e9;
  for (double t : p.y.ticks) {
    const double y = p.y.At(t);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>\n",
        a.x0, y, a.x1);
    if (last_y - y < 14) continue;
    last_y = y;
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}"
        "</text>\n",
        a.x0 - 6, y, XmlEscape(p.y_tick(t)));
  }
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n"
      "<text transform=\"translate({:.1f} {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}"
      "</text>\n",
      (a.x0 + a.x1) / 2, a.y1 + 36, XmlEscape(p.x_title), a.x0 - 64, (a.y0 + a.y1) / 2,
      XmlEscape(p.y_title));
  return svg;
}

// What a point is, for tooltips and notes: "dgx-h100 bf16 at 1,024 GPUs".
std::string PointName(const Series& s, const SweepPoint& p) {
  return fmt::format("{} at {} GPUs", s.name, GroupThousands(p.gpus));
}

// A point with a plan, all its figures in one line.
std::string Tooltip(const Series& s, const SweepPoint& p) {
  std::string text =
      fmt::format("{}, batch {}: {}, {} tokens/s ({} per GPU), MFU {:.1f}%", PointName(s, p),
                  GroupThousands(p.global_batch), SizesText(p.best->plan.parallel),
                  Compact(p.tokens_per_s), Compact(p.tokens_per_s_per_gpu), 100 * p.mfu);
  if (p.time_to_train_s > 0) {
    text +=
        fmt::format(", {:.3g} days, {} GPU-hours", Days(p.time_to_train_s), Compact(p.gpu_hours));
  }
  if (p.cost_usd) text += ", " + Usd(*p.cost_usd);
  if (p.pareto) text += " (Pareto front)";
  return text;
}

// The series' lines (broken where a point has no plan or no x) and markers in `plot`, x and y
// of a point from `x_of` and `y_of` (nullopt: not drawn). Returns the markers' boxes in `boxes`.
std::string SeriesLines(const Plot& plot, const std::vector<Series>& series,
                        const std::function<std::optional<double>(const SweepPoint&)>& x_of,
                        const std::function<double(const SweepPoint&)>& y_of,
                        std::vector<Box>& boxes) {
  std::string lines, markers;
  for (const Series& s : series) {
    std::string path;
    bool open = false;
    for (const SweepPoint* p : s.points) {
      const std::optional<double> x = p->best ? x_of(*p) : std::nullopt;
      if (!x) {
        open = false;
        continue;
      }
      const double px = plot.x.At(*x), py = plot.y.At(y_of(*p));
      path += fmt::format("{}{:.1f},{:.1f}", open ? " L" : " M", px, py);
      open = true;
      markers += Marker(s.shape, s.hollow, px, py, 4.5, s.colour, Tooltip(s, *p)) + "\n";
      boxes.push_back({px - 6, py - 6, px + 6, py + 6});
    }
    if (path.find('L') == std::string::npos) continue;  // one point: no line
    lines += fmt::format(
        "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-dasharray=\"{}\" "
        "stroke-linejoin=\"round\"/>\n",
        path.substr(1), s.colour, s.hollow ? 1.3 : 2, s.dash.empty() ? "none" : s.dash);
  }
  return lines + markers;
}

// The Pareto front (`front`: its points' x and y): a band through them as a staircase (from a
// point's x on, its y is to be had), under the lines, and a ring around each, over them. Adds
// the rings' boxes to `boxes`.
struct ParetoMarks {
  std::string band, rings;
};
ParetoMarks Pareto(const Plot& plot, const std::vector<std::pair<double, double>>& front,
                   std::vector<Box>& boxes) {
  ParetoMarks m;
  std::vector<std::pair<double, double>> at;
  for (const auto& [x, y] : front) at.push_back({plot.x.At(x), plot.y.At(y)});
  std::sort(at.begin(), at.end());
  std::string path;
  for (size_t i = 0; i < at.size(); ++i) {
    path += i == 0 ? fmt::format("M{:.1f},{:.1f}", at[i].first, at[i].second)
                   : fmt::format(" H{:.1f} V{:.1f}", at[i].first, at[i].second);
  }
  if (at.size() > 1) {
    m.band = fmt::format(
        "<path d=\"{}\" fill=\"none\" stroke=\"#999\" stroke-opacity=\"0.35\" "
        "stroke-width=\"9\" stroke-linejoin=\"round\" stroke-linecap=\"round\"/>\n",
        path);
  }
  for (const auto& [x, y] : at) {
    m.rings += fmt::format(
        "<circle class=\"pareto\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"8.5\" fill=\"none\" "
        "stroke=\"#222\" stroke-width=\"1.5\"/>\n",
        x, y);
    boxes.push_back({x - 9, y - 9, x + 9, y + 9});
  }
  return m;
}

// The notes under the chart, each a line of at most `width` characters (the table has the
// whole text): why the left panel is by GPU-hours when some clusters have a price, and the
// points without a plan, a line per run of them in a series (at most kMostNoPlan lines).
constexpr size_t kMostNoPlan = 8;
std::vector<std::string> ChartNotes(const SweepRequest& req, const std::vector<Series>& series,
                                    SweepPareto axes, size_t width) {
  std::vector<std::string> notes;
  std::vector<std::string> unpriced;
  for (const ClusterSpec& c : req.clusters) {
    if (!req.price_per_gpu_hour.count(c.name)) unpriced.push_back(c.name);
  }
  if (axes == SweepPareto::kTimeGpuHours && unpriced.size() < req.clusters.size()) {
    notes.push_back(fmt::format(
        "Cost needs a price for every cluster (--price): none for {}; the left panel shows "
        "GPU-hours, the table the cost where there is a price.",
        JoinWords(unpriced)));
  }
  size_t runs = 0, left_out = 0;
  for (const Series& s : series) {
    for (size_t i = 0; i < s.points.size(); ++i) {
      if (s.points[i]->best) continue;
      size_t end = i + 1;
      while (end < s.points.size() && !s.points[end]->best) ++end;
      std::vector<std::string> counts;
      bool same_problem = true;
      for (size_t j = i; j < end; ++j) {
        counts.push_back(GroupThousands(s.points[j]->gpus));
        same_problem &= s.points[j]->problem == s.points[i]->problem;
      }
      const SweepPoint& last = *s.points[end - 1];
      i = end - 1;
      if (runs++ >= kMostNoPlan) {
        left_out += counts.size();
        continue;
      }
      const std::string where = counts.size() <= 3
                                    ? JoinWords(counts) + " GPUs"
                                    : fmt::format("{} to {} GPUs ({} counts)", counts.front(),
                                                  counts.back(), counts.size());
      std::string problem = last.problem.empty() ? "no layout is valid and fits" : last.problem;
      std::replace(problem.begin(), problem.end(), '\n', ' ');
      if (!same_problem) problem = fmt::format("at {} GPUs: {}", counts.back(), problem);
      std::string text = fmt::format("{} at {}: no plan ({})", s.name, where, problem);
      if (text.size() > width) {  // cut between words
        const size_t cut = text.rfind(' ', width - 5);
        text = text.substr(0, cut == std::string::npos ? width - 5 : cut) + " ...)";
      }
      notes.push_back(text);
    }
  }
  if (left_out > 0) {
    notes.push_back(fmt::format("and {} more points without a plan (see the table)", left_out));
  }
  return notes;
}

// "15T", "300B" tokens.
std::string TokensText(double tokens) { return Compact(tokens); }

// The chart's geometry: 1200 px wide, two plots of 360 px height under the title and legend.
constexpr double kWidth = 1200, kPlotHeight = 360;

}  // namespace

std::string SweepSvg(const SweepRequest& req, const SweepResult& res) {
  const std::vector<Series> series = SeriesOf(req, res);
  const bool by_time = req.tokens > 0;
  const SweepPareto axes = ParetoAxes(req, res);
  const bool by_cost = axes == SweepPareto::kTimeCost;
  std::vector<int64_t> counts = req.gpu_counts;
  if (counts.empty()) {
    for (const SweepPoint& p : res.points) counts.push_back(p.gpus);
  }

  // The title, and a legend of the series drawn (rows wrap), then the Pareto front's entry.
  std::string head = fmt::format(
      "<text x=\"20\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
      XmlEscape(by_time ? fmt::format("{}: training {} tokens, time and cost by GPU count",
                                      req.model.name, TokensText(req.tokens))
                        : fmt::format("{}: throughput by GPU count", req.model.name)));
  std::string prices;
  for (const ClusterSpec& c : req.clusters) {
    const auto it = req.price_per_gpu_hour.find(c.name);
    prices += fmt::format("{}{} {}", prices.empty() ? "" : ", ", c.name,
                          it == req.price_per_gpu_hour.end()
                              ? std::string("no price")
                              : fmt::format("${:.2f}/GPU-hour", it->second));
  }
  head += fmt::format(
      "<text x=\"20\" y=\"44\" font-size=\"13\" fill=\"#444\">{}</text>\n",
      XmlEscape("Each point: the best plan Megatron-LM runs at that GPU count (exact search)." +
                (by_time ? " Prices: " + prices + "." : std::string())));
  double lx = 20, ly = 68;
  const auto legend_entry = [&](double width) {
    if (lx + width > kWidth - 20 && lx > 20) lx = 20, ly += 20;
    const double x = lx;
    lx += width;
    return x;
  };
  for (const Series& s : series) {
    if (!s.Drawn()) continue;
    const double x = legend_entry(32 + TextWidth(s.name, 12) + 18);
    head += Swatch(s, x, ly - 4) + fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                                               x + 30, ly, XmlEscape(s.name));
  }
  const bool any_pareto = std::any_of(res.points.begin(), res.points.end(),
                                      [](const SweepPoint& p) { return p.best && p.pareto; });
  if (any_pareto) {
    const std::string text = by_cost   ? "Pareto front: none faster for less money"
                             : by_time ? "Pareto front: none faster for fewer GPU-hours"
                                       : "Pareto front: none faster on fewer GPUs";
    const double x = legend_entry(32 + TextWidth(text, 12) + 18);
    head += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#999\" "
        "stroke-opacity=\"0.35\" stroke-width=\"9\" stroke-linecap=\"round\"/>"
        "<circle cx=\"{3:.1f}\" cy=\"{1:.1f}\" r=\"7\" fill=\"none\" stroke=\"#222\" "
        "stroke-width=\"1.5\"/><text x=\"{4:.1f}\" y=\"{5:.1f}\">{6}</text>\n",
        x + 2, ly - 4, x + 22, x + 12, x + 30, ly, XmlEscape(text));
  }

  // The plots.
  const double top = ly + 42, bottom = top + kPlotHeight;
  const Box left_area{80, top, 565, bottom}, right_area{690, top, 1140, bottom};
  const auto gpus_tick = [](double v) { return GroupThousands(std::llround(v)); };
  const auto compact_tick = [](double v) { return Compact(v, 4); };

  Plot left;
  left.area = left_area;
  std::function<std::optional<double>(const SweepPoint&)> left_x;
  std::function<double(const SweepPoint&)> left_y;
  std::vector<double> xs, ys;
  // Time in days, or in hours where every point takes less than two days.
  const bool in_hours = std::all_of(res.points.begin(), res.points.end(), [](const SweepPoint& p) {
    return !p.best || p.time_to_train_s < 2 * 86400;
  });
  const double time_unit_s = in_hours ? 3600 : 86400;
  if (by_time) {
    left_x = [by_cost](const SweepPoint& p) -> std::optional<double> {
      if (by_cost) return p.cost_usd;
      return p.gpu_hours;
    };
    left_y = [time_unit_s](const SweepPoint& p) { return p.time_to_train_s / time_unit_s; };
  } else {
    left_x = [](const SweepPoint& p) -> std::optional<double> {
      return static_cast<double>(p.gpus);
    };
    left_y = [](const SweepPoint& p) { return p.tokens_per_s; };
  }
  for (const SweepPoint& p : res.points) {
    if (!p.best) continue;
    if (const std::optional<double> x = left_x(p)) xs.push_back(*x), ys.push_back(left_y(p));
  }
  const std::string log_note = " (log scale)";
  if (by_time) {
    left.x = ValueAxis(xs, left_area.x0, left_area.x1, false);
    left.y = ValueAxis(ys, left_area.y1, left_area.y0, false);
    left.x_tick = by_cost ? [](double v) { return Usd(v, 4); } : compact_tick;
    left.y_tick = [in_hours](double t) {
      return fmt::format("{:g} {}", RoundSig(t, 4), in_hours ? "h" : "d");
    };
    left.title = by_cost ? "Time to train against cost" : "Time to train against GPU-hours";
    left.x_title = (by_cost ? "cost (USD)" : "GPU-hours") + (left.x.log ? log_note : "");
    left.y_title = fmt::format("{} to train {} tokens{}", in_hours ? "hours" : "days",
                               TokensText(req.tokens), left.y.log ? log_note : "");
  } else {
    left.x = GpuAxis(counts, left_area.x0, left_area.x1);
    left.y = ValueAxis(ys, left_area.y1, left_area.y0, true);
    left.x_tick = gpus_tick;
    left.y_tick = compact_tick;
    left.title = "Throughput";
    left.x_title = "GPUs (log2 scale)";
    left.y_title = std::string("tokens per second") + (left.y.log ? log_note : "");
  }

  Plot right;
  right.area = right_area;
  std::vector<double> per_gpu;
  for (const SweepPoint& p : res.points) {
    if (p.best) per_gpu.push_back(p.tokens_per_s_per_gpu);
  }
  right.x = GpuAxis(counts, right_area.x0, right_area.x1);
  right.y = ValueAxis(per_gpu, right_area.y1, right_area.y0, true);
  right.x_tick = gpus_tick;
  right.y_tick = compact_tick;
  right.title = "Throughput per GPU (% at a line's end: scaling efficiency)";
  right.x_title = "GPUs (log2 scale)";
  right.y_title = std::string("tokens per second per GPU") + (right.y.log ? log_note : "");

  std::string svg = head + PlotFrame(left) + PlotFrame(right);

  // Left: the Pareto front under the lines, its rings over them, then the GPU counts.
  std::vector<Box> taken;
  std::vector<std::pair<double, double>> front;
  for (const SweepPoint& p : res.points) {
    if (!p.best || !p.pareto) continue;
    if (const std::optional<double> x = left_x(p)) front.push_back({*x, left_y(p)});
  }
  const ParetoMarks pareto = Pareto(left, front, taken);
  svg += pareto.band + SeriesLines(left, series, left_x, left_y, taken) + pareto.rings;
  LabelPlacer left_labels(left_area, taken);
  for (const Series& s : series) {
    for (const SweepPoint* p : s.points) {
      if (!p->best || !left_x(*p) || by_time == false) continue;  // the axis says the counts
      svg += left_labels.Place(left.x.At(*left_x(*p)), left.y.At(left_y(*p)), p->pareto ? 12 : 8,
                               GroupThousands(p->gpus), 10, "#444", "count");
    }
  }

  // Right: the lines, and each line's scaling efficiency at its last point.
  taken.clear();
  const auto right_x = [](const SweepPoint& p) -> std::optional<double> {
    return static_cast<double>(p.gpus);
  };
  const auto right_y = [](const SweepPoint& p) { return p.tokens_per_s_per_gpu; };
  svg += SeriesLines(right, series, right_x, right_y, taken);
  LabelPlacer right_labels({right_area.x0, right_area.y0, kWidth - 4, right_area.y1}, taken);
  for (const Series& s : series) {
    const SweepPoint* last = nullptr;
    int drawn = 0;
    for (const SweepPoint* p : s.points) {
      if (p->best) last = p, ++drawn;
    }
    if (drawn < 2) continue;
    svg += right_labels.Place(
        right.x.At(static_cast<double>(last->gpus)), right.y.At(last->tokens_per_s_per_gpu), 8,
        fmt::format("{:.0f}%", 100 * last->scaling_efficiency), 11, s.colour, "efficiency");
  }
  if (xs.empty()) {
    for (const Box& a : {left_area, right_area}) {
      svg += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#c0392b\">No point "
          "has a plan.</text>\n",
          (a.x0 + a.x1) / 2, (a.y0 + a.y1) / 2);
    }
  }

  // The notes: series without a price, points without a plan.
  const std::vector<std::string> notes =
      ChartNotes(req, series, axes, static_cast<size_t>((kWidth - 40) / (0.6 * 12)));
  double y = bottom + 64;
  for (const std::string& note : notes) {
    svg += fmt::format("<text class=\"note\" x=\"20\" y=\"{:.1f}\" fill=\"#555\">{}</text>\n", y,
                       XmlEscape(note));
    y += 17;
  }
  return fmt::format(
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1:.0f}\" "
             "viewBox=\"0 0 {0} {1:.0f}\" font-family=\"DejaVu Sans, Arial, sans-serif\" "
             "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
             kWidth, y + 4) +
         svg + "</svg>\n";
}

namespace {

// Megatron-LM flags, each flag with its values in a span that does not wrap inside (as the plan
// report writes them): a long line wraps between flags.
std::string FlagsHtml(const std::vector<std::string>& args) {
  std::string html;
  for (const std::string& a : args) {
    if (a.rfind("--", 0) == 0) {
      html += html.empty() ? "<span class=\"flag\">" : "</span> <span class=\"flag\">";
    } else {
      html += html.empty() ? "<span class=\"flag\">" : " ";
    }
    html += XmlEscape(a);
  }
  return html.empty() ? html : html + "</span>";
}

// "1,024 sequences", "1,024 sequences per 512 GPUs (a multiple of 8)".
std::string BatchRuleWords(const SweepBatch& b) {
  std::string text = fmt::format("{} sequences", GroupThousands(b.sequences));
  if (b.at_gpus > 0) {
    text += fmt::format(" per {} GPUs, scaled with the GPU count", GroupThousands(b.at_gpus));
  }
  if (b.multiple_of > 1) text += fmt::format(" (a multiple of {})", b.multiple_of);
  return text;
}

// The page's head and its summary: what was swept, the token budget, the prices.
std::string SummaryHtml(const SweepRequest& req, const SweepResult& res) {
  const std::string model = XmlEscape(req.model.name);
  const std::string tokens = req.tokens > 0 ? Compact(req.tokens) + " tokens" : "";
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>ptdp sweep: {}{}</title>\n"
      "<style>body{{font-family:'DejaVu Sans',Arial,sans-serif;margin:24px 32px;color:#222;"
      "max-width:1250px}} h1{{font-size:22px}} h2{{font-size:17px;margin-top:28px}} "
      "table{{border-collapse:collapse;font-size:13px}} th,td{{padding:4px 9px;border-bottom:"
      "1px solid #ddd;text-align:right}} th{{background:#f4f4f4}} td.l,th.l{{text-align:left}}"
      " .note{{color:#555;font-size:13px}} code{{background:#f4f4f4;padding:2px 4px;"
      "font-size:12px;line-height:1.7}} .flag{{white-space:nowrap}} summary{{cursor:pointer;"
      "font-size:13px;margin:4px 0}} td.none{{color:#c0392b}} "
      "table.points td,.n{{white-space:nowrap}} table.points td.none{{white-space:normal}} "
      "td.low{{color:#c0392b}}</style></head><body>\n",
      model, tokens.empty() ? "" : ", " + tokens);
  html += fmt::format("<h1>ptdp sweep: {}{}</h1>\n", model, tokens.empty() ? "" : ", " + tokens);
  std::vector<std::string> clusters, precisions, batches;
  for (const ClusterSpec& c : req.clusters) clusters.push_back(XmlEscape(c.name));
  for (const TrainingSpec& t : req.trainings) precisions.push_back(std::string(Name(t.precision)));
  for (const SweepBatch& b : req.batches) batches.push_back(BatchRuleWords(b));
  std::vector<int64_t> counts = req.gpu_counts;
  std::sort(counts.begin(), counts.end());
  const std::string gpus =
      counts.empty() ? "no GPU counts"
      : counts.size() == 1
          ? fmt::format("{} GPUs", GroupThousands(counts.front()))
          : fmt::format("{} to {} GPUs ({} counts)", GroupThousands(counts.front()),
                        GroupThousands(counts.back()), counts.size());
  html += fmt::format(
      "<p>The best plan Megatron-LM runs (ptdp's exact search) for {} on {}, in {}, at "
      "{}, global batch {}.",
      model, JoinWords(clusters), JoinWords(precisions), gpus, JoinWords(batches));
  if (req.tokens > 0) {
    std::vector<std::string> prices;
    for (const ClusterSpec& c : req.clusters) {
      const auto it = req.price_per_gpu_hour.find(c.name);
      prices.push_back(XmlEscape(c.name) + (it == req.price_per_gpu_hour.end()
                                                ? std::string(" none")
                                                : fmt::format(" ${:.2f}", it->second)));
    }
    html += fmt::format(" Time and cost to train {} ({}); prices per GPU-hour: {}.", tokens,
                        GroupThousands(std::llround(req.tokens)), JoinWords(prices));
  }
  const size_t planned = static_cast<size_t>(std::count_if(
      res.points.begin(), res.points.end(), [](const SweepPoint& p) { return p.best; }));
  html += fmt::format(" {} points, {} with a plan; the sweep took {}.</p>\n", res.points.size(),
                      planned, Seconds(res.total_s));
  return html;
}

// The table of points, as `ptdp sweep` prints it.
std::string PointsHtml(const SweepRequest& req, const SweepResult& res) {
  const bool by_time = req.tokens > 0;
  std::string html =
      "<h2>Points</h2>\n<table class=\"points\"><tr><th class=\"l\">cluster</th><th "
      "class=\"l\">precision</th>"
      "<th>GPUs</th><th>batch</th><th class=\"l\">layout</th><th>step (s)</th><th>tokens/s</th>"
      "<th>tokens/s per GPU</th><th>MFU</th><th>headroom</th>";
  if (by_time) html += "<th>days</th><th>GPU-hours</th><th>cost</th>";
  html += "<th>scaling</th><th>Pareto</th></tr>\n";
  const int columns = by_time ? 15 : 12;
  bool low_headroom = false;
  for (const SweepPoint& p : res.points) {
    html += fmt::format("<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td>",
                        XmlEscape(p.cluster), Name(p.precision), GroupThousands(p.gpus),
                        GroupThousands(p.global_batch));
    if (!p.best) {
      html += fmt::format("<td class=\"l none\" colspan=\"{}\">no plan: {}</td></tr>\n",
                          columns - 4, XmlEscape(p.problem));
      continue;
    }
    html += fmt::format(
        "<td class=\"l\">{}</td><td>{:.3f}</td><td>{}</td><td>{}</td><td>{:.1f}%</td>"
        "<td{}>{:.{}f}%</td>",
        XmlEscape(SizesText(p.best->plan.parallel)), p.best->report.step_time_s,
        GroupThousands(std::llround(p.tokens_per_s)),
        GroupThousands(std::llround(p.tokens_per_s_per_gpu)), 100 * p.mfu,
        p.headroom < kMemoryModelError ? " class=\"low\"" : "", 100 * p.headroom,
        p.headroom < 0.01 ? 1 : 0);  // under 1%: "0.4%", not "0%"
    low_headroom |= p.headroom < kMemoryModelError;
    if (by_time) {
      html += fmt::format("<td>{}</td><td>{}</td><td>{}</td>", DaysNumber(p.time_to_train_s),
                          Compact(p.gpu_hours), p.cost_usd ? Usd(*p.cost_usd) : "-");
    }
    html += fmt::format("<td>{:.0f}%</td><td>{}</td></tr>\n", 100 * p.scaling_efficiency,
                        p.pareto ? "&#10003;" : "");
  }
  html += "</table>\n";
  if (low_headroom) {
    html += fmt::format(
        "<p class=\"note\">Headroom in red: the plan leaves less of the GPU's memory free than "
        "the memory model's mean error ({:.1f}%); it may not fit (--memory-headroom keeps a "
        "margin).</p>\n",
        100 * kMemoryModelError);
  }
  return html;
}

// One point in a sentence: "fp8 at 16,384 GPUs, batch 2,048: 12.3 days, $4.56M (TP 8 x ...)".
std::string PointWords(const SweepRequest& req, const SweepPoint& p) {
  std::string text = fmt::format("{} at {} GPUs, batch {}: ", Name(p.precision),
                                 GroupThousands(p.gpus), GroupThousands(p.global_batch));
  if (req.tokens > 0) {
    text +=
        fmt::format("{} days, {} GPU-hours", DaysNumber(p.time_to_train_s), Compact(p.gpu_hours));
    if (p.cost_usd) text += ", " + Usd(*p.cost_usd);
  } else {
    text += fmt::format("{} tokens/s ({} per GPU)", Compact(p.tokens_per_s),
                        Compact(p.tokens_per_s_per_gpu));
  }
  return text + " (" + SizesText(p.best->plan.parallel) + ")";
}

// Per cluster: the fastest point, and the cheapest (by cost where it has a price, else by
// GPU-hours; without a token budget, the most tokens/s per GPU).
std::string BestPerClusterHtml(const SweepRequest& req, const SweepResult& res) {
  const bool by_time = req.tokens > 0;
  std::string html = fmt::format(
      "<h2>Best per cluster</h2>\n<table><tr><th class=\"l\">cluster</th><th "
      "class=\"l\">fastest</th><th class=\"l\">{}</th></tr>\n",
      !by_time ? "most tokens/s per GPU"
      : std::all_of(req.clusters.begin(), req.clusters.end(),
                    [&](const ClusterSpec& c) { return req.price_per_gpu_hour.count(c.name); })
          ? "cheapest"
          : "cheapest (fewest GPU-hours where no price)");
  for (const ClusterSpec& c : req.clusters) {
    const SweepPoint *fastest = nullptr, *cheapest = nullptr;
    for (const SweepPoint& p : res.points) {
      if (p.cluster != c.name || !p.best) continue;
      if (!fastest || p.tokens_per_s > fastest->tokens_per_s) fastest = &p;
      const auto cost = [](const SweepPoint& q) { return q.cost_usd ? *q.cost_usd : q.gpu_hours; };
      if (!cheapest || (by_time ? cost(p) < cost(*cheapest)
                                : p.tokens_per_s_per_gpu > cheapest->tokens_per_s_per_gpu)) {
        cheapest = &p;
      }
    }
    if (!fastest) {
      html += fmt::format(
          "<tr><td class=\"l n\">{}</td><td class=\"l none\" colspan=\"2\">no plan at any "
          "point</td></tr>\n",
          XmlEscape(c.name));
      continue;
    }
    html += fmt::format(
        "<tr><td class=\"l n\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>\n",
        XmlEscape(c.name), XmlEscape(PointWords(req, *fastest)),
        XmlEscape(PointWords(req, *cheapest)));
  }
  return html + "</table>\n";
}

// Each point's best plan as Megatron-LM flags, collapsed.
std::string FlagsSectionHtml(const SweepResult& res) {
  std::string html = "<h2>Megatron-LM flags per point</h2>\n";
  for (const SweepPoint& p : res.points) {
    if (!p.best) continue;
    html += fmt::format(
        "<details><summary>{} {} at {} GPUs, batch {}: {}{}</summary><p><code>{}</code></p>"
        "</details>\n",
        XmlEscape(p.cluster), Name(p.precision), GroupThousands(p.gpus),
        GroupThousands(p.global_batch), XmlEscape(Describe(p.best->plan.parallel)),
        p.best_rank < 0 ? " (zero-bubble: Megatron-LM cannot run it; none it runs was found)" : "",
        FlagsHtml(MegatronArgs(p.best->plan)));
  }
  return html;
}

// The clusters' what-if changes (--cluster-set) and the batches' notes: rounded, or far from the
// batch they were scaled from (why a point has no plan is in its row of the table).
std::string NotesHtml(const SweepRequest& req, const SweepResult& res) {
  std::string html;
  std::string overrides;
  for (const ClusterSpec& c : req.clusters) {
    if (c.overrides.empty()) continue;
    std::vector<std::string> words;
    for (const std::string& o : c.overrides) words.push_back("<code>" + XmlEscape(o) + "</code>");
    overrides += fmt::format("<li>{}: {}</li>", XmlEscape(c.name), JoinWords(words));
  }
  if (!overrides.empty()) {
    html +=
        "<h2>Cluster overrides (what-if)</h2>\n<p class=\"note\">The profiles were changed "
        "for this sweep (--cluster-set):</p>\n<ul>" +
        overrides + "</ul>\n";
  }
  // A batch's note depends on the GPU count and the batch rule, not on the cluster: once each.
  std::string notes;
  std::set<std::pair<int64_t, std::string>> said;
  for (const SweepPoint& p : res.points) {
    if (p.batch_note.empty() || !said.insert({p.gpus, p.batch_note}).second) continue;
    notes +=
        fmt::format("<li>At {} GPUs: {}</li>\n", GroupThousands(p.gpus), XmlEscape(p.batch_note));
  }
  if (!notes.empty()) {
    html += "<h2>Notes on the batches</h2>\n<ul class=\"note\">\n" + notes + "</ul>\n";
  }
  return html;
}

}  // namespace

std::string SweepReportHtml(const SweepRequest& req, const SweepResult& res) {
  std::string html = SummaryHtml(req, res);
  html += SweepSvg(req, res);
  html += PointsHtml(req, res);
  html += BestPerClusterHtml(req, res);
  html += FlagsSectionHtml(res);
  html += NotesHtml(req, res);
  return html + "<p class=\"note\">Generated by ptdp sweep.</p>\n</body></html>\n";
}

}  // namespace ptdp
