// Measured operation intervals on one rank, in the trace format of core/trace.h. Times are
// seconds since the recorder's origin. Ranks align their origins (executor/train/trainer.cc): on
// one host to the same instant of the shared monotonic clock, across hosts to the end of a barrier.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/trace.h"

namespace ptdp {

// The trace event of the time a rank waited for an overlapped parameter gather (the gather's
// exposed part; the gather itself is an event from its start to its completion).
inline constexpr const char* kParamGatherWait = "wait for param all-gather";

class Recorder {
 public:
  explicit Recorder(bool keep_events = false) : keep_events_(keep_events) { SetOrigin(); }

  void SetOrigin() { origin_ = std::chrono::steady_clock::now(); }
  // The monotonic clock's reading, in seconds since its epoch (boot on Linux, shared by the
  // processes of one host), and an origin given in that unit.
  static double ClockS() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void SetOriginClockS(double clock_s) {
    origin_ = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(clock_s)));
  }
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }
  bool keep_events() const { return keep_events_; }

  // Keeps the event when events are kept; always returns its duration.
  double Add(std::string name, const char* category, double start_s, double end_s,
             int microbatch = -1, int chunk = -1) {
    if (keep_events_) {
      events_.push_back(
          {0, std::move(name), category, start_s, end_s - start_s, microbatch, chunk});
    }
    return end_s - start_s;
  }
  const std::vector<TraceEvent>& events() const { return events_; }

 private:
  bool keep_events_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<TraceEvent> events_;
};

}  // namespace ptdp
