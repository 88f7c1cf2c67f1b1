// `ptdp sweep` driven in-process: its points are what `ptdp plan` recommends for the same
// inputs, its figures the arithmetic written out here, its JSON and CSV well formed, and every
// bad value exit 2 naming the flag.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/presets.h"
#include "core/text.h"

namespace ptdp::cli {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result Cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = Run(args, out, err);
  return {code, out.str(), err.str()};
}

// The Megatron-LM flags `ptdp plan` recommends: the line after "... flags:" ("" if none).
std::string RecommendedFlags(const std::string& plan_output) {
  for (const char* header : {"Best plan as Megatron-LM flags:\n  ", "), as flags:\n  "}) {
    const size_t at = plan_output.find(header);
    if (at == std::string::npos) continue;
    const size_t begin = at + std::string(header).size();
    return plan_output.substr(begin, plan_output.find('\n', begin) - begin);
  }
  return "";
}

// One CSV line's fields (RFC 4180 quoting).
std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Three points, one without a plan (70B does not fit on 8 H100s) and one where zb-h1 is the
// fastest (64 GPUs): each the plan `ptdp plan` prints as flags, with its step time, or the first
// of plan's hints.
TEST(CliSweep, PointsEqualPlanRuns) {
  const Result sweep = Cli({"sweep", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus",
                            "8,32,64", "--global-batch", "512", "--format", "json"});
  ASSERT_EQ(sweep.code, kExitOk) << sweep.err;
  const YAML::Node points = YAML::Load(sweep.out)["points"];
  ASSERT_EQ(points.size(), 3u);
  int with_plan = 0;
  for (const YAML::Node& p : points) {
    const std::string gpus = p["gpus"].as<std::string>();
    SCOPED_TRACE(gpus + " GPUs");
    const std::vector<std::string> args = {"plan",      "--model",        "llama3-70b",
                                           "--cluster", "dgx-h100",       "--gpus",
                                           gpus,        "--global-batch", "512"};
    const Result plan = Cli(args);
    if (p["plan"].IsNull()) {
      EXPECT_EQ(plan.code, kExitFailed);
      const size_t hint = plan.out.find("No valid plan.\n  - ");
      ASSERT_NE(hint, std::string::npos) << plan.out;
      const size_t begin = hint + std::string("No valid plan.\n  - ").size();
      EXPECT_EQ(p["problem"].as<std::string>(),
                plan.out.substr(begin, plan.out.find('\n', begin) - begin));
      continue;
    }
    ++with_plan;
    ASSERT_EQ(plan.code, kExitOk) << plan.err;
    const std::string flags = p["plan"]["megatron_args"].as<std::string>();
    EXPECT_EQ(flags, RecommendedFlags(plan.out));
    // The same plan's step time in plan's JSON.
    std::vector<std::string> json_args = args;
    json_args.insert(json_args.end(), {"--format", "json"});
    bool found = false;
    for (const YAML::Node& ranked : YAML::Load(Cli(json_args).out)["plans"]) {
      if (ranked["megatron_args"].as<std::string>() != flags) continue;
      EXPECT_EQ(p["step_time_s"].as<double>(), ranked["step_time_s"].as<double>());
      EXPECT_TRUE(ranked["in_megatron"].as<bool>());
      found = true;
      break;
    }
    EXPECT_TRUE(found) << flags;
  }
  EXPECT_EQ(with_plan, 2);
  EXPECT_EQ(points[0]["plan"].IsNull(), true);
  EXPECT_EQ(points[2]["plan"]["schedule"].as<std::string>() != "zb-h1", true);
}

