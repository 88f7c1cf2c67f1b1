// Pictures of a simulated step: an SVG timeline (stages as rows, time across), Chrome trace
// events (core/trace.h), and a text rendering for terminals (small cases).
#pragma once

#include <string>
#include <vector>

#include "core/schedule.h"
#include "core/trace.h"
#include "simulator/event_sim.h"

namespace ptdp {

struct TimelineTitle {
  std::string title;       // "seed-example on 8 x dgx-a100-80gb: TP 2 x PP 4 x DP 1, mb 4, 1f1b"
  std::string subtitle;    // "step 1.23 s, bubble 8.6%, peak memory 23.4 GB"
  bool unit_time = false;  // times are abstract units (schedule studies), not seconds
  double axis_end_s = 0;   // draw the time axis to here (to compare pictures); 0: the step's end
};

// A self-contained SVG document: one row per stage (compute) with a thin lane below it for
// point-to-point sends and data-parallel communication; forward, backward, weight-gradient,
// communication and optimizer in distinct colours (lighter shades for later model chunks),
// micro-batch numbers where they fit, idle time hatched, a time axis and a legend.
std::string TimelineSvg(const PipelineSchedule& schedule, const SimResult& result,
                        const TimelineTitle& title);

// Tracks and events for ChromeTraceJson: per stage, its compute stream (operations, then the
// optimizer), its forward and backward send links, and its data-parallel communication.
struct TimelineTrace {
  std::vector<TraceTrack> tracks;
  std::vector<TraceEvent> events;
};
TimelineTrace TimelineTraceEvents(const PipelineSchedule& schedule, const SimResult& result);

// Each stage's operations as characters in time over the pipeline phase:
//   stage 0  F0 F1 F2 F3 ......B0    F4 ......B1    ...
// ('.' is idle). With width 0 the scale gives the shortest operation room for the longest label
// plus a space, in whole columns, up to `max_width` columns; a given width is used as is.
// Labels are truncated where an operation is narrower than its label.
std::string TimelineText(const PipelineSchedule& schedule, const SimResult& result, int width = 0,
                         int max_width = 320);

// "F3" or, with several model chunks, "F3.1" (micro-batch.chunk).
std::string OpLabel(const PipelineSchedule& schedule, const PipelineOp& op);

}  // namespace ptdp
