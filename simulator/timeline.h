// Pictures of a simulated step: an SVG timeline (stages as rows, time across), Chrome trace
// events (core/trace.h), and a text rendering for terminals (small cases).
#pragma once

#include <string>
#include <vector>

#include "core/parallel_config.h"
#include "core/schedule.h"
#include "core/trace.h"
#include "simulator/event_sim.h"

namespace ptdp {

struct TimelineTitle {
  std::string title;       // "seed-example on 8 x dgx-a100-80gb: TP 2 x PP 4 x DP 1, mb 4, 1f1b"
  std::string subtitle;    // "step 1.23 s, bubble 8.6%, peak memory 23.4 GB"
  bool unit_time = false;  // times are abstract units (schedule studies), not seconds
  // The window of the step to draw, [window_start_s, axis_end_s): what runs in it, clipped to
  // it, on a time axis labelled in the step's time. axis_end_s 0: the step's end; before it,
  // the picture ends there; after it, the axis goes on (to compare pictures at one scale). The
  // start is at least 0 and before the end (InternalError otherwise: callers check their input).
  double window_start_s = 0;
  double axis_end_s = 0;
};

// A self-contained SVG document: one row per stage (compute) with a thin lane below it for
// point-to-point sends and data-parallel communication (Megatron-FSDP's gathers and
// reduce-scatters each from its operation's start); forward, backward, weight-gradient,
// communication and optimizer in distinct colours (lighter shades for later model chunks),
// micro-batch numbers where they fit inside their box at a readable size (none otherwise),
// idle time hatched, a time axis and a legend with an entry for every colour drawn (later
// chunks' shades by a note). When the operations hold tensor-parallel collectives,
// context-parallel exchanges or MoE dispatch / combine (SimulatedOp), another thin lane
// between the two shows them per operation: how long each takes in it, summed over the
// operation's layers and drawn from its start (they run layer by layer inside it).
std::string TimelineSvg(const PipelineSchedule& schedule, const SimResult& result,
                        const TimelineTitle& title);

// Tracks and events for ChromeTraceJson: per stage, its compute stream (operations, then the
// optimizer), its forward and backward send links, its data-parallel communication (with
// Megatron-FSDP's per operation, "FSDP gather / reduce-scatter"), and where
// its operations hold any, their CP exchanges (category cp-comm, named as
// SimResult::cp_comm_label) and MoE "EP dispatch" / "EP combine" (ep-comm), each operation's
// summed over its layers, from the operation's start, micro-batch and chunk as its own. (The
// TP collectives inside the operations are in the SVG only.)
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

// The context-parallel exchange's name in pictures: "CP ring (KV)" (p2p), "CP all-to-all (QKV,
// output)", "CP all-gather (KV)".
const char* CpCommLabel(CpComm comm);

// "F3" or, with several model chunks, "F3.1" (micro-batch.chunk).
std::string OpLabel(const PipelineSchedule& schedule, const PipelineOp& op);

}  // namespace ptdp