// The cost of one point by hand from its step time, and the same numbers in its table and CSV
// rows.
TEST(CliSweep, TimeAndCostByHand) {
  const std::vector<std::string> args = {
      "sweep",          "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus",      "16",
      "--global-batch", "64",      "--tokens",  "1T",        "--price",  "dgx-h100=2.5"};
  std::vector<std::string> json_args = args;
  json_args.insert(json_args.end(), {"--format", "json"});
  const Result json = Cli(json_args);
  ASSERT_EQ(json.code, kExitOk) << json.err;
  const YAML::Node p = YAML::Load(json.out)["points"][0];
  const double step_s = p["step_time_s"].as<double>();
  // 64 sequences of 8,192 tokens per step; 1e12 tokens; 16 GPUs at $2.50 per GPU-hour.
  const double tokens_per_s = 64.0 * 8192 / step_s;
  const double seconds = 1e12 / tokens_per_s;
  const double gpu_hours = 16 * seconds / 3600;
  const double cost = 2.5 * gpu_hours;
  EXPECT_NEAR(p["tokens_per_s"].as<double>(), tokens_per_s, 1e-9 * tokens_per_s);
  EXPECT_NEAR(p["time_to_train_s"].as<double>(), seconds, 1e-9 * seconds);
  EXPECT_NEAR(p["gpu_hours"].as<double>(), gpu_hours, 1e-9 * gpu_hours);
  EXPECT_NEAR(p["cost_usd"].as<double>(), cost, 1e-9 * cost);
  EXPECT_EQ(p["scaling_efficiency"].as<double>(), 1);
  EXPECT_TRUE(p["pareto"].as<bool>());

  const Result table = Cli(args);
  ASSERT_EQ(table.code, kExitOk) << table.err;
  std::string row;
  for (const std::string& line : Lines(table.out)) {
    if (line.rfind("dgx-h100 ", 0) == 0) row = line;
  }
  ASSERT_FALSE(row.empty()) << table.out;
  for (const std::string& cell :
       {fmt::format("  {:.1f}  ", seconds / 86400),
        fmt::format("  {}  ", GroupThousands(std::llround(gpu_hours))),
        fmt::format("  ${}  ", GroupThousands(std::llround(cost))),
        fmt::format("  {}  ", GroupThousands(std::llround(tokens_per_s))), std::string("100.0%")}) {
    EXPECT_NE(row.find(cell), std::string::npos) << "\"" << cell << "\" in\n" << row;
  }
  EXPECT_NE(table.out.find("Training 1,000,000,000,000 tokens; per GPU-hour: dgx-h100 $2.50."),
            std::string::npos)
      << table.out;

  std::vector<std::string> csv_args = args;
  csv_args.insert(csv_args.end(), {"--format", "csv"});
  const std::vector<std::string> csv = Lines(Cli(csv_args).out);
  ASSERT_EQ(csv.size(), 2u);
  const std::vector<std::string> header = CsvFields(csv[0]), cells = CsvFields(csv[1]);
  ASSERT_EQ(header.size(), cells.size());
  auto cell = [&](const std::string& name) {
    const auto at = std::find(header.begin(), header.end(), name);
    EXPECT_NE(at, header.end()) << name;
    return at == header.end() ? std::string() : cells[at - header.begin()];
  };
  EXPECT_EQ(cell("cluster"), "dgx-h100");
  EXPECT_EQ(cell("gpus"), "16");
  EXPECT_EQ(std::stod(cell("step_time_s")), step_s);
  EXPECT_NEAR(std::stod(cell("time_to_train_s")), seconds, 1e-9 * seconds);
  EXPECT_NEAR(std::stod(cell("gpu_hours")), gpu_hours, 1e-9 * gpu_hours);
  EXPECT_NEAR(std::stod(cell("cost_usd")), cost, 1e-9 * cost);
  EXPECT_EQ(cell("pareto"), "1");
}

