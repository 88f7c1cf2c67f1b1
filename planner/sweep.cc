#include "planner/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/limits.h"
#include "core/text.h"

namespace ptdp {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void Fail(std::string_view flag, std::string message, std::string hint = "") {
  throw InputError({"", 0, std::string(flag)}, std::move(message), std::move(hint));
}

// A whole number in [1, max], all of `text`; else an InputError naming `flag` and `what`.
int64_t PositiveInteger(std::string_view text, int64_t max, std::string_view flag,
                        std::string_view what, std::string_view hint) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  const bool out_of_range = ec == std::errc::result_out_of_range;
  if (text.empty() || ptr != end || (ec != std::errc() && !out_of_range)) {
    Fail(flag,
         fmt::format("expected a positive integer for {}, got \"{}\"", what, QuotedWord(text)),
         std::string(hint));
  }
  if (text.front() == '-' || (!out_of_range && value <= 0)) {
    Fail(flag, fmt::format("{} must be positive, got {}", what, QuotedWord(text)),
         std::string(hint));
  }
  if (out_of_range || value > max) {
    Fail(flag, fmt::format("{} is at most {}, got {}", what, GroupThousands(max), QuotedWord(text)),
         std::string(hint));
  }
  return value;
}

// A finite number, all of `text` (from_chars: no sign other than '-', no hex); nullopt else.
std::optional<double> Number(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ptr != end || ec != std::errc() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// "1,066.7": one decimal, thousands grouped.
std::string OneDecimal(double x) {
  const int64_t tenths = std::llround(x * 10);
  return fmt::format("{}{}.{}", tenths < 0 ? "-" : "", GroupThousands(std::abs(tenths) / 10),
                     std::abs(tenths) % 10);
}

// "8", "1.5": a ratio for people.
std::string Ratio(double ratio) {
  return ratio == std::round(ratio) ? fmt::format("{:.0f}", ratio) : fmt::format("{:.1f}", ratio);
}

// The batch's note at `gpus` GPUs: rounded, or far from the reference it was scaled from. A
// fixed batch is the user's own choice and gets none. ptdp models the step, not convergence:
// the note says what may change and that it is not modelled.
std::string BatchNote(const SweepBatch& b, int64_t gpus) {
  if (b.at_gpus == 0) return "";
  const int64_t batch = b.At(gpus);
  std::vector<std::string> parts;
  const double exact =
      static_cast<double>(b.sequences) * static_cast<double>(gpus) / static_cast<double>(b.at_gpus);
  if (exact != static_cast<double>(batch)) {
    parts.push_back(fmt::format("{} x {} / {} GPUs = {} sequences, rounded to {}",
                                GroupThousands(b.sequences), GroupThousands(gpus),
                                GroupThousands(b.at_gpus), OneDecimal(exact),
                                b.multiple_of > 1 ? fmt::format("a multiple of {}", b.multiple_of)
                                                  : std::string("a whole number")));
  }
  constexpr double kTunedRange = 4;  // beyond this factor either way, say so
  const double ratio = static_cast<double>(batch) / static_cast<double>(b.sequences);
  const std::string reference = fmt::format("the reference {} (at {} GPUs)",
                                            GroupThousands(b.sequences), GroupThousands(b.at_gpus));
  if (ratio > kTunedRange) {
    parts.push_back(fmt::format(
        "{}x {}; beyond {:.0f}x the batch a model was tuned with, convergence per token may "
        "suffer (not modelled)",
        Ratio(ratio), reference, kTunedRange));
  } else if (ratio < 1 / kTunedRange) {
    parts.push_back(fmt::format(
        "1/{} of {}; far below the batch a model was tuned with, the learning rate may need "
        "retuning (not modelled)",
        Ratio(1 / ratio), reference));
  }
  if (parts.empty()) return "";
  std::string note = fmt::format("global batch {}: ", GroupThousands(batch));
  for (size_t i = 0; i < parts.size(); ++i) note += (i ? "; " : "") + parts[i];
  return note;
}

// The search at one point, into its figures: `ptdp plan`'s request for the same inputs, with
// top_k 1. The ranking is a strict order (Better: step time, memory, then the knobs), so the
// first plan Megatron-LM runs in a longer ranking is the best of a search without zb-h1, which
// BestRunnable runs when the best plan is zb-h1: the same plan `ptdp plan` prints as flags.
void Search(const SweepRequest& sweep, const ClusterSpec& cluster, const TrainingSpec& training,
            SweepPoint& point) {
  PlanRequest req{.model = sweep.model,
                  .cluster = cluster,
                  .training = training,
                  .gpus = point.gpus,
                  .constraints = sweep.constraints,
                  .options = sweep.options,
                  .top_k = 1,
                  .memory_headroom = sweep.memory_headroom,
                  .keep_points = false,
                  .recommend_overlap = sweep.recommend_overlap,
                  .progress = sweep.search_progress,
                  .memory_unit = sweep.memory_unit,
                  .threads = std::max(1, sweep.threads)};
  req.training.global_batch_size = point.global_batch;
  const Clock::time_point start = Clock::now();
  const PlanSearchResult res = SearchPlans(req);
  point.examined = res.examined;
  point.valid = res.valid;
  point.fits = res.fits;
  if (res.plans.empty()) {
    const std::vector<std::string> hints = UnblockHints(req, res);
    point.problem = hints.empty() ? "no valid plan" : hints.front();
    point.search_s = SecondsSince(start);
    return;
  }
  RunnablePlan runnable = BestRunnable(req, res);
  point.search_s = SecondsSince(start);
  const SimulationReport& r = runnable.plan.report;
  point.tokens_per_s = r.tokens_per_s;
  point.tokens_per_s_per_gpu = r.tokens_per_s / static_cast<double>(point.gpus);
  point.mfu = r.mfu;
  point.peak_memory_bytes = r.peak_memory_bytes;
  point.headroom = 1 - r.peak_memory_bytes / static_cast<double>(cluster.gpu.hbm_bytes);
  if (sweep.tokens > 0 && r.tokens_per_s > 0) {
    point.time_to_train_s = sweep.tokens / r.tokens_per_s;
    point.gpu_hours = static_cast<double>(point.gpus) * point.time_to_train_s / 3600;
    if (auto price = sweep.price_per_gpu_hour.find(cluster.name);
        price != sweep.price_per_gpu_hour.end()) {
      point.cost_usd = point.gpu_hours * price->second;
    }
  }
  point.best = std::move(runnable.plan);
  point.best_rank = runnable.rank;
}

// Each series (cluster, precision, batch rule: consecutive points) against its first point
// with a plan.
void ScalingEfficiency(std::vector<SweepPoint>& points) {
  for (size_t begin = 0; begin < points.size();) {
    size_t end = begin;
    while (end < points.size() && points[end].cluster == points[begin].cluster &&
           points[end].precision == points[begin].precision &&
           points[end].batch_rule == points[begin].batch_rule) {
      ++end;
    }
    double base = 0;
    for (size_t i = begin; i < end; ++i) {
      if (!points[i].best) continue;
      if (base == 0) base = points[i].tokens_per_s_per_gpu;
      points[i].scaling_efficiency = base > 0 ? points[i].tokens_per_s_per_gpu / base : 0;
    }
    begin = end;
  }
}

void MarkPareto(SweepPareto axes, std::vector<SweepPoint>& points) {
  // Both coordinates lower is better.
  auto coordinates = [axes](const SweepPoint& p) -> std::pair<double, double> {
    switch (axes) {
      case SweepPareto::kTimeCost:
        return {p.time_to_train_s, p.cost_usd.value_or(0)};
      case SweepPareto::kTimeGpuHours:
        return {p.time_to_train_s, p.gpu_hours};
      case SweepPareto::kThroughputGpus:
        return {1 / p.tokens_per_s, static_cast<double>(p.gpus)};
    }
    return {0, 0};
  };
  for (SweepPoint& p : points) {
    if (!p.best || p.tokens_per_s <= 0) continue;
    const auto [x, y] = coordinates(p);
    p.pareto = std::none_of(points.begin(), points.end(), [&](const SweepPoint& q) {
      if (!q.best || q.tokens_per_s <= 0) return false;
      const auto [qx, qy] = coordinates(q);
      return qx <= x && qy <= y && (qx < x || qy < y);
    });
  }
}

}  // namespace

