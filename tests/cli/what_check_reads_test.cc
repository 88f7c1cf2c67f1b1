// What `ptdp check` and `ptdp simulate --file` read of someone else's launch script (issue 35):
// sourced and submitted files only inside the script's folder or a folder --allow-source names,
// never /proc, /sys, /dev or what is not a regular file; --file bounded and never a FIFO; every
// word printed as printable text, and a long one by its start and size.
//
// WhatCheckReads.NoGeneratedScriptLeaksAFileOutsideItsFolder plays the part of a fuzz target
// with deterministic inputs: it plants a marker in files outside the script's folder and runs
// check on hundreds of scripts that try to reach them (source, `.`, sbatch; absolute, `../`,
// symbolic-link and /proc paths; variables, eval, here-documents, `sh -c`, functions), asserting
// that no output, text or JSON, ever holds the marker, while the same scripts aimed at a copy
// inside the folder do read it.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/printable.h"
#include "core/text.h"

namespace ptdp::cli {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code;
  std::string out, err;
  std::string all() const { return out + err; }
};

// Standard input replaced by `text` for one command.
class StandardInputFrom {
 public:
  explicit StandardInputFrom(const std::string& text) : in_(text), saved_(std::cin.rdbuf()) {
    std::cin.rdbuf(in_.rdbuf());
  }
  ~StandardInputFrom() { std::cin.rdbuf(saved_); }
  StandardInputFrom(const StandardInputFrom&) = delete;
  StandardInputFrom& operator=(const StandardInputFrom&) = delete;

 private:
  std::istringstream in_;
  std::streambuf* saved_;
};

Result Cli(const std::vector<std::string>& args, const std::string* stdin_text = nullptr) {
  std::optional<StandardInputFrom> input;
  if (stdin_text != nullptr) input.emplace(*stdin_text);
  std::ostringstream out, err;
  const int code = Run(args, out, err);
  return {code, out.str(), err.str()};
}

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The command every script ends with: complete but for what the files it sources would add.
constexpr const char* kCommand =
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
    "--num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 "
    "--global-batch-size 8 --vocab-size 1000";

// A folder tree for one test: root/project holds the scripts (the script's folder), root/outside
// the files no script may read, root/other a folder that --allow-source may name.
class WhatCheckReads : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("ptdp-reads-" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    project_ = root_ / "project";
    outside_ = root_ / "outside";
    fs::create_directories(project_ / "sub");
    fs::create_directories(outside_);
    fs::create_directories(root_ / "other");
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path Script(const std::string& name, const std::string& text) {
    Write(project_ / name, text);
    return project_ / name;
  }

  fs::path root_, project_, outside_;
};

TEST_F(WhatCheckReads, SourcedFilesOnlyFromTheScriptsFolder) {
  Write(outside_ / "model.env", "NUM_LAYERS=24\n");
  Write(project_ / "sub" / "model.env", "NUM_LAYERS=12\n");
  fs::create_symlink("../outside/model.env", project_ / "link.env");
  fs::create_directories(project_ / "folder.env");
  const fs::path script = Script("train.sh",
                                 "source ../outside/model.env\n"  // 1
                                 "source " +
                                     (outside_ / "model.env").string() +
                                     "\n"                                    // 2
                                     "source link.env\n"                     // 3
                                     ". /proc/self/environ\n"                // 4
                                     "source /dev/zero\n"                    // 5
                                     "source folder.env\n"                   // 6
                                     "source sub/../../outside/model.env\n"  // 7
                                     "source sub/model.env\n" +              // 8: read
                                     std::string(kCommand) +
                                     " --ffn-hidden-size $((NUM_LAYERS * 100))\n");
  const Result r = Cli({"check", "--file", script.string()});
  SCOPED_TRACE(r.all());
  EXPECT_EQ(r.code, kExitOk);
  const std::string folder = fs::weakly_canonical(project_).string();
  const std::string outside = fmt::format("it lies outside the script's folder ({})", folder);
  EXPECT_NE(r.out.find("line 1: ../outside/model.env was not read: " + outside), std::string::npos);
  EXPECT_NE(
      r.out.find("line 2: " + (outside_ / "model.env").string() + " was not read: " + outside),
      std::string::npos);
  EXPECT_NE(r.out.find("line 3: link.env was not read: " + outside), std::string::npos);
  EXPECT_NE(r.out.find("line 4: /proc/self/environ was not read: ptdp never reads /proc, /sys or "
                       "/dev"),
            std::string::npos);
  EXPECT_NE(r.out.find("line 5: /dev/zero was not read: ptdp never reads"), std::string::npos);
  EXPECT_NE(r.out.find("line 6: folder.env was not read: it is not a regular file"),
            std::string::npos);
  EXPECT_NE(r.out.find("line 7: sub/../../outside/model.env was not read: " + outside),
            std::string::npos);
  EXPECT_NE(r.out.find("pass --allow-source DIR"), std::string::npos);
  EXPECT_EQ(r.out.find("line 8"), std::string::npos);  // read: 12 layers, 1200 wide
  EXPECT_NE(r.out.find("--ffn-hidden-size"), std::string::npos);

  // The same script with the outside folder allowed reads it (24 layers, then 12).
  const Result allowed = Cli({"check", "--file", script.string(), "--allow-source",
                              outside_.string(), "--format", "json"});
  EXPECT_EQ(allowed.out.find("../outside/model.env was not read"), std::string::npos)
      << allowed.out;
  EXPECT_NE(allowed.out.find("/proc/self/environ was not read"), std::string::npos);
  // --allow-source names a folder.
  const Result bad = Cli(
      {"check", "--file", script.string(), "--allow-source", (outside_ / "model.env").string()});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_NE(
      bad.err.find("--allow-source: " + (outside_ / "model.env").string() + " is not a folder"),
      std::string::npos)
      << bad.err;
}