// One CSV row per point, every row as wide as the header (notes with commas quoted); the JSON
// parses, with a point per row and nulls where a point has no plan.
TEST(CliSweep, CsvRowsAndJsonShape) {
  const std::vector<std::string> args = {
      "sweep",    "--model",  "llama3-8b",      "--cluster", "dgx-a100-80gb,dgx-h100",
      "--gpus",   "8:16:x2",  "--global-batch", "128@1",     "--precision",
      "bf16,fp8", "--tokens", "2.5e11"};
  std::vector<std::string> csv_args = args;
  csv_args.insert(csv_args.end(), {"--format", "csv"});
  const Result csv = Cli(csv_args);
  ASSERT_EQ(csv.code, kExitOk) << csv.err;
  const std::vector<std::string> lines = Lines(csv.out);
  ASSERT_EQ(lines.size(), 1u + 2 * 2 * 2);
  const size_t width = CsvFields(lines[0]).size();
  for (size_t i = 1; i < lines.size(); ++i)
    EXPECT_EQ(CsvFields(lines[i]).size(), width) << lines[i];
  // The batch 1,024 is 8x its reference: its note, quoted for its commas.
  EXPECT_NE(csv.out.find("\"global batch 1,024: 8x the reference 128 (at 1 GPUs)"),
            std::string::npos)
      << csv.out;

  std::vector<std::string> json_args = args;
  json_args.insert(json_args.end(), {"--format", "json"});
  const Result json = Cli(json_args);
  ASSERT_EQ(json.code, kExitOk) << json.err;
  const YAML::Node doc = YAML::Load(json.out);
  EXPECT_EQ(doc["model"].as<std::string>(), "llama3-8b");
  EXPECT_EQ(doc["tokens"].as<double>(), 2.5e11);
  ASSERT_EQ(doc["clusters"].size(), 2u);
  EXPECT_EQ(doc["clusters"][1]["name"].as<std::string>(), "dgx-h100");
  EXPECT_TRUE(doc["clusters"][1]["price_per_gpu_hour"].IsNull());
  EXPECT_EQ(doc["pareto_of"].as<std::string>(), "time_to_train_s,gpu_hours");
  const YAML::Node points = doc["points"];
  ASSERT_EQ(points.size(), 8u);
  for (const YAML::Node& p : points) {
    for (const char* key :
         {"cluster", "precision", "gpus", "global_batch", "batch_rule", "batch_note", "problem",
          "plan", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_bytes",
          "headroom", "time_to_train_s", "gpu_hours", "cost_usd", "scaling_efficiency", "pareto"}) {
      EXPECT_TRUE(p[key]) << key;
    }
    EXPECT_TRUE(p["cost_usd"].IsNull());
    const bool a100_fp8 = p["cluster"].as<std::string>() == "dgx-a100-80gb" &&
                          p["precision"].as<std::string>() == "fp8";
    EXPECT_EQ(p["plan"].IsNull(), a100_fp8);
    if (a100_fp8) {
      EXPECT_EQ(p["problem"].as<std::string>(), "no FP8 units on A100-SXM4-80GB");
      EXPECT_TRUE(p["step_time_s"].IsNull());
    } else {
      EXPECT_GT(p["time_to_train_s"].as<double>(), 0);
      EXPECT_EQ(
          p["plan"]["megatron_args"].as<std::string>().rfind("--tensor-model-parallel-size", 0),
          0u);
    }
  }
}

