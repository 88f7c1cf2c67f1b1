// `ptdp check` on launch scripts as people write them: each script in tests/fixtures/check_scripts
// with its expected reading beside it (NAME.expect), as check prints it.
//
// NAME.expect, one statement per line ('#' starts a comment line):
//   flags: WORDS   check's own flags besides --file NAME.sh (split at blanks; {dir} is this
//                  folder)
//   exit: N        the exit code
//   out: TEXT      a line of the standard output contains TEXT
//   err: TEXT      the standard error contains TEXT
//   not: TEXT      neither output contains TEXT
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace ptdp::cli {
namespace {

struct Expectation {
  std::vector<std::string> flags;
  int exit = 0;
  std::vector<std::string> out, err, absent;
};

Expectation ReadExpectation(const std::filesystem::path& path) {
  Expectation e;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.starts_with("#")) continue;
    const size_t colon = line.find(": ");
    EXPECT_NE(colon, std::string::npos) << path << ": " << line;
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon), value = line.substr(colon + 2);
    if (key == "flags") {
      std::istringstream words(value);
      for (std::string w; words >> w;) e.flags.push_back(w);
    } else if (key == "exit") {
      e.exit = std::stoi(value);
    } else if (key == "out") {
      e.out.push_back(value);
    } else if (key == "err") {
      e.err.push_back(value);
    } else if (key == "not") {
      e.absent.push_back(value);
    } else {
      ADD_FAILURE() << path << ": unknown key " << key;
    }
  }
  return e;
}

TEST(CliCheckScripts, EachScriptReadsAsExpected) {
  const std::filesystem::path dir = std::string(PTDP_TEST_FIXTURES) + "/check_scripts";
  int scripts = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".sh") continue;
    std::filesystem::path expect = entry.path();
    expect.replace_extension(".expect");
    ASSERT_TRUE(std::filesystem::exists(expect)) << expect;
    const Expectation e = ReadExpectation(expect);
    std::vector<std::string> args = {"check", "--file", entry.path().string()};
    for (std::string flag : e.flags) {
      if (const size_t at = flag.find("{dir}"); at != std::string::npos) {
        flag.replace(at, 5, dir.string());
      }
      args.push_back(flag);
    }
    std::ostringstream out, err;
    const int code = cli::Run(args, out, err);
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name + "\n--- stdout:\n" + out.str() + "--- stderr:\n" + err.str());
    EXPECT_EQ(code, e.exit);
    for (const std::string& text : e.out)
      EXPECT_NE(out.str().find(text), std::string::npos) << text;
    for (const std::string& text : e.err)
      EXPECT_NE(err.str().find(text), std::string::npos) << text;
    for (const std::string& text : e.absent) {
      EXPECT_EQ(out.str().find(text), std::string::npos) << text;
      EXPECT_EQ(err.str().find(text), std::string::npos) << text;
    }
    ++scripts;
  }
  EXPECT_GE(scripts, 1);
}

TEST(CliCheckScripts, ACommandWithoutTheSeparatorIsExplained) {
  // issue 33: the command pasted without the lone -- before it.
  std::ostringstream out, err;
  const int code = cli::Run({"check", "--cluster", "dgx-h100", "torchrun", "--nproc_per_node", "8",
                             "pretrain_gpt.py", "--num-layers", "24"},
                            out, err);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(err.str().find("--nproc_per_node: unknown flag: it belongs to the Megatron-LM command"),
            std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("put the command after a lone --: ptdp check [--cluster C] --"),
            std::string::npos)
      << err.str();
}

}  // namespace
}  // namespace ptdp::cli
