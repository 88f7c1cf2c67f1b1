#include "simulator/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json.h"
#include "core/text.h"

namespace ptdp {
namespace {

struct Rgb {
  int r, g, b;
};

// Tableau-like palette; later model chunks get lighter shades of their kind's colour.
constexpr Rgb kForward{76, 120, 168};
constexpr Rgb kBackward{89, 161, 79};
constexpr Rgb kWeightGrad{176, 122, 161};
constexpr Rgb kSend{242, 142, 43};
constexpr Rgb kDpComm{225, 87, 89};
constexpr Rgb kOptimizer{121, 112, 110};
constexpr Rgb kCpComm{23, 190, 207};
constexpr Rgb kEpDispatch{237, 201, 72};
constexpr Rgb kEpCombine{156, 117, 95};
constexpr Rgb kTpComm{255, 157, 167};

// Beyond this many operations the SVG draws pixel columns instead of one box per operation.
constexpr size_t kDenseOps = 6000;

std::string Hex(Rgb c) { return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b); }

// Labels inside operations: no smaller than this font size (pixels), and only where the text,
// estimated at 0.65 em per character (DejaVu Sans' digits are 0.64 em), fits with 2 px each side.
constexpr double kMinLabelFont = 7;
bool LabelFits(std::string_view text, double font, double box_w) {
  return 0.65 * font * static_cast<double>(text.size()) + 4 <= box_w;
}

Rgb Lighter(Rgb c, double amount) {
  auto mix = [&](int x) { return static_cast<int>(std::lround(x + (255 - x) * amount)); };
  return {mix(c.r), mix(c.g), mix(c.b)};
}

Rgb OpColour(const PipelineSchedule& s, OpKind kind, int chunk) {
  const Rgb base = kind == OpKind::kForward    ? kForward
                   : kind == OpKind::kBackward ? kBackward
                                               : kWeightGrad;
  return s.chunks > 1 ? Lighter(base, 0.5 * chunk / (s.chunks - 1)) : base;
}

std::string FormatTime(double seconds, double step) {
  if (step >= 1.0) return fmt::format("{:g} s", seconds);
  if (step >= 1e-3) return fmt::format("{:g} ms", std::round(seconds * 1e6) / 1e3);
  return fmt::format("{:g} us", std::round(seconds * 1e9) / 1e3);
}

const char* Category(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return "forward";
    case OpKind::kBackward:
      return "backward";
    case OpKind::kWeightGrad:
      return "weight-grad";
  }
  return "other";
}

// The communication inside an operation, drawn (and traced) from its start in this order: the
// CP exchanges, the MoE dispatch, the MoE combine, then (drawn, not traced) the TP collectives.
constexpr int kInnerKinds = 4;
constexpr Rgb kInnerColours[kInnerKinds] = {kCpComm, kEpDispatch, kEpCombine, kTpComm};
struct InnerSlice {
  int kind;  // 0 CP, 1 EP dispatch, 2 EP combine, 3 TP
  const char* name;
  const char* category;
  double start_s, duration_s;
};

std::vector<InnerSlice> InnerSlices(const SimResult& r, const SimulatedOp& o, bool with_tp) {
  std::vector<InnerSlice> out;
  double t = o.start_s;
  const auto add = [&](int kind, const char* name, const char* category, double d) {
    if (d <= 0) return;
    out.push_back({kind, name, category, t, d});
    t += d;
  };
  add(0, r.cp_comm_label.c_str(), "cp-comm", o.cp_comm_s);
  add(1, "EP dispatch", "ep-comm", o.ep_dispatch_s);
  add(2, "EP combine", "ep-comm", o.ep_combine_s);
  if (with_tp) add(3, "TP comm", "tp-comm", o.tp_comm_s);
  return out;
}

bool HasInner(const SimulatedOp& o, bool with_tp) {
  return o.cp_comm_s > 0 || o.ep_dispatch_s > 0 || o.ep_combine_s > 0 ||
         (with_tp && o.tp_comm_s > 0);
}

