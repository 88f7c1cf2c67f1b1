// Timelines as Chrome trace event JSON (opens in Perfetto and chrome://tracing). The simulator
// writes its predicted timeline and the executor its measured one in this same format, one
// track per pipeline stage or rank, so the two can be laid over each other.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace ptdp {

struct TraceTrack {
  int id = 0;        // thread id in the trace: the stage (simulated) or the rank (measured)
  std::string name;  // "stage 0", "rank 3 (tp 1, pp 0, dp 1)"
};

struct TraceEvent {
  int track = 0;
  std::string name;      // "F3", "B3.1" (micro-batch.chunk), "dp all-reduce", "optimizer"
  std::string category;  // "forward" | "backward" | "weight-grad" | "send" | "recv" | "tp-comm"
                         // | "cp-comm" | "ep-comm" | "dp-comm" | "optimizer" | "other"
  double start_s = 0;
  double duration_s = 0;
  int microbatch = -1;  // -1 when not about one micro-batch
  int chunk = -1;
};

// {"displayTimeUnit": "ms", "traceEvents": [...]}: one complete ("X") event per TraceEvent with
// ts/dur in microseconds, plus metadata naming the process and each track.
std::string ChromeTraceJson(std::string_view process_name, std::span<const TraceTrack> tracks,
                            std::span<const TraceEvent> events);

}  // namespace ptdp
