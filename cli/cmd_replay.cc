// `ptdp replay`: simulate published training runs and compare with what was measured.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/presets.h"
#include "core/yaml_io.h"
#include "validation/bridge.h"
#include "validation/functional_tests.h"
#include "validation/narayanan2021.h"
#include "validation/published.h"
#include "validation/vtrain.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

constexpr std::string_view kFunctionalTestsFile =
    "results/validation/megatron-functional-tests/golden.tsv";
constexpr std::string_view kFunctionalTestsCommands =
    "tests/fixtures/megatron_corpus/functional-tests";

void AddReplayOptions(po::options_description& o) {
  o.add_options()("dataset", po::value<std::vector<std::string>>()->composing()->value_name("D"),
                  "narayanan2021 (Narayanan et al. 2021, Table 1; the default), a vTrain "
                  "ground-truth CSV file (repeat for several), the Megatron-Bridge H100 "
                  "file (results/validation/megatron-bridge/h100_pretrain.csv) or a file in its "
                  "format (results/validation/dgxc-benchmarking/h100_nemo2409.csv), or "
                  "megatron-functional-tests (Megatron-LM's functional tests' measured memory "
                  "and iteration time: results/validation/megatron-functional-tests/golden.tsv, "
                  "or a file in its format)")(
      "commands", po::value<std::string>()->value_name("DIR"),
      "megatron-functional-tests: the folder of the test cases' launch scripts, <case>.sh "
      "(default: tests/fixtures/megatron_corpus/functional-tests)")(
      "gpu", po::value<std::string>()->value_name("G"),
      "megatron-functional-tests: only the cases measured on this GPU, h100 or a100")(
      "cluster", po::value<std::string>()->value_name("C"),
      "hardware profile: name or YAML file (default: dgx-a100-80gb for narayanan2021, "
      "vtrain-a100 for vTrain files, dgx-h100 for Megatron-Bridge)")(
      "fit-releases", po::value<std::string>()->value_name("LIST"),
      "Megatron-Bridge with --fit: the releases to fit on, comma-separated (default: the "
      "oldest, 25.09); the others are held out")(
      "attention-backend", po::value<std::string>()->value_name("A"),
      "Megatron-Bridge: the attention kernels to simulate, fused (cuDNN, the default) or flash")(
      "plan", po::bool_switch(),
      "narayanan2021: also search each row's best plan and rank the published layout among all "
      "plans")("svg", po::value<std::string>()->value_name("FILE"),
               "CSV datasets: write a predicted-vs-measured scatter plot (log-log, SVG)")(
      "worst", po::value<std::string>()->default_value("10")->value_name("N"),
      "CSV datasets: list the N rows with the largest errors, with their breakdown")(
      "fit", po::bool_switch(),
      "CSV datasets: fit the profile's free constants on part of the rows and replay with them: "
      "vTrain files, memory efficiency, kernel launch cost and micro-batch overhead on single-"
      "node files only; Megatron-Bridge, the FP8 GEMM level on --fit-releases, or the BF16 "
      "GEMM level on the rows marked [bf16 level fit row] where a file has them; "
      "megatron-functional-tests, each GPU's host costs (kernel launch, per micro-batch, per "
      "step) on the fit half");
}

int ReplayNarayanan(const Flags& flags, std::ostream& out, std::ostream& err) {
  const ClusterSpec cluster =
      ResolveCluster(flags.OptionalString("cluster").value_or("dgx-a100-80gb"));
  const std::vector<ValidationResult> results = ValidateNarayanan2021(cluster);
  out << "Narayanan et al. 2021, Table 1, each row in its published layout on " << cluster.name
      << " (fp16, full recompute, the 2021 code's behaviour):\n\n"
      << ValidationMarkdown(results);
  if (flags.Switch("plan")) {
    std::vector<PaperLayoutRanking> rankings;
    {
      ProgressLine progress(err, "ptdp replay --plan");
      rankings = RankNarayananLayouts(cluster, [&progress](size_t row, size_t rows, int64_t valid,
                                                           int64_t simulated) {
        progress.Update(fmt::format(
            "row {} of {}: {}", row + 1, rows,
            simulated == 0
                ? fmt::format("{} layouts pass Megatron-LM's rules so far", GroupThousands(valid))
                : fmt::format("ranking: {} of {} layouts simulated", GroupThousands(simulated),
                              GroupThousands(valid))));
      });
    }
    out << "\nThe planner on the same models, GPUs and global batches (every knob; the rank is "
           "the published layout's place among all valid plans that fit):\n\n"
        << PaperRankingMarkdown(rankings);
  }
  return kExitOk;
}

