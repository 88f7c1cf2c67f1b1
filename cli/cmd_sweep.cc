// `ptdp sweep`: the exact search at every point of a grid (planner/sweep.h), as a table, JSON or
// CSV, with the time, GPU-hours and money a token budget takes at each point.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/progress.h"
#include "cli/report.h"
#include "cli/search_flags.h"
#include "cli/workload.h"
#include "core/cluster_override.h"
#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/presets.h"
#include "core/table.h"
#include "megatron/rules.h"
#include "megatron/write_flags.h"
#include "planner/sweep.h"
#include "planner/sweep_report.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

enum class Format { kTable, kJson, kCsv };
constexpr EnumName<Format> kFormats[] = {
    {"table", Format::kTable}, {"json", Format::kJson}, {"csv", Format::kCsv}};

// Points of one sweep at most (clusters x precisions x batches x GPU counts).
constexpr size_t kMaxPoints = 512;
constexpr size_t kMaxClusters = 16;

// The global batch when none is given, in tokens: 2^22, about Llama 3 405B's first 4M.
constexpr int64_t kDefaultBatchTokens = int64_t{1} << 22;

void AddSweepOptions(po::options_description& o) {
  o.add_options()("model", po::value<std::string>()->value_name("M"),
                  "model: preset name (ptdp models), model YAML or Hugging Face config.json")(
      "cluster", po::value<std::string>()->value_name("C1,C2"),
      "hardware profiles, comma-separated: names (ptdp profiles) or YAML files")(
      "gpus", po::value<std::string>()->value_name("LIST"),
      "GPU counts: a list (512,1024,2048), or a range START:STOP:xFACTOR (512:16384:x2) or "
      "START:STOP:+STEP (1024:4096:+1024)")(
      "global-batch", po::value<std::string>()->value_name("B"),
      "global batch in sequences: B, the same at every point (a comma list for several), or "
      "B@G: B at G GPUs, scaled linearly with the GPU count (default: about 4M tokens, 2^22, in "
      "sequences of the training length)")(
      "batch-multiple", po::value<std::string>()->value_name("M"),
      "with B@G: round each scaled batch to a multiple of M (default 1)")(
      "seq-length", po::value<std::string>()->value_name("S"),
      "the training sequence length (default: the model's)")(
      "precision", po::value<std::string>()->default_value("bf16")->value_name("LIST"),
      "precisions, comma-separated: bf16, fp16, fp32, fp8 (fp8 points of a GPU without FP8 "
      "units are skipped, saying so)")(
      "fp8-recipe", po::value<std::string>()->value_name("R"),
      "for fp8: delayed (Megatron's default) | tensorwise | blockwise")(
      "num-layers-at-start-in-bf16", po::value<std::string>()->value_name("N"),
      "for fp8: keep the first N transformer layers in bf16 (not with delayed scaling)")(
      "num-layers-at-end-in-bf16", po::value<std::string>()->value_name("N"),
      "for fp8: keep the last N transformer layers in bf16")(
      "fp8-param-gather", po::bool_switch(),
      "for fp8: FP8 primary weights, gathered in FP8 (needs the distributed optimizer)")(
      "keep-fp8-transpose-cache", po::bool_switch(),
      "for fp8 with --fsdp optim_grads_params: keep every FP8 weight's transpose")(
      "tokens", po::value<std::string>()->value_name("N"),
      "tokens to train: 15T, 300B, 1.5e13 (K, M, G or B, T: powers of 1000); adds the days, "
      "GPU-hours and cost at each point")(
      "price", po::value<std::vector<std::string>>()->composing()->value_name("CLUSTER=USD"),
      "the price of one GPU-hour of a cluster of --cluster, in US dollars (repeatable): "
      "dgx-h100=2.5")("format", po::value<std::string>()->default_value("table")->value_name("F"),
                      "table | json | csv")(
      "svg", po::value<std::string>()->value_name("FILE"),
      "write the charts: time to train against cost, tokens/s per GPU against GPUs")(
      "html", po::value<std::string>()->value_name("FILE"),
      "write a self-contained HTML report (charts, table, each point's Megatron-LM flags)");
  AddSearchConstraintOptions(o);
  AddClusterSetOption(o, /*several_clusters=*/true);
  AddCostOptions(o);
  AddMemoryUnitOption(o);
  AddThreadsOption(o);
}

