// `ptdp sweep`: the exact search (planner.h SearchPlans) at every point of a grid of clusters,
// precisions, GPU counts and global batches; per point its best plan, what it sustains, and what
// training a token budget on it takes (days, GPU-hours, money). Answers "how many GPUs, which
// GPUs, how long, how much" where `ptdp plan` answers one layout question.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/training_spec.h"
#include "planner/planner.h"
#include "planner/space.h"

namespace ptdp {

// The global batch at each point: one fixed size, or a size scaled linearly with the GPU
// count from a reference point (`sequences` at `at_gpus` GPUs), rounded to a whole number of
// sequences that is a multiple of `multiple_of` (1: any).
struct SweepBatch {
  int64_t sequences = 0;
  int64_t at_gpus = 0;  // 0: fixed
  int64_t multiple_of = 1;

  int64_t At(int64_t gpus) const;  // the batch at `gpus` GPUs (at least multiple_of)
  std::string Text() const;        // "2,048", or "2,048@512" when scaled
};

struct SweepRequest {
  ModelSpec model;
  // One entry per cluster, overrides (--cluster-set) already applied; `name` keys prices.
  std::vector<ClusterSpec> clusters;
  std::vector<int64_t> gpu_counts;      // ascending, no duplicates
  std::vector<TrainingSpec> trainings;  // one per precision; global_batch_size set per point
  std::vector<SweepBatch> batches;      // at least one
  double tokens = 0;                    // tokens to train (--tokens); 0: no time to train
  std::map<std::string, double> price_per_gpu_hour;  // by cluster name, USD (--price)
  SearchConstraints constraints = {};
  CostOptions options = {};
  bool recommend_overlap = true;  // PlanRequest::recommend_overlap (off: --no-overlap)
  double memory_headroom = 0;
  int threads = 1;  // each point's search (PlanRequest::threads)
  // Called after each point with the points done and the total, for a progress line; may throw
  // to stop (cli::Interrupted), as PlanRequest::progress.
  std::function<void(size_t done, size_t total)> progress = {};
  // Passed to each point's search as PlanRequest::progress.
  std::function<void(int64_t valid, int64_t simulated)> search_progress = {};
  MemoryUnit memory_unit = MemoryUnit::kGiB;
};

struct SweepPoint {
  // Where: the cluster (its profile name), precision, GPUs, global batch.
  std::string cluster;
  Precision precision = Precision::kBf16;
  int64_t gpus = 0;
  int64_t global_batch = 0;
  size_t batch_rule = 0;  // the index of its SweepRequest::batches entry
  // A warning for this point ("" if none), for a scaled batch only: it was rounded, or it is
  // beyond 4x or below 1/4 of the reference it was scaled from (ModelSpec holds no training
  // batch, so the reference stands for the one the model was tuned with). ptdp does not model
  // convergence, and the note says so.
  std::string batch_note = {};
  // The best plan Megatron-LM runs (planner.h BestRunnable); none when no layout is valid or
  // fits (then `problem` says why, from UnblockHints' first hint).
  std::optional<RankedPlan> best = {};
  // BestRunnable's rank of `best`: 1 and up in the ranking, 0 found by a second search without
  // zb-h1, -1 a zb-h1 plan (no plan Megatron-LM runs was found).
  int best_rank = 0;
  std::string problem = {};
  // Search figures (as `ptdp plan` prints them).
  int64_t examined = 0, valid = 0, fits = 0;
  double search_s = 0;
  // Figures of the best plan (0 without one): tokens/s of the whole cluster and per GPU, MFU,
  // peak memory and what it leaves free of the GPU's memory (fraction).
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double peak_memory_bytes = 0;
  double headroom = 0;
  // With SweepRequest::tokens: seconds to train them, GPU-hours, and USD when the cluster has a
  // price (nullopt otherwise).
  double time_to_train_s = 0;
  double gpu_hours = 0;
  std::optional<double> cost_usd = {};
  // Tokens/s per GPU divided by that of the smallest GPU count of the same cluster, precision
  // and batch rule that has a plan (1 there; 0 without a plan).
  double scaling_efficiency = 0;
  // On the Pareto front over every point with a plan (SweepPareto says of what): no other point
  // is at least as good in both and better in one.
  bool pareto = false;
};

struct SweepResult {
  std::vector<SweepPoint> points;  // in order: cluster, precision, batch rule, GPU count
  double total_s = 0;
};

// Every point, in order. A point that cannot run is a point with a `problem`, not an error:
// fp8 on a GPU without FP8 units ("no FP8 units on <gpu>"), a global batch beyond
// kMaxGlobalBatch, or a search with no valid plan (UnblockHints' first hint). Each point's best
// is what `ptdp plan` recommends for the same inputs ("Best plan as Megatron-LM flags").
SweepResult RunSweep(const SweepRequest& request);

// What the Pareto front is of: with tokens, time to train against cost when every point with a
// plan has a price, else against GPU-hours; without tokens, 1 / tokens/s against the GPU count.
enum class SweepPareto { kTimeCost, kTimeGpuHours, kThroughputGpus };
SweepPareto ParetoAxes(const SweepRequest& request, const SweepResult& result);

// The command line's values, read; each mistake is an InputError naming `flag`.
//
// GPU counts: a list ("512,1024,2048", sorted, duplicates dropped) or a range
// "START:STOP:xFACTOR" (512:16384:x2, an integer factor of at least 2) or "START:STOP:+STEP"
// (1024:4096:+1024), STOP included when the steps reach it; at most kMaxSweepGpuCounts counts,
// each at most kMaxGpus.
inline constexpr size_t kMaxSweepGpuCounts = 64;
std::vector<int64_t> ParseGpuCounts(std::string_view text, std::string_view flag = "--gpus");
// Global batches: a comma list of "B" (fixed) or "B@G" (B sequences at G GPUs, scaled linearly
// with the GPU count).
std::vector<SweepBatch> ParseSweepBatches(std::string_view text,
                                          std::string_view flag = "--global-batch");
// A token count: a number (15000000000000, 1.5e13) with an optional suffix K, M, G or B, T
// (powers of 1000; either case); positive, at most 1e18.
double ParseTokenCount(std::string_view text, std::string_view flag = "--tokens");
// "CLUSTER=USD" (USD per GPU-hour, a positive number) into (CLUSTER, USD).
std::pair<std::string, double> ParsePrice(std::string_view text, std::string_view flag = "--price");

}  // namespace ptdp
