#include "validation/functional_tests.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/limits.h"
#include "core/plan.h"
#include "core/schedule.h"
#include "core/text.h"
#include "planner/check.h"
#include "simulator/simulate.h"
#include "validation/pattern_search.h"
#include "validation/stats.h"

namespace ptdp {
namespace {

constexpr std::array<std::string_view, 10> kColumns = {"case",
                                                       "model_dir",
                                                       "gpu",
                                                       "gpus",
                                                       "allocated_bytes",
                                                       "max_allocated_bytes",
                                                       "iteration_time_s",
                                                       "steps",
                                                       "gpus_from",
                                                       "half"};

std::string HeaderLine() {
  std::string text;
  for (std::string_view c : kColumns) text += (text.empty() ? "" : "\t") + std::string(c);
  return text;
}

double Number(std::string_view text, const std::string& source, int line, std::string_view column,
              bool may_be_empty = false) {
  if (text.empty() && may_be_empty) return 0;
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !(v >= 0) || !std::isfinite(v)) {
    throw InputError({source, line, std::string(column)},
                     fmt::format("expected a non-negative number, got \"{}\"", text));
  }
  return v;
}

// A number within [lowest, highest] (0 too when `zero_ok`: not measured): counts in range for
// their integer fields, measurements normal numbers (a subnormal time or size once made an
// error infinite).
double Bounded(std::string_view text, const std::string& source, int line, std::string_view column,
               double lowest, double highest, bool zero_ok = false) {
  const double v = Number(text, source, line, column, zero_ok);
  if ((v == 0 && zero_ok) || (v >= lowest && v <= highest)) return v;
  throw InputError({source, line, std::string(column)},
                   fmt::format("expected {}a number from {} to {}, got \"{}\"",
                               zero_ok ? "0 (not measured) or " : "", lowest, highest, text));
}

}  // namespace

bool IsFunctionalTestsTsv(std::string_view text) {
  const std::string header = HeaderLine();
  return text.substr(0, text.find('\n')) == header;
}