// A library parser's InputError, said naming the flag as it was typed (a Megatron-LM name too).
template <typename F>
auto ReadFlag(const Flags& flags, std::string_view flag, F&& parse) {
  try {
    return parse(flags.String(flag));
  } catch (const InputError& e) {
    flags.Fail(flag, e.message(), e.hint());
  }
}

std::vector<std::string> CommaList(const Flags& flags, std::string_view flag) {
  std::vector<std::string> items;
  const std::string text = flags.String(flag);
  for (const std::string_view item : SplitOn(text, ',')) {
    if (item.empty()) flags.Fail(flag, "an empty item in the list");
    items.emplace_back(item);
  }
  return items;
}

// --cluster: each a profile, --cluster-set applied; `typed` gets the words as given (--price
// may name a cluster by them).
std::vector<ClusterSpec> ReadClusters(const Flags& flags, std::vector<std::string>& typed) {
  typed = CommaList(flags, "cluster");
  if (typed.size() > kMaxClusters) {
    flags.Fail("cluster", fmt::format("{} clusters; at most {}", typed.size(), kMaxClusters));
  }
  std::vector<ClusterSpec> clusters;
  std::vector<std::string> names;
  for (const std::string& arg : typed) {
    clusters.push_back(ResolveCluster(arg, "--cluster"));
    if (std::find(names.begin(), names.end(), clusters.back().name) != names.end()) {
      flags.Fail("cluster", fmt::format("two clusters are named {}", clusters.back().name),
                 "prices and --cluster-set name a cluster by its profile's name: give each "
                 "profile file its own `name`");
    }
    names.push_back(clusters.back().name);
  }
  const std::vector<ClusterOverride> overrides = ReadClusterSets(flags);
  CheckOverrideClusters(overrides, names);
  for (ClusterSpec& c : clusters) ApplyClusterOverrides(overrides, c);
  return clusters;
}

// --precision LIST, each with the fp8 flags where it is fp8 (refused when no precision is).
std::vector<TrainingSpec> ReadTrainings(const Flags& flags, const ClusterSpec& first_cluster) {
  std::vector<TrainingSpec> trainings;
  for (const std::string& name : CommaList(flags, "precision")) {
    const auto p = ValueOf<Precision>(kPrecisionNames, name);
    if (!p) flags.Fail("precision", UnknownValueMessage<Precision>(kPrecisionNames, name));
    if (std::any_of(trainings.begin(), trainings.end(),
                    [&](const TrainingSpec& t) { return t.precision == *p; })) {
      flags.Fail("precision", fmt::format("{} is given twice", name));
    }
    trainings.push_back(TrainingSpec{.precision = *p});
  }
  // Whether a GPU has FP8 units is a point's question here (the sweep skips those points), not
  // the flags': read them as for a cluster that has them.
  ClusterSpec with_fp8 = first_cluster;
  with_fp8.gpu.peak_fp8_flops = std::max(with_fp8.gpu.peak_fp8_flops, 1.0);
  const auto fp8 = std::find_if(trainings.begin(), trainings.end(), [](const TrainingSpec& t) {
    return t.precision == Precision::kFp8;
  });
  ReadFp8Flags(flags, fp8 != trainings.end() ? *fp8 : trainings.front(), with_fp8);
  return trainings;
}