// Where things go in the SVG: fixed margins, then per stage a compute row, the TP / CP / EP lane
// (with communication inside the operations) and the communication lane, then the time axis
// over the window [begin, end) of the step.
struct Geometry {
  double width = 1200, left = 92, right = 24, top = 64;
  double row = 0;         // compute row height
  double lane = 0;        // communication lane under it
  bool inner = false;     // TP, CP or EP communication inside the operations
  double inner_h = 0;     // the TP / CP / EP lane's height
  double inner_lane = 0;  // the room it takes (0 without it)
  double pitch = 0;       // from one stage's rows to the next's
  double plot_w = 0;
  double begin = 0;  // the window's start, in seconds of the step
  double end = 0;    // the time axis' end, in seconds
  double scale = 0;  // pixels per second
  double axis_y = 0;
  bool zoomed = false;  // the window leaves out part of the step
  double x(double time) const { return left + (time - begin) * scale; }
  double y(int stage) const { return top + stage * pitch; }  // the stage's compute row
  // Whether [a, b) shows in the window, and its part there.
  bool Visible(double a, double b) const { return b > begin && a < end; }
  double ClipX(double time) const { return x(std::clamp(time, begin, end)); }
};

// The geometry for s's stages and the window t asks for (the whole step by default).
Geometry MakeGeometry(const PipelineSchedule& s, const SimResult& r, const TimelineTitle& t) {
  Geometry g;
  PTDP_CHECK(std::isfinite(r.step_time_s) && std::isfinite(t.axis_end_s) &&
             std::isfinite(t.window_start_s) && t.window_start_s >= 0 && t.axis_end_s >= 0);
  g.begin = t.window_start_s;
  g.end = t.axis_end_s > 0 ? t.axis_end_s : std::max(r.step_time_s, 1e-30);
  PTDP_CHECK(g.begin < g.end);
  g.zoomed = g.begin > 0 || g.end < r.step_time_s;
  g.row = std::clamp(560.0 / s.stages, 10.0, 30.0);
  g.lane = std::max(3.0, g.row * 0.28);
  // With communication inside the operations, a lane for it between the two.
  g.inner = std::any_of(r.ops.begin(), r.ops.end(), [&](const SimulatedOp& o) {
    return HasInner(o, true) && g.Visible(o.start_s, o.end_s);
  });
  g.inner_h = std::max(4.0, g.row * 0.4);
  g.inner_lane = g.inner ? g.inner_h + 1 : 0;
  g.pitch = g.row + g.inner_lane + g.lane + 4;
  g.plot_w = g.width - g.left - g.right;
  g.scale = g.plot_w / (g.end - g.begin);
  g.axis_y = g.top + s.stages * g.pitch + 6;
  return g;
}

struct LegendItem {
  Rgb colour;
  std::string text;
  bool hatched;
};

struct Legend {
  std::vector<LegendItem> items;
  std::vector<std::string> notes;
};

// The room a legend item (swatch and text) and a legend note take, at the legend's font size.
double ItemWidth(std::string_view text) { return 40 + 7.0 * text.size(); }
double NoteWidth(std::string_view text) { return 12 + 6.2 * text.size(); }

// Legend: what the window shows, each colour drawn once (later chunks' lighter shades by a note).
Legend MakeLegend(const PipelineSchedule& s, const SimResult& r, const Geometry& g) {
  Legend legend;
  std::vector<LegendItem>& items = legend.items;
  auto has_kind = [&](OpKind kind) {
    return std::any_of(r.ops.begin(), r.ops.end(), [&](const SimulatedOp& o) {
      return o.op.kind == kind && g.Visible(o.start_s, o.end_s);
    });
  };
  const bool sends = std::any_of(r.transfers.begin(), r.transfers.end(), [&](const auto& tr) {
    return tr.end_s > tr.start_s && g.Visible(tr.start_s, tr.end_s);
  });
  auto has_phase = [&](bool dp_comm) {
    return std::any_of(r.phases.begin(), r.phases.end(), [&](const SimulatedPhase& ph) {
      return (ph.category == "dp-comm") == dp_comm && g.Visible(ph.start_s, ph.end_s);
    });
  };
  auto has_op = [&](double SimulatedOp::*field) {
    return std::any_of(r.ops.begin(), r.ops.end(), [&](const SimulatedOp& o) {
      return o.*field > 0 && g.Visible(o.start_s, o.end_s);
    });
  };
  if (has_kind(OpKind::kForward)) items.push_back({kForward, "forward", false});
  if (has_kind(OpKind::kBackward)) items.push_back({kBackward, "backward", false});
  if (has_kind(OpKind::kWeightGrad)) items.push_back({kWeightGrad, "weight gradient", false});
  if (sends) items.push_back({kSend, "pipeline send", false});
  const bool fsdp = has_op(&SimulatedOp::fsdp_comm_s);
  if (has_phase(true) || fsdp) items.push_back({kDpComm, "data-parallel comm", false});
  if (has_phase(false)) items.push_back({kOptimizer, "optimizer", false});
  if (has_op(&SimulatedOp::tp_comm_s)) items.push_back({kTpComm, "TP comm", false});
  if (has_op(&SimulatedOp::cp_comm_s)) items.push_back({kCpComm, r.cp_comm_label, false});
  if (has_op(&SimulatedOp::ep_dispatch_s)) items.push_back({kEpDispatch, "EP dispatch", false});
  if (has_op(&SimulatedOp::ep_combine_s)) items.push_back({kEpCombine, "EP combine", false});
  items.push_back({{0, 0, 0}, "idle (bubble)", true});
  if (g.inner)
    legend.notes.push_back(
        "thin lane under each stage: the communication inside its operations, summed over "
        "their layers");
  if (fsdp) {
    legend.notes.push_back(
        "Megatron-FSDP's gathers and reduce-scatters: in the lane under each operation, from its "
        "start");
  }
  if (s.chunks > 1) legend.notes.push_back("lighter shade = later model chunk");
  return legend;
}