std::vector<FunctionalTestRow> ParseFunctionalTestsTsv(std::string_view text,
                                                       const std::string& source) {
  if (!IsFunctionalTestsTsv(text)) {
    throw InputError({source, 1, ""},
                     "not a functional-tests golden-values file: its first line must be the "
                     "header " +
                         HeaderLine(),
                     "scripts/functional_tests_golden.py writes it");
  }
  std::vector<FunctionalTestRow> rows;
  int line_no = 1;
  size_t start = text.find('\n');
  while (start != std::string_view::npos && start + 1 < text.size()) {
    const size_t end = text.find('\n', start + 1);
    const std::string_view line =
        text.substr(start + 1, end == std::string_view::npos ? end : end - start - 1);
    start = end;
    ++line_no;
    if (line.empty()) continue;
    const std::vector<std::string_view> f = SplitOn(line, '\t');
    if (f.size() != kColumns.size()) {
      throw InputError(
          {source, line_no, ""},
          fmt::format("expected {} tab-separated fields, got {}", kColumns.size(), f.size()));
    }
    FunctionalTestRow r;
    r.line = line_no;
    r.case_name = f[0];
    r.model_dir = f[1];
    r.gpu = f[2];
    if (r.gpu != "h100" && r.gpu != "a100") {
      throw InputError({source, line_no, "gpu"},
                       fmt::format("expected h100 or a100, got \"{}\"", f[2]));
    }
    r.gpus = static_cast<int64_t>(
        Bounded(f[3], source, line_no, "gpus", 1, static_cast<double>(kMaxGpus)));
    // Bytes: from one to an exabyte; seconds: from a microsecond to a year.
    r.allocated_bytes = Bounded(f[4], source, line_no, "allocated_bytes", 1, 1e18);
    r.max_allocated_bytes = Bounded(f[5], source, line_no, "max_allocated_bytes", 1, 1e18);
    r.iteration_time_s =
        Bounded(f[6], source, line_no, "iteration_time_s", 1e-6, 365 * 24 * 3600.0, true);
    r.steps = static_cast<int>(Bounded(f[7], source, line_no, "steps", 0, 1e9));
    r.gpus_from = f[8];
    if (f[9] != "fit" && f[9] != "test") {
      throw InputError({source, line_no, "half"},
                       fmt::format("expected fit or test, got \"{}\"", f[9]));
    }
    r.test_half = f[9] == "test";
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string FunctionalTestCluster(const FunctionalTestRow& row) {
  return row.gpu == "h100" ? "dgx-h100" : "dgx-a100-80gb";
}

FunctionalTestCase ReadFunctionalTest(const FunctionalTestRow& row, std::string_view command,
                                      const std::string& source) {
  FunctionalTestCase out;
  out.row = row;
  CheckReport report;
  try {
    report = CheckMegatronCommand(command, source, row.gpus);
  } catch (const InputError& e) {
    out.not_simulated = std::string("cannot read the command: ") + e.what();
    return out;
  }
  const MegatronCommand& c = report.command;
  for (const MegatronFinding& f : c.findings) {
    out.not_modelled +=
        f.severity == MegatronFinding::Severity::kWarning && f.message.starts_with("not simulated");
  }
  if (!c.model_complete) {
    out.not_simulated = "the command does not give the whole model";
  } else if (!report.violations.empty()) {
    out.not_simulated = "breaks a layout rule as ptdp reads it: " + report.violations[0].message;
  } else if (!report.not_simulated.empty()) {
    out.not_simulated = report.not_simulated;
  } else if (!report.simulatable()) {
    out.not_simulated = "the global batch does not divide into micro-batches";
  }
  if (!out.not_simulated.empty()) return out;
  out.not_simulated = ScheduleSizeProblem(c.parallel.pp, NumMicrobatches(c.training, c.parallel),
                                          c.parallel.virtual_stages);
  if (!out.not_simulated.empty()) return out;
  // The GPU count too: the report's per-GPU rates divide by it.
  out.plan = Plan{.model = c.model,
                  .cluster = {},
                  .num_gpus = report.gpus,
                  .training = c.training,
                  .parallel = c.parallel,
                  .options = c.options};
  return out;
}

FunctionalTestResult ReplayFunctionalTest(const FunctionalTestCase& test,
                                          const ClusterSpec& cluster) {
  FunctionalTestResult out;
  out.row = test.row;
  out.not_modelled = test.not_modelled;
  out.not_simulated = test.not_simulated;
  if (out.not_simulated.empty() && test.plan.training.precision == Precision::kFp8 &&
      cluster.gpu.peak_fp8_flops <= 0) {
    out.not_simulated = "trains in FP8 on a GPU without FP8 units";
  }
  if (!out.not_simulated.empty()) return out;
  Plan plan = test.plan;
  plan.cluster = cluster;
  out.moe = plan.model.moe();
  out.layout = LayoutLine(plan);
  const SimulationReport sim = SimulatePlan(plan);
  const StageMemory& last = sim.memory.stages.back();
  out.predicted_total_bytes = last.peak_bytes;
  out.predicted_peak_bytes = last.allocated_bytes();
  out.predicted_allocated_bytes =
      last.weights_bytes + last.gradients_bytes + last.optimizer_bytes + last.workspace_bytes;
  out.fits = sim.memory_problem.empty();
  out.predicted_step_s = sim.step_time_s;
  return out;
}

HostFit FitFunctionalTestsHost(const ClusterSpec& cluster,
                               std::span<const FunctionalTestCase> tests) {
  std::vector<FunctionalTestCase> timed;
  for (const FunctionalTestCase& t : tests) {
    if (t.not_simulated.empty() && t.row.iteration_time_s > 0) {
      timed.push_back(t);
    }
  }
  // Integer grid units, so the search is exact and its result reproducible.
  constexpr double kUnit[4] = {0.25e-6, 10e-6, 100e-6, 10e-6};
  // The per-micro-batch cost stays 0 (its bound): see the declaration. The MoE layer's cost is
  // free only where a MoE case is timed.
  const bool moe = std::any_of(timed.begin(), timed.end(),
                               [](const FunctionalTestCase& t) { return t.plan.model.moe(); });
  const std::array<int, 4> high = {4000, 0, 10000, moe ? 1000 : 0};  // 1 ms, 0, 1 s, 10 ms
  std::array<int, 4> at = {80, 0, 100, 0};                           // 20 us, 0, 10 ms, 0
  HostFit fit;
  fit.cases = static_cast<int>(timed.size());
  const auto host_at = [&](const std::array<int, 4>& x) {
    return HostSpec{.kernel_launch_s = x[0] * kUnit[0],
                    .microbatch_overhead_s = x[1] * kUnit[1],
                    .optimizer_step_s = x[2] * kUnit[2],
                    .moe_layer_s = x[3] * kUnit[3]};
  };
  const auto evaluate = [&](const std::array<int, 4>& x) {
    ++fit.evaluations;
    ClusterSpec c = cluster;
    c.host = host_at(x);
    double sum = 0;
    for (const FunctionalTestCase& t : timed) {
      sum += std::abs(ReplayFunctionalTest(t, c).time_error());
    }
    return timed.empty() ? 0 : sum / static_cast<double>(timed.size());
  };
  const double best = PatternSearch(at, {32, 32, 32, 32}, {0, 0, 0, 0}, high, evaluate);
  fit.host = host_at(at);
  fit.mape = best;
  return fit;
}

namespace {

struct Summary {
  int cases = 0, beyond = 0, not_fit = 0, timed = 0;
  std::vector<double> peak, allocated, time, dense_time;
};

double MeanAbs(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += std::abs(x);
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

std::string Percent(double x) { return fmt::format("{:+.1f}%", 100 * x); }

}  // namespace

std::string FunctionalTestsMarkdown(std::span<const FunctionalTestResult> results) {
  // (gpu, test half) -> summary.
  std::map<std::pair<std::string, bool>, Summary> by;
  for (const FunctionalTestResult& r : results) {
    if (!r.not_simulated.empty()) continue;
    Summary& s = by[{r.row.gpu, r.row.test_half}];
    ++s.cases;
    s.peak.push_back(r.peak_error());
    s.allocated.push_back(r.allocated_error());
    s.beyond += std::abs(r.peak_error()) > 0.25;
    s.not_fit += !r.fits;
    if (r.row.iteration_time_s > 0) {
      s.time.push_back(r.time_error());
      if (!r.moe) s.dense_time.push_back(r.time_error());
    }
  }
  std::string out =
      "| GPU | half | cases | peak allocated: mean abs error | median error | beyond 25% | "
      "allocated after the step: mean abs error | median error | predicted not to fit | "
      "iteration time: cases | mean abs error | median error | of them dense: cases | mean abs "
      "error |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& [key, s] : by) {
    out += fmt::format(
        "| {} | {} | {} | {:.1f}% | {} | {} | {:.1f}% | {} | {} | {} | {} | {} | {} | {} |\n",
        key.first, key.second ? "test (out-of-sample)" : "fit (in-sample)", s.cases,
        100 * MeanAbs(s.peak), Percent(Median(s.peak)), s.beyond, 100 * MeanAbs(s.allocated),
        Percent(Median(s.allocated)), s.not_fit, s.time.size(),
        s.time.empty() ? "-" : fmt::format("{:.1f}%", 100 * MeanAbs(s.time)),
        s.time.empty() ? "-" : Percent(Median(s.time)), s.dense_time.size(),
        s.dense_time.empty() ? "-" : fmt::format("{:.1f}%", 100 * MeanAbs(s.dense_time)));
  }
  out +=
      "\n| case | GPU | GPUs | half | layout | not simulated flags | measured peak GiB | "
      "predicted | error | measured after step GiB | predicted | error | fits | measured s | "
      "predicted s | error |\n"
      "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n";
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  for (const FunctionalTestResult& r : results) {
    if (!r.not_simulated.empty()) continue;
    const bool timed = r.row.iteration_time_s > 0;
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {:.2f} | {:.2f} | {} | {:.2f} | {:.2f} | {} | {} | {} | "
        "{} | {} |\n",
        r.row.case_name, r.row.gpu, r.row.gpus, r.row.test_half ? "test" : "fit",
        MarkdownCell(r.layout), r.not_modelled, r.row.max_allocated_bytes / kGiB,
        r.predicted_peak_bytes / kGiB, Percent(r.peak_error()), r.row.allocated_bytes / kGiB,
        r.predicted_allocated_bytes / kGiB, Percent(r.allocated_error()), r.fits ? "yes" : "**no**",
        timed ? fmt::format("{:.3f}", r.row.iteration_time_s) : "-",
        fmt::format("{:.3f}", r.predicted_step_s), timed ? Percent(r.time_error()) : "-");
  }
  std::string skipped;
  for (const FunctionalTestResult& r : results) {
    if (r.not_simulated.empty()) continue;
    skipped += fmt::format("- {} ({}): {}\n", r.row.case_name, r.row.gpu, r.not_simulated);
  }
  if (!skipped.empty()) out += "\nNot simulated:\n\n" + skipped;
  return out;
}

}  // namespace ptdp