// A relative path starts at the script's folder, not where ptdp runs: the working folder is
// never tried first.
TEST_F(WhatCheckReads, RelativePathsStartAtTheScriptsFolderOnly) {
  Write(project_ / "model.env", "NUM_LAYERS=12\n");
  const fs::path script = Script(
      "sub/train.sh", "source model.env\n" + std::string(kCommand) + " --num-layers $NUM_LAYERS\n");
  const fs::path saved = fs::current_path();
  fs::current_path(project_);  // model.env is here, but not beside the script
  const Result r = Cli({"check", "--file", script.string()});
  fs::current_path(saved);
  EXPECT_NE(r.out.find("line 1: model.env could not be read"), std::string::npos) << r.all();
}

// A script on standard input has no folder: only what --allow-source names is read, relative
// paths from the current folder.
TEST_F(WhatCheckReads, AScriptOnStandardInputReadsOnlyAllowedFolders) {
  Write(project_ / "model.env", "NUM_LAYERS=12\n");
  const std::string text =
      "source model.env\n" + std::string(kCommand) + " --num-layers $NUM_LAYERS\n";
  const fs::path saved = fs::current_path();
  fs::current_path(project_);
  const Result none = Cli({"check", "--file", "-"}, &text);
  const Result other = Cli({"check", "--file", "-", "--allow-source", "../other"}, &text);
  const Result here = Cli({"check", "--file", "-", "--allow-source", "."}, &text);
  fs::current_path(saved);
  EXPECT_NE(none.out.find("model.env was not read: a script from <stdin> has no folder to read "
                          "files from"),
            std::string::npos)
      << none.all();
  EXPECT_NE(other.out.find("model.env was not read: it lies outside the folders --allow-source "
                           "names"),
            std::string::npos)
      << other.all();
  EXPECT_EQ(here.out.find("model.env"), std::string::npos) << here.all();
  EXPECT_EQ(here.code, kExitOk) << here.all();
}

// sbatch's job script is read by the same rules.
TEST_F(WhatCheckReads, SbatchsJobScriptByTheSameRules) {
  Write(outside_ / "job.sh", std::string(kCommand) + " --bogus-outside-flag\n");
  Write(project_ / "in" / "job.sh", std::string(kCommand) + " --bogus-inside-flag\n");
  const Result out = Cli(
      {"check", "--file", Script("submit.sh", "sbatch --nodes 2 ../outside/job.sh\n").string()});
  // Nothing else runs a Python script: check cannot judge, and says why.
  EXPECT_EQ(out.code, kExitCannotJudge);
  EXPECT_NE(out.out.find("../outside/job.sh was not read: it lies outside the script's folder"),
            std::string::npos)
      << out.all();
  EXPECT_EQ(out.all().find("bogus-outside-flag"), std::string::npos);
  const Result in =
      Cli({"check", "--file", Script("submit-in.sh", "sbatch --nodes 2 in/job.sh\n").string()});
  EXPECT_NE(in.out.find("--bogus-inside-flag"), std::string::npos) << in.all();
}