int64_t SweepBatch::At(int64_t gpus) const {
  const int64_t m = std::max<int64_t>(1, multiple_of);
  if (at_gpus == 0) return sequences;
  // round(sequences x gpus / (at_gpus x m)) x m, half up, in integers (both at most 2^20).
  const int64_t unit = at_gpus * m;
  const int64_t multiples = (2 * sequences * gpus + unit) / (2 * unit);
  return std::max<int64_t>(multiples, 1) * m;
}

std::string SweepBatch::Text() const {
  return at_gpus == 0 ? GroupThousands(sequences)
                      : fmt::format("{}@{}", GroupThousands(sequences), GroupThousands(at_gpus));
}

SweepResult RunSweep(const SweepRequest& request) {
  PTDP_CHECK(!request.batches.empty());
  PTDP_CHECK(std::is_sorted(request.gpu_counts.begin(), request.gpu_counts.end()));
  const Clock::time_point start = Clock::now();
  SweepResult result;
  const size_t total = request.clusters.size() * request.trainings.size() * request.batches.size() *
                       request.gpu_counts.size();
  for (const ClusterSpec& cluster : request.clusters) {
    for (const TrainingSpec& training : request.trainings) {
      for (size_t b = 0; b < request.batches.size(); ++b) {
        for (const int64_t gpus : request.gpu_counts) {
          SweepPoint point{.cluster = cluster.name,
                           .precision = training.precision,
                           .gpus = gpus,
                           .global_batch = request.batches[b].At(gpus),
                           .batch_rule = b,
                           .batch_note = BatchNote(request.batches[b], gpus)};
          if (training.precision == Precision::kFp8 && cluster.gpu.peak_fp8_flops <= 0) {
            point.problem = fmt::format("no FP8 units on {}", cluster.gpu.name);
          } else if (point.global_batch > kMaxGlobalBatch) {
            point.problem =
                fmt::format("global batch {} is beyond ptdp's limit of {} sequences",
                            GroupThousands(point.global_batch), GroupThousands(kMaxGlobalBatch));
          } else {
            Search(request, cluster, training, point);
          }
          result.points.push_back(std::move(point));
          if (request.progress) request.progress(result.points.size(), total);
        }
      }
    }
  }
  ScalingEfficiency(result.points);
  MarkPareto(ParetoAxes(request, result), result.points);
  result.total_s = SecondsSince(start);
  return result;
}

