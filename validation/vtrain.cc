#include "validation/vtrain.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/limits.h"
#include "core/plan.h"
#include "core/schedule.h"
#include "core/text.h"
#include "core/yaml_io.h"
#include "megatron/rules.h"
#include "simulator/collectives.h"
#include "validation/pattern_search.h"

namespace ptdp {
namespace {

// The published headers, after the byte-order mark; the multi-node file adds kParamsColumn.
constexpr std::array<std::string_view, 11> kColumns = {"# GPUs",
                                                       "global batch",
                                                       "micro batch",
                                                       "hidden size",
                                                       "attention heads",
                                                       "# layers",
                                                       "sequence length",
                                                       "tensor parallelism",
                                                       "data parallelism",
                                                       "pipeline parallelism",
                                                       "iteration time (ms)"};
constexpr std::string_view kParamsColumn = "Parameters (billion)";
constexpr std::string_view kBom = "\xEF\xBB\xBF";

// Reads the fields of one data line; `offset` is 1 when the file has the parameter column.
class RowReader {
 public:
  RowReader(const std::string& source, int line, std::span<const std::string_view> fields,
            int offset)
      : source_(source), line_(line), fields_(fields), offset_(offset) {}

  // Field of column `index` (0-based, in kColumns) as a positive integer, at most `max` (the
  // bound of the model, batch or GPU field it fills, core/limits.h).
  int PositiveInt(int index, int64_t max) const {
    const std::string_view text = fields_[index + offset_];
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value <= 0) {
      Fail(index + offset_, fmt::format("expected a positive integer, got \"{}\"", text));
    }
    if (value > max) Fail(index + offset_, fmt::format("at most {}, got {}", max, value));
    return static_cast<int>(value);
  }

  // A measured time in milliseconds: a normal number from a microsecond to a year (a subnormal
  // one once made the error of every row infinite).
  double Milliseconds(int column) const {
    constexpr double kLowest = 1e-3, kHighest = 365 * 24 * 3600e3;
    const double value = PositiveNumber(column);
    if (value < kLowest || value > kHighest) {
      Fail(column, fmt::format("expected a time between {:g} and {:g} ms, got \"{}\"", kLowest,
                               kHighest, fields_[column]));
    }
    return value;
  }

  double PositiveNumber(int column) const {
    const std::string_view text = fields_[column];
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || !(value > 0) ||
        !std::isfinite(value)) {
      Fail(column, fmt::format("expected a positive number, got \"{}\"", text));
    }
    return value;
  }

  // `column` counts the file's columns from 0.
  [[noreturn]] void Fail(int column, std::string message, std::string hint = "") const {
    throw InputError({source_, line_, ColumnKey(column)}, std::move(message), std::move(hint));
  }

  std::string ColumnKey(int column) const {
    const std::string_view name =
        offset_ == 1 && column == 0 ? kParamsColumn : kColumns[column - offset_];
    return fmt::format("column {} ({})", column + 1, name);
  }

 private:
  const std::string& source_;
  int line_;
  std::span<const std::string_view> fields_;
  int offset_;
};

std::string HeaderText(bool params) {
  std::string text(params ? kParamsColumn : "");
  for (std::string_view c : kColumns) {
    if (!text.empty()) text += ',';
    text += c;
  }
  return text;
}

}  // namespace

