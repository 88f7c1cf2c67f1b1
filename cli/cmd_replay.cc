// `ptdp replay`: simulate published training runs and compare with what was measured.
#include <fmt/format.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "core/presets.h"
#include "planner/published.h"
#include "simulator/validation.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

void AddReplayOptions(po::options_description& o) {
  o.add_options()("dataset",
                  po::value<std::string>()->default_value("narayanan2021")->value_name("D"),
                  "narayanan2021 (Narayanan et al. 2021, Table 1)")(
      "cluster", po::value<std::string>()->default_value("dgx-a100-80gb")->value_name("C"),
      "hardware profile: name or YAML file")(
      "plan", po::bool_switch(),
      "also search each row's best plan and rank the published layout among all plans");
}

int RunReplay(const Flags& flags, std::ostream& out, std::ostream&) {
  const std::string dataset = flags.String("dataset");
  if (dataset != "narayanan2021") {
    flags.Fail("dataset", fmt::format("unknown dataset \"{}\"", dataset),
               "datasets: narayanan2021");
  }
  const ClusterSpec cluster = ResolveCluster(flags.String("cluster"));
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

}  // namespace

const Command kReplayCommand{
    .name = "replay",
    .summary = "simulate published training runs and compare with the measured step times",
    .usage = "ptdp replay [--dataset narayanan2021] [--cluster C] [--plan]",
    .description =
        "Simulates every run of a published dataset in its exact layout and prints published "
        "against\nsimulated step time per row with the mean absolute error; with --plan, also "
        "the best plan ptdp\nfinds for each row and where the published layout ranks.",
    .examples = "ptdp replay\nptdp replay --plan",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddReplayOptions,
    .run = RunReplay,
};

}  // namespace ptdp::cli