// The legend's rows: its items, then its notes, wrapped to the width.
int LegendRows(const Legend& legend, const Geometry& g) {
  int rows = 1;
  double lx = g.left;
  for (const LegendItem& it : legend.items) {
    if (lx > g.left && lx + ItemWidth(it.text) > g.width - g.right) lx = g.left, ++rows;
    lx += ItemWidth(it.text);
  }
  for (const std::string& n : legend.notes) {
    if (lx > g.left && lx + NoteWidth(n) > g.width - g.right) lx = g.left, ++rows;
    lx += NoteWidth(n);
  }
  return rows;
}

// The document's start: size, the idle hatching, the white background, title and subtitle
// (which says so when the window leaves out part of the step).
std::string SvgHeader(const Geometry& g, double height, const TimelineTitle& t,
                      const SimResult& r) {
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} "
      "{}\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
      "<defs><pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fafafa\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d9d9d9\" stroke-width=\"2\"/>"
      "</pattern></defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      g.width, height, g.width, height);
  // Long titles shrink to fit the width (about 0.6 em per character).
  const double title_font =
      std::min(15.0, (g.width - g.left - 10) / (0.6 * std::max<size_t>(1, t.title.size())));
  svg +=
      fmt::format("<text x=\"{}\" y=\"24\" font-size=\"{:.1f}\" font-weight=\"bold\">{}</text>\n",
                  g.left, title_font, XmlEscape(t.title));
  std::string subtitle = t.subtitle;
  if (g.zoomed) {
    // In the step's unit (s, ms or us), to 4 digits.
    const double step = r.step_time_s;
    const double unit = t.unit_time || step >= 1 ? 1 : step >= 1e-3 ? 1e-3 : 1e-6;
    const char* unit_name = t.unit_time ? "" : unit == 1 ? " s" : unit == 1e-3 ? " ms" : " us";
    const auto time = [&](double s) { return fmt::format("{:.4g}{}", s / unit, unit_name); };
    subtitle += fmt::format("{}window {} to {} of the step's {}", subtitle.empty() ? "" : "; ",
                            time(g.begin), time(g.end), time(r.step_time_s));
  }
  svg += fmt::format("<text x=\"{}\" y=\"44\" font-size=\"13\" fill=\"#444\">{}</text>\n", g.left,
                     XmlEscape(subtitle));
  return svg;
}

// Each stage's label and the hatched background of its pipeline phase.
void AppendStageRows(std::string& svg, int stages, const SimResult& r, const Geometry& g) {
  for (int st = 0; st < stages; ++st) {
    const double y = g.y(st);
    svg += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"{:.0f}\" text-anchor=\"end\" "
        "dominant-baseline=\"middle\">stage {}</text>\n",
        g.left - 8, y + g.row / 2, std::min(12.0, g.row * 0.8), st);
    // Idle is what shows through: the hatched background of the pipeline phase.
    if (!g.Visible(0, r.pipeline_end_s)) continue;
    svg += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"url(#idle)\" "
        "stroke=\"#cccccc\" stroke-width=\"0.5\"/>\n",
        g.ClipX(0), y, g.ClipX(r.pipeline_end_s) - g.ClipX(0), g.row);
  }
}