SweepPareto ParetoAxes(const SweepRequest& request, const SweepResult& result) {
  if (request.tokens <= 0) return SweepPareto::kThroughputGpus;
  const bool priced = std::all_of(result.points.begin(), result.points.end(),
                                  [&](const SweepPoint& p) { return !p.best || p.cost_usd; });
  return priced ? SweepPareto::kTimeCost : SweepPareto::kTimeGpuHours;
}

std::vector<int64_t> ParseGpuCounts(std::string_view text, std::string_view flag) {
  constexpr std::string_view kHint =
      "a list (512,1024,2048) or a range START:STOP:xFACTOR (512:16384:x2) or START:STOP:+STEP "
      "(1024:4096:+1024)";
  std::vector<int64_t> counts;
  const std::vector<std::string_view> range = SplitOn(text, ':');
  if (range.size() > 1) {
    if (range.size() != 3 || range[2].empty() ||
        (range[2][0] != 'x' && range[2][0] != '*' && range[2][0] != '+')) {
      Fail(flag,
           fmt::format("expected START:STOP:xFACTOR or START:STOP:+STEP, got \"{}\"",
                       QuotedWord(text)),
           std::string(kHint));
    }
    const int64_t first = PositiveInteger(range[0], kMaxGpus, flag, "the range's start", kHint);
    const int64_t last = PositiveInteger(range[1], kMaxGpus, flag, "the range's stop", kHint);
    if (last < first) {
      Fail(flag, fmt::format("the range stops ({}) below its start ({})", last, first),
           std::string(kHint));
    }
    const bool times = range[2][0] != '+';
    const int64_t step = PositiveInteger(range[2].substr(1), kMaxGpus, flag,
                                         times ? "the range's factor" : "the range's step", kHint);
    if (times && step < 2) {
      Fail(flag, fmt::format("the range's factor must be at least 2, got {}", step),
           std::string(kHint));
    }
    for (int64_t g = first; g <= last && counts.size() <= kMaxSweepGpuCounts;
         g = times ? g * step : g + step) {
      counts.push_back(g);
    }
  } else {
    for (const std::string_view item : SplitOn(text, ',')) {
      counts.push_back(PositiveInteger(item, kMaxGpus, flag, "a GPU count", kHint));
      if (counts.size() > kMaxSweepGpuCounts) break;
    }
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  }
  if (counts.size() > kMaxSweepGpuCounts) {
    Fail(flag, fmt::format("more than {} GPU counts", kMaxSweepGpuCounts),
         "a coarser step, or several sweeps");
  }
  return counts;
}

