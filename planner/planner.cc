#include "planner/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "core/limits.h"
#include "core/schedule.h"
#include "core/text.h"
#include "megatron/rules.h"
#include "megatron/write_flags.h"
#include "simulator/cost_model.h"
#include "simulator/layer_work.h"
#include "simulator/memory_model.h"

namespace ptdp {
namespace {

auto ConfigKey(const ParallelConfig& p) {
  return std::make_tuple(p.tp, p.cp, static_cast<int>(p.cp_comm), p.ep, p.etp, p.pp, p.dp,
                         p.micro_batch_size, static_cast<int>(p.schedule), p.virtual_stages,
                         p.sequence_parallel, static_cast<int>(p.recompute),
                         p.distributed_optimizer, static_cast<int>(p.fsdp), p.first_stage_layers,
                         p.last_stage_layers, p.account_for_embedding, p.account_for_loss,
                         p.recompute_num_layers, p.recompute_modules);
}

// Best first: step time, then memory, then a fixed order of the knobs (so ties are stable).
bool Better(const RankedPlan& a, const RankedPlan& b) {
  if (a.report.step_time_s != b.report.step_time_s) {
    return a.report.step_time_s < b.report.step_time_s;
  }
  if (a.report.peak_memory_bytes != b.report.peak_memory_bytes) {
    return a.report.peak_memory_bytes < b.report.peak_memory_bytes;
  }
  return ConfigKey(a.plan.parallel) < ConfigKey(b.plan.parallel);
}

// In-flight micro-batch chunks per stage depend only on (schedule, p, m, v): computed once (by
// core MaxInFlight's closed form, which agrees with the generated schedules).
class InFlightCache {
 public:
  const std::vector<int>& Get(Schedule kind, int p, int64_t m, int v) {
    const auto key = std::make_tuple(static_cast<int>(kind), p, m, v);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      std::vector<int> held(p);
      for (int r = 0; r < p; ++r) held[r] = MaxInFlight(kind, p, static_cast<int>(m), v, r);
      it = cache_.emplace(key, std::move(held)).first;
    }
    return it->second;
  }

 private:
  std::map<std::tuple<int, int, int64_t, int>, std::vector<int>> cache_;
};

std::string OutOfMemory(const CandidatePoint& c, const MemoryPeak& mem, double limit,
                        MemoryUnit unit) {
  return fmt::format("{}: stage {} needs {}, {} available", Describe(c.parallel), mem.stage,
                     Memory(mem.peak_bytes(), unit), Memory(limit, unit));
}

// A lower bound on a layout's peak memory per GPU from its parameters alone, for transformers
// (0 for a hybrid model: no bound): the largest stage holds at least the mean of the stages'
// weights, gradients and optimizer state, plus the profile's reserved bytes (activations,
// buffers, fragmentation, the embedding and output parts, FP8's weight copies only add: those
// copies take 2 bytes per FP8 weight, or replace its 16-bit weight, never less). Layer
// parameters are kept by (tp, ep, etp).
class MemoryLowerBound {
 public:
  double operator()(const ModelSpec& m, const ClusterSpec& c, const TrainingSpec& t,
                    const ParallelConfig& p, const CostOptions& o) {
    if (m.hybrid()) return 0;
    const auto key = std::make_tuple(p.tp, p.ep, p.expert_tp());
    auto it = layers_.find(key);
    if (it == layers_.end()) {
      const double moe_layers = m.NumMoeLayers(), dense_layers = m.num_layers - moe_layers;
      const LayerParams dense = LayerKindParams(m, p, LayerKind::kTransformer);
      const LayerParams moe =
          moe_layers > 0 ? LayerKindParams(m, p, LayerKind::kMoeTransformer) : LayerParams{};
      it = layers_
               .emplace(key, std::pair{dense_layers * dense.dense + moe_layers * moe.dense,
                                       moe_layers * moe.experts})
               .first;
    }
    const auto [dense, experts] = it->second;
    double bytes = dense * BytesPerParam(t, p, o).total();
    if (experts > 0) bytes += experts * BytesPerParam(t, p, o, p.expert_dp()).total();
    return bytes / p.pp + static_cast<double>(c.gpu.reserved_bytes);
  }