// --price CLUSTER=USD, by the cluster's profile name (CLUSTER may be the word given to
// --cluster: a file's path).
std::map<std::string, double> ReadPrices(const Flags& flags,
                                         const std::vector<ClusterSpec>& clusters,
                                         const std::vector<std::string>& typed) {
  std::map<std::string, double> prices;
  for (const std::string& text : flags.Strings("price")) {
    std::pair<std::string, double> price;
    try {
      price = ParsePrice(text);
    } catch (const InputError& e) {
      flags.Fail("price", e.message(), e.hint());
    }
    std::vector<std::string> names;
    std::string name;
    for (size_t i = 0; i < clusters.size(); ++i) {
      names.push_back(clusters[i].name);
      if (price.first == clusters[i].name || price.first == typed[i]) name = clusters[i].name;
    }
    if (name.empty()) {
      const std::string near = ClosestName(price.first, names);
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      flags.Fail(
          "price",
          fmt::format("{} is not a cluster of --cluster ({})", QuotedWord(price.first), list),
          near.empty() ? "--price CLUSTER=USD_PER_GPU_HOUR names a cluster of --cluster"
                       : fmt::format("did you mean {}?", near));
    }
    if (!prices.emplace(name, price.second).second) {
      flags.Fail("price", fmt::format("{} has two prices", name));
    }
  }
  return prices;
}

ModelSpec ReadModel(const Flags& flags, std::vector<std::string>& notes) {
  const ResolvedModel resolved = ResolveModelAndSource(flags.String("model"));
  ModelSpec model = resolved.model;
  if (auto seq = flags.OptionalPositiveInt("seq-length", kMaxModelDimension)) {
    if (*seq > model.max_position_embeddings &&
        model.position_embedding == PositionEmbedding::kLearned) {
      flags.Fail("seq-length", fmt::format("{} exceeds the model's max_position_embeddings ({})",
                                           *seq, model.max_position_embeddings));
    }
    model.seq_length = static_cast<int>(*seq);
    model.max_position_embeddings = std::max(model.max_position_embeddings, model.seq_length);
  } else if (resolved.hf_config) {
    notes.push_back(fmt::format(
        "sequence length {}, ptdp's default for a Hugging Face config; --seq-length sets another",
        GroupThousands(model.seq_length)));
  }
  return model;
}

// An output must not replace a profile the sweep reads (CheckOutputs sees --cluster as one
// word, not its list).
void CheckOutputsAreNotClusters(const Flags& flags, const std::vector<std::string>& typed) {
  namespace fs = std::filesystem;
  for (const char* flag : {"svg", "html"}) {
    const auto path = flags.OptionalString(flag);
    if (!path || *path == "-") continue;
    for (const std::string& input : typed) {
      std::error_code ec;
      if (fs::exists(input, ec) && fs::exists(*path, ec) && fs::equivalent(input, *path, ec)) {
        flags.Fail(flag, fmt::format("cannot write {}: it is a profile given to --cluster, which "
                                     "this run reads",
                                     *path));
      }
    }
  }
}

