// `ptdp schedule`: the operation order of a pipeline schedule, per stage, and its shape with
// unit operation times (forward 1, backward 2, or 1 + 1 when the weight gradient is split).
#include <fmt/format.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "core/error.h"
#include "core/schedule.h"
#include "core/trace.h"
#include "simulator/event_sim.h"
#include "simulator/timeline.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

enum class Format { kText, kJson };
constexpr EnumName<Format> kFormats[] = {{"text", Format::kText}, {"json", Format::kJson}};

void AddScheduleOptions(po::options_description& o) {
  o.add_options()("schedule", po::value<std::string>()->default_value("1f1b")->value_name("S"),
                  "gpipe | 1f1b | interleaved | zb-h1")(
      "pp", po::value<std::string>()->value_name("P"), "pipeline stages (required)")(
      "microbatches", po::value<std::string>()->value_name("M"),
      "micro-batches per step (required)")(
      "virtual-stages", po::value<std::string>()->value_name("V"),
      "model chunks per stage (interleaved only; required there)")(
      "format", po::value<std::string>()->default_value("text")->value_name("F"), "text | json")(
      "width", po::value<std::string>()->value_name("N"),
      "columns of the text timeline (default: as many as the labels need, at most 320)")(
      "svg", po::value<std::string>()->value_name("FILE"), "write the unit-time timeline as SVG")(
      "trace", po::value<std::string>()->value_name("FILE"),
      "write the unit-time timeline as a Chrome trace (Perfetto)");
}

int RunSchedule(const Flags& flags, std::ostream& out, std::ostream&) {
  const Schedule kind = flags.Enum("schedule", kScheduleNames, Schedule::k1F1B);
  const int p = static_cast<int>(flags.PositiveInt("pp"));
  const int m = static_cast<int>(flags.PositiveInt("microbatches"));
  const auto v_flag = flags.OptionalPositiveInt("virtual-stages");
  if (kind == Schedule::kInterleaved && !v_flag) {
    flags.Fail("virtual-stages", "is required with --schedule interleaved");
  }
  const int v = static_cast<int>(v_flag.value_or(1));
  const Format format = flags.Enum("format", kFormats, Format::kText);
  const int width = static_cast<int>(flags.OptionalPositiveInt("width").value_or(0));
  if (p > 4096 || m > 1 << 20 || v > 256) flags.Fail("pp", "sizes too large to print");
  if (const std::string problem = ScheduleProblem(kind, p, m, v); !problem.empty()) {
    const char* flag = problem.find("chunk") != std::string::npos         ? "virtual-stages"
                       : problem.find("micro-batch") != std::string::npos ? "microbatches"
                                                                          : "pp";
    flags.Fail(flag, problem);
  }
  // pp 256 x 100,000 micro-batches once took 4.6 GB and ended in bad_alloc.
  if (const std::string problem = ScheduleSizeProblem(p, m, v); !problem.empty()) {
    flags.Fail("microbatches", problem, "fewer --microbatches or --pp");
  }

  const PipelineSchedule s = MakeSchedule(kind, p, m, v);
  // Unit times per micro-batch per stage, split evenly over the stage's chunks.
  const double tw = s.split_backward ? 1.0 : 0.0;
  const SimResult sim = SimulateStep(s, UniformCosts(s, 1.0 / v, (2.0 - tw) / v, tw / v));
  const TimelineTitle title{
      fmt::format("{} schedule: {} stages, {} micro-batches{}", Name(kind), p, m,
                  v > 1 ? fmt::format(", {} model chunks per stage", v) : ""),
      fmt::format("unit times per micro-batch and stage: forward 1, backward 2{}; bubble {:.1f}% "
                  "of the pipeline",
                  s.split_backward ? " (input gradient 1 + weight gradient 1)" : "",
                  100 * sim.bubble_fraction),
      /*unit_time=*/true};
  std::vector<OutputFile> files;
  if (auto path = flags.OptionalString("svg"))
    files.push_back({*path, TimelineSvg(s, sim, title), "--svg"});
  if (auto path = flags.OptionalString("trace")) {
    const TimelineTrace trace = TimelineTraceEvents(s, sim);
    files.push_back({*path, ChromeTraceJson(title.title, trace.tracks, trace.events), "--trace"});
  }
  WriteOutputFiles(files);

  if (format == Format::kJson) {
    out << "{\"schedule\": \"" << Name(kind) << "\", \"pp\": " << p << ", \"microbatches\": " << m
        << ", \"virtual_stages\": " << v << ", \"stages\": [";
    for (int r = 0; r < p; ++r) {
      out << (r ? ",\n  [" : "\n  [");
      for (size_t i = 0; i < s.ops[r].size(); ++i) {
        const PipelineOp& op = s.ops[r][i];
        out << (i ? ", " : "") << "{\"op\": \"" << Letter(op.kind)
            << "\", \"microbatch\": " << op.microbatch << ", \"chunk\": " << op.chunk << "}";
      }
      out << "]";
    }
    out << "\n]}\n";
    return kExitOk;
  }

  out << title.title << "\n\nOperation order per stage (F forward, B backward"
      << (s.split_backward ? ", W weight gradient" : "") << (v > 1 ? "; micro-batch.chunk" : "")
      << "):\n";
  for (int r = 0; r < p; ++r) {
    std::string line;
    for (const PipelineOp& op : s.ops[r]) line += (line.empty() ? "" : " ") + OpLabel(s, op);
    out << fmt::format("  stage {:<3} {}\n", r, line);
  }
  out << "\n" << title.subtitle << ":\n";
  {
    std::string text = TimelineText(s, sim, width);
    for (size_t pos = 0; pos < text.size();) {
      const size_t nl = text.find('\n', pos);
      out << "  " << text.substr(pos, nl - pos + 1);
      pos = nl + 1;
    }
  }
  std::string peaks;
  for (const StageResult& st : sim.stages) {
    peaks += v > 1 ? fmt::format(" {:g}", static_cast<double>(st.peak_in_flight) / v)
                   : fmt::format(" {}", st.peak_in_flight);
  }
  out << fmt::format("\nPeak activations held per stage, in micro-batches{}:{}\n",
                     v > 1 ? " (of the whole stage: model chunks held / v)" : "", peaks);
  return kExitOk;
}

}  // namespace

const Command kScheduleCommand{
    .name = "schedule",
    .summary = "print a pipeline schedule's operation order and its shape",
    .usage =
        "ptdp schedule --schedule gpipe|1f1b|interleaved|zb-h1 --pp P --microbatches M\n"
        "                     [--virtual-stages V] [--format text|json] [--svg FILE]",
    .description =
        "Prints, for each pipeline stage, the ordered operations of one training step: forward "
        "(F),\nbackward (B) and, for zb-h1, weight gradient (W) of each micro-batch (and model "
        "chunk), exactly\nas the simulator times them and the executor runs them. The timeline "
        "uses unit times\n(forward 1, backward 2 per micro-batch and stage) and free "
        "communication, so the bubble is the\nschedule's own. Orders follow Megatron-LM "
        "(1f1b, interleaved) and Qi et al. 2023 (zb-h1).",
    .examples =
        "ptdp schedule --pp 4 --microbatches 8\n"
        "ptdp schedule --schedule interleaved --pp 4 --microbatches 8 --virtual-stages 2\n"
        "ptdp schedule --schedule zb-h1 --pp 4 --microbatches 8 --svg zb.svg\n"
        "ptdp schedule --pp 2 --microbatches 3 --format json",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddScheduleOptions,
    .run = RunSchedule,
};

}  // namespace ptdp::cli
