// A safe interpreter for the subset of bash that launch scripts are written in.
//
// `ptdp check` reads a Megatron-LM launch script as its author wrote it: bash arrays, ${VAR:-x},
// $((A*B)), if/case/for, functions, `source`, quotes over several lines. InterpretShell plays the
// script the way bash 5 would and lists every command it would run with each argument exactly
// as bash would pass it. It never runs a program, reads a file only through
// ShellOptions::read_file, and stops with an InputError instead of looping or growing without
// bound.
//
// What it cannot know becomes visible instead of guessed. A `$(cmd)` or backquoted command, a
// script argument ($1...) that was not given, $RANDOM are unknown parts of a word, kept as
// written; the known text around them still splits into words as usual (`OPTS="--data $1 --lr
// 1"; python t.py $OPTS` gives --data, $1, --lr, 1). Only $(pwd) is known: it is $PWD when the
// environment gives one. A condition that depends on an unknown part, or on whether a program
// succeeds, is not decided: the `else` branch (or none) is taken and a note says so; in
// `a || b` and `a && b` a program is taken to succeed. `while` and `until` loops are not run;
// `for` loops run at most 1,000 iterations in all; functions call each other at most 16 deep.
//
// Deliberate differences from bash, each with a note: a comment line inside a command continued
// with `\` ends the command in bash, here the command reads on as its author meant (with a
// warning, as ptdp's earlier reader did); file tests (-f, -d, ...) assume the file exists; a CR
// before a newline (a script saved on Windows) is ignored.
//
// As bash does: an arithmetic error ($((1/0))) abandons the rest of its line and a note says so;
// ${X:?message} ends the script; a sourced file with a syntax error is skipped with a note.
//
// Not implemented (the words stay as written): brace expansion {a,b}, pathname expansion
// (globs are assumed to match no file, as bash leaves them then), associative arrays, ${!name},
// `=~`, IFS other than blanks and newline, aliases, `read`, `getopts`, `coproc`, `select`,
// commands inside $(...) (they are not listed).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ptdp {

// One argument of a command, after expansion, word splitting and quote removal.
struct ShellWord {
  std::string text;
  // Where the word's text was written: its first character's line, or for a word that an
  // expansion made, the expansion's line; an array element or a function argument keeps the
  // line where the element or argument was written.
  int line = 0;
  // The word came (partly) from something the interpreter cannot know: `$(cmd)`, a backquoted
  // command, a script argument that was not given, $RANDOM. Its text is that part as written.
  bool unknown = false;
  std::string source;  // the file `line` is in: the script, or a file it sources

  bool operator==(const ShellWord&) const = default;
};

// A command bash would run (or a builtin that only prints or changes the directory: echo, set,
// cd...). Assignments, declarations, tests, control flow and function calls are interpreted,
// not listed; a function's commands are.
struct ShellCommand {
  std::vector<ShellWord> words;  // redirections removed; words[0] is the program
  int line = 0;                  // the line the command starts on
  std::string source;            // the file `line` is in
  // Exported variables in effect, plus the command's own `NAME=value` prefixes.
  std::map<std::string, std::string> environment;
  // What a here-document (<<EOF ... EOF) or here-string (<<< word) feeds the command, expanded
  // as bash expands it (<<'EOF' keeps it as written); its line is where the text starts. The
  // body is never run here: `sbatch <<EOF` lists sbatch only, and the caller may read the job.
  std::optional<ShellWord> input;
};

// Something the reader should know: a condition that could not be decided, a loop not run, a
// file not read, a script argument not given (warning = false for notes that only inform).
struct ShellNote {
  bool warning = true;
  int line = 0;
  std::string message;
  std::string fix;     // what to change in the script; may be empty
  std::string source;  // the file `line` is in
};

// The most text InterpretShell parses: the script, the files it sources and the text it evals,
// in all. Readers of a script need read no more than this (and a byte, to tell it was more).
inline constexpr size_t kMaxShellTextBytes = size_t{1} << 20;  // 1 MiB

// What ShellOptions::read_file answers for a path: the file's text, or nothing, and then why
// when the reader refused it (rather than failing to read it).
struct FileText {
  std::optional<std::string> text;
  // Why the file was not read, said after "<path> was not read: " ("it lies outside the
  // script's folder (/a/b)"); "" when it could not be read (missing, unreadable): the note then
  // says only that, whatever the reason.
  std::string refused;
  std::string fix;  // what to do to have it read ("pass --allow-source DIR"); may be empty

  FileText() = default;
  // A reader that answers with the text or nullopt (tests, fuzz targets) converts implicitly.
  FileText(std::optional<std::string> t) : text(std::move(t)) {}  // NOLINT(runtime/explicit)
  static FileText Refused(std::string why, std::string fix = "") {
    FileText f;
    f.refused = std::move(why);
    f.fix = std::move(fix);
    return f;
  }
};
using FileReader = std::function<FileText(const std::string& path)>;

struct ShellOptions {
  std::vector<std::string> positional;  // $1, $2, ...; $0 is the source name
  // The starting environment; its variables are exported. Nothing else is inherited: $HOME,
  // $PWD, $USER are unset unless given here.
  std::map<std::string, std::string> environment;
  // Name prefixes (SLURM_, PBS_) of variables that the environment the script really runs in
  // sets: one of them unset here reads as unknown ("$SLURM_NNODES"), not empty.
  std::vector<std::string> unknown_when_unset;
  // Reads the file that `source FILE` or `. FILE` names (the path as written after expansion);
  // no text when it cannot or will not (a note says which, FileText). When empty, sourced files
  // are not read (a note says so).
  FileReader read_file;
};

struct ShellResult {
  std::vector<ShellCommand> commands;  // in the order bash would run them
  std::vector<ShellNote> notes;        // in the order they arose
  // The files `source` named that were not read (unknown path, unreadable), as written.
  std::vector<std::string> unread_files;
  std::vector<std::string> missing_arguments;  // script arguments read but not given: "1", "2"
};

// Interprets `text` (named `source` in notes, errors and $0). Throws InputError naming the
// source and line for a syntax error the user must fix (an unclosed quote, `(` array, `$(`,
// `${` or `if`; `fi` without `if`; a redirection without a target), and when the script would
// produce more than 1,000,000 words, a value over 16 MiB, more than 256 MiB of expanded text or
// run more than 100,000 commands. A syntax error in a sourced file is a note, as in bash.
ShellResult InterpretShell(std::string_view text, const std::string& source,
                           const ShellOptions& options = {});

}  // namespace ptdp