// One box per operation in the window (clipped to it), labelled with its micro-batch where the
// label fits inside the box at a readable size: dark on light shades, white on the others.
void AppendOps(std::string& svg, const PipelineSchedule& s, const SimResult& r, const Geometry& g) {
  const double font = std::round(std::min(11.0, g.row * 0.6) * 10) / 10;
  for (const SimulatedOp& o : r.ops) {
    if (!g.Visible(o.start_s, o.end_s)) continue;
    const double y = g.y(o.stage);
    const double x0 = g.ClipX(o.start_s), w = g.ClipX(o.end_s) - x0;
    const Rgb colour = OpColour(s, o.op.kind, o.op.chunk);
    svg += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\" "
        "stroke=\"white\" stroke-width=\"{}\"><title>stage {} {} {}</title></rect>\n",
        x0, y, w, g.row, Hex(colour), w > 3 ? 0.6 : 0, o.stage, OpLabel(s, o.op),
        FormatTime(o.end_s - o.start_s, o.end_s - o.start_s));
    const std::string label = std::to_string(o.op.microbatch);
    if (font >= kMinLabelFont && LabelFits(label, font, w)) {
      const bool light = 0.299 * colour.r + 0.587 * colour.g + 0.114 * colour.b > 160;
      svg += fmt::format(
          "<text x=\"{:.2f}\" y=\"{:.2f}\" font-size=\"{:.1f}\" fill=\"{}\" "
          "text-anchor=\"middle\" dominant-baseline=\"central\">{}</text>\n",
          x0 + w / 2, y + g.row / 2, font, light ? "#222" : "white", label);
    }
  }
}

// One box per CP / EP slice inside an operation, in the lane under the compute row.
void AppendInnerSlices(std::string& svg, const PipelineSchedule& s, const SimResult& r,
                       const Geometry& g) {
  for (const SimulatedOp& o : r.ops) {
    if (!HasInner(o, true) || !g.Visible(o.start_s, o.end_s)) continue;
    const double y = g.y(o.stage) + g.row + 1;
    for (const InnerSlice& in : InnerSlices(r, o, true)) {
      if (!g.Visible(in.start_s, in.start_s + in.duration_s)) continue;
      const double x0 = g.ClipX(in.start_s);
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\">"
          "<title>stage {} {}: {} {} (its layers' together)</title></rect>\n",
          x0, y, std::max(0.5, g.ClipX(in.start_s + in.duration_s) - x0), g.inner_h,
          Hex(kInnerColours[in.kind]), o.stage, OpLabel(s, o.op), XmlEscape(in.name),
          FormatTime(in.duration_s, in.duration_s));
    }
  }
}

// One box per pipeline send, in the sending stage's communication lane.
void AppendTransfers(std::string& svg, const SimResult& r, const Geometry& g) {
  for (const SimulatedTransfer& tr : r.transfers) {
    // Free communication has nothing to draw.
    if (tr.end_s <= tr.start_s || !g.Visible(tr.start_s, tr.end_s)) continue;
    const double y = g.y(tr.from_stage) + g.row + 1 + g.inner_lane;
    const double x0 = g.ClipX(tr.start_s);
    svg += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\" "
        "opacity=\"0.8\"/>\n",
        x0, y, std::max(0.5, g.ClipX(tr.end_s) - x0), g.lane, Hex(kSend));
  }
}

// Megatron-FSDP's traffic of an operation: its own stream from the operation's start, at most
// to its end.
double FsdpEnd(const SimulatedOp& o) { return std::min(o.end_s, o.start_s + o.fsdp_comm_s); }

// One box per operation's Megatron-FSDP traffic, in its stage's communication lane.
void AppendFsdp(std::string& svg, const PipelineSchedule& s, const SimResult& r,
                const Geometry& g) {
  for (const SimulatedOp& o : r.ops) {
    if (o.fsdp_comm_s <= 0 || !g.Visible(o.start_s, FsdpEnd(o))) continue;
    const double y = g.y(o.stage) + g.row + 1 + g.inner_lane;
    const double x0 = g.ClipX(o.start_s);
    svg += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\">"
        "<title>stage {} {}: Megatron-FSDP gathers / reduce-scatters {}</title></rect>\n",
        x0, y, std::max(0.5, g.ClipX(FsdpEnd(o)) - x0), g.lane, Hex(kDpComm), o.stage,
        OpLabel(s, o.op), FormatTime(o.fsdp_comm_s, o.fsdp_comm_s));
  }
}

