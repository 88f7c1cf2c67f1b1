#include "planner/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
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

// A layout out of memory, and its largest stage: what a message about it needs (formatted only
// for the one a search reports).
struct OutOfMemoryCase {
  CandidatePoint point;
  int stage = 0;
};

std::string OutOfMemory(const OutOfMemoryCase& c, double limit, MemoryUnit unit) {
  return fmt::format("{}: stage {} needs {}, {} available", Describe(c.point.parallel), c.stage,
                     Memory(c.point.peak_memory_bytes, unit), Memory(limit, unit));
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

// What screening one part of the space (ConfigSpace) found; the parts' findings are merged in
// their order, so that the result does not depend on which thread screened which part.
struct PartScreen {
  int64_t examined = 0;
  int64_t valid = 0;
  RuleTally broken;
  std::vector<CandidatePoint> fitting;
  std::vector<CandidatePoint> points;  // with keep_points
  // Out of memory: how many, the first met (unless an earlier part had one), and the closest to
  // fitting.
  int64_t out_of_memory = 0;
  std::optional<OutOfMemoryCase> first_out_of_memory;
  double closest_ratio = std::numeric_limits<double>::infinity();
  std::optional<OutOfMemoryCase> closest;
  // Layouts whose step is too long a schedule to simulate (core/limits.h kMaxPipelineOps).
  int64_t too_long = 0;
  std::string too_long_example;
};

// What the threads screening parts tell each other, to skip estimates no result needs: the part
// with the lowest index known to hold a layout out of memory (a later part's first example is
// not needed), and the least memory-over-limit ratio met in any part (a layout whose lower bound
// is above it cannot be the closest miss).
class ScreenHints {
 public:
  bool EarlierPartHasAnExample(size_t part) const { return first_out_of_memory_ < part; }
  bool CannotBeClosest(double bound_ratio) const { return bound_ratio > closest_ratio_; }

  void OutOfMemory(size_t part) {
    for (size_t at = first_out_of_memory_; part < at;) {
      if (first_out_of_memory_.compare_exchange_weak(at, part)) break;
    }
  }
  void Ratio(double ratio) {
    for (double at = closest_ratio_; ratio < at;) {
      if (closest_ratio_.compare_exchange_weak(at, ratio)) break;
    }
  }

 private:
  std::atomic<size_t> first_out_of_memory_{std::numeric_limits<size_t>::max()};
  std::atomic<double> closest_ratio_{std::numeric_limits<double>::infinity()};
};

// One thread's screening, with its caches (none is thread-safe; their answers do not depend on
// what they saw before).
class Screener {
 public:
  Screener(const PlanRequest& req, double limit, ScreenHints& hints)
      : req_(req), limit_(limit), hints_(hints) {}

  // Screens part `part` of `space` into `out`; `tick` is called after every valid candidate.
  void Screen(const ConfigSpace& space, size_t part, PartScreen& out,
              const std::function<void()>& tick) {
    part_ = part;
    out.examined = space.Walk(part, out.broken, [&](const ParallelConfig& p) {
      ++out.valid;
      Visit(p, out);
      tick();
    });
  }

 private:
  // Each candidate's largest stage (one that does not fit is counted out of memory, the closest
  // miss kept); for those that fit, or with keep_points for all, the step time's lower bound.
  void Visit(const ParallelConfig& p, PartScreen& out) {
    const PlanRequest& req = req_;
    const CostOptions options = PlanOptions(req, p);
    // Memory first: most candidates of a large search do not fit, and they need no time.
    const int64_t m = NumMicrobatches(req.training, p);
    if (int64_t{p.pp} * m * p.virtual_stages > kMaxPipelineOps) {
      if (out.too_long++ == 0) {
        out.too_long_example =
            fmt::format("{}: {}", Describe(p), ScheduleSizeProblem(p.pp, m, p.virtual_stages));
      }
      return;
    }
    const std::vector<int>& held = in_flight_.Get(p.schedule, p.pp, m, p.virtual_stages);
    // A layout that cannot fit by its parameters alone needs no estimate, unless it could be
    // the first out of memory (its example: the part's first, with no earlier part holding
    // one), could be the closest to fitting (of its part, and of every part: above another
    // part's closest it cannot be), or every point is kept: it is counted as out of memory all
    // the same.
    if (!req.keep_points && (out.out_of_memory > 0 || hints_.EarlierPartHasAnExample(part_))) {
      const double bound = lower_bound_(req.model, req.cluster, req.training, p, options);
      if (bound > limit_ &&
          (bound / limit_ >= out.closest_ratio || hints_.CannotBeClosest(bound / limit_))) {
        if (out.out_of_memory++ == 0) hints_.OutOfMemory(part_);
        return;
      }
    }
    // The exchange of context parallelism changes no memory: the layouts that differ in it
    // alone (enumerated one after the other) share one estimate.
    ParallelConfig memory_key = p;
    memory_key.cp_comm = CpComm::kP2p;
    if (!last_memory_ || last_memory_->first != memory_key) {
      last_memory_.emplace(
          memory_key, EstimatePeakMemory(req.model, req.cluster, req.training, p, held, options));
    }
    const MemoryPeak& mem = last_memory_->second;
    CandidatePoint point{p, 0, mem.peak_bytes(), mem.peak_bytes() <= limit_};
    if (point.fits || req.keep_points) {
      point.step_lower_bound_s =
          EstimateStepLowerBound(req.model, req.cluster, req.training, p, options, layer_costs_);
    }
    if (req.keep_points) out.points.push_back(point);
    if (point.fits) {
      out.fitting.push_back(point);
      return;
    }
    if (out.out_of_memory++ == 0 && !hints_.EarlierPartHasAnExample(part_)) {
      out.first_out_of_memory = OutOfMemoryCase{point, mem.stage};
      hints_.OutOfMemory(part_);
    }
    if (point.peak_memory_bytes / limit_ < out.closest_ratio) {
      out.closest_ratio = point.peak_memory_bytes / limit_;
      hints_.Ratio(out.closest_ratio);
      out.closest = OutOfMemoryCase{point, mem.stage};
    }
  }

  const PlanRequest& req_;
  double limit_;
  ScreenHints& hints_;
  size_t part_ = 0;
  InFlightCache in_flight_;
  LayerCostCache layer_costs_;
  MemoryLowerBound lower_bound_;
  std::optional<std::pair<ParallelConfig, MemoryPeak>> last_memory_;
};

// Thrown inside a walk to leave it when another thread failed or the caller stopped.
struct StopScreening {};

// Screens every part of `space` on req.threads threads (the calling thread one of them), into
// `parts` (by index). The calling thread alone calls req.progress: when the valid candidates
// (counted over all threads, in batches of 1,024) pass a multiple of 16,384 (on one thread: at
// each multiple), and every 50 ms once it has no part left to take. The first exception (the
// progress callback's, else the one of the lowest part) is rethrown once every thread has stopped.
void ScreenParts(const PlanRequest& req, double limit, const ConfigSpace& space,
                 std::vector<PartScreen>& parts) {
  parts.assign(space.parts(), PartScreen{});
  const int threads = std::clamp(req.threads, 1, std::max(1, static_cast<int>(parts.size())));
  std::atomic<size_t> next_part{0};
  std::atomic<int64_t> valid{0};
  std::atomic<bool> stop{false};
  ScreenHints hints;
  std::mutex mutex;  // guards what follows
  std::condition_variable finished;
  int running = 1;  // threads screening
  std::exception_ptr failure;
  size_t failure_rank = std::numeric_limits<size_t>::max();
  // Keeps the exception being handled if it ranks first (0: the progress callback's; part + 1).
  auto fail = [&](size_t rank) {
    const std::lock_guard lock(mutex);
    if (rank < failure_rank) failure = std::current_exception(), failure_rank = rank;
    stop = true;
  };
  auto progress = [&](int64_t total) {
    try {
      req.progress(total, 0);
    } catch (...) {
      fail(0);
      throw StopScreening{};
    }
  };
  constexpr int64_t kBatch = 0x400, kProgressEvery = 0x4000;
  // Takes parts until none is left; `caller` reports progress.
  auto work = [&](bool caller) {
    Screener screener(req, limit, hints);
    int64_t batch = 0, reported = 0;  // progress said at reported x kProgressEvery
    size_t part = 0;
    try {
      while (!stop.load(std::memory_order_relaxed) && (part = next_part++) < parts.size()) {
        screener.Screen(space, part, parts[part], [&] {
          if (++batch < kBatch) return;
          if (stop.load(std::memory_order_relaxed)) throw StopScreening{};
          const int64_t total = valid += batch;
          batch = 0;
          if (caller && req.progress && total / kProgressEvery > reported) {
            reported = total / kProgressEvery;
            progress(total);
          }
        });
      }
    } catch (const StopScreening&) {
    } catch (...) {
      fail(part + 1);
    }
    valid += batch;
    {
      const std::lock_guard lock(mutex);
      --running;
    }
    finished.notify_all();
  };
  std::vector<std::thread> others;
  others.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) {
    {
      const std::lock_guard lock(mutex);
      ++running;
    }
    try {
      others.emplace_back(work, false);
    } catch (const std::system_error&) {  // no more threads: the ones there do the work
      const std::lock_guard lock(mutex);
      --running;
      break;
    }
  }
  work(true);
  {
    std::unique_lock lock(mutex);
    while (!finished.wait_for(lock, std::chrono::milliseconds(50), [&] { return running == 0; })) {
      if (!req.progress || stop) continue;
      lock.unlock();
      try {
        progress(valid.load());
      } catch (const StopScreening&) {
      }
      lock.lock();
    }
  }
  for (std::thread& t : others) t.join();
  if (failure) std::rethrow_exception(failure);
}

