// `ptdp replay`: simulate published training runs and compare with what was measured.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "core/presets.h"
#include "validation/narayanan2021.h"
#include "validation/published.h"
#include "validation/vtrain.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

void AddReplayOptions(po::options_description& o) {
  o.add_options()("dataset", po::value<std::vector<std::string>>()->composing()->value_name("D"),
                  "narayanan2021 (Narayanan et al. 2021, Table 1; the default), or a vTrain "
                  "ground-truth CSV file (repeat for several)")(
      "cluster", po::value<std::string>()->value_name("C"),
      "hardware profile: name or YAML file (default: dgx-a100-80gb for narayanan2021, "
      "vtrain-a100 for CSV files)")(
      "plan", po::bool_switch(),
      "narayanan2021: also search each row's best plan and rank the published layout among all "
      "plans")("svg", po::value<std::string>()->value_name("FILE"),
               "CSV datasets: write a predicted-vs-measured scatter plot (log-log, SVG)")(
      "worst", po::value<std::string>()->default_value("10")->value_name("N"),
      "CSV datasets: list the N rows with the largest errors, with their breakdown")(
      "fit", po::bool_switch(),
      "CSV datasets: fit the profile's free constants (memory efficiency, kernel launch cost, "
      "micro-batch overhead) on the rows, which must all come from single-node files, and print "
      "them before the replay with the fitted values");
}

int ReplayNarayanan(const Flags& flags, std::ostream& out) {
  const ClusterSpec cluster =
      ResolveCluster(flags.OptionalString("cluster").value_or("dgx-a100-80gb"));
  const std::vector<ValidationResult> results = ValidateNarayanan2021(cluster);
  out << "Narayanan et al. 2021, Table 1, each row in its published layout on " << cluster.name
      << " (fp16, full recompute, the 2021 code's behaviour):\n\n"
      << ValidationMarkdown(results);
  if (flags.Switch("plan")) {
    out << "\nThe planner on the same models, GPUs and global batches (every knob; the rank is "
           "the published layout's place among all valid plans that fit):\n\n"
        << PaperRankingMarkdown(RankNarayananLayouts(cluster));
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

int RunReplay(const Flags& flags, std::ostream& out, std::ostream&) {
  std::vector<std::string> datasets = flags.Strings("dataset");
  if (datasets.empty()) datasets.push_back("narayanan2021");
  const bool narayanan = datasets.size() == 1 && datasets[0] == "narayanan2021";
  for (const std::string& d : datasets) {
    if (d == "narayanan2021" && !narayanan) {
      flags.Fail("dataset", "narayanan2021 cannot be combined with other datasets");
    }
    if (d != "narayanan2021" && !d.ends_with(".csv")) {
      flags.Fail("dataset", fmt::format("unknown dataset \"{}\"", d),
                 "datasets: narayanan2021, or a vTrain ground-truth file ending in .csv");
    }
  }
  if (narayanan) {
    if (flags.Has("svg")) flags.Fail("svg", "applies to CSV datasets only");
    if (flags.Switch("fit")) flags.Fail("fit", "applies to CSV datasets only");
    return ReplayNarayanan(flags, out);
  }
  if (flags.Switch("plan")) flags.Fail("plan", "applies to --dataset narayanan2021 only");
  return ReplayCsv(flags, datasets, out);
}

}  // namespace

const Command kReplayCommand{
    .name = "replay",
    .summary = "simulate published training runs and compare with the measured step times",
    .usage =
        "ptdp replay [--dataset narayanan2021] [--cluster C] [--plan]\n"
        "ptdp replay --dataset FILE.csv [--dataset FILE.csv ...] [--cluster C] [--svg OUT.svg]\n"
        "            [--worst N] [--fit]",
    .description =
        "Simulates every run of a published dataset in its exact layout and compares the "
        "simulated with\nthe measured step time. narayanan2021: Table 1 of Narayanan et al. "
        "2021 on dgx-a100-80gb, with\n--plan also the best plan ptdp finds for each row and "
        "where the published layout ranks. A CSV\nfile: vTrain's measured Megatron-DeepSpeed "
        "iterations (results/validation/vtrain/) on vtrain-a100;\nprints the mean absolute "
        "percentage error overall, per model size and per layout family, the\nworst rows with "
        "their breakdown and the rows ptdp rejects or that exceed memory; --svg writes a\n"
        "scatter plot; --fit first fits the profile's free constants on the (single-node) rows.",
    .examples =
        "ptdp replay\nptdp replay --plan\n"
        "ptdp replay --dataset results/validation/vtrain/ground_truth_single.csv --dataset "
        "results/validation/vtrain/ground_truth_multi.csv --svg vtrain-scatter.svg\n"
        "ptdp replay --dataset results/validation/vtrain/ground_truth_single.csv --fit",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddReplayOptions,
    .run = RunReplay,
};

}  // namespace ptdp::cli