// The GEMM levels --fit reports the single-node error at (1 = the profile's table).
constexpr double kGemmLevels[] = {0.9, 1.0, 1.05, 1.111, 1.2};

std::string FitReport(const ClusterSpec& cluster, const std::vector<VtrainRow>& rows,
                      const VtrainFit& fit) {
  std::string out = fmt::format(
      "Fitted on {} rows (pattern search, {} evaluations): memory_efficiency {:g}, "
      "host.kernel_launch_us {:g}, host.microbatch_overhead_us {:g}; MAPE {:.2f}%.\n\n",
      rows.size(), fit.evaluations, fit.memory_efficiency, fit.kernel_launch_s * 1e6,
      fit.microbatch_overhead_s * 1e6, 100 * fit.mape);
  out +=
      "The GEMM table is not fitted. With it scaled by a level and the three constants refitted "
      "on the same rows:\n\n| GEMM level | best GEMM efficiency | memory efficiency | launch us | "
      "micro-batch us | MAPE |\n|---:|---:|---:|---:|---:|---:|\n";
  double best = 0;
  for (const GemmEfficiencyPoint& p : cluster.gpu.gemm_efficiency)
    best = std::max(best, p.efficiency);
  for (const double level : kGemmLevels) {
    const VtrainFit f =
        FitVtrain(WithEfficiencies(cluster, level, cluster.gpu.memory_efficiency), rows);
    out += fmt::format("| {:g} | {:.3f} | {:g} | {:g} | {:g} | {:.2f}% |\n", level, best * level,
                       f.memory_efficiency, f.kernel_launch_s * 1e6, f.microbatch_overhead_s * 1e6,
                       100 * f.mape);
  }
  return out + "\n";
}

int ReplayCsv(const Flags& flags, const std::vector<std::string>& files, std::ostream& out) {
  ClusterSpec cluster = ResolveCluster(flags.OptionalString("cluster").value_or("vtrain-a100"));
  std::vector<VtrainRow> rows;
  for (const std::string& file : files) {
    const std::vector<VtrainRow> more = LoadVtrainCsv(file);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  const int64_t worst = [&] {
    const std::string text = flags.String("worst");
    int64_t n = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n < 0) {
      flags.Fail("worst", fmt::format("expected a non-negative integer, got \"{}\"", text));
    }
    return n;
  }();
  if (flags.Switch("fit")) {
    for (const VtrainRow& r : rows) {
      if (r.params_billion > 0) {
        flags.Fail("fit", "fits on single-node files only",
                   "the multi-node file is held out for evaluation: fit on "
                   "ground_truth_single.csv, then replay the multi-node file with the profile");
      }
    }
    const VtrainFit fit = FitVtrain(cluster, rows);
    out << FitReport(cluster, rows, fit);
    cluster = WithVtrainFit(cluster, fit);
  }
  const std::vector<VtrainResult> results = ReplayVtrain(cluster, rows);
  out << fmt::format(
      "vTrain's measured Megatron-DeepSpeed iterations ({}), each row in its layout on {} "
      "(fp16, full recompute, 1F1B):\n\n",
      fmt::join(files, ", "), cluster.name);
  out << VtrainMarkdown(results, cluster.gpus_per_node,
                        {.worst_rows = static_cast<int>(std::min<int64_t>(worst, 1 << 20))});
  if (const auto svg = flags.OptionalString("svg")) {
    WriteOutputFile(*svg,
                    VtrainScatterSvg(results, cluster.gpus_per_node,
                                     fmt::format("vTrain ground truth on {}: simulated vs "
                                                 "measured iteration time",
                                                 cluster.name)),
                    "--svg");
  }
  return kExitOk;
}