 private:
  std::map<std::tuple<int, int, int>, std::pair<double, double>> layers_;
};

}  // namespace

CostOptions PlanOptions(const PlanRequest& request, const ParallelConfig& parallel) {
  CostOptions o = request.options;
  if (request.recommend_overlap && o.stack == SoftwareStack::kCore) {
    o.overlap_grad_reduce = true;
    o.overlap_param_gather =
        o.overlap_param_gather || (parallel.distributed_optimizer && parallel.fsdp == Fsdp::kNone);
  }
  if (request.recommend_overlap && o.stack == SoftwareStack::kCore && request.model.moe() &&
      parallel.ep > 1 && o.moe_token_dispatcher == MoeDispatcher::kAllGather) {
    // With experts spread over ranks the all-to-all dispatcher moves k copies of each token
    // instead of every token of the group (Megatron-Bridge's MoE recipes use it).
    o.moe_token_dispatcher = MoeDispatcher::kAllToAll;
  }
  if (o.overlap_param_gather && !parallel.distributed_optimizer) o.overlap_param_gather = false;
  if (o.tp_comm_overlap && !(parallel.sequence_parallel && parallel.tp > 1)) {
    o.tp_comm_overlap = false;
  }
  return o;
}

Plan MakePlan(const PlanRequest& request, const ParallelConfig& parallel) {
  return Plan{.model = request.model,
              .cluster = request.cluster,
              .num_gpus = request.gpus,
              .training = request.training,
              .parallel = parallel,
              .options = PlanOptions(request, parallel)};
}

