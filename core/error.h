// Errors raised by the ptdp libraries. Libraries never print or exit: they return values or
// throw; only cli/ catches, prints and chooses the exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace ptdp {

// Wrong input from a user: a file, a key in it, or a command-line flag. The CLI prints
// `ptdp: error: <what()>` and exits with code 2.
//
// what() reads `<source>:<line>: <key>: <message> (hint: <hint>)`; parts that are empty (or a
// line of 0) are left out, so a flag error reads `--gpus: must be positive, got 0`.
class InputError : public std::runtime_error {
 public:
  struct Where {
    std::string source;  // file path, "<string>" for in-memory text, "" for flags
    int line = 0;        // 1-based; 0 when unknown or not applicable
    std::string key;     // dotted key path ("parallel.tp") or flag ("--gpus")
  };

  InputError(Where where, std::string message, std::string hint = "");

  const Where& where() const { return where_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

 private:
  Where where_;
  std::string message_;
  std::string hint_;
};

// A broken invariant inside ptdp (a bug, not a user mistake). Stays on in Release builds.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace ptdp

// Checks an invariant in every build type; throws ptdp::InternalError naming file:line.
#define PTDP_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw ::ptdp::InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                  ": check failed: " #cond);                               \
  } while (0)