SweepRequest ReadRequest(const Flags& flags, std::vector<std::string>& notes,
                         std::vector<std::string>& typed_clusters) {
  SweepRequest req;
  req.model = ReadModel(flags, notes);
  req.clusters = ReadClusters(flags, typed_clusters);
  CheckOutputsAreNotClusters(flags, typed_clusters);
  req.gpu_counts = ReadFlag(flags, "gpus", [](const std::string& s) { return ParseGpuCounts(s); });
  if (flags.Has("global-batch")) {
    req.batches =
        ReadFlag(flags, "global-batch", [](const std::string& s) { return ParseSweepBatches(s); });
  } else {
    // About 4M tokens per step (Llama 3 405B's first batch: 4M tokens, "The Llama 3 Herd of
    // Models", section 3.4.1), in whole sequences of the training length.
    const int64_t sequences =
        std::max<int64_t>(1, std::llround(static_cast<double>(kDefaultBatchTokens) /
                                          static_cast<double>(req.model.seq_length)));
    req.batches = {SweepBatch{.sequences = sequences}};
    notes.push_back(fmt::format(
        "no --global-batch: {} sequences of {} tokens at every point ({} tokens per step, about "
        "the 4M tokens Llama 3 405B began its pretraining with); --global-batch B or B@G sets it",
        GroupThousands(sequences), GroupThousands(req.model.seq_length),
        GroupThousands(sequences * req.model.seq_length)));
  }
  if (auto m = flags.OptionalPositiveInt("batch-multiple", kMaxGlobalBatch)) {
    if (std::none_of(req.batches.begin(), req.batches.end(),
                     [](const SweepBatch& b) { return b.at_gpus > 0; })) {
      flags.Fail("batch-multiple", "applies to a scaled batch (--global-batch B@G) only");
    }
    for (SweepBatch& b : req.batches) b.multiple_of = *m;
  }
  req.trainings = ReadTrainings(flags, req.clusters.front());
  const size_t points =
      req.clusters.size() * req.trainings.size() * req.batches.size() * req.gpu_counts.size();
  if (points > kMaxPoints) {
    flags.Fail("gpus",
               fmt::format("{} points (clusters x precisions x global batches x GPU counts); at "
                           "most {}",
                           points, kMaxPoints),
               "fewer GPU counts (a coarser step), or several sweeps");
  }
  if (flags.Has("tokens")) {
    req.tokens = ReadFlag(flags, "tokens", [](const std::string& s) { return ParseTokenCount(s); });
  }
  req.price_per_gpu_hour = ReadPrices(flags, req.clusters, typed_clusters);
  req.constraints = ReadSearchConstraints(flags, req.model);
  req.options = ReadCostOptions(flags);
  req.recommend_overlap = !flags.Switch("no-overlap");
  req.memory_headroom = ReadHeadroom(flags);
  req.threads = ReadThreads(flags);
  req.memory_unit = ReadMemoryUnit(flags);
  return req;
}

// The notes under the table: each batch note once (they do not depend on the cluster), and
// each problem once per series for the GPU counts it stops.
std::string PointNotes(const SweepRequest& req, const SweepResult& res) {
  std::vector<std::string> batch_notes;
  struct Problem {
    const SweepPoint* first;
    std::string text;
    std::vector<int64_t> gpus;
  };
  std::vector<Problem> problems;
  for (const SweepPoint& p : res.points) {
    if (!p.batch_note.empty() &&
        std::find(batch_notes.begin(), batch_notes.end(), p.batch_note) == batch_notes.end()) {
      batch_notes.push_back(p.batch_note);
    }
    std::string problem = p.problem;
    if (p.best && p.best_rank < 0) {
      problem = "only zb-h1 plans were found, which Megatron-LM cannot run (ptdp models them)";
    }
    if (problem.empty()) continue;
    if (!problems.empty() && problems.back().text == problem &&
        problems.back().first->cluster == p.cluster &&
        problems.back().first->precision == p.precision &&
        problems.back().first->batch_rule == p.batch_rule) {
      problems.back().gpus.push_back(p.gpus);
    } else {
      problems.push_back({&p, problem, {p.gpus}});
    }
  }
  std::string out;
  for (const std::string& note : batch_notes) out += NoteText(note);
  for (const Problem& p : problems) {
    std::string gpus;
    for (const int64_t g : p.gpus) gpus += (gpus.empty() ? "" : ", ") + GroupThousands(g);
    out += NoteText(fmt::format(
        "{} {}{} on {} GPUs: {}", p.first->cluster, Name(p.first->precision),
        req.batches.size() > 1 ? ", global batch " + req.batches[p.first->batch_rule].Text() : "",
        gpus, p.text));
  }
  return out;
}

std::string LayoutText(const ParallelConfig& p) {
  return fmt::format("{}, mbs {}", SizesText(p), p.micro_batch_size);
}

// Less free memory than the memory model's error: the plan may not fit (as `ptdp plan`'s
// LowHeadroomNote says).
bool LowHeadroom(const SweepPoint& p) { return p.best && p.headroom < kMemoryModelError; }

// "1,066.7": one decimal, thousands grouped.
std::string OneDecimal(double x) {
  const int64_t tenths = std::llround(x * 10);
  return fmt::format("{}{}.{}", tenths < 0 ? "-" : "", GroupThousands(std::abs(tenths) / 10),
                     std::abs(tenths) % 10);
}