namespace {

// The valid candidates (EnumerateConfigs) screened by memory, the search's counts into `res`:
// each candidate's largest stage (one that does not fit is counted out of memory, the closest
// miss kept); for those that fit, or with keep_points for all, the step time's lower bound.
// Returns those that fit.
std::vector<CandidatePoint> ScreenCandidates(const PlanRequest& req, double limit,
                                             PlanSearchResult& res) {
  InFlightCache in_flight;
  LayerCostCache layer_costs;
  std::optional<std::pair<ParallelConfig, MemoryPeak>> last_memory;
  std::vector<CandidatePoint> fitting;
  double closest_ratio = std::numeric_limits<double>::infinity();
  // Counted here and added once (the first example met), not per candidate.
  int64_t out_of_memory = 0;
  std::string out_of_memory_example;
  MemoryLowerBound lower_bound;
  // Layouts whose step is too long a schedule to simulate (core/limits.h kMaxPipelineOps).
  int64_t too_long = 0;
  std::string too_long_example;

  res.examined = EnumerateConfigs(
      req.model, req.training, req.gpus, req.constraints, res.rejected,
      [&](const ParallelConfig& p) {
        if ((++res.valid & 0x3fff) == 0 && req.progress) req.progress(res.valid, 0);
        const CostOptions options = PlanOptions(req, p);
        // Memory first: most candidates of a large search do not fit, and they need no time.
        const int64_t m = NumMicrobatches(req.training, p);
        if (int64_t{p.pp} * m * p.virtual_stages > kMaxPipelineOps) {
          if (too_long++ == 0) {
            too_long_example =
                fmt::format("{}: {}", Describe(p), ScheduleSizeProblem(p.pp, m, p.virtual_stages));
          }
          return;
        }
        const std::vector<int>& held = in_flight.Get(p.schedule, p.pp, m, p.virtual_stages);
        // A layout that cannot fit by its parameters alone needs no estimate, unless it is the
        // first out of memory (its example), could be the closest to fitting, or every point is
        // kept: it is counted as out of memory all the same.
        if (!req.keep_points && out_of_memory > 0) {
          const double bound = lower_bound(req.model, req.cluster, req.training, p, options);
          if (bound > limit && bound / limit >= closest_ratio) {
            ++out_of_memory;
            return;
          }
        }
        // The exchange of context parallelism changes no memory: the layouts that differ in it
        // alone (enumerated one after the other) share one estimate.
        ParallelConfig memory_key = p;
        memory_key.cp_comm = CpComm::kP2p;
        if (!last_memory || last_memory->first != memory_key) {
          last_memory.emplace(memory_key, EstimatePeakMemory(req.model, req.cluster, req.training,
                                                             p, held, options));
        }
        const MemoryPeak& mem = last_memory->second;
        CandidatePoint point{p, 0, mem.peak_bytes(), mem.peak_bytes() <= limit};
        if (point.fits || req.keep_points) {
          point.step_lower_bound_s =
              EstimateStepLowerBound(req.model, req.cluster, req.training, p, options, layer_costs);
        }
        if (req.keep_points) res.points.push_back(point);
        if (point.fits) {
          fitting.push_back(point);
          return;
        }
        if (out_of_memory++ == 0)
          out_of_memory_example = OutOfMemory(point, mem, limit, req.memory_unit);
        if (point.peak_memory_bytes / limit < closest_ratio) {
          closest_ratio = point.peak_memory_bytes / limit;
          res.closest_out_of_memory = point;
          res.closest_out_of_memory_problem = OutOfMemory(point, mem, limit, req.memory_unit);
        }
      },
      req.options);
  if (out_of_memory > 0) {
    res.rejected.Add(
        "out-of-memory", [&] { return out_of_memory_example; }, out_of_memory);
  }
  if (too_long > 0) {
    res.rejected.Add(
        "schedule-too-long", [&] { return too_long_example; }, too_long);
  }
  return fitting;
}

// The reference layout, simulated on its own (it may be outside the constraints), into
// res.reference. Returns its step time, or -1 when it is not a valid plan or does not fit.
double SimulateReference(const PlanRequest& req, double limit, PlanSearchResult& res) {
  if (!req.reference) return -1;
  double reference_time = -1;
  ReferenceResult ref{.parallel = *req.reference};
  const std::vector<Violation> v =
      CheckParallelConfig(req.model, req.training, *req.reference, req.gpus,
                          req.reference_options ? *req.reference_options : req.options);
  const std::string too_long =
      v.empty()
          ? ScheduleSizeProblem(req.reference->pp, NumMicrobatches(req.training, *req.reference),
                                req.reference->virtual_stages)
          : "";
  if (!v.empty()) {
    ref.problem = v.front().message;
  } else if (!too_long.empty()) {
    ref.problem = too_long;
  } else {
    RankedPlan r{MakePlan(req, *req.reference), {}};
    if (req.reference_options) r.plan.options = *req.reference_options;
    r.report = SimulatePlan(r.plan);
    ++res.simulated;
    if (r.report.peak_memory_bytes > limit) {
      ref.problem = fmt::format(
          "stage {} needs {}, {} available{}", r.report.memory.largest_stage,
          Memory(r.report.peak_memory_bytes, req.memory_unit), Memory(limit, req.memory_unit),
          r.report.memory.stages.empty()
              ? ""
              : AllocatorSurplusNote(r.report.memory.stages[r.report.memory.largest_stage], limit,
                                     req.memory_unit));
    } else {
      reference_time = r.report.step_time_s;
    }
    ref.simulated = std::move(r);
  }
  res.reference = std::move(ref);
  return reference_time;
}

// Branch and bound: simulate the fitting candidates in order of the bound; stop when nothing
// later can enter the top K (or beat the reference, at `reference_time`, whose rank must be
// exact). The ranked plans and the reference's rank into `res`.
void RankPlans(const PlanRequest& req, std::vector<CandidatePoint> fitting, double reference_time,
               PlanSearchResult& res) {
  std::sort(fitting.begin(), fitting.end(), [](const CandidatePoint& a, const CandidatePoint& b) {
    return a.step_lower_bound_s < b.step_lower_bound_s;
  });
  std::vector<RankedPlan> top;
  int64_t faster_than_reference = 0;
  for (const CandidatePoint& c : fitting) {
    const double kth = static_cast<int>(top.size()) < req.top_k
                           ? std::numeric_limits<double>::infinity()
                           : top.back().report.step_time_s;
    // The bound equals the simulation for uniform stages up to rounding (it can exceed it by an
    // ulp or so): stop only clearly above, so that a tie is still simulated and ranked.
    constexpr double kRounding = 1e-9;
    if (c.step_lower_bound_s > kth * (1 + kRounding) &&
        c.step_lower_bound_s > reference_time * (1 + kRounding)) {
      break;
    }
    RankedPlan r{MakePlan(req, c.parallel), {}};
    r.report = SimulatePlan(r.plan);
    ++res.simulated;
    if (req.progress) req.progress(res.valid, res.simulated);
    if (res.reference && res.reference->simulated && reference_time >= 0) {
      if (ConfigKey(c.parallel) != ConfigKey(*req.reference) &&
          Better(r, *res.reference->simulated)) {
        ++faster_than_reference;
      }
    }
    if (r.report.step_time_s <= kth) {
      top.insert(std::upper_bound(top.begin(), top.end(), r, Better), std::move(r));
      if (static_cast<int>(top.size()) > req.top_k) top.pop_back();
    }
  }
  if (res.reference && reference_time >= 0) res.reference->rank = faster_than_reference + 1;
  res.plans = std::move(top);
}

}  // namespace