// How much of each pixel column of one stage's rows what runs there covers, in pixels.
struct ColumnCover {
  std::vector<double> ops;    // column * kinds + (kind, chunk) category
  std::vector<double> inner;  // column * kInnerKinds + InnerSlice::kind (empty without the lane)
  std::vector<double> sends;  // per column
  std::vector<double> fsdp;   // per column: Megatron-FSDP's traffic
};

// Calls add(column, pixels) for each column that [start, end) covers.
template <typename Add>
void Spread(const Geometry& g, int columns, double start, double end, Add&& add) {
  // Clamped to the columns first: outside a narrow window the pixels overflow an int.
  const double a = std::clamp((start - g.begin) * g.scale, 0.0, static_cast<double>(columns));
  const double b = std::clamp((end - g.begin) * g.scale, 0.0, static_cast<double>(columns));
  for (int c = static_cast<int>(a); c < columns && c < b; ++c) {
    add(c, std::min<double>(b, c + 1) - std::max<double>(a, c));
  }
}

// What covers each pixel column of stage st's rows.
ColumnCover CoverColumns(const PipelineSchedule& s, const SimResult& r, const Geometry& g, int st,
                         int columns, int kinds) {
  ColumnCover cover;
  cover.ops.assign(static_cast<size_t>(columns) * kinds, 0.0);
  cover.sends.assign(columns, 0.0);
  cover.fsdp.assign(columns, 0.0);
  cover.inner.assign(g.inner ? static_cast<size_t>(columns) * kInnerKinds : 0, 0.0);
  for (const SimulatedOp& o : r.ops) {
    if (o.stage != st) continue;
    const int k = static_cast<int>(o.op.kind) * s.chunks + o.op.chunk;
    Spread(g, columns, o.start_s, o.end_s, [&](int c, double w) { cover.ops[c * kinds + k] += w; });
    if (o.fsdp_comm_s > 0) {
      Spread(g, columns, o.start_s, FsdpEnd(o), [&](int c, double w) { cover.fsdp[c] += w; });
    }
    if (!g.inner || !HasInner(o, true)) continue;
    for (const InnerSlice& in : InnerSlices(r, o, true)) {
      Spread(g, columns, in.start_s, in.start_s + in.duration_s,
             [&](int c, double w) { cover.inner[c * kInnerKinds + in.kind] += w; });
    }
  }
  for (const SimulatedTransfer& tr : r.transfers) {
    if (tr.from_stage == st)
      Spread(g, columns, tr.start_s, tr.end_s, [&](int c, double w) { cover.sends[c] += w; });
  }
  return cover;
}

// A colour channel's weighted sum over the total weight, quantized to steps of 8.
int Quantize(double v, double total) {
  return std::clamp(static_cast<int>(v / total / 8) * 8, 0, 255);
}

// Column c's colour is its operations' colours weighted by how much of it they cover, over the
// idle background; quantized so that steady stretches form runs; none when nearly idle.
std::string OpsColumnColour(const PipelineSchedule& s, const std::vector<double>& cover, int c,
                            int kinds) {
  double covered = 0, rr = 0, gg = 0, bb = 0;
  for (int k = 0; k < kinds; ++k) {
    const double w = cover[c * kinds + k];
    if (w <= 0) continue;
    const Rgb col = OpColour(s, static_cast<OpKind>(k / s.chunks), k % s.chunks);
    covered += w, rr += w * col.r, gg += w * col.g, bb += w * col.b;
  }
  if (covered > 0.05) {
    const double idle = std::max(0.0, 1.0 - covered);  // shows as light grey
    const double total = covered + idle;
    return Hex({Quantize(rr + idle * 236, total), Quantize(gg + idle * 236, total),
                Quantize(bb + idle * 236, total)});
  }
  return "";
}