std::string Dollars(double usd) { return "$" + GroupThousands(std::llround(usd)); }

std::string ParetoLegend(SweepPareto axes) {
  switch (axes) {
    case SweepPareto::kTimeCost:
      return "Pareto: on the front of time to train and cost (no other point is as fast and as "
             "cheap, and better in one)";
    case SweepPareto::kTimeGpuHours:
      return "Pareto: on the front of time to train and GPU-hours (no other point is as fast and "
             "takes as few GPU-hours, and better in one)";
    case SweepPareto::kThroughputGpus:
      return "Pareto: on the front of tokens/s and GPUs (no other point is as fast on as few "
             "GPUs, and better in one)";
  }
  return "";
}

std::string SweepTable(const SweepRequest& req, const SweepResult& res) {
  const bool tokens = req.tokens > 0;
  const bool priced = !req.price_per_gpu_hour.empty() && tokens;
  std::vector<Table::Column> columns = {{"cluster"},
                                        {"precision"},
                                        {"GPUs", Table::Align::kRight},
                                        {"batch", Table::Align::kRight},
                                        {"best layout"},
                                        {"step", Table::Align::kRight},
                                        {"tokens/s", Table::Align::kRight},
                                        {"per GPU", Table::Align::kRight},
                                        {"MFU", Table::Align::kRight},
                                        {"headroom", Table::Align::kRight}};
  if (tokens) {
    columns.push_back({"days", Table::Align::kRight});
    columns.push_back({"GPU-hours", Table::Align::kRight});
  }
  if (priced) columns.push_back({"cost", Table::Align::kRight});
  columns.push_back({"scaling", Table::Align::kRight});
  columns.push_back({"Pareto"});
  Table t(columns);
  for (const SweepPoint& p : res.points) {
    std::vector<std::string> row = {p.cluster, std::string(Name(p.precision)),
                                    GroupThousands(p.gpus), GroupThousands(p.global_batch)};
    if (!p.best) {
      row.push_back("no plan (see below)");
      while (row.size() < columns.size()) row.push_back("-");
      t.AddRow(row);
      continue;
    }
    row.push_back(LayoutText(p.best->plan.parallel) + (p.best_rank < 0 ? " (zb-h1)" : ""));
    row.push_back(Seconds(p.best->report.step_time_s));
    row.push_back(GroupThousands(std::llround(p.tokens_per_s)));
    row.push_back(GroupThousands(std::llround(p.tokens_per_s_per_gpu)));
    row.push_back(fmt::format("{:.1f}%", 100 * p.mfu));
    row.push_back(fmt::format("{:.0f}%{}", 100 * p.headroom, LowHeadroom(p) ? " !" : ""));
    if (tokens) {
      row.push_back(OneDecimal(p.time_to_train_s / 86400));
      row.push_back(GroupThousands(std::llround(p.gpu_hours)));
    }
    if (priced) row.push_back(p.cost_usd ? Dollars(*p.cost_usd) : "-");
    row.push_back(fmt::format("{:.1f}%", 100 * p.scaling_efficiency));
    row.push_back(p.pareto ? "yes" : "-");
    t.AddRow(row);
  }
  return t.Render();
}

