// The extension module under the Python package: the command layer (cli::Run) in-process, so
// that every Python call goes through the same flags, rules and messages as the `ptdp` command.
// The typed results, errors and pictures are built in Python (ptdp/*.py) from the commands' JSON.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <iostream>
#include <optional>
#include <sstream>
#include <string>
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

std::tuple<int, std::string, std::string> RunCaptured(
    const std::vector<std::string>& args, const std::optional<std::string>& stdin_text) {
  std::ostringstream out, err;
  StandardInputFrom input(stdin_text);
  const int code = ptdp::cli::Run(args, out, err);
  return {code, out.str(), err.str()};
}

// The `ptdp` console script of the wheel: the command with the process's own streams.
int Main(const std::vector<std::string>& args) {
  const int code = ptdp::cli::Run(args, std::cout, std::cerr);
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