PlanSearchResult SearchPlans(const PlanRequest& req) {
  PlanSearchResult res;
  const double limit = static_cast<double>(req.cluster.gpu.hbm_bytes) * (1.0 - req.memory_headroom);
  res.memory_limit_bytes = limit;
  std::vector<CandidatePoint> fitting = ScreenCandidates(req, limit, res);
  res.fits = static_cast<int64_t>(fitting.size());
  const double reference_time = SimulateReference(req, limit, res);
  RankPlans(req, std::move(fitting), reference_time, res);
  return res;
}

std::vector<RankedPlan> BruteForcePlans(const PlanRequest& req) {
  const double limit = static_cast<double>(req.cluster.gpu.hbm_bytes) * (1.0 - req.memory_headroom);
  std::vector<RankedPlan> all;
  Rejections ignored;
  EnumerateConfigs(
      req.model, req.training, req.gpus, req.constraints, ignored,
      [&](const ParallelConfig& p) {
        RankedPlan r{MakePlan(req, p), {}};
        r.report = SimulatePlan(r.plan);
        if (r.report.peak_memory_bytes <= limit) all.push_back(std::move(r));
      },
      req.options);
  std::sort(all.begin(), all.end(), Better);
  if (static_cast<int>(all.size()) > req.top_k) all.resize(req.top_k);
  return all;
}

RunnablePlan BestRunnable(const PlanRequest& req, const PlanSearchResult& res) {
  PTDP_CHECK(!res.plans.empty());
  for (size_t i = 0; i < res.plans.size(); ++i) {
    if (RunsInMegatron(res.plans[i].plan.parallel)) return {res.plans[i], static_cast<int>(i + 1)};
  }
  PlanRequest runnable = req;
  std::erase(runnable.constraints.schedules, Schedule::kZbH1);
  runnable.top_k = 1;
  runnable.reference.reset();
  runnable.keep_points = false;
  const PlanSearchResult again = SearchPlans(runnable);
  if (again.plans.empty()) return {res.plans.front(), -1};
  return {again.plans.front(), 0};
}

std::string CheckpointFormatNote(const Plan& recommended, std::string_view current,
                                 std::string_view keep) {
  const std::vector<std::string> args = MegatronArgs(recommended);
  const auto flag = std::find(args.begin(), args.end(), "--ckpt-format");
  if (flag == args.end() || flag + 1 == args.end() || *(flag + 1) == current) return "";
  const std::string& format = *(flag + 1);
  return fmt::format(
      "these flags save checkpoints as {}{}, not {}: checkpoints of one format do not load into a "
      "run of the other{}",
      format, recommended.parallel.fsdp != Fsdp::kNone ? " (Megatron-FSDP needs it)" : "", current,
      keep.empty() ? "" : fmt::format("; {}", keep));
}