std::vector<VtrainRow> ParseVtrainCsv(std::string_view text, const std::string& source) {
  if (text.starts_with(kBom)) text.remove_prefix(kBom.size());
  std::vector<VtrainRow> rows;
  int offset = -1;  // 0 or 1 once the header is read
  int line = 0;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    std::string_view current = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++line;
    if (current.ends_with('\r')) current.remove_suffix(1);
    if (current.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (offset < 0) {
      if (current == HeaderText(false)) {
        offset = 0;
      } else if (current == HeaderText(true)) {
        offset = 1;
      } else {
        throw InputError({source, line, "header"},
                         fmt::format("not a vTrain ground-truth header: \"{}\"", current),
                         fmt::format("expected \"{}\", optionally preceded by \"{},\"",
                                     HeaderText(false), kParamsColumn));
      }
      continue;
    }
    const std::vector<std::string_view> fields = SplitOn(current, ',');
    const int expected = static_cast<int>(kColumns.size()) + offset;
    if (static_cast<int>(fields.size()) != expected) {
      throw InputError(
          {source, line, fmt::format("column {}", fields.size())},
          fmt::format("expected {} columns as in the header, got {}", expected, fields.size()));
    }
    const RowReader r(source, line, fields, offset);
    VtrainRow row;
    row.line = line;
    if (offset == 1) row.params_billion = r.PositiveNumber(0);
    row.gpus = r.PositiveInt(0, kMaxGpus);
    row.global_batch = r.PositiveInt(1, kMaxGlobalBatch);
    row.micro_batch = r.PositiveInt(2, kMaxGlobalBatch);
    row.hidden = r.PositiveInt(3, kMaxModelDimension);
    row.heads = r.PositiveInt(4, kMaxModelDimension);
    row.layers = r.PositiveInt(5, kMaxLayers);
    row.seq = r.PositiveInt(6, kMaxModelDimension);
    row.tp = r.PositiveInt(7, kMaxGpus);
    row.dp = r.PositiveInt(8, kMaxGpus);
    row.pp = r.PositiveInt(9, kMaxGpus);
    row.measured_s = r.Milliseconds(10 + offset) / 1000;
    if (int64_t{row.tp} * row.dp * row.pp != row.gpus) {
      r.Fail(offset,
             fmt::format("{} GPUs, but tensor x data x pipeline parallelism is {} x {} x {} "
                         "= {}",
                         row.gpus, row.tp, row.dp, row.pp, int64_t{row.tp} * row.dp * row.pp));
    }
    if (row.hidden % row.heads != 0) {
      r.Fail(3 + offset, fmt::format("hidden size {} is not a multiple of the {} attention heads",
                                     row.hidden, row.heads));
    }
    // The step's schedule is built to be simulated: pipeline stages x micro-batches bounded.
    const int64_t microbatches = row.global_batch / (int64_t{row.micro_batch} * row.dp);
    if (const std::string problem = ScheduleSizeProblem(row.pp, microbatches, 1);
        !problem.empty()) {
      r.Fail(1 + offset, problem);
    }
    rows.push_back(row);
  }
  if (offset < 0) {
    throw InputError({source, std::max(line, 1), "header"}, "no header line: the file is empty");
  }
  return rows;
}

std::vector<VtrainRow> LoadVtrainCsv(const std::string& path) {
  return ParseVtrainCsv(ReadTextFile(path), path);
}

ModelSpec VtrainModel(const VtrainRow& row) {
  // GPT-2 BPE vocabulary (50257; Megatron pads it to a multiple of 128 tp).
  return ClassicGpt(row.params_billion > 0 ? fmt::format("gpt-{}b", row.params_billion)
                                           : fmt::format("gpt-h{}-l{}", row.hidden, row.layers),
                    row.layers, row.hidden, row.heads, 50257, row.seq);
}

TrainingSpec VtrainTraining(const VtrainRow& row) {
  TrainingSpec t;
  t.global_batch_size = row.global_batch;
  t.precision = Precision::kFp16;
  return t;
}

ParallelConfig VtrainLayout(const VtrainRow& row) {
  ParallelConfig p;
  p.tp = row.tp;
  p.pp = row.pp;
  p.dp = row.dp;
  p.micro_batch_size = row.micro_batch;
  p.schedule = Schedule::k1F1B;
  p.recompute = Recompute::kFull;
  return p;
}