// A sourced file that exists but cannot be read is a note, as a missing one is, saying no more.
TEST_F(WhatCheckReads, AnUnreadableSourcedFileIsANoteNotAnError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every file: permissions cannot be tested";
  Write(project_ / "secret.env", "NUM_LAYERS=12\n");
  fs::permissions(project_ / "secret.env", fs::perms::none);
  const Result r =
      Cli({"check", "--file",
           Script("train.sh", "source secret.env\n" + std::string(kCommand) + "\n").string()});
  EXPECT_EQ(r.code, kExitOk) << r.all();
  EXPECT_NE(r.out.find("line 1: secret.env could not be read\n"), std::string::npos) << r.all();
  EXPECT_EQ(r.all().find("ermission"), std::string::npos) << r.all();
}

TEST_F(WhatCheckReads, FileIsARegularFileOfAtMostOneMebibyte) {
  for (const char* flag_value : {"/dev/zero", "/dev/null"}) {
    const Result r = Cli({"check", "--file", flag_value});
    EXPECT_EQ(r.code, kExitBadInput) << flag_value;
    EXPECT_NE(r.err.find(fmt::format("--file: {} is not a regular file", flag_value)),
              std::string::npos)
        << r.err;
  }
  // A FIFO is refused by its type, before it is opened (opening it would wait for a writer).
  const fs::path fifo = project_ / "fifo.sh";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Result f = Cli({"check", "--file", fifo.string()});
  EXPECT_EQ(f.code, kExitBadInput);
  EXPECT_NE(f.err.find("is not a regular file"), std::string::npos) << f.err;
  const Result folder = Cli({"simulate", "--cluster", "dgx-h100", "--file", project_.string()});
  EXPECT_EQ(folder.code, kExitBadInput);
  EXPECT_NE(folder.err.find("--file: " + project_.string() + " is not a regular file"),
            std::string::npos)
      << folder.err;
  // More than 1 MiB: refused after reading 1 MiB and a byte, from a file or standard input.
  const std::string big(size_t{1} << 20 | 1, '#');
  const Result large = Cli({"check", "--file", Script("large.sh", big).string()});
  EXPECT_EQ(large.code, kExitBadInput);
  EXPECT_NE(large.err.find("large.sh is larger than 1 MiB"), std::string::npos) << large.err;
  const Result piped = Cli({"check", "--file", "-"}, &big);
  EXPECT_EQ(piped.code, kExitBadInput);
  EXPECT_NE(piped.err.find("--file: standard input holds more than 1 MiB"), std::string::npos)
      << piped.err;
  std::string fits = std::string((size_t{1} << 20) - 400, '#') + "\n" + kCommand + "\n";
  fits += std::string((size_t{1} << 20) - fits.size(), '\n');  // exactly 1 MiB
  EXPECT_EQ(Cli({"check", "--file", "-"}, &fits).code, kExitOk);
  // --env-file likewise.
  const Result env = Cli({"check", "--env-file", "/dev/zero", "--", kCommand});
  EXPECT_EQ(env.code, kExitBadInput);
  EXPECT_NE(env.err.find("--env-file: /dev/zero is not a regular file"), std::string::npos)
      << env.err;
}

// Whether `text` is UTF-8 with no control character but newline.
bool PrintableUtf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = DecodeUtf8(std::string_view(text).substr(i));
    if (c.length == 0 || (c.code != '\n' && IsControlCharacter(c.code))) return false;
    i += c.length;
  }
  return true;
}

TEST_F(WhatCheckReads, ControlCharactersNeverReachTheTerminal) {
  // A flag named --$'\e]0;TITLE\a\e[2J' sets the terminal's title and clears it, where printed
  // raw; CSI as one C1 byte, bytes that are not UTF-8, and a carriage return likewise.
  const std::string nasty =
      "--\x1b]0;TITLE\x07\x1b[2J-\xc2\x9b"
      "2J-\xff\xfe-\r-\x7f";
  const fs::path script = Script(
      "nasty.sh",
      fmt::format("{} '{}' --x\n# \x1b[31m\nsource '/nope/\x1b]0;T\x07.sh'\n", kCommand, nasty));
  for (const char* format : {"table", "json"}) {
    const Result r = Cli({"check", "--format", format, "--file", script.string()});
    SCOPED_TRACE(r.all());
    EXPECT_EQ(r.code, kExitCannotJudge);  // refused, with a sourced file not read
    EXPECT_TRUE(PrintableUtf8(r.out)) << format;
    EXPECT_TRUE(PrintableUtf8(r.err)) << format;
  }
  const Result text = Cli({"check", "--file", script.string()});
  EXPECT_NE(text.out.find("--\\x1b]0;TITLE\\x07\\x1b[2J-\\u009b2J-\\xff\\xfe-\\x0d-\\x7f"),
            std::string::npos)
      << text.out;
  // The same word as a flag of ptdp's own command line, and on simulate's path.
  const Result own = Cli({"check", nasty});
  EXPECT_EQ(own.code, kExitBadInput);
  EXPECT_TRUE(PrintableUtf8(own.err)) << own.err;
  const Result sim = Cli({"simulate", "--cluster", "dgx-h100", "--file", script.string()});
  EXPECT_EQ(sim.code, kExitBadInput);
  EXPECT_TRUE(PrintableUtf8(sim.err)) << sim.err;
}