std::string LowHeadroomNote(const Plan& recommended, const SimulationReport& report,
                            MemoryUnit unit) {
  const double hbm = static_cast<double>(recommended.cluster.gpu.hbm_bytes);
  const double free = hbm - report.peak_memory_bytes;
  if (free >= kMemoryModelError * hbm) return "";
  return fmt::format(
      "this plan leaves {} of {} free ({:.1f}%), less than the memory model's error (peak "
      "allocated memory within {:.1f}% on average out of sample): it may not fit; "
      "--memory-headroom {:.0f}% ranks the plans that keep a margin",
      Memory(free, unit), Memory(hbm, unit), 100 * free / hbm, 100 * kMemoryModelError,
      std::ceil(100 * kMemoryModelError));
}

std::vector<std::string> UnblockHints(const PlanRequest& req, const PlanSearchResult& res) {
  std::vector<std::string> hints;
  if (!res.plans.empty()) return hints;
  if (res.examined == 0) {
    // Nothing to examine: the constraints leave no layout of this GPU count (tp=3 on 64 GPUs).
    hints.push_back(fmt::format(
        "no layout of {} GPUs meets the constraints (--fix, --max-*): tp x pp x cp must divide "
        "the GPU count; relax them",
        req.gpus));
    return hints;
  }
  if (res.valid == 0) {
    std::string worst;
    int64_t most = -1;
    for (const auto& [reason, count] : res.rejected.counts) {
      if (count > most) most = count, worst = reason;
    }
    hints.push_back(fmt::format(
        "every layout breaks a Megatron-LM rule; the commonest is {} ({} candidates), e.g. {}",
        worst, most, res.rejected.examples.at(worst)));
    if (res.rejected.counts.count("global-batch-divisible")) {
      hints.push_back(
          "choose a global batch that is a multiple of the data-parallel sizes "
          "(a multiple of the GPU count always works)");
    }
    if (res.rejected.counts.count("heads-divisible-by-tp") ||
        res.rejected.counts.count("layers-divisible-by-pp")) {
      hints.push_back(fmt::format(
          "choose a GPU count whose divisors fit the model ({} heads, {} layers), e.g. a power "
          "of two",
          req.model.num_attention_heads, req.model.num_layers));
    }
    hints.push_back("or loosen the --fix / --max-* constraints");
    return hints;
  }
  // Everything valid ran out of memory.
  const double ratio = res.closest_out_of_memory
                           ? res.closest_out_of_memory->peak_memory_bytes / res.memory_limit_bytes
                           : 1.0;
  hints.push_back(fmt::format("the closest layout needs {:.0f}% of the memory available: {}",
                              100 * ratio, res.closest_out_of_memory_problem));
  const auto& c = req.constraints;
  if (c.recomputes.size() < 3) {
    hints.push_back(
        "allow activation recompute (it was excluded); full recompute keeps one "
        "layer input per micro-batch");
  }
  if (c.distributed_optimizer == false) {
    hints.push_back("allow the distributed optimizer (it shards optimizer state over DP)");
  }
  // In doubles: the ratio of a model far beyond any cluster overflows an int64.
  const double node = static_cast<double>(req.cluster.gpus_per_node);
  const double more = std::ceil(static_cast<double>(req.gpus) * ratio / node) * node;
  if (more > static_cast<double>(kMaxGpus)) {
    hints.push_back(fmt::format(
        "more GPUs than ptdp plans for: about {:.2g} would be needed, and ptdp's limit is {}", more,
        GroupThousands(kMaxGpus)));
  } else if (more > static_cast<double>(req.gpus)) {
    hints.push_back(
        fmt::format("more GPUs: about {} (weights and optimizer state shrink with "
                    "the model-parallel size)",
                    static_cast<int64_t>(more)));
  }
  if (req.memory_headroom > 0) {
    hints.push_back(
        fmt::format("a smaller --memory-headroom (now {:.0f}%)", 100 * req.memory_headroom));
  }
  hints.push_back("a GPU with more memory (`ptdp profiles`), or a shorter --seq-length");
  return hints;
}

}  // namespace ptdp