std::string LayoutFamily(const VtrainRow& row, int gpus_per_node) {
  std::string family;
  for (const auto& [size, name] : {std::pair{row.tp, "tp"}, {row.dp, "dp"}, {row.pp, "pp"}}) {
    if (size > 1) family += (family.empty() ? "" : "+") + std::string(name);
  }
  if (family.empty()) family = "single";
  if (row.tp > gpus_per_node) family += " x-node";
  return family;
}

std::string ModelFamily(const VtrainRow& row) {
  return row.params_billion > 0 ? fmt::format("{}B", row.params_billion)
                                : fmt::format("h{} L{}", row.hidden, row.layers);
}

std::vector<VtrainResult> ReplayVtrain(const ClusterSpec& cluster,
                                       std::span<const VtrainRow> rows) {
  std::vector<VtrainResult> results;
  results.reserve(rows.size());
  const CostOptions options = MegatronDeepSpeedOptions();  // cost_options.h
  for (const VtrainRow& row : rows) {
    VtrainResult r;
    r.row = row;
    Plan plan;
    plan.model = VtrainModel(row);
    plan.cluster = cluster;
    plan.num_gpus = row.gpus;
    plan.training = VtrainTraining(row);
    plan.parallel = VtrainLayout(row);
    const std::vector<Violation> violations =
        CheckParallelConfig(plan.model, plan.training, plan.parallel, plan.num_gpus);
    if (!violations.empty()) {
      r.rejected = violations.front().message;
      results.push_back(r);
      continue;
    }
    plan.options = options;
    const SimulationReport report = SimulatePlan(plan);
    r.simulated_s = report.step_time_s;
    r.breakdown = report.breakdown;
    for (const StageBreakdown& st : report.estimate.stages) {
      r.host_overhead_s += report.estimate.microbatches * st.overhead_s / plan.parallel.pp;
    }
    r.peak_memory_bytes = report.peak_memory_bytes;
    r.memory_problem = report.memory_problem;
    results.push_back(r);
  }
  return results;
}

double VtrainMape(std::span<const VtrainResult> results) {
  double sum = 0;
  int n = 0;
  for (const VtrainResult& r : results) {
    if (!r.rejected.empty()) continue;
    sum += std::abs(r.error());
    ++n;
  }
  return n == 0 ? 0 : sum / n;
}

}  // namespace ptdp

namespace ptdp {

ClusterSpec WithVtrainFit(ClusterSpec cluster, const VtrainFit& fit) {
  cluster.gpu.memory_efficiency = fit.memory_efficiency;
  cluster.host.kernel_launch_s = fit.kernel_launch_s;
  cluster.host.microbatch_overhead_s = fit.microbatch_overhead_s;
  return cluster;
}

VtrainFit FitVtrain(const ClusterSpec& cluster, std::span<const VtrainRow> rows) {
  // Integer grid units, so the search is exact and its result reproducible: memory efficiency
  // in 0.005, the launch cost in 0.25 us, the micro-batch overhead in 10 us.
  constexpr double kUnit[3] = {0.005, 0.25e-6, 10e-6};
  constexpr std::array<int, 3> kLow = {60, 0, 0};           // 0.3, 0 us, 0 us
  constexpr std::array<int, 3> kHigh = {180, 4000, 10000};  // 0.9, 1 ms, 100 ms
  std::array<int, 3> at = {160, 160, 100};                  // 0.8, 40 us, 1 ms
  VtrainFit fit;
  const double best = PatternSearch(at, {8, 32, 32}, kLow, kHigh, [&](const std::array<int, 3>& x) {
    ++fit.evaluations;
    const VtrainFit f{x[0] * kUnit[0], x[1] * kUnit[1], x[2] * kUnit[2]};
    return VtrainMape(ReplayVtrain(WithVtrainFit(cluster, f), rows));
  });
  fit.memory_efficiency = at[0] * kUnit[0];
  fit.kernel_launch_s = at[1] * kUnit[1];
  fit.microbatch_overhead_s = at[2] * kUnit[2];
  fit.mape = best;
  return fit;
}

}  // namespace ptdp
