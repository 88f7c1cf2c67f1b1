// `--cluster-set KEY=VALUE` on plan and simulate, in-process: what-if hardware changes the
// figures, every output says what was changed, plan files keep it, bad input is exit 2 naming
// the flag.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/presets.h"
#include "core/spec_yaml.h"

namespace ptdp::cli {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result Cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = Run(args, out, err);
  return {code, out.str(), err.str()};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// GPT-3 175B on 1,024 H100s: the best plan's data-parallel traffic crosses the network.
const std::vector<std::string> kPlan = {"plan",     "--model", "gpt3-175b", "--cluster",
                                        "dgx-h100", "--gpus",  "1024",      "--global-batch",
                                        "1536",     "--top",   "1"};

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

double BestStepTime(const Result& r) {
  EXPECT_EQ(r.code, kExitOk) << r.err;
  return YAML::Load(r.out)["plans"][0]["step_time_s"].as<double>();
}

TEST(ClusterSet, AFasterNetworkShortensAMultiNodeStepAndThePlanSaysSo) {
  const double base = BestStepTime(Cli(With(kPlan, {"--format", "json"})));
  const Result faster =
      Cli(With(kPlan, {"--format", "json", "--cluster-set", "network.nic_gb_per_s=x2"}));
  EXPECT_LT(BestStepTime(faster), 0.95 * base);
  const Result slower =
      Cli(With(kPlan, {"--format", "json", "--cluster-set", "nic_gb_per_s=-50%"}));
  EXPECT_GT(BestStepTime(slower), base);
  // JSON: the changes, as typed, in order; absent without any.
  const Result two = Cli(With(kPlan, {"--format", "json", "--cluster-set", "nic_gb_per_s=x2",
                                      "--cluster-set", "hbm_bytes=+50%"}));
  const YAML::Node changes = YAML::Load(two.out)["cluster_overrides"];
  ASSERT_TRUE(changes.IsSequence()) << two.out;
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].as<std::string>(), "nic_gb_per_s=x2");
  EXPECT_EQ(changes[1].as<std::string>(), "hbm_bytes=+50%");
  EXPECT_FALSE(YAML::Load(Cli(With(kPlan, {"--format", "json"})).out)["cluster_overrides"]);
  // The table: one line under the heading; the memory limit is the larger HBM's.
  const Result table =
      Cli(With(kPlan, {"--cluster-set", "nic_gb_per_s=x2", "--cluster-set", "hbm_bytes=+50%"}));
  EXPECT_EQ(table.code, kExitOk) << table.err;
  EXPECT_NE(table.out.find("bf16\ndgx-h100 changed (--cluster-set): nic_gb_per_s=x2, "
                           "hbm_bytes=+50%\nSearched "),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("fit in 119.5 GiB per GPU"), std::string::npos) << table.out;
  EXPECT_EQ(Cli(kPlan).out.find("changed (--cluster-set)"), std::string::npos);
}