// The CP / EP lane: each column the mix of what covers it, over white; none when nearly blank.
std::string InnerColumnColour(const std::vector<double>& inner_cover, int c) {
  double covered = 0, rr = 0, gg = 0, bb = 0;
  for (int k = 0; k < kInnerKinds; ++k) {
    const double w = std::min(1.0, inner_cover[c * kInnerKinds + k]);
    covered += w, rr += w * kInnerColours[k].r, gg += w * kInnerColours[k].g;
    bb += w * kInnerColours[k].b;
  }
  if (covered > 0.05) {
    const double blank = std::max(0.0, 1.0 - covered), total = covered + blank;
    return Hex({Quantize(rr + blank * 255, total), Quantize(gg + blank * 255, total),
                Quantize(bb + blank * 255, total)});
  }
  return "";
}

// One rectangle, `height` high at `y`, per run of columns of one colour (none where
// colour_at(column) is empty).
template <typename ColourAt>
void AppendRuns(std::string& svg, const Geometry& g, int columns, double y, double height,
                ColourAt&& colour_at) {
  int run_start = 0;
  std::string run_colour;
  for (int c = 0; c <= columns; ++c) {
    std::string colour = c < columns ? colour_at(c) : std::string();
    if (colour != run_colour) {
      if (!run_colour.empty() && c > run_start) {
        svg += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.2f}\" width=\"{}\" height=\"{:.2f}\" fill=\"{}\"/>\n",
            g.left + run_start, y, c - run_start, height, run_colour);
      }
      run_start = c;
      run_colour = std::move(colour);
    }
  }
}

// One rectangle per run of columns mostly covered (`cover`: sends, or Megatron-FSDP's traffic),
// in the communication lane of the stage whose rows start at y.
void AppendLaneRuns(std::string& svg, const Geometry& g, int columns,
                    const std::vector<double>& cover, double y, Rgb colour, double opacity) {
  int run_start = -1;
  for (int c = 0; c <= columns; ++c) {
    const bool on = c < columns && cover[c] > 0.5;
    if (on && run_start < 0) run_start = c;
    if (!on && run_start >= 0) {
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.2f}\" width=\"{}\" height=\"{:.2f}\" fill=\"{}\" "
          "opacity=\"{}\"/>\n",
          g.left + run_start, y + g.row + 1 + g.inner_lane, c - run_start, g.lane, Hex(colour),
          opacity);
      run_start = -1;
    }
  }
}

// Too many operations for one rectangle each: stage st's rows drawn per pixel column, each the
// mix of the colours that cover it, as runs.
void AppendDenseStage(std::string& svg, const PipelineSchedule& s, const SimResult& r,
                      const Geometry& g, int st) {
  const int columns = static_cast<int>(std::ceil(g.plot_w));
  const int kinds = 3 * s.chunks;  // (kind, chunk) categories
  const ColumnCover cover = CoverColumns(s, r, g, st, columns, kinds);
  const double y = g.y(st);
  AppendRuns(svg, g, columns, y, g.row,
             [&](int c) { return OpsColumnColour(s, cover.ops, c, kinds); });
  if (g.inner) {
    AppendRuns(svg, g, columns, y + g.row + 1, g.inner_h,
               [&](int c) { return InnerColumnColour(cover.inner, c); });
  }
  AppendLaneRuns(svg, g, columns, cover.fsdp, y, kDpComm, 1);
  AppendLaneRuns(svg, g, columns, cover.sends, y, kSend, 0.8);
}

// Phases; a run of a stage's phases of one name closer than a pixel apart (the buckets of an
// overlapped gradient reduction) is one rectangle.
void AppendPhases(std::string& svg, const SimResult& r, const Geometry& g) {
  for (size_t i = 0; i < r.phases.size();) {
    const SimulatedPhase& ph = r.phases[i];
    double end_s = ph.end_s;
    size_t j = i + 1, parts = 1;
    for (; j < r.phases.size() && r.phases[j].stage == ph.stage && r.phases[j].name == ph.name &&
           (r.phases[j].start_s - end_s) * g.scale < 1;
         ++j, ++parts) {
      end_s = r.phases[j].end_s;
    }
    i = j;
    if (!g.Visible(ph.start_s, end_s)) continue;
    const bool comm = ph.category == "dp-comm";
    const double y = g.y(ph.stage) + (comm ? g.row + 1 + g.inner_lane : 0);
    const double x0 = g.ClipX(ph.start_s);
    svg += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\">"
        "<title>stage {} {}{}</title></rect>\n",
        x0, y, std::max(0.5, g.ClipX(end_s) - x0), comm ? g.lane : g.row,
        Hex(comm ? kDpComm : kOptimizer), ph.stage, XmlEscape(ph.name),
        parts > 1 ? fmt::format(" ({} buckets)", parts) : "");
  }
}

