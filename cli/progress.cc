#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "cli/printable.h"

namespace ptdp::cli {
namespace {

// The should_stop of the command running on this thread (StopRequestScope), or null.
thread_local const std::function<bool()>* t_should_stop = nullptr;

bool ForcedByEnvironment() {
  const char* value = std::getenv("PTDP_PROGRESS");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace

StopRequestScope::StopRequestScope(const std::function<bool()>& should_stop)
    : saved_(t_should_stop) {
  t_should_stop = &should_stop;
}

StopRequestScope::~StopRequestScope() { t_should_stop = saved_; }

void ThrowIfStopRequested() {
  if (t_should_stop != nullptr && *t_should_stop && (*t_should_stop)()) throw Interrupted();
}

ProgressLine::ProgressLine(std::ostream& err, std::string what)
    : ProgressLine(err, std::move(what), false) {}

ProgressLine::ProgressLine(std::ostream& err, std::string what, bool forced)
    : err_(err),
      what_(std::move(what)),
      mode_(forced || ForcedByEnvironment() ? Mode::kLines
            : ::isatty(STDERR_FILENO) != 0  ? Mode::kTerminal
                                            : Mode::kOff),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

ProgressLine::~ProgressLine() { Clear(); }

void ProgressLine::Clear() {
  if (mode_ == Mode::kTerminal && shown_ > 0) {
    WriteRaw(err_, "\r" + std::string(shown_, ' ') + "\r");
    err_.flush();
    shown_ = 0;
  }
}

void ProgressLine::Update(const std::string& status) {
  ThrowIfStopRequested();  // whether the line is shown or not
  if (mode_ == Mode::kOff) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double since = std::chrono::duration<double>(now - last_).count();
  // Nothing in the first second; then a terminal line five times a second, a log line a second.
  const double interval = mode_ == Mode::kTerminal ? 0.2 : 1.0;
  if (elapsed < 1 || (updated_ && since < interval)) return;
  updated_ = true;
  last_ = now;
  const std::string line = fmt::format("{}: {} ({:.0f} s)", what_, status, elapsed);
  if (mode_ == Mode::kLines) {
    err_ << line << '\n';
  } else {
    WriteRaw(err_, "\r");  // ptdp's own carriage return; `line` is escaped as all text is
    err_ << line << std::string(shown_ > line.size() ? shown_ - line.size() : 0, ' ');
    shown_ = line.size();
  }
  err_.flush();
}

}  // namespace ptdp::cli
