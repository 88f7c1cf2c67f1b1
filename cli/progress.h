// A progress line on stderr for work that can take more than a second (a large plan search,
// `replay --plan`, `calibrate`), and the place where such work stops when an in-process caller
// asks it to (RunOptions::should_stop in cli.h).
// Nothing is shown during the first second. Then the line is rewritten in place when stderr is a
// terminal; with PTDP_PROGRESS=1 (logs, tests) each update is a line of its own, at most one a
// second. Otherwise nothing is shown, so pipes and files get only the result.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <ostream>
#include <string>

namespace ptdp::cli {

// The command stopped because its caller asked (RunOptions::should_stop); Run catches it and
// returns kExitInterrupted. Thrown through the libraries (planner, validation, calibration):
// they hold nothing that RAII does not release.
class Interrupted : public std::exception {
 public:
  const char* what() const noexcept override { return "interrupted"; }
};

// The caller's should_stop for the command that runs on this thread while this object lives
// (Run makes one per command). An empty function, or none, never stops.
class StopRequestScope {
 public:
  explicit StopRequestScope(const std::function<bool()>& should_stop);
  ~StopRequestScope();
  StopRequestScope(const StopRequestScope&) = delete;
  StopRequestScope& operator=(const StopRequestScope&) = delete;

 private:
  const std::function<bool()>* saved_;
};

// Throws Interrupted when this thread's command was asked to stop (StopRequestScope).
void ThrowIfStopRequested();

class ProgressLine {
 public:
  // `what` starts every line ("ptdp plan"); `err` is stderr (or a test's stream, with
  // `forced`: every update after the first second is written).
  ProgressLine(std::ostream& err, std::string what);
  ProgressLine(std::ostream& err, std::string what, bool forced);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // The state now ("1,245,184 layouts checked"); cheap when nothing is due. Throws
  // Interrupted when the command was asked to stop (ThrowIfStopRequested).
  void Update(const std::string& status);
  // Erases the terminal line (other text is about to be written); the next Update redraws it.
  void Clear();

 private:
  enum class Mode { kOff, kTerminal, kLines };
  std::ostream& err_;
  std::string what_;
  Mode mode_;
  std::chrono::steady_clock::time_point start_, last_;
  bool updated_ = false;  // a line has been shown
  size_t shown_ = 0;      // characters on the terminal line now
};

}  // namespace ptdp::cli
