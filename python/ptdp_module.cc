// The extension module under the Python package: the command layer (cli::Run) in-process, so
// that every Python call goes through the same flags, rules and messages as the `ptdp` command.
// The typed results, errors and pictures are built in Python (ptdp/*.py) from the commands' JSON.
// A command runs without the GIL, so other Python threads go on meanwhile, and stops when a
// signal handler raises (Ctrl-C: KeyboardInterrupt), which the call then raises.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "cli/cli.h"

namespace nb = nanobind;

namespace {

// Standard input replaced by `text` for one command (a file flag given as "-" reads it).
class StandardInputFrom {
 public:
  explicit StandardInputFrom(const std::optional<std::string>& text) : in_(text.value_or("")) {
    if (text) saved_ = std::cin.rdbuf(in_.rdbuf());
  }
  ~StandardInputFrom() {
    if (saved_ != nullptr) std::cin.rdbuf(saved_);
  }
  StandardInputFrom(const StandardInputFrom&) = delete;
  StandardInputFrom& operator=(const StandardInputFrom&) = delete;

 private:
  std::istringstream in_;
  std::streambuf* saved_ = nullptr;
};

// Python's signal handlers, run from C++ code that does not hold the GIL. They run on the main
// thread only: elsewhere a check finds nothing.
class SignalCheck {
 public:
  static constexpr auto kInterval = std::chrono::milliseconds(100);

  // Takes the GIL and runs the handlers, at most once per kInterval; true when one raised (then
  // on every later call too), keeping its exception for RethrowIfRaised().
  bool HandlerRaised() {
    if (raised_) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < kInterval) return false;
    last_ = now;
    const nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;
    raised_.emplace();  // fetches the handler's exception
    return true;
  }

  // The exception a handler raised, if one did (KeyboardInterrupt for Ctrl-C). With the GIL.
  void RethrowIfRaised() {
    if (raised_) throw std::move(*raised_);
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::optional<nb::python_error> raised_;
};

// Commands that read only files and write only their own streams (no standard input, no "-")
// run at once on several Python threads (a sweep fanned out over threads); the others, which
// swap std::cin or may read the process's standard input, or run MPI or CUDA, one at a time.
// Held without the GIL.
std::shared_timed_mutex command_mutex;

bool RunsBesideOthers(const std::vector<std::string>& args,
                      const std::optional<std::string>& stdin_text) {
  static constexpr std::string_view kConcurrent[] = {"plan",     "simulate", "sweep",   "check",
                                                     "schedule", "models",   "profiles"};
  if (stdin_text || args.empty()) return false;
  if (std::find(std::begin(kConcurrent), std::end(kConcurrent), args.front()) ==
      std::end(kConcurrent)) {
    return false;
  }
  return std::none_of(args.begin(), args.end(), [](const std::string& a) { return a == "-"; });
}

// Runs one command without the GIL, so that other Python threads go on meanwhile. The command
// asks should_stop where it reports progress (at least every ~0.1 s of long work), which runs
// the signal handlers: when one raises, the command stops (kExitInterrupted) and so does the
// call, with that exception. So does a call waiting for another thread's command. A signal that
// no check meets before the command ends is raised by Python as soon as the call returns.
int RunWithoutGil(const std::vector<std::string>& args,
                  const std::optional<std::string>& stdin_text, std::ostream& out,
                  std::ostream& err) {
  SignalCheck signals;
  ptdp::cli::RunOptions options;
  options.should_stop = [&signals] { return signals.HandlerRaised(); };
  int code = ptdp::cli::kExitInterrupted;
  {
    const nb::gil_scoped_release no_gil;
    auto run = [&](auto& lock) {
      while (!lock.try_lock_for(SignalCheck::kInterval) && !signals.HandlerRaised()) {
      }
      if (lock.owns_lock()) {
        const StandardInputFrom input(stdin_text);
        code = ptdp::cli::Run(args, out, err, options);
      }
    };
    if (RunsBesideOthers(args, stdin_text)) {
      std::shared_lock lock(command_mutex, std::defer_lock);
      run(lock);
    } else {
      std::unique_lock lock(command_mutex, std::defer_lock);
      run(lock);
    }
  }
  signals.RethrowIfRaised();
  return code;
}

std::tuple<int, std::string, std::string> RunCaptured(
    const std::vector<std::string>& args, const std::optional<std::string>& stdin_text) {
  std::ostringstream out, err;
  const int code = RunWithoutGil(args, stdin_text, out, err);
  return {code, out.str(), err.str()};
}

// The `ptdp` console script of the wheel: the command with the process's own streams.
int Main(const std::vector<std::string>& args) {
  const int code = RunWithoutGil(args, std::nullopt, std::cout, std::cerr);
  std::cout.flush();
  return code;
}

}  // namespace

NB_MODULE(_ptdp, m) {
  m.doc() = "ptdp's command layer, in-process (use the `ptdp` package, not this module)";
  m.def("run", &RunCaptured, nb::arg("args"), nb::arg("stdin") = nb::none(),
        "Runs one ptdp command; returns (exit code, standard output, standard error).");
  m.def("main", &Main, nb::arg("args"), "Runs one ptdp command on the process's own streams.");
  m.attr("__version__") = PTDP_VERSION;
}