std::vector<SweepBatch> ParseSweepBatches(std::string_view text, std::string_view flag) {
  constexpr std::string_view kHint =
      "sequences per step: B (fixed; a comma list for several) or B@G (B at G GPUs, scaled with "
      "the GPU count), e.g. 2048 or 2048@1024";
  constexpr size_t kMaxBatches = 16;
  std::vector<SweepBatch> batches;
  for (const std::string_view item : SplitOn(text, ',')) {
    const size_t at = item.find('@');
    SweepBatch b;
    b.sequences =
        PositiveInteger(item.substr(0, at), kMaxGlobalBatch, flag, "a global batch", kHint);
    if (at != std::string_view::npos) {
      b.at_gpus =
          PositiveInteger(item.substr(at + 1), kMaxGpus, flag, "the GPU count after @", kHint);
    }
    if (std::find_if(batches.begin(), batches.end(), [&](const SweepBatch& o) {
          return o.sequences == b.sequences && o.at_gpus == b.at_gpus;
        }) != batches.end()) {
      Fail(flag, fmt::format("\"{}\" is given twice", QuotedWord(item)), std::string(kHint));
    }
    batches.push_back(b);
    if (batches.size() > kMaxBatches) {
      Fail(flag, fmt::format("more than {} global batches", kMaxBatches), std::string(kHint));
    }
  }
  return batches;
}

double ParseTokenCount(std::string_view text, std::string_view flag) {
  constexpr std::string_view kHint =
      "a number of tokens, with an optional suffix K, M, G or B, T (powers of 1000): 15T, 300B, "
      "1.5e13";
  constexpr double kMaxTokens = 1e18;
  std::string_view number = text;
  double scale = 1;
  if (!number.empty()) {
    switch (number.back()) {
      case 'K':
      case 'k':
        scale = 1e3;
        break;
      case 'M':
      case 'm':
        scale = 1e6;
        break;
      case 'G':
      case 'g':
      case 'B':
      case 'b':
        scale = 1e9;
        break;
      case 'T':
      case 't':
        scale = 1e12;
        break;
      default:
        break;
    }
    if (scale != 1) number.remove_suffix(1);
  }
  const std::optional<double> value = Number(number);
  if (!value) {
    Fail(flag, fmt::format("expected a token count, got \"{}\"", QuotedWord(text)),
         std::string(kHint));
  }
  const double tokens = *value * scale;
  if (!(tokens >= 1)) {
    Fail(flag, fmt::format("must be at least 1 token, got {}", QuotedWord(text)),
         std::string(kHint));
  }
  if (tokens > kMaxTokens) {
    Fail(flag, fmt::format("at most 1e18 tokens, got {}", QuotedWord(text)), std::string(kHint));
  }
  return tokens;
}

std::pair<std::string, double> ParsePrice(std::string_view text, std::string_view flag) {
  constexpr std::string_view kHint =
      "CLUSTER=USD_PER_GPU_HOUR, one --price per cluster, e.g. --price dgx-h100=2.5";
  constexpr double kMaxPrice = 1e6;
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    Fail(flag, fmt::format("expected CLUSTER=USD_PER_GPU_HOUR, got \"{}\"", QuotedWord(text)),
         std::string(kHint));
  }
  std::string_view amount = text.substr(eq + 1);
  if (!amount.empty() && amount.front() == '$') amount.remove_prefix(1);
  const std::optional<double> usd = Number(amount);
  if (!usd) {
    Fail(flag,
         fmt::format("expected a price in USD per GPU-hour, got \"{}\"",
                     QuotedWord(text.substr(eq + 1))),
         std::string(kHint));
  }
  if (!(*usd > 0) || *usd > kMaxPrice) {
    Fail(flag,
         fmt::format("a price must be positive and at most {} USD per GPU-hour, got {}",
                     GroupThousands(static_cast<int64_t>(kMaxPrice)),
                     QuotedWord(text.substr(eq + 1))),
         std::string(kHint));
  }
  return {std::string(text.substr(0, eq)), *usd};
}

}  // namespace ptdp