int ReplayBridgeFile(const Flags& flags, const std::string& file, std::ostream& out) {
  const ClusterSpec cluster = ResolveCluster(flags.OptionalString("cluster").value_or("dgx-h100"));
  const std::vector<BridgeRow> rows = LoadBridgeCsv(file);
  AttentionBackend attention = AttentionBackend::kFused;
  if (auto a = flags.OptionalString("attention-backend")) {
    attention = flags.Enum("attention-backend", kAttentionBackendNames, attention);
    if (attention == AttentionBackend::kUnfused) {
      flags.Fail("attention-backend", "Megatron-Bridge's runs use fused or flash attention");
    }
  }
  std::vector<std::string> releases = {rows.empty() ? "" : rows.front().release};
  for (const BridgeRow& r : rows) releases[0] = std::min(releases[0], r.release);
  if (auto list = flags.OptionalString("fit-releases")) {
    if (!flags.Switch("fit")) flags.Fail("fit-releases", "applies with --fit only");
    releases.clear();
    size_t start = 0;
    while (start <= list->size()) {
      const size_t comma = std::min(list->find(',', start), list->size());
      const std::string release = list->substr(start, comma - start);
      if (std::none_of(rows.begin(), rows.end(),
                       [&](const BridgeRow& r) { return r.release == release; })) {
        flags.Fail("fit-releases", fmt::format("no row of release \"{}\" in {}", release, file));
      }
      releases.push_back(release);
      start = comma + 1;
    }
  }
  ClusterSpec replayed = cluster;
  // The fit set: fitted here with --fit, else the releases the shipped H100 / H200 profiles'
  // FP8 level was fitted on (the same default, the oldest release).
  const std::vector<std::string> fitted = releases;
  const bool bf16_fit = HasBf16FitRows(rows);
  if (bf16_fit && flags.Has("fit-releases")) {
    flags.Fail("fit-releases",
               fmt::format("{} marks its own fit rows ([bf16 level fit row])", file));
  }
  if (flags.Switch("fit")) {
    const BridgeFit fit = FitBridge(cluster, rows, releases, attention);
    const auto& table = fit.bf16 ? cluster.gpu.gemm_efficiency : cluster.gpu.gemm_efficiency_fp8;
    double best = 0;
    for (const GemmEfficiencyPoint& p : table) best = std::max(best, p.efficiency);
    out << fmt::format(
        "Fitted on {} simulated rows ({}): the {} GEMM table of {} scaled by {:g} (its largest "
        "efficiency {:.3f}); mean |error| {:.2f}% on those rows.\n\n",
        fit.rows,
        fit.bf16 ? "those marked [bf16 level fit row]"
                 : fmt::format("release{} {}, dense, without context parallelism",
                               releases.size() > 1 ? "s" : "", fmt::join(releases, ", ")),
        fit.bf16 ? "BF16" : "FP8", cluster.name, fit.gemm_scale,
        std::min(1.0, best * fit.gemm_scale), 100 * fit.mape);
    replayed = fit.bf16 ? WithBf16GemmScale(cluster, fit.gemm_scale)
                        : WithFp8GemmScale(cluster, fit.gemm_scale);
  } else if (bf16_fit) {
    out << "The BF16 GEMM level of dgx-h100 and hgx-h200 was fitted on the rows marked [bf16 "
           "level fit row] (in-sample); --fit refits it.\n\n";
  } else {
    out << fmt::format(
        "The FP8 GEMM level of dgx-h100 and hgx-h200 was fitted on the dense rows without "
        "context parallelism of release {} (marked in-sample; the rows ptdp could express then); "
        "--fit refits it.\n\n",
        fmt::join(releases, ", "));
  }
  const std::vector<BridgeResult> results = ReplayBridge(replayed, rows, attention);
  out << fmt::format(
      "Measured Megatron-Core pre-training runs ({}), each row in its layout on {}, attention "
      "{}:\n\n",
      file, cluster.name, Name(attention));
  out << BridgeMarkdown(results, fitted);
  return kExitOk;
}

