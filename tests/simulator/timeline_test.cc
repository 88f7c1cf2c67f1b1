// The SVG timeline read back as text: every colour drawn has its legend entry, labels fit their
// boxes, and a window of the step is drawn clipped to it on an axis in the step's time.
#include "simulator/timeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace ptdp {
namespace {

// The value of attribute `name` in the element text `element` ("" if absent).
std::string Attr(const std::string& element, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = element.find(key);
  if (at == std::string::npos) return "";
  const size_t open = at + key.size();
  return element.substr(open, element.find('"', open) - open);
}

// Every element `<tag ...>` of the SVG, as its opening text.
std::vector<std::string> Elements(const std::string& svg, const std::string& tag) {
  std::vector<std::string> out;
  for (size_t at = svg.find("<" + tag + " "); at != std::string::npos;
       at = svg.find("<" + tag + " ", at + 1)) {
    out.push_back(svg.substr(at, svg.find('>', at) - at + 1));
  }
  return out;
}

// A step with every kind of thing the timeline draws: sends, DP communication, the optimizer,
// TP, CP and EP communication inside F and B (and TP in W).
SimResult Everything(const PipelineSchedule& s) {
  StepCosts costs = UniformCosts(s, 1.0, 1.5, s.split_backward ? 0.5 : 0.0);
  for (size_t vs = 0; vs < costs.chunks.size(); ++vs) {
    ChunkCosts& c = costs.chunks[vs];
    c.send_forward_s = vs + 1 < costs.chunks.size() ? 0.05 : 0;
    c.send_backward_s = vs > 0 ? 0.05 : 0;
    c.forward_tp_s = 0.1, c.backward_tp_s = 0.2, c.weight_tp_s = 0.05;
    c.forward_cp_s = 0.1, c.backward_cp_s = 0.1;
    c.forward_ep_dispatch_s = c.forward_ep_combine_s = 0.1;
    c.backward_ep_dispatch_s = c.backward_ep_combine_s = 0.1;
  }
  for (StageCosts& st : costs.stages) st.dp_grad_sync_s = 0.5, st.optimizer_s = 0.3;
  return SimulateStep(s, costs);
}

struct Colour {
  int r, g, b;
};
Colour ParseHex(const std::string& hex) {
  return {std::stoi(hex.substr(1, 2), nullptr, 16), std::stoi(hex.substr(3, 2), nullptr, 16),
          std::stoi(hex.substr(5, 2), nullptr, 16)};
}

TEST(Timeline, EveryColourDrawnHasALegendEntryAndEveryEntryIsDrawn) {
  for (const PipelineSchedule& s :
       {MakeSchedule(Schedule::k1F1B, 4, 8, 1), MakeSchedule(Schedule::kZbH1, 4, 8, 1),
        MakeSchedule(Schedule::kInterleaved, 4, 8, 3)}) {
    const SimResult r = Everything(s);
    const std::string svg = TimelineSvg(s, r, {});
    // The legend's swatches are the rectangles outlined in grey; the rest are drawn things.
    std::set<std::string> legend, drawn;
    for (const std::string& rect : Elements(svg.substr(svg.find("</defs>")), "rect")) {
      const std::string fill = Attr(rect, "fill");
      if (fill.empty() || fill[0] != '#') continue;  // background, idle hatching
      (Attr(rect, "stroke") == "#999" ? legend : drawn).insert(fill);
    }
    ASSERT_GE(legend.size(), 9u);  // forward, backward, send, DP, optimizer, TP, CP, EP x 2
    for (const std::string& fill : drawn) {
      if (legend.count(fill)) continue;
      // A later chunk's lighter shade of a legend colour (the note says so).
      bool shade = false;
      for (const std::string& l : legend) {
        const Colour base = ParseHex(l), c = ParseHex(fill);
        for (int k = 1; k < s.chunks; ++k) {
          const double a = 0.5 * k / (s.chunks - 1);
          const auto mix = [&](int x) { return static_cast<int>(std::lround(x + (255 - x) * a)); };
          shade |= mix(base.r) == c.r && mix(base.g) == c.g && mix(base.b) == c.b;
        }
      }
      EXPECT_TRUE(shade) << fill << " is drawn without a legend entry (" << Name(s.kind) << ")";
    }
    for (const std::string& fill : legend) {
      EXPECT_TRUE(drawn.count(fill)) << fill << " is in the legend, not drawn";
    }
    for (const char* entry :
         {">forward<", ">backward<", ">pipeline send<", ">data-parallel comm<", ">optimizer<",
          ">TP comm<", ">CP ring (KV)<", ">EP dispatch<", ">EP combine<", ">idle (bubble)<"}) {
      EXPECT_NE(svg.find(entry), std::string::npos) << entry;
    }
    EXPECT_EQ(svg.find(">weight gradient<") != std::string::npos, s.split_backward);
    EXPECT_EQ(svg.find("lighter shade = later model chunk") != std::string::npos, s.chunks > 1);
  }
}

TEST(Timeline, NoCommunicationNoLaneAndNoLegendEntryForIt) {
  const PipelineSchedule s = MakeSchedule(Schedule::k1F1B, 4, 8, 1);
  const std::string svg = TimelineSvg(s, SimulateStep(s, UniformCosts(s, 1, 2, 0)), {});
  for (const char* absent : {"TP comm", "CP ring", "EP dispatch", "pipeline send", "optimizer",
                             "thin lane", "weight gradient"}) {
    EXPECT_EQ(svg.find(absent), std::string::npos) << absent;
  }
}

// Each operation's label: the text right after its box. Checks that it fits inside the box
// (DejaVu Sans' digits are 0.636 em wide; at least 1 px each side) at a readable size.
struct LabelCount {
  int drawn = 0, dropped = 0;
};
LabelCount CheckLabels(const std::string& svg) {
  LabelCount count;
  std::istringstream in(svg);
  std::string box;  // the operation box on the line before, if any
  for (std::string line; std::getline(in, line); box = line) {
    if (line.rfind("<text ", 0) != 0 || Attr(box, "stroke") != "white") {
      if (Attr(box, "stroke") == "white" && line.rfind("<text ", 0) != 0) ++count.dropped;
      continue;
    }
    ++count.drawn;
    const double x = std::stod(Attr(box, "x")), w = std::stod(Attr(box, "width"));
    const double cx = std::stod(Attr(line, "x")), font = std::stod(Attr(line, "font-size"));
    const size_t open = line.find('>') + 1;
    const double text_w = 0.636 * font * static_cast<double>(line.find('<', open) - open);
    EXPECT_GE(font, 7) << line;
    EXPECT_GE(cx - text_w / 2, x + 1) << box << "\n" << line;
    EXPECT_LE(cx + text_w / 2, x + w - 1) << box << "\n" << line;
  }
  return count;
}

TEST(Timeline, LabelsFitTheirBoxesOrAreLeftOut) {
  LabelCount total;
  for (int p : {2, 4, 16, 48, 64}) {
    for (int m : {4, 12, 40, 130}) {
      for (const PipelineSchedule& s :
           {MakeSchedule(Schedule::k1F1B, p, m, 1), MakeSchedule(Schedule::kZbH1, p, m, 1)}) {
        const SimResult r = SimulateStep(s, UniformCosts(s, 1.0, 1.4, s.split_backward ? 0.6 : 0));
        const LabelCount c = CheckLabels(TimelineSvg(s, r, {}));
        total.drawn += c.drawn, total.dropped += c.dropped;
        // Zoomed in, boxes cut by the window's edges keep their labels inside too.
        TimelineTitle window;
        window.window_start_s = 0.37 * r.step_time_s, window.axis_end_s = 0.41 * r.step_time_s;
        const LabelCount z = CheckLabels(TimelineSvg(s, r, window));
        total.drawn += z.drawn, total.dropped += z.dropped;
      }
    }
  }
  // Both happen over these cases: some boxes have room for their label, some do not.
  EXPECT_GT(total.drawn, 1000);
  EXPECT_GT(total.dropped, 1000);
}

TEST(Timeline, LabelsOnLightShadesAreDark) {
  const PipelineSchedule s = MakeSchedule(Schedule::kInterleaved, 2, 4, 2);
  const std::string svg = TimelineSvg(s, SimulateStep(s, UniformCosts(s, 1, 2, 0)), {});
  EXPECT_NE(svg.find("fill=\"white\" text-anchor=\"middle\""), std::string::npos);  // chunk 0
  EXPECT_NE(svg.find("fill=\"#222\" text-anchor=\"middle\""), std::string::npos);   // chunk 1
}

TimelineTitle UnitTime() {
  TimelineTitle t;
  t.unit_time = true;
  return t;
}

// The tick labels of the time axis, in order.
std::vector<std::string> Ticks(const std::string& svg) {
  std::vector<std::string> out;
  const std::string mark = "font-size=\"11\" text-anchor=\"middle\">";
  for (size_t at = svg.find(mark); at != std::string::npos; at = svg.find(mark, at + 1)) {
    const size_t open = at + mark.size();
    out.push_back(svg.substr(open, svg.find('<', open) - open));
  }
  return out;
}

TEST(Timeline, AWindowIsDrawnClippedOnAnAxisInTheStepsTime) {
  // 1F1B, p 4, m 8, F 1 and B 2 time units: the step is (8 + 3) x 3 = 33.
  const PipelineSchedule s = MakeSchedule(Schedule::k1F1B, 4, 8, 1);
  const SimResult r = SimulateStep(s, UniformCosts(s, 1, 2, 0));
  ASSERT_DOUBLE_EQ(r.step_time_s, 33);
  TimelineTitle t{.title = "t", .subtitle = "sub", .unit_time = true};
  t.window_start_s = 10, t.axis_end_s = 20;
  const std::string svg = TimelineSvg(s, r, t);
  EXPECT_EQ(Ticks(svg), (std::vector<std::string>{"10", "11", "12", "13", "14", "15", "16", "17",
                                                  "18", "19", "20"}));
  EXPECT_NE(svg.find(">sub; window 10 to 20 of the step's 33</text>"), std::string::npos);
  // Only what runs in the window, every box inside the plot (x from 92 to 1176).
  size_t visible = 0;
  for (const SimulatedOp& o : r.ops) visible += o.end_s > 10 && o.start_s < 20;
  size_t boxes = 0;
  for (const std::string& rect : Elements(svg, "rect")) {
    if (Attr(rect, "stroke") == "#999" || Attr(rect, "x").empty()) continue;
    const double x = std::stod(Attr(rect, "x")), w = std::stod(Attr(rect, "width"));
    EXPECT_GE(x, 92 - 1e-9) << rect;
    EXPECT_LE(x + w, 1176 + 1e-9) << rect;
    boxes += Attr(rect, "stroke") == "white";
  }
  EXPECT_EQ(boxes, visible);
  EXPECT_LT(visible, r.ops.size());

  // An end beyond the step extends the axis (pictures at one scale), clipping nothing.
  TimelineTitle longer = UnitTime();
  longer.axis_end_s = 50;
  const std::string wide = TimelineSvg(s, r, longer);
  EXPECT_EQ(Ticks(wide).front(), "0");
  EXPECT_EQ(Ticks(wide).back(), "50");
  EXPECT_EQ(wide.find("window"), std::string::npos);
  size_t all = 0;
  for (const std::string& rect : Elements(wide, "rect")) all += Attr(rect, "stroke") == "white";
  EXPECT_EQ(all, r.ops.size());

  // An end before the step's: the picture stops there.
  TimelineTitle shorter = UnitTime();
  shorter.axis_end_s = 5;
  EXPECT_EQ(Ticks(TimelineSvg(s, r, shorter)).back(), "5");
  // The default: the whole step, from 0.
  EXPECT_EQ(Ticks(TimelineSvg(s, r, UnitTime())).back(), "30");
}

TEST(Timeline, AWindowOfADenseStepDrawsColumnsOnlyInside) {
  // Over 6,000 operations: pixel columns; a window in the middle draws its columns in the plot.
  const PipelineSchedule s = MakeSchedule(Schedule::k1F1B, 8, 1000, 1);
  const SimResult r = SimulateStep(s, UniformCosts(s, 1, 2, 0));
  TimelineTitle t = UnitTime();
  t.window_start_s = 100, t.axis_end_s = 160;
  const std::string svg = TimelineSvg(s, r, t);
  EXPECT_EQ(svg.find("operations: each pixel column"), std::string::npos);  // few in the window
  t.window_start_s = 100, t.axis_end_s = 3000;
  const std::string dense = TimelineSvg(s, r, t);
  EXPECT_NE(dense.find("operations: each pixel column"), std::string::npos);
  for (const std::string& rect : Elements(dense, "rect")) {
    if (Attr(rect, "stroke") == "#999" || Attr(rect, "x").empty()) continue;
    const double x = std::stod(Attr(rect, "x")), w = std::stod(Attr(rect, "width"));
    EXPECT_GE(x, 92 - 1e-9) << rect;
    EXPECT_LE(x + w, 1176 + 1.0) << rect;  // whole pixel columns
  }
}

}  // namespace
}  // namespace ptdp