// The valid candidates (ConfigSpace) screened by memory, on req.threads threads, the search's
// counts into `res`. Returns those that fit, in the space's order.
std::vector<CandidatePoint> ScreenCandidates(const PlanRequest& req, double limit,
                                             PlanSearchResult& res) {
  const ConfigSpace space(req.model, req.training, req.gpus, req.constraints, req.options);
  std::vector<PartScreen> parts;
  ScreenParts(req, limit, space, parts);
  // Merged in the parts' order: counts summed, the first example and the closest miss (the
  // first of equals) kept, as one thread screening every part in order finds them.
  RuleTally broken;
  std::vector<CandidatePoint> fitting;
  size_t fitting_size = 0, points_size = 0;
  for (const PartScreen& part : parts) {
    fitting_size += part.fitting.size();
    points_size += part.points.size();
  }
  fitting.reserve(fitting_size);
  res.points.reserve(points_size);
  int64_t out_of_memory = 0, too_long = 0;
  std::string out_of_memory_example, too_long_example;
  const OutOfMemoryCase* closest = nullptr;
  double closest_ratio = std::numeric_limits<double>::infinity();
  for (PartScreen& part : parts) {
    res.examined += part.examined;
    res.valid += part.valid;
    broken.Add(part.broken);
    fitting.insert(fitting.end(), std::make_move_iterator(part.fitting.begin()),
                   std::make_move_iterator(part.fitting.end()));
    res.points.insert(res.points.end(), std::make_move_iterator(part.points.begin()),
                      std::make_move_iterator(part.points.end()));
    if (out_of_memory == 0 && part.out_of_memory > 0) {
      // The first part out of memory holds its first case: no earlier part had one.
      PTDP_CHECK(part.first_out_of_memory.has_value());
      out_of_memory_example = OutOfMemory(*part.first_out_of_memory, limit, req.memory_unit);
    }
    out_of_memory += part.out_of_memory;
    if (too_long == 0) too_long_example = std::move(part.too_long_example);
    too_long += part.too_long;
    if (part.closest && part.closest_ratio < closest_ratio) {
      closest_ratio = part.closest_ratio;
      closest = &*part.closest;
    }
    part.fitting = {};  // its memory back
    part.points = {};
  }
  if (closest != nullptr) {
    res.closest_out_of_memory = closest->point;
    res.closest_out_of_memory_problem = OutOfMemory(*closest, limit, req.memory_unit);
  }
  broken.AddTo(res.rejected);
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

// Simulates `plans` (made from the candidates) on up to `threads` threads, the calling thread
// one of them; a simulation's exception is kept in `failures` at its index.
void SimulateAll(std::vector<RankedPlan>& plans, std::vector<std::exception_ptr>& failures,
                 int threads) {
  failures.assign(plans.size(), nullptr);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < plans.size();) {
      try {
        plans[i].report = SimulatePlan(plans[i].plan);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> others;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(plans.size())); ++t) {
    try {
      others.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& t : others) t.join();
}

// Branch and bound: simulate the fitting candidates in order of the bound; stop when nothing
// later can enter the top K (or beat the reference, at `reference_time`, whose rank must be
// exact). The ranked plans and the reference's rank into `res`. With several threads the next
// few candidates are simulated at once; those past the stop are dropped and not counted, so
// that the result and the counts are those of one thread.
void RankPlans(const PlanRequest& req, std::vector<CandidatePoint> fitting, double reference_time,
               PlanSearchResult& res) {
  // A heap of (bound, index), the least on top: the search pops a few of the candidates only,
  // in order of the bound, equal bounds in the space's order.
  std::vector<std::pair<double, size_t>> order(fitting.size());
  for (size_t i = 0; i < fitting.size(); ++i) order[i] = {fitting[i].step_lower_bound_s, i};
  std::make_heap(order.begin(), order.end(), std::greater<>());
  std::vector<RankedPlan> top;
  int64_t faster_than_reference = 0;
  const int threads = std::max(1, req.threads);
  std::vector<CandidatePoint> batch;
  std::vector<RankedPlan> simulated;
  std::vector<std::exception_ptr> failures;
  for (bool stop = false; !stop && !order.empty();) {
    batch.clear();
    while (static_cast<int>(batch.size()) < threads && !order.empty()) {
      std::pop_heap(order.begin(), order.end(), std::greater<>());
      batch.push_back(std::move(fitting[order.back().second]));
      order.pop_back();
    }
    simulated.clear();
    for (const CandidatePoint& c : batch)
      simulated.push_back(RankedPlan{MakePlan(req, c.parallel), {}});
    SimulateAll(simulated, failures, threads);
    for (size_t i = 0; i < batch.size(); ++i) {
      const CandidatePoint& c = batch[i];
      const double kth = static_cast<int>(top.size()) < req.top_k
                             ? std::numeric_limits<double>::infinity()
                             : top.back().report.step_time_s;
      // The bound equals the simulation for uniform stages up to rounding (it can exceed it by
      // an ulp or so): stop only clearly above, so that a tie is still simulated and ranked.
      constexpr double kRounding = 1e-9;
      if (c.step_lower_bound_s > kth * (1 + kRounding) &&
          c.step_lower_bound_s > reference_time * (1 + kRounding)) {
        stop = true;
        break;
      }
      if (failures[i]) std::rethrow_exception(failures[i]);
      RankedPlan& r = simulated[i];
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