// The time axis with its ticks, and the notes under it.
void AppendAxis(std::string& svg, size_t ops_drawn, const Geometry& g, const TimelineTitle& t) {
  const double end = g.end, axis_y = g.axis_y;
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n",
                     g.x(g.begin), axis_y, g.x(end), axis_y);
  // Ticks at the window's times: multiples of a round step from its start to its end.
  const double tick = NiceTickStep(end - g.begin, 10);
  for (double i = std::max(0.0, std::ceil(g.begin / tick - 1e-9));
       i * tick <= end + (end - g.begin) * 1e-9; ++i) {
    const double tt = i * tick;
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#333\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" font-size=\"11\" text-anchor=\"middle\">{4}</text>\n",
        g.x(tt), axis_y, axis_y + 5, axis_y + 18,
        t.unit_time ? fmt::format("{:g}", tt) : FormatTime(tt, tick));
  }

  if (ops_drawn > kDenseOps) {
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#444\">{} operations: each pixel "
        "column mixes the colours of what runs in it</text>\n",
        g.left, axis_y + 32, ops_drawn);
  }
  if (t.unit_time) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#444\">time units</text>\n",
                       g.x(end) - 60, axis_y + 32);
  }
}

// The legend under the axis: its items, then its notes, in rows that fit the width.
void AppendLegend(std::string& svg, const Legend& legend, const Geometry& g) {
  double lx = g.left, ly = g.axis_y + 40;
  for (const LegendItem& it : legend.items) {
    if (lx > g.left && lx + ItemWidth(it.text) > g.width - g.right) lx = g.left, ly += 18;
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"{}\" stroke=\"#999\" "
        "stroke-width=\"0.5\"/><text x=\"{:.1f}\" y=\"{}\" font-size=\"12\">{}</text>\n",
        lx, ly, it.hatched ? "url(#idle)" : Hex(it.colour), lx + 19, ly + 10, XmlEscape(it.text));
    lx += ItemWidth(it.text);
  }
  for (const std::string& n : legend.notes) {
    if (lx > g.left && lx + NoteWidth(n) > g.width - g.right) lx = g.left, ly += 18;
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\" fill=\"#444\">{}</text>\n", lx,
                       ly + 10, XmlEscape(n));
    lx += NoteWidth(n);
  }
}

}  // namespace

const char* CpCommLabel(CpComm comm) {
  switch (comm) {
    case CpComm::kP2p:
      return "CP ring (KV)";
    case CpComm::kA2a:
      return "CP all-to-all (QKV, output)";
    case CpComm::kAllGather:
      return "CP all-gather (KV)";
  }
  return "CP comm";
}

std::string OpLabel(const PipelineSchedule& s, const PipelineOp& op) {
  std::string label = Letter(op.kind) + std::to_string(op.microbatch);
  if (s.chunks > 1) label += "." + std::to_string(op.chunk);
  return label;
}

std::string TimelineSvg(const PipelineSchedule& s, const SimResult& r, const TimelineTitle& t) {
  const Geometry g = MakeGeometry(s, r, t);
  const Legend legend = MakeLegend(s, r, g);
  const double height = g.axis_y + 62 + 18 * LegendRows(legend, g);
  std::string svg = SvgHeader(g, height, t, r);
  AppendStageRows(svg, s.stages, r, g);
  const size_t ops_drawn =
      static_cast<size_t>(std::count_if(r.ops.begin(), r.ops.end(), [&](const SimulatedOp& o) {
        return g.Visible(o.start_s, o.end_s);
      }));
  if (ops_drawn <= kDenseOps) {
    AppendOps(svg, s, r, g);
    AppendInnerSlices(svg, s, r, g);
    AppendFsdp(svg, s, r, g);
    AppendTransfers(svg, r, g);
  } else {
    for (int st = 0; st < s.stages; ++st) AppendDenseStage(svg, s, r, g, st);
  }
  AppendPhases(svg, r, g);
  AppendAxis(svg, ops_drawn, g, t);
  AppendLegend(svg, legend, g);
  svg += "</svg>\n";
  return svg;
}