// What-if hardware: the overrides are said in the header and the JSON, and a point equals
// `ptdp plan` with the same --cluster-set.
TEST(CliSweep, ClusterSetIsAppliedAndSaid) {
  const Result table =
      Cli({"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100,hgx-h200", "--gpus", "16",
           "--global-batch", "64", "--cluster-set", "dgx-h100:nic_gb_per_s=x2"});
  ASSERT_EQ(table.code, kExitOk) << table.err;
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[1].rfind("dgx-h100 changed (--cluster-set): ", 0), 0u) << table.out;
  EXPECT_NE(lines[1].find("nic_gb_per_s=x2"), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find("hgx-h200 changed"), std::string::npos) << table.out;

  const Result json =
      Cli({"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
           "--global-batch", "64", "--cluster-set", "nic_gb_per_s=x2", "--format", "json"});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  const YAML::Node doc = YAML::Load(json.out);
  EXPECT_EQ(doc["clusters"][0]["cluster_overrides"][0].as<std::string>(), "nic_gb_per_s=x2");
  const Result plan = Cli({"plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                           "--global-batch", "64", "--cluster-set", "nic_gb_per_s=x2"});
  ASSERT_EQ(plan.code, kExitOk) << plan.err;
  EXPECT_EQ(doc["points"][0]["plan"]["megatron_args"].as<std::string>(),
            RecommendedFlags(plan.out));
}

TEST(CliSweep, WritesTheChartsAndTheReport) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "sweep-files";
  std::filesystem::create_directories(dir);
  const std::string svg = (dir / "sweep.svg").string(), html = (dir / "sweep.html").string();
  const Result r = Cli({"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8,16",
                        "--global-batch", "64", "--tokens", "1T", "--svg", svg, "--html", html});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("Wrote the charts to " + svg + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Wrote the report to " + html + "\n"), std::string::npos) << r.out;
  std::ifstream svg_in(svg), html_in(html);
  std::string svg_text((std::istreambuf_iterator<char>(svg_in)), {});
  std::string html_text((std::istreambuf_iterator<char>(html_in)), {});
  EXPECT_EQ(svg_text.rfind("<svg", 0), 0u);
  EXPECT_NE(html_text.find("<html"), std::string::npos);
}

TEST(CliSweep, NoPointWithAPlanExitsOne) {
  const Result r = Cli({"sweep", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "8",
                        "--global-batch", "64"});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_NE(r.out.find("no plan (see below)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Note: dgx-h100 bf16 on 8 GPUs: "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no point of the sweep has a plan"), std::string::npos) << r.err;
}

// Every bad value: exit 2, the message naming the flag (as typed).
TEST(CliSweep, BadInputIsExitTwoNamingTheFlag) {
  const std::filesystem::path profile =
      std::filesystem::path(::testing::TempDir()) / "sweep-profile.yaml";
  for (const PresetFile& f : ClusterPresetFiles()) {
    if (f.name == "hgx-h200") std::ofstream(profile) << f.text;
  }
  const std::vector<std::string> base = {"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100"};
  struct Case {
    std::vector<std::string> args;
    std::string flag;  // the message's start after "ptdp: error: "
  };
  const std::vector<Case> cases = {
      {{"--gpus", "64:8:x2", "--global-batch", "64"}, "--gpus: the range stops (8) below"},
      {{"--gpus", "8:64:x1", "--global-batch", "64"}, "--gpus: the range's factor must be"},
      {{"--gpus", "8:64:+0", "--global-batch", "64"}, "--gpus: the range's step must be"},
      {{"--gpus", "0", "--global-batch", "64"}, "--gpus: a GPU count must be positive"},
      {{"--gpus", "eight", "--global-batch", "64"}, "--gpus: expected a positive integer"},
      {{"--gpus", "8:64", "--global-batch", "64"}, "--gpus: expected START:STOP:xFACTOR"},
      {{"--gpus", "1:1000:+1", "--global-batch", "64"}, "--gpus: more than 64 GPU counts"},
      {{"--gpus", "8", "--global-batch", "0"}, "--global-batch: "},
      {{"--gpus", "8", "--global-batch", "64@0"}, "--global-batch: the GPU count after @"},
      {{"--gpus", "8", "--global-batch-size", "64@x"}, "--global-batch-size: expected"},
      {{"--gpus", "8", "--global-batch", "64", "--tokens", "15X"}, "--tokens: expected a token"},
      {{"--gpus", "8", "--global-batch", "64", "--tokens", "-1T"}, "--tokens: must be at least"},
      {{"--gpus", "8", "--global-batch", "64", "--tokens", "1e30"}, "--tokens: at most 1e18"},
      {{"--gpus", "8", "--global-batch", "64", "--price", "dgx-h100=-1"}, "--price: a price must"},
      {{"--gpus", "8", "--global-batch", "64", "--price", "dgx-h100=abc"}, "--price: expected a"},
      {{"--gpus", "8", "--global-batch", "64", "--price", "dgx-h100"},
       "--price: expected CLUSTER="},
      {{"--gpus", "8", "--global-batch", "64", "--price", "a100=2"},
       "--price: a100 is not a cluster of --cluster (dgx-h100)"},
      {{"--gpus", "8", "--global-batch", "64", "--price", "dgx-h100=2", "--price", "dgx-h100=3"},
       "--price: dgx-h100 has two prices"},
      {{"--gpus", "8", "--global-batch", "64", "--precision", "bf16,int4"}, "--precision: "},
      {{"--gpus", "8", "--global-batch", "64", "--precision", "bf16,bf16"}, "--precision: bf16 is"},
      {{"--gpus", "8", "--global-batch", "64", "--fp8-recipe", "tensorwise"}, "--fp8-recipe: "},
      {{"--gpus", "8", "--global-batch", "64", "--batch-multiple", "8"}, "--batch-multiple: "},
      {{"--gpus", "8", "--global-batch", "64", "--format", "xml"}, "--format: "},
      {{"--gpus", "8", "--global-batch", "64", "--memory-headroom", "2"}, "--memory-headroom: "},
      {{"--gpus", "8", "--global-batch", "64", "--fix", "tp=x"}, "--fix: "},
      {{"--gpus", "8", "--global-batch", "64", "--threads", "0"}, "--threads: "},
      {{"--gpus", "8", "--global-batch", "64", "--cluster-set", "bogus=1"}, "--cluster-set: "},
      {{"--gpus", "8", "--global-batch", "64", "--seq-length", "0"}, "--seq-length: "},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Result r = Cli(args);
    EXPECT_EQ(r.code, kExitBadInput) << c.flag;
    EXPECT_EQ(r.err.rfind("ptdp: error: " + c.flag, 0), 0u) << c.flag << "\n" << r.err;
  }
  const std::vector<std::vector<std::string>> whole = {
      {"sweep", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "64"},
      {"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100,,hgx-h200", "--gpus", "8",
       "--global-batch", "64"},
      {"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100,nosuch", "--gpus", "8",
       "--global-batch", "64"},
      {"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100,dgx-h100", "--gpus", "8",
       "--global-batch", "64"},
      {"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100," + profile.string(), "--gpus", "8",
       "--global-batch", "64", "--svg", profile.string()},
  };
  const std::vector<std::string> expected = {
      "--model: is required", "--cluster: an empty item",
      "--cluster: ", "--cluster: two clusters are named dgx-h100", "--svg: cannot write"};
  for (size_t i = 0; i < whole.size(); ++i) {
    const Result r = Cli(whole[i]);
    EXPECT_EQ(r.code, kExitBadInput) << expected[i];
    EXPECT_EQ(r.err.rfind("ptdp: error: " + expected[i], 0), 0u) << expected[i] << "\n" << r.err;
  }
  // The profile the run reads is intact.
  std::ifstream in(profile);
  EXPECT_NE(std::string((std::istreambuf_iterator<char>(in)), {}).find("name: hgx-h200"),
            std::string::npos);
}

// Without --global-batch: about 4M tokens per step (2^22 over the sequence length), said in a
// note.
TEST(CliSweep, WithoutAGlobalBatchItTakesFourMillionTokensAndSaysSo) {
  const std::vector<std::string> args = {"sweep",  "--model", "gpt3-1.3b", "--cluster", "dgx-h100",
                                         "--gpus", "64",      "--threads", "1"};
  const Result r = Cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  // gpt3-1.3b trains on 2,048-token sequences: 4,194,304 / 2,048 = 2,048 sequences.
  EXPECT_NE(r.out.find("no --global-batch: 2,048 sequences of 2,048 tokens"), std::string::npos)
      << r.out;
  std::vector<std::string> json = args;
  json.insert(json.end(), {"--format", "json"});
  const Result j = Cli(json);
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_NE(j.out.find("\"global_batch\": 2048"), std::string::npos) << j.out;
  EXPECT_NE(j.err.find("ptdp: note: no --global-batch"), std::string::npos) << j.err;
}

}  // namespace
}  // namespace ptdp::cli
