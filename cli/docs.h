// The help text as a command runs it, and what is generated from it and from the flag tables
// at build time, so that none of them can drift from the flags: the man page (`ptdp --man`) and
// the bash and zsh completions (`ptdp --completion bash|zsh`). Hidden top-level options; the
// build writes their output into share/ (cli/CMakeLists.txt) and `cmake --install` installs it.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <string_view>

#include "cli/commands.h"

namespace ptdp::cli {

// `ptdp --help`.
std::string TopHelp();
// A command's flags (its own and --help), as parsed and as `ptdp CMD --help` lists them.
boost::program_options::options_description CommandOptions(const Command& command);
// `ptdp CMD --help`.
std::string CommandHelp(const Command& command);

// A man(7) page: the top help, then each command's help.
std::string ManPage();
// A completion script for `shell` ("bash" or "zsh"): command names, each command's flags, and
// the values of the flags that take names (presets, profiles, formats, schedules, ...).
// InputError for another shell.
std::string CompletionScript(std::string_view shell);

}  // namespace ptdp::cli