TimelineTrace TimelineTraceEvents(const PipelineSchedule& s, const SimResult& r) {
  const int p = s.stages;
  TimelineTrace out;
  for (int st = 0; st < p; ++st) {
    out.tracks.push_back({st, fmt::format("stage {} compute", st)});
    out.tracks.push_back({p + st, fmt::format("stage {} send to next", st)});
    out.tracks.push_back({2 * p + st, fmt::format("stage {} send to previous", st)});
    out.tracks.push_back({3 * p + st, fmt::format("stage {} data-parallel comm", st)});
  }
  std::vector<char> inner(p, 0);
  for (const SimulatedOp& o : r.ops) inner[o.stage] |= HasInner(o, false) ? 1 : 0;
  for (int st = 0; st < p; ++st) {
    if (inner[st]) {
      out.tracks.push_back(
          {4 * p + st, fmt::format("stage {} CP / EP comm (inside its operations)", st)});
    }
  }
  std::sort(out.tracks.begin(), out.tracks.end(),
            [](const TraceTrack& a, const TraceTrack& b) { return a.id < b.id; });
  out.events.reserve(r.ops.size() + r.transfers.size() + r.phases.size());
  for (const SimulatedOp& o : r.ops) {
    out.events.push_back({o.stage, OpLabel(s, o.op), Category(o.op.kind), o.start_s,
                          o.end_s - o.start_s, o.op.microbatch, o.op.chunk});
    if (o.fsdp_comm_s > 0) {
      out.events.push_back({3 * p + o.stage, "FSDP gather / reduce-scatter", "dp-comm", o.start_s,
                            FsdpEnd(o) - o.start_s, o.op.microbatch, o.op.chunk});
    }
    if (!HasInner(o, false)) continue;
    for (const InnerSlice& in : InnerSlices(r, o, false)) {
      out.events.push_back({4 * p + o.stage, in.name, in.category, in.start_s, in.duration_s,
                            o.op.microbatch, o.op.chunk});
    }
  }
  for (const SimulatedTransfer& tr : r.transfers) {
    const bool forward = tr.op.kind == OpKind::kForward;
    out.events.push_back({(forward ? p : 2 * p) + tr.from_stage,
                          fmt::format("send {} to stage {}", OpLabel(s, tr.op), tr.to_stage),
                          "send", tr.start_s, tr.end_s - tr.start_s, tr.op.microbatch,
                          tr.op.chunk});
  }
  for (const SimulatedPhase& ph : r.phases) {
    const bool comm = ph.category == "dp-comm";
    out.events.push_back({comm ? 3 * p + ph.stage : ph.stage, ph.name, ph.category, ph.start_s,
                          ph.end_s - ph.start_s});
  }
  return out;
}

std::string TimelineText(const PipelineSchedule& s, const SimResult& r, int width, int max_width) {
  const double end = std::max(r.pipeline_end_s, 1e-30);
  if (width <= 0) {
    double shortest = end;
    size_t label = 1;
    for (const SimulatedOp& o : r.ops) {
      if (o.end_s > o.start_s) shortest = std::min(shortest, o.end_s - o.start_s);
      label = std::max(label, OpLabel(s, o.op).size());
    }
    const double columns = std::ceil(end / shortest - 1e-9) * static_cast<double>(label + 1);
    width = static_cast<int>(std::min<double>(columns, max_width));
  }
  const double scale = width / end;
  std::string text;
  const int label_width = static_cast<int>(fmt::format("stage {}", s.stages - 1).size());
  std::vector<std::string> rows(s.stages, std::string(width, '.'));
  for (const SimulatedOp& o : r.ops) {
    std::string& line = rows[o.stage];
    int a = static_cast<int>(std::lround(o.start_s * scale));
    int b = static_cast<int>(std::lround(o.end_s * scale));
    a = std::clamp(a, 0, width - 1);
    b = std::clamp(std::max(b, a + 1), a + 1, width);
    const std::string label = OpLabel(s, o.op);
    for (int i = a; i < b; ++i) {
      const size_t k = static_cast<size_t>(i - a);
      line[i] = k < label.size() && b - a > 1 ? label[k] : (b - a > 1 ? ' ' : Letter(o.op.kind));
    }
  }
  for (int st = 0; st < s.stages; ++st) {
    text += fmt::format("{:<{}}  {}\n", fmt::format("stage {}", st), label_width, rows[st]);
  }
  return text;
}

}  // namespace ptdp