std::string SweepText(const SweepRequest& req, const SweepResult& res,
                      const std::vector<std::string>& notes) {
  std::string clusters, prices;
  for (const ClusterSpec& c : req.clusters) {
    clusters += (clusters.empty() ? "" : ", ") + c.name;
    if (auto price = req.price_per_gpu_hour.find(c.name); price != req.price_per_gpu_hour.end()) {
      prices += fmt::format("{}{} ${:.2f}", prices.empty() ? "" : ", ", c.name, price->second);
    }
  }
  std::string batches, precisions;
  for (const SweepBatch& b : req.batches) batches += (batches.empty() ? "" : ", ") + b.Text();
  for (const TrainingSpec& t : req.trainings) {
    precisions += (precisions.empty() ? "" : ", ") + std::string(Name(t.precision));
  }
  std::string out = fmt::format("ptdp sweep: {} on {}; global batch {}; {}\n", req.model.name,
                                clusters, batches, precisions);
  for (const ClusterSpec& c : req.clusters) {
    if (const std::string changed = ClusterOverridesLine(c); !changed.empty())
      out += changed + "\n";
  }
  if (req.tokens > 0) {
    out += fmt::format("Training {} tokens{}.\n", GroupThousands(std::llround(req.tokens)),
                       prices.empty() ? "" : fmt::format("; per GPU-hour: {}", prices));
  }
  for (const std::string& note : notes) out += NoteText(note);
  int64_t examined = 0;
  for (const SweepPoint& p : res.points) examined += p.examined;
  out += fmt::format("Searched {} points ({} configurations) in {:.1f} s on {} thread{}.\n\n",
                     res.points.size(), GroupThousands(examined), res.total_s, req.threads,
                     req.threads == 1 ? "" : "s");
  out += SweepTable(req, res);
  out += ParetoLegend(ParetoAxes(req, res)) + "\n";
  out +=
      "scaling: tokens/s per GPU against the fewest GPUs of the same cluster, precision and "
      "batch with a plan\n";
  if (std::any_of(res.points.begin(), res.points.end(), LowHeadroom)) {
    out += fmt::format(
        "!: less memory free than the memory model's error ({:.1f}%): the plan may not fit; "
        "--memory-headroom {:.0f}% keeps a margin\n",
        100 * kMemoryModelError, std::ceil(100 * kMemoryModelError));
  }
  const std::string below = PointNotes(req, res);
  if (!below.empty()) out += "\n" + below;
  return out;
}

std::string Json(double value) { return JsonNumber(value); }

std::string PlanMembers(const RankedPlan& r) {
  return fmt::format("{{{}}}", LayoutJsonMembers(r.plan));
}

std::string PointJson(const SweepRequest& req, const SweepPoint& p) {
  const bool plan = p.best.has_value();
  auto figure = [plan](double v) { return plan ? Json(v) : std::string("null"); };
  const bool trained = plan && req.tokens > 0;
  return fmt::format(
      "{{\"cluster\": {}, \"precision\": \"{}\", \"gpus\": {}, \"global_batch\": {}, "
      "\"batch_rule\": {}, \"batch_note\": {}, \"problem\": {}, \"examined\": {}, \"valid\": {}, "
      "\"fits\": {}, \"search_s\": {},\n   \"plan\": {},\n   \"step_time_s\": {}, "
      "\"tokens_per_s\": {}, \"tokens_per_s_per_gpu\": {}, \"mfu\": {}, \"peak_memory_bytes\": "
      "{}, \"headroom\": {}, \"time_to_train_s\": {}, \"gpu_hours\": {}, \"cost_usd\": {}, "
      "\"scaling_efficiency\": {}, \"pareto\": {}}}",
      JsonString(p.cluster), Name(p.precision), p.gpus, p.global_batch,
      JsonString(req.batches[p.batch_rule].Text()), JsonString(p.batch_note), JsonString(p.problem),
      p.examined, p.valid, p.fits, Json(p.search_s), plan ? PlanMembers(*p.best) : "null",
      figure(plan ? p.best->report.step_time_s : 0), figure(p.tokens_per_s),
      figure(p.tokens_per_s_per_gpu), figure(p.mfu), figure(p.peak_memory_bytes),
      figure(p.headroom), trained ? Json(p.time_to_train_s) : "null",
      trained ? Json(p.gpu_hours) : "null", trained && p.cost_usd ? Json(*p.cost_usd) : "null",
      figure(p.scaling_efficiency), p.pareto);
}