// A megabyte-long flag is quoted by its start and size, once per finding; a nesting error
// quotes its 200 KB expression once.
TEST_F(WhatCheckReads, LongWordsAreQuotedShort) {
  const std::string huge = "--" + std::string(1'000'000, 'x');
  const Result r = Cli({"check", "--file", Script("huge.sh", kCommand + (" " + huge)).string()});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_LT(r.all().size(), 8'000u);
  const std::string quoted = "--" + std::string(58, 'x') + "... (1000002 bytes)";
  EXPECT_NE(r.out.find("  line 1: unrecognized arguments: " + quoted + "\n"), std::string::npos)
      << r.out;
  const Result json = Cli({"check", "--format", "json", "--file", (project_ / "huge.sh").string()});
  EXPECT_LT(json.out.size(), 8'000u);

  const std::string expression =
      std::string(101, '(') + std::string(200'000, '1') + std::string(101, ')');
  const Result nest =
      Cli({"check", "--file",
           Script("nest.sh", "X=$((" + expression + "))\n" + kCommand + " --ffn-hidden-size $X\n")
               .string()});
  EXPECT_LT(nest.all().size(), 8'000u) << nest.all().substr(0, 2000);
  EXPECT_NE(nest.out.find("bash abandons the command on line 1: " + std::string(60, '(') +
                          "... (200202 bytes): expression recursion level exceeded"),
            std::string::npos)
      << nest.out;
  // ptdp's own flag, a megabyte long, likewise.
  const Result own = Cli({"plan", huge});
  EXPECT_EQ(own.code, kExitBadInput);
  EXPECT_LT(own.err.size(), 2'000u);
}

// The stream filter escapes a stream as it would the whole text: a character cut between two
// writes is held, not escaped; ptdp's own carriage return passes raw.
TEST(PrintableStream, EscapesAcrossWritesAndPassesPtdpsOwnControls) {
  std::ostringstream target;
  {
    PrintableStream out(target);
    out << "caf\xc3";
    out << "\xa9 \x1b[2J ";
    out.flush();
    out << "\xe2\x80";
    out << "\xa6 ";
    WriteRaw(out, "\r");
    out << "\r\xe2";
  }  // a character cut short for good: its byte as \xNN
  EXPECT_EQ(target.str(), "caf\xc3\xa9 \\x1b[2J \xe2\x80\xa6 \r\\x0d\\xe2");
}

// The marker planted outside the script's folder never reaches an output.
TEST_F(WhatCheckReads, NoGeneratedScriptLeaksAFileOutsideItsFolder) {
  const std::string marker = "PTDP_MARKER_5b1e7c";  // in files' contents only, never in a path
  const std::string inside_marker = "PTDP_INSIDE_9d2f4a";
  // What a file holds: an #SBATCH line, a variable, an exported one, an array, a command with a
  // flag; and a file with a syntax error (a note that quoted the file would show it).
  const auto contents = [&](const std::string& m) {
    return fmt::format(
        "#SBATCH --job-name={0}\nSECRET={0}\nexport SECRET_EXPORTED=--{0}-exported\n"
        "SECRET_ARRAY=(--{0}-array 1)\ntorchrun pretrain_gpt.py --{0}-flag 1\n",
        m);
  };
  Write(outside_ / "secret.env", contents(marker));
  Write(outside_ / "broken.env", fmt::format("SECRET={}\nif then \"{}\n", marker, marker));
  Write(project_ / "inside" / "broken.env",
        fmt::format("SECRET={}\nif then \"{}\n", inside_marker, inside_marker));
  Write(root_ / "other" / "secret.env", contents(marker));  // allowed by no test below
  fs::create_symlink("../outside/secret.env", project_ / "link.env");
  fs::create_symlink("../outside", project_ / "linkdir");
  fs::create_symlink(outside_ / "secret.env", project_ / "sub" / "abs-link.env");
  Write(project_ / "inside" / "secret.env", contents(inside_marker));

  // Paths to the outside file, each relative to the script's folder (project_), and the same
  // path's counterpart inside the folder (empty: no counterpart).
  struct Target {
    std::string outside, inside;
  };
  const std::string abs_outside = (outside_ / "secret.env").string();
  const std::vector<Target> targets = {
      {"../outside/secret.env", "inside/secret.env"},
      {"./../outside/secret.env", "./inside/secret.env"},
      {"sub/../../outside/secret.env", "sub/../inside/secret.env"},
      {abs_outside, (project_ / "inside" / "secret.env").string()},
      {"link.env", ""},
      {"linkdir/secret.env", ""},
      {"sub/abs-link.env", ""},
      {"$PWD/../outside/secret.env", "$PWD/inside/secret.env"},
      {"${D}/secret.env", ""},  // D=../outside below
      {"$(dirname $0)/../outside/secret.env", ""},
      {"/proc/self/cwd/../outside/secret.env", ""},
      {"/proc/self/root" + abs_outside, ""},
      {"/proc/self/environ", ""},
      {"/proc/self/cmdline", ""},
      {"/dev/stdin", ""},
      {"/dev/fd/0", ""},
      {"../outside//secret.env", ""},
      {"../outside/./secret.env", ""},
      {"../outside/secret.env/", ""},
      {"../other/secret.env", ""},
      {"../outside/broken.env", "inside/broken.env"},
  };
  // How a script reaches a file, then uses what it set in the command it runs.
  const std::vector<std::string> forms = {
      "source {}",
      ". {}",
      "source \"{}\" extra args",
      "sbatch {}",
      "sbatch --nodes 2 --ntasks-per-node 8 {}",
      "eval \"source {}\"",
      "bash <<EOF\nsource {}\nEOF",
      "sbatch <<EOF\n#!/bin/bash\nsource {}\nEOF",
      "sh -c \"source {}\"",
      "load() {{ source \"$1\"; }}\nload {}",
      "F={}\nsource $F",
      "if [ -f {0} ]; then source {0}; fi",
      "for f in {}; do . $f; done",
      "X=$(cat {})",
      "X=$(< {})",
      "read -r X < {}",
      "mapfile -t LINES < {}",
      "source <(cat {})",
  };
  // Incomplete (no search runs), but every unknown flag is named: a value that leaked would be.
  const std::string use =
      "torchrun pretrain_gpt.py --num-layers 2 --from-$SECRET $SECRET_EXPORTED "
      "\"${SECRET_ARRAY[@]}\" $X\n";
  int runs = 0, inside_reads = 0;
  for (const Target& target : targets) {
    for (const std::string& form : forms) {
      for (const bool inside : {false, true}) {
        if (inside && target.inside.empty()) continue;
        const std::string path = inside ? target.inside : target.outside;
        const std::string text =
            "D=../outside\n" + fmt::format(fmt::runtime(form), path) + "\n" + use;
        const fs::path script = Script("generated.sh", text);
        std::vector<std::vector<std::string>> commands = {
            {"check", "--file", script.string()},
            {"check", "--format", "json", "--file", script.string()},
            {"check", "--file", script.string(), "--allow-source", (project_ / "sub").string()},
            {"simulate", "--cluster", "dgx-h100", "--file", script.string()},
        };
        for (const auto& args : commands) {
          const Result r = Cli(args);
          ++runs;
          SCOPED_TRACE(text + "\n" + fmt::format("{}", fmt::join(args, " ")) + "\n" + r.all());
          EXPECT_EQ(r.all().find(marker), std::string::npos);
          EXPECT_NE(r.code, 3);
          if (inside && r.all().find(inside_marker) != std::string::npos) ++inside_reads;
        }
        if (inside) continue;
        // The same text on standard input, with no folder allowed, then with the project's
        // folder allowed (the outside one never is).
        fs::path saved = fs::current_path();
        fs::current_path(project_);
        for (const bool allow : {false, true}) {
          std::vector<std::string> args = {"check", "--format", "json", "--file", "-"};
          if (allow) args.insert(args.end(), {"--allow-source", "."});
          const Result r = Cli(args, &text);
          ++runs;
          SCOPED_TRACE(text + "\n" + r.all());
          EXPECT_EQ(r.all().find(marker), std::string::npos);
        }
        fs::current_path(saved);
      }
    }
  }
  EXPECT_GT(runs, 500);
  // The generator reaches files: the inside copies are read by most forms (not those ptdp does
  // not run, such as $(cat ...) and `read`).
  EXPECT_GT(inside_reads, 40);
}

}  // namespace
}  // namespace ptdp::cli