int ReplayFunctionalTests(const Flags& flags, const std::string& file, std::ostream& out,
                          std::ostream& err) {
  std::vector<FunctionalTestRow> rows = ParseFunctionalTestsTsv(ReadTextFile(file), file);
  if (auto gpu = flags.OptionalString("gpu")) {
    if (*gpu != "h100" && *gpu != "a100") {
      flags.Fail("gpu", fmt::format("expected h100 or a100, got \"{}\"", *gpu));
    }
    std::erase_if(rows, [&](const FunctionalTestRow& r) { return r.gpu != *gpu; });
  }
  const std::string commands =
      flags.OptionalString("commands").value_or(std::string(kFunctionalTestsCommands));
  std::vector<FunctionalTestCase> cases;
  {
    ProgressLine progress(err, "ptdp replay");
    for (const FunctionalTestRow& r : rows) {
      progress.Update(fmt::format("reading case {} of {}: {} ({})", cases.size() + 1, rows.size(),
                                  r.case_name, r.gpu));
      const std::string path = commands + "/" + r.case_name + ".sh";
      std::string text;
      try {
        text = ReadTextFile(path);
      } catch (const InputError& e) {
        throw InputError({file, r.line, "case"},
                         fmt::format("no launch script for {}: {}", r.case_name, e.what()),
                         "pass --commands DIR, the folder of <case>.sh");
      }
      cases.push_back(ReadFunctionalTest(r, text, path));
    }
  }
  // Per GPU its profile, with --fit its host costs fitted on the fit half's cases of that GPU.
  std::map<std::string, ClusterSpec> clusters;
  for (const FunctionalTestCase& t : cases) {
    const std::string name = FunctionalTestCluster(t.row);
    if (clusters.contains(t.row.gpu)) continue;
    clusters.emplace(t.row.gpu, ClusterPreset(name));
  }
  if (flags.Switch("fit")) {
    for (auto& [gpu, cluster] : clusters) {
      std::vector<FunctionalTestCase> fit_half;
      for (const FunctionalTestCase& t : cases) {
        if (t.row.gpu == gpu && !t.row.test_half) fit_half.push_back(t);
      }
      ProgressLine progress(err, "ptdp replay --fit");
      progress.Update(
          fmt::format("fitting the host costs of {} on {} cases", cluster.name, fit_half.size()));
      const HostFit fit = FitFunctionalTestsHost(cluster, fit_half);
      out << fmt::format(
          "{}: host costs fitted on the {} timed cases of the fit half ({} evaluations): "
          "kernel_launch_us {:g}, microbatch_overhead_us {:g}, optimizer_step_us {:g}, "
          "moe_layer_us {:g}; mean |error| of the iteration time {:.1f}% on them.\n\n",
          cluster.name, fit.cases, fit.evaluations, fit.host.kernel_launch_s * 1e6,
          fit.host.microbatch_overhead_s * 1e6, fit.host.optimizer_step_s * 1e6,
          fit.host.moe_layer_s * 1e6, 100 * fit.mape);
      cluster.host = fit.host;
    }
  }
  std::vector<FunctionalTestResult> results;
  for (const FunctionalTestCase& t : cases) {
    results.push_back(ReplayFunctionalTest(t, clusters.at(t.row.gpu)));
  }
  out << fmt::format(
      "Megatron-LM's functional tests ({}; launch scripts from {}), each case in its layout on "
      "the DGX it was measured on (h100: dgx-h100, a100: dgx-a100-80gb). Measured: PyTorch's "
      "allocator on the last rank (peak allocated over the run, allocated after the step) and "
      "the median iteration time from step 3. Predicted: the last pipeline stage's memory "
      "without the allocator allowance, and its weights, gradients and optimizer state. The "
      "fit half may be used to fit constants (in-sample); the test half is out-of-sample.\n\n",
      file, commands);
  out << FunctionalTestsMarkdown(results);
  return kExitOk;
}

