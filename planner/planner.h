// `ptdp plan`: search the whole space (space.h), keep what Megatron-LM accepts and what fits in
// memory, rank by simulated step time (ties: less memory), best first.
//
// Exact, and fast: every valid candidate gets the cost model (microseconds) and a lower bound on
// its simulated step time (simulator/bounds.h, sound and tight); candidates are then simulated
// in increasing order of their bound, and the search stops when the next bound exceeds the K-th
// best simulated time, since no later candidate can enter the top K. The result equals
// simulating every candidate (a test compares the two on spaces small enough to brute-force).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost_options.h"
#include "core/plan.h"
#include "core/text.h"
#include "planner/space.h"
#include "simulator/simulate.h"

namespace ptdp {

struct PlanRequest {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;
  int64_t gpus = 0;
  SearchConstraints constraints = {};
  CostOptions options = {};
  int top_k = 10;
  double memory_headroom = 0;  // fraction of the GPU's memory a plan must leave free
  // A layout to place in the ranking (the user's, the paper's); it need not pass the
  // constraints. Its rank is exact: every candidate that could beat it is simulated.
  std::optional<ParallelConfig> reference = {};
  // The software the reference runs with, when it is not PlanOptions' (a pasted command's own
  // flags).
  std::optional<CostOptions> reference_options = {};
  bool keep_points = false;  // record every candidate that fits, for charts
  // For the core stack: run every candidate with --overlap-grad-reduce, and with the
  // distributed optimizer --overlap-param-gather (Megatron-Core's recipes do; they only hide
  // communication). Off: exactly `options`.
  bool recommend_overlap = true;
  // Called now and then during the search, on the calling thread only (every 16,384 valid
  // candidates, some 20 ms of work, and with several threads every 50 ms while the calling thread
  // waits for the others; then once per simulation of the ranking phase) with the candidates that
  // passed the rules so far and the simulations run, for a progress line and for the caller to
  // stop the search by throwing (cli::Interrupted; every thread stops); the search does not
  // depend on it.
  std::function<void(int64_t valid, int64_t simulated)> progress = {};
  // The unit the messages (out-of-memory reasons) state memory in; the search does not depend
  // on it.
  MemoryUnit memory_unit = MemoryUnit::kGiB;
  // Threads the search runs on (>= 1). The result does not depend on it: the same plans, in the
  // same order, with the same counts and examples, bit for bit.
  int threads = 1;
};

struct RankedPlan {
  Plan plan;
  SimulationReport report;
};

// A candidate that passes Megatron's rules, with its cost-model figures (no event simulation).
struct CandidatePoint {
  ParallelConfig parallel;
  double step_lower_bound_s = 0;  // <= its simulated step time
  double peak_memory_bytes = 0;
  bool fits = false;
};

struct ReferenceResult {
  ParallelConfig parallel;
  std::string problem = {};  // why it is not a valid plan ("" if it is): a rule or the memory
  std::optional<RankedPlan> simulated = {};  // when it passes Megatron's rules
  int64_t rank = 0;  // 1-based among the valid plans that fit; 0 if it does not fit or is invalid
};

struct PlanSearchResult {
  std::vector<RankedPlan> plans;  // best first, at most top_k
  int64_t examined = 0;           // candidates looked at (valid + rejected by a rule)
  int64_t valid = 0;              // passed Megatron's rules
  int64_t fits = 0;               // and fit in memory: the plans ranked
  int64_t simulated = 0;          // event simulations run
  // Per rule; and of the valid, "out-of-memory" and "schedule-too-long" (a step of more than
  // kMaxPipelineOps stages x micro-batches x chunks, core/limits.h, too long to simulate).
  Rejections rejected;
  // The candidate rejected for memory that came closest to fitting.
  std::optional<CandidatePoint> closest_out_of_memory;
  std::string closest_out_of_memory_problem;
  std::optional<ReferenceResult> reference;
  std::vector<CandidatePoint> points;  // every valid candidate, when keep_points
  double memory_limit_bytes = 0;       // the GPU's memory minus the headroom
};

PlanSearchResult SearchPlans(const PlanRequest& request);

// The plan whose Megatron-LM flags a report prints: the best that Megatron-LM runs
// (RunsInMegatron), the first of the ranking that it runs (`rank`, 1-based), or, when
// zero-bubble schedules took every place, the best of the same search without them (rank 0;
// that search calls `request.progress`); with none of those either, the ranking's first (rank
// -1). `result` must hold a plan.
struct RunnablePlan {
  RankedPlan plan;
  int rank = 0;
};
RunnablePlan BestRunnable(const PlanRequest& request, const PlanSearchResult& result);

// Megatron-LM's default --ckpt-format.
inline constexpr std::string_view kDefaultCheckpointFormat = "torch_dist";

// When `recommended`'s flags set a --ckpt-format other than `current` (the user's command's, or
// Megatron-LM's default): that checkpoints of one format do not load into a run of the other
// (Megatron-FSDP writes fsdp_dtensor); "" otherwise. `keep` says how to keep the format ("" for
// nothing).
std::string CheckpointFormatNote(const Plan& recommended, std::string_view current,
                                 std::string_view keep);

// The peak allocated memory's mean error out of sample (Megatron-LM's functional tests on H100,
// results/validation/megatron-functional-tests/README.md: 5.3%): a plan that leaves less free
// may not fit.
inline constexpr double kMemoryModelError = 0.053;

// When `recommended` leaves less of the GPU's memory free than kMemoryModelError: how much it
// leaves, and that --memory-headroom keeps a margin; "" otherwise.
std::string LowHeadroomNote(const Plan& recommended, const SimulationReport& report,
                            MemoryUnit unit);

// The same ranking by simulating every valid candidate (for tests of SearchPlans; slow).
std::vector<RankedPlan> BruteForcePlans(const PlanRequest& request);

// The software options a candidate runs with: the request's, with the overlaps recommended
// (recommend_overlap) and those the layout cannot use dropped (--overlap-param-gather without
// the distributed optimizer, --tp-comm-overlap without sequence parallelism).
CostOptions PlanOptions(const PlanRequest& request, const ParallelConfig& parallel);

// A plan for `parallel` under `request` (model, cluster, training, GPUs, PlanOptions).
Plan MakePlan(const PlanRequest& request, const ParallelConfig& parallel);

// What would make a search with no valid plan succeed, in words (more GPUs, recompute, another
// global batch, ...), from its rejections. Empty when there are plans.
std::vector<std::string> UnblockHints(const PlanRequest& request, const PlanSearchResult& result);

}  // namespace ptdp