TEST(ClusterSet, TheHtmlReportAndThePlanFileSayWhatChangedAndReadBack) {
  const std::string plan = ::testing::TempDir() + "/cluster-set-plan.yaml";
  const std::string html = ::testing::TempDir() + "/cluster-set-report.html";
  const Result r = Cli(With(
      kPlan, {"--cluster-set", "nic_gb_per_s=x2", "--out", plan, "--html", html, "--explain"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(ReadFile(html).find("What-if hardware:</b> dgx-h100 changed (--cluster-set): "
                                "nic_gb_per_s=x2</p>"),
            std::string::npos);
  const std::string yaml = ReadFile(plan);
  EXPECT_NE(yaml.find("  overrides:\n    - \"nic_gb_per_s=x2\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("nic_gb_per_s: 100\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("nic_busbw_gb_per_s: 94\n"), std::string::npos) << yaml;
  // The plan file reads back equal, and simulate says what changed; more changes append.
  const Plan read = ParsePlanSpecs(yaml, plan);
  EXPECT_EQ(WritePlanYaml(read), yaml);
  EXPECT_EQ(read.cluster.overrides, std::vector<std::string>{"nic_gb_per_s=x2"});
  const Result sim = Cli({"simulate", "--plan", plan});
  EXPECT_EQ(sim.code, kExitOk) << sim.err;
  EXPECT_NE(sim.out.find("\ndgx-h100 changed (--cluster-set): nic_gb_per_s=x2\n"),
            std::string::npos)
      << sim.out;
  const Result more = Cli({"simulate", "--plan", plan, "--cluster-set", "hbm_bytes=+50%",
                           "--format", "json", "--explain"});
  ASSERT_EQ(more.code, kExitOk) << more.err;
  const YAML::Node json = YAML::Load(more.out);
  EXPECT_EQ(json["cluster_overrides"].size(), 2u);
  EXPECT_TRUE(json["groups"].IsSequence());
}

TEST(ClusterSet, SimulateTakesItWithFlagsAndSaysItInTheTimeline) {
  const std::vector<std::string> sim = {"simulate",
                                        "--model",
                                        "gpt3-1.3b",
                                        "--cluster",
                                        "dgx-h100",
                                        "--gpus",
                                        "16",
                                        "--global-batch",
                                        "64",
                                        "--tp",
                                        "2",
                                        "--pp",
                                        "2",
                                        "--cluster-set",
                                        "hbm_bandwidth_gb_per_s=x2"};
  const std::string svg = ::testing::TempDir() + "/cluster-set.svg";
  const Result r = Cli(With(sim, {"--svg", svg}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("dgx-h100 changed (--cluster-set): hbm_bandwidth_gb_per_s=x2\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(ReadFile(svg).find("16 x dgx-h100 with hbm_bandwidth_gb_per_s=x2: TP 2"),
            std::string::npos);
  const Result json = Cli(With(sim, {"--format", "json"}));
  EXPECT_EQ(YAML::Load(json.out)["cluster_overrides"][0].as<std::string>(),
            "hbm_bandwidth_gb_per_s=x2");
}

TEST(ClusterSet, BadInputIsExitTwoNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nic_bandwidth=x2", "--cluster-set: unknown key \"nic_bandwidth\""},
      {"nic_gb_per_s=x0", "--cluster-set: network.nic_gb_per_s: a factor must be above 0"},
      {"hbm_bytes=-150%", "--cluster-set: gpu.hbm_bytes: a decrease must be below 100%"},
      {"hbm_bytes=abc", "--cluster-set: gpu.hbm_bytes: expected a number, got \"abc\""},
      {"hbm_bytes", "--cluster-set: expected KEY=VALUE, got \"hbm_bytes\""},
      {"hgx-h200:hbm_bytes=x2", "--cluster-set: \"hgx-h200:hbm_bytes=x2\" names cluster"},
      {"nic_busbw_gb_per_s=x2",
       "--cluster-set: nic_busbw_gb_per_s=x2: "
       "network.nic_busbw_gb_per_s: achieved bus bandwidth"},
  };
  for (const auto& [assignment, message] : cases) {
    for (const char* command : {"plan", "simulate"}) {
      std::vector<std::string> args = {command,    "--model",       "gpt3-1.3b", "--cluster",
                                       "dgx-h100", "--gpus",        "16",        "--global-batch",
                                       "64",       "--cluster-set", assignment};
      if (std::string(command) == "simulate") args = With(args, {"--tp", "2", "--pp", "1"});
      const Result r = Cli(args);
      EXPECT_EQ(r.code, kExitBadInput) << command << " " << assignment;
      EXPECT_NE(r.err.find("ptdp: error: " + message), std::string::npos)
          << command << " " << assignment << ": " << r.err;
    }
  }
  // A cluster prefix naming the command's cluster applies.
  EXPECT_EQ(Cli(With(kPlan, {"--cluster-set", "dgx-h100:nic_gb_per_s=x2"})).code, kExitOk);
}

TEST(ClusterSet, TheHelpOfPlanAndSimulateDocumentsIt) {
  for (const char* command : {"plan", "simulate"}) {
    const std::string help = Cli({command, "--help"}).out;
    EXPECT_NE(help.find("--cluster-set KEY=VALUE"), std::string::npos) << command;
    EXPECT_NE(help.find("what-if hardware (repeatable)"), std::string::npos) << command;
  }
}

}  // namespace
}  // namespace ptdp::cli