std::string SweepJson(const SweepRequest& req, const SweepResult& res) {
  static constexpr std::string_view kAxes[] = {"time_to_train_s,cost_usd",
                                               "time_to_train_s,gpu_hours", "tokens_per_s,gpus"};
  std::string out =
      fmt::format("{{\"model\": {}, \"tokens\": {}, \"clusters\": [", JsonString(req.model.name),
                  req.tokens > 0 ? Json(req.tokens) : "null");
  for (size_t i = 0; i < req.clusters.size(); ++i) {
    const ClusterSpec& c = req.clusters[i];
    const auto price = req.price_per_gpu_hour.find(c.name);
    out += fmt::format("{}{{\"name\": {}, \"gpu\": {}, \"price_per_gpu_hour\": {}{}}}",
                       i ? ", " : "", JsonString(c.name), JsonString(c.gpu.name),
                       price != req.price_per_gpu_hour.end() ? Json(price->second) : "null",
                       ClusterOverridesJsonMember(c));
  }
  out += "],\n \"global_batches\": [";
  for (size_t i = 0; i < req.batches.size(); ++i) {
    out += (i ? ", " : "") + JsonString(req.batches[i].Text());
  }
  out += fmt::format("], \"pareto_of\": \"{}\", \"total_s\": {},\n \"points\": [",
                     kAxes[static_cast<int>(ParetoAxes(req, res))], Json(res.total_s));
  for (size_t i = 0; i < res.points.size(); ++i) {
    out += (i ? ",\n  " : "\n  ") + PointJson(req, res.points[i]);
  }
  return out + "\n]}\n";
}

// RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes doubled.
std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (const char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string SweepCsv(const SweepRequest& req, const SweepResult& res) {
  std::string out =
      "cluster,precision,gpus,global_batch,batch_rule,layout,micro_batch,schedule,step_time_s,"
      "tokens_per_s,tokens_per_s_per_gpu,mfu,peak_memory_bytes,headroom,time_to_train_s,"
      "gpu_hours,cost_usd,scaling_efficiency,pareto,note\n";
  for (const SweepPoint& p : res.points) {
    std::string note = p.batch_note;
    if (!p.problem.empty()) note += (note.empty() ? "" : "; ") + p.problem;
    // The header's 20 columns; a point without a plan leaves the plan's empty.
    std::vector<std::string> cells(20);
    cells[0] = CsvField(p.cluster);
    cells[1] = Name(p.precision);
    cells[2] = std::to_string(p.gpus);
    cells[3] = std::to_string(p.global_batch);
    cells[4] = CsvField(req.batches[p.batch_rule].Text());
    cells[18] = p.pareto ? "1" : "0";
    cells[19] = CsvField(note);
    if (p.best) {
      const ParallelConfig& c = p.best->plan.parallel;
      cells[5] = CsvField(SizesText(c));
      cells[6] = std::to_string(c.micro_batch_size);
      cells[7] = c.schedule == Schedule::kInterleaved
                     ? fmt::format("interleaved v={}", c.virtual_stages)
                     : std::string(Name(c.schedule));
      cells[8] = Json(p.best->report.step_time_s);
      cells[9] = Json(p.tokens_per_s);
      cells[10] = Json(p.tokens_per_s_per_gpu);
      cells[11] = Json(p.mfu);
      cells[12] = Json(p.peak_memory_bytes);
      cells[13] = Json(p.headroom);
      if (req.tokens > 0) {
        cells[14] = Json(p.time_to_train_s);
        cells[15] = Json(p.gpu_hours);
        if (p.cost_usd) cells[16] = Json(*p.cost_usd);
      }
      cells[17] = Json(p.scaling_efficiency);
    }
    for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
    out += "\n";
  }
  return out;
}

SweepResult TimedSweep(SweepRequest& req, std::ostream& err) {
  ProgressLine progress(err, "ptdp sweep");
  size_t done = 0;
  const size_t total =
      req.clusters.size() * req.trainings.size() * req.batches.size() * req.gpu_counts.size();
  req.progress = [&](size_t d, size_t) {
    done = d;
    progress.Update(fmt::format("{} of {} points done", done, total));
  };
  req.search_progress = [&](int64_t valid, int64_t simulated) {
    progress.Update(fmt::format("point {} of {}: {} layouts pass Megatron-LM's rules, {} simulated",
                                std::min(done + 1, total), total, GroupThousands(valid),
                                GroupThousands(simulated)));
  };
  SweepResult res = RunSweep(req);
  req.progress = {};
  req.search_progress = {};
  return res;
}

int RunSweepCommand(const Flags& flags, std::ostream& out, std::ostream& err) {
  std::vector<std::string> notes, typed_clusters;
  SweepRequest req = ReadRequest(flags, notes, typed_clusters);
  const Format format = flags.Enum("format", kFormats, Format::kTable);
  if (format != Format::kTable) {
    for (const std::string& note : notes) err << "ptdp: note: " << note << "\n";
  }
  const SweepResult res = TimedSweep(req, err);
  std::vector<OutputFile> files;
  if (auto path = flags.OptionalString("svg"))
    files.push_back({*path, SweepSvg(req, res), "--svg"});
  if (auto path = flags.OptionalString("html")) {
    files.push_back({*path, SweepReportHtml(req, res), "--html"});
  }
  WriteOutputFiles(files);
  switch (format) {
    case Format::kJson:
      out << SweepJson(req, res);
      break;
    case Format::kCsv:
      out << SweepCsv(req, res);
      break;
    case Format::kTable:
      out << SweepText(req, res, notes);
      for (const OutputFile& f : files) {
        out << fmt::format("Wrote the {} to {}\n", f.flag == "--svg" ? "charts" : "report", f.path);
      }
      break;
  }
  const bool any = std::any_of(res.points.begin(), res.points.end(),
                               [](const SweepPoint& p) { return p.best.has_value(); });
  if (!any) {
    err << "ptdp: no point of the sweep has a plan that satisfies Megatron-LM's rules and fits in "
           "memory\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

const Command kSweepCommand{
    .name = "sweep",
    .summary =
        "the best plan at every point of a grid of clusters, GPU counts, batches and "
        "precisions: days, GPU-hours and cost to train",
    .usage =
        "ptdp sweep --model M --cluster C1,C2 --gpus 512:16384:x2 [--global-batch B[@G]]\n"
        "                  [--precision bf16,fp8] [--tokens 15T] [--price C1=USD]\n"
        "                  [--format table|json|csv] [--svg FILE] [--html FILE]",
    .description =
        "Runs `ptdp plan`'s exact search at every point of a grid: each cluster, precision, "
        "global batch\nand GPU count. Each point's best plan is the one `ptdp plan` prints as "
        "Megatron-LM flags for the\nsame inputs. With --tokens it says how long training that "
        "many tokens takes there, the GPU-hours,\nand with --price the cost; the scaling "
        "efficiency compares tokens/s per GPU with the fewest GPUs\nof the same series, and the "
        "Pareto front marks the points that no other beats on both time and\ncost (GPU-hours "
        "without prices). A point without a valid plan says what blocked it; fp8 on a GPU\n"
        "without FP8 units is skipped. ptdp models the step time, not convergence: a scaled "
        "batch far\nfrom the reference is noted, its effect on the tokens needed is not "
        "modelled. Exits 1 when no\npoint has a plan.",
    .examples =
        "ptdp sweep --model llama3-405b --cluster dgx-h100,hgx-h200 --gpus 512:16384:x2 "
        "--global-batch 2048 --tokens 15T --price dgx-h100=2.5 --price hgx-h200=3.5\n"
        "ptdp sweep --model llama3-70b --cluster dgx-h100 --gpus 64,128,256,512 "
        "--global-batch 512@64 --precision bf16,fp8 --format csv\n"
        "ptdp sweep --model llama3-8b --cluster hgx-h200 --gpus 8:64:+8 --global-batch 256 "
        "--tokens 2T --html sweep.html",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddSweepOptions,
    .run = RunSweepCommand,
};

}  // namespace ptdp::cli