int RunReplay(const Flags& flags, std::ostream& out, std::ostream& err) {
  std::vector<std::string> datasets = flags.Strings("dataset");
  if (datasets.empty()) datasets.push_back("narayanan2021");
  const bool narayanan = datasets.size() == 1 && datasets[0] == "narayanan2021";
  for (const std::string& d : datasets) {
    if (d == "narayanan2021" && !narayanan) {
      flags.Fail("dataset", "narayanan2021 cannot be combined with other datasets");
    }
    if (d != "narayanan2021" && d != "megatron-functional-tests" && !d.ends_with(".csv") &&
        !d.ends_with(".tsv")) {
      flags.Fail("dataset", fmt::format("unknown dataset \"{}\"", d),
                 "datasets: narayanan2021, megatron-functional-tests, or a vTrain "
                 "ground-truth file ending in .csv");
    }
  }
  const auto functional_tests = [](const std::string& d) {
    return d == "megatron-functional-tests" || d.ends_with(".tsv");
  };
  if (std::any_of(datasets.begin(), datasets.end(), functional_tests)) {
    if (datasets.size() > 1) {
      flags.Fail("dataset", "replay megatron-functional-tests on its own");
    }
    // Each case runs on the profile of the GPU it was measured on (its `gpu` column).
    for (const char* flag : {"svg", "fit-releases", "attention-backend", "cluster"}) {
      if (flags.Has(flag)) flags.Fail(flag, "does not apply to megatron-functional-tests");
    }
    if (flags.Switch("plan")) flags.Fail("plan", "does not apply to megatron-functional-tests");
    const std::string file = datasets[0] == "megatron-functional-tests"
                                 ? std::string(kFunctionalTestsFile)
                                 : datasets[0];
    return ReplayFunctionalTests(flags, file, out, err);
  }
  for (const char* flag : {"commands", "gpu"}) {
    if (flags.Has(flag)) flags.Fail(flag, "applies to --dataset megatron-functional-tests only");
  }
  if (narayanan) {
    if (flags.Has("svg")) flags.Fail("svg", "applies to CSV datasets only");
    if (flags.Switch("fit")) flags.Fail("fit", "applies to CSV datasets only");
    return ReplayNarayanan(flags, out, err);
  }
  if (flags.Switch("plan")) flags.Fail("plan", "applies to --dataset narayanan2021 only");
  std::vector<std::string> bridge;
  for (const std::string& d : datasets) {
    if (IsBridgeCsv(ReadTextFile(d))) bridge.push_back(d);
  }
  if (!bridge.empty()) {
    if (datasets.size() > 1) {
      flags.Fail("dataset", "replay the Megatron-Bridge file on its own");
    }
    for (const char* flag : {"svg"}) {
      if (flags.Has(flag)) flags.Fail(flag, "applies to vTrain files only");
    }
    return ReplayBridgeFile(flags, bridge.front(), out);
  }
  for (const char* flag : {"fit-releases", "attention-backend"}) {
    if (flags.Has(flag)) flags.Fail(flag, "applies to the Megatron-Bridge file only");
  }
  return ReplayCsv(flags, datasets, out);
}

}  // namespace

const Command kReplayCommand{
    .name = "replay",
    .summary = "simulate published training runs and compare with the measured step times",
    .usage =
        "ptdp replay [--dataset narayanan2021] [--cluster C] [--plan]\n"
        "ptdp replay --dataset FILE.csv [--dataset FILE.csv ...] [--cluster C] [--svg OUT.svg]\n"
        "            [--worst N] [--fit]\n"
        "ptdp replay --dataset megatron-functional-tests [--gpu h100|a100] [--commands DIR] "
        "[--fit]",
    .description =
        "Simulates every run of a published dataset in its exact layout and compares the "
        "simulated with\nthe measured step time. narayanan2021: Table 1 of Narayanan et al. "
        "2021 on dgx-a100-80gb, with\n--plan also the best plan ptdp finds for each row and "
        "where the published layout ranks. A CSV\nfile: vTrain's measured Megatron-DeepSpeed "
        "iterations (results/validation/vtrain/) on vtrain-a100;\nprints the mean absolute "
        "percentage error overall, per model size and per layout family, the\nworst rows with "
        "their breakdown and the rows ptdp rejects or that exceed memory; --svg writes a\n"
        "scatter plot; --fit first fits the profile's free constants on the (single-node) rows.\n"
        "megatron-functional-tests: Megatron-LM's functional tests, each test case's command read "
        "as\n"
        "`check` reads it and simulated on the DGX it ran on; the last stage's memory against the\n"
        "peak PyTorch allocated there, and the step time, for the fit half (in-sample) and the\n"
        "test half; --fit first fits each GPU's host costs on the fit half.",
    .examples =
        "ptdp replay\nptdp replay --plan\n"
        "ptdp replay --dataset results/validation/vtrain/ground_truth_single.csv --dataset "
        "results/validation/vtrain/ground_truth_multi.csv --svg vtrain-scatter.svg\n"
        "ptdp replay --dataset results/validation/vtrain/ground_truth_single.csv --fit\n"
        "ptdp replay --dataset megatron-functional-tests --gpu h100",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddReplayOptions,
    .run = RunReplay,
};

}  // namespace ptdp::cli
