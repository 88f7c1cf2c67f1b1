// Output files of the CLI. Checked before any work (CheckOutputs: the folder exists and is
// writable, the path is not a folder and not a file the run reads), then written all or none
// (WriteOutputFiles: each to a temporary name in its own folder, then renamed), so that a failed
// or interrupted run never leaves a half-written file, never destroys an earlier output, and
// never leaves the first of two outputs written when the second fails. A replaced file keeps its
// permissions; a symbolic link keeps pointing at the file it names, which gets the new content.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/flags.h"

namespace ptdp::cli {

// The flags that name a file ptdp writes, and the one that names a folder (--save).
inline constexpr std::string_view kOutputFileFlags[] = {"out",  "svg",     "trace",
                                                        "html", "results", "comm-results"};
inline constexpr std::string_view kOutputDirFlag = "save";

// Every output flag given in `flags` is checked; an InputError names the first flag that cannot
// be written, and why. "-" is standard output, for one output at most; "-" is standard input
// for one input flag at most. Run by every command before it reads its inputs.
void CheckOutputs(const Flags& flags);

// Whether an output flag is "-": the command's report then goes to stderr, the file to stdout.
bool AnOutputIsStandardOutput(const Flags& flags);

// Where an output named "-" is written (the stream `ptdp` was given as its standard output);
// set by the command runner before each command.
void SetStandardOutput(std::ostream* out);

// `path` can be written: InputError naming `flag` otherwise.
void CheckOutputPath(const std::string& path, std::string_view flag);

struct OutputFile {
  std::string path;
  std::string content;
  std::string flag;  // "--svg": named in an error
};

// Writes every file or none (see the top of this file). InputError naming the flag otherwise.
void WriteOutputFiles(const std::vector<OutputFile>& files);
void WriteOutputFile(const std::string& path, std::string_view content, std::string_view flag);

}  // namespace ptdp::cli
