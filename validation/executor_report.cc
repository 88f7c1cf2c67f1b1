#include "validation/executor_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "core/json.h"
#include "core/table.h"
#include "core/text.h"
#include "executor/backend/measure.h"
#include "simulator/kernel_classes.h"
#include "validation/stats.h"

namespace ptdp {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string Megabytes(double bytes) { return fmt::format("{:.2f} MB", bytes / 1e6); }

std::string RatioCell(const Compared& c) {
  const double r = c.ratio();
  return std::isfinite(r) ? fmt::format("{:.2f}", r) : "-";
}

std::string ComparedJson(const Compared& c) {
  return fmt::format("{{\"measured\": {}, \"simulated\": {}, \"ratio\": {}, \"error\": {}}}",
                     JsonNumber(c.measured), JsonNumber(c.simulated), JsonNumber(c.ratio()),
                     JsonNumber(c.error()));
}

// Per stage, the data-parallel communication its ranks waited for per measured step (mean over
// the stage's ranks and steps), from each rank's trace events within each "step N" event: the
// tail of the gradient reductions (dp-comm all-reduces and reduce-scatters) past the step's last
// pipeline operation, plus the parameter gathers (blocking) or the waits for them (overlapped).
std::vector<double> MeasuredDpExposed(const Plan& executed, const ExecuteResult& r) {
  const int p = executed.parallel.pp;
  const bool overlapped_gather =
      executed.options.overlap_param_gather && executed.parallel.distributed_optimizer;
  std::map<int, int> stage_of;
  for (const RankReport& k : r.ranks) stage_of[k.world_rank] = k.coords.pp;
  struct Window {
    double begin, end, last_op = 0, reduced = 0, gather = 0;
  };
  std::map<int, std::vector<Window>> steps;  // track -> its measured steps
  const std::string first = fmt::format("step {}", r.first_step);
  for (const TraceEvent& e : r.events) {
    if (e.category != "other" || e.name.rfind("step ", 0) != 0) continue;
    if (r.steps.size() > 1 && e.name == first) continue;
    steps[e.track].push_back({e.start_s, e.start_s + e.duration_s});
  }
  for (const TraceEvent& e : r.events) {
    const auto it = steps.find(e.track);
    if (it == steps.end()) continue;
    const double end = e.start_s + e.duration_s;
    for (Window& w : it->second) {
      if (e.start_s < w.begin || e.start_s > w.end) continue;
      if (e.category == "forward" || e.category == "backward" || e.category == "weight-grad") {
        w.last_op = std::max(w.last_op, end);
      } else if (e.category == "dp-comm") {
        const bool gather = e.name.find("param all-gather") != std::string::npos;
        if (!gather) {
          w.reduced = std::max(w.reduced, end);
        } else if ((e.name == kParamGatherWait) == overlapped_gather) {
          w.gather += e.duration_s;
        }
      }
    }
  }
  std::vector<double> sum(static_cast<size_t>(p)), count(static_cast<size_t>(p));
  for (const auto& [track, windows] : steps) {
    const auto st = stage_of.find(track);
    if (st == stage_of.end()) continue;
    for (const Window& w : windows) {
      const auto s = static_cast<size_t>(st->second);
      sum[s] += std::max(0.0, w.reduced - w.last_op) + w.gather;
      count[s] += 1;
    }
  }
  for (size_t s = 0; s < sum.size(); ++s) sum[s] = count[s] > 0 ? sum[s] / count[s] : 0;
  return sum;
}

}  // namespace

std::string ErrorCell(const Compared& c) {
  const double e = c.error();
  if (!std::isfinite(e)) return "-";
  return c.difference ? fmt::format("{:+.3f}", e) : fmt::format("{:+.1f}%", 100 * e);
}

double Compared::ratio() const { return measured != 0 ? simulated / measured : kNaN; }
double Compared::error() const { return difference ? simulated - measured : ratio() - 1; }

CostOptions ExecutorCostOptions() {
  CostOptions o;
  o.attention = AttentionBackend::kUnfused;
  o.overlap_grad_reduce = false;  // ExecutedPlan takes the plan's overlap and buckets
  o.overlap_p2p_communication = true;
  o.accumulate_allreduce_grads_in_fp32 = true;
  o.gradient_accumulation_fusion = true;
  o.scatter_gather_tensors_in_pipeline = false;
  // Its tensor-parallel all-reduces block (ExecutedPlan takes the plan's
  // async_tensor_parallel_allreduce: the input gradients of QKV and fc1 reduced beside their
  // weight gradients, executor/model/gpt.h).
  o.async_tensor_parallel_allreduce = false;
  // MoE layers dispatch their tokens with all-to-alls over the EP group (executor/model/moe.h).
  o.moe_token_dispatcher = MoeDispatcher::kAllToAll;
  return o;
}

namespace {

// Per stage, from the trace events of the measured steps: F time and count, B + W time and B
// count.
struct MeasuredPasses {
  std::vector<double> forward, backward;
  std::vector<int64_t> forwards, backwards;
};

MeasuredPasses MeasuredPassTimes(const ExecuteResult& r, int p) {
  MeasuredPasses m;
  m.forward.resize(static_cast<size_t>(p)), m.backward.resize(static_cast<size_t>(p));
  m.forwards.resize(static_cast<size_t>(p)), m.backwards.resize(static_cast<size_t>(p));
  std::map<int, int> stage_of;  // track (world rank) -> stage
  for (const RankReport& k : r.ranks) stage_of[k.world_rank] = k.coords.pp;
  std::map<int, double> measured_from;  // track -> end of the run's first step
  const std::string first = fmt::format("step {}", r.first_step);
  for (const TraceEvent& e : r.events) {
    if (r.steps.size() > 1 && e.category == "other" && e.name == first) {
      measured_from[e.track] = e.start_s + e.duration_s;
    }
  }
  for (const TraceEvent& e : r.events) {
    const auto st = stage_of.find(e.track);
    if (st == stage_of.end()) continue;
    const auto from = measured_from.find(e.track);
    if (from != measured_from.end() && e.start_s < from->second) continue;
    const auto s = static_cast<size_t>(st->second);
    if (e.category == "forward") m.forward[s] += e.duration_s, ++m.forwards[s];
    if (e.category == "backward") m.backward[s] += e.duration_s, ++m.backwards[s];
    if (e.category == "weight-grad") m.backward[s] += e.duration_s;
  }
  return m;
}

// The stage's peak memory by category (the largest of its ranks'), total and reserved, against
// the simulated stage `m`, into `st`.
void CompareStageMemory(const ExecuteResult& r, const StageMemory& m, StageComparison& st) {
  std::array<int64_t, kNumMemCategories> peak{};
  int64_t total = 0;
  for (const RankReport& k : r.ranks) {
    if (k.coords.pp != st.stage) continue;
    for (int c = 0; c < kNumMemCategories; ++c) {
      peak[static_cast<size_t>(c)] =
          std::max(peak[static_cast<size_t>(c)], k.memory.peak_bytes[static_cast<size_t>(c)]);
    }
    total = std::max(total, k.memory.peak_total_bytes);
    st.measured_reserved_bytes =
        std::max(st.measured_reserved_bytes, static_cast<double>(k.peak_reserved_bytes));
  }
  auto measured = [&](MemCategory c) { return static_cast<double>(peak[static_cast<size_t>(c)]); };
  st.weights_bytes = {measured(MemCategory::kWeights), m.weights_bytes};
  st.gradients_bytes = {measured(MemCategory::kGradients), m.gradients_bytes};
  st.optimizer_bytes = {measured(MemCategory::kOptimizer), m.optimizer_bytes};
  st.activations_bytes = {measured(MemCategory::kActivations), m.activations_bytes};
  st.total_bytes = {static_cast<double>(total),
                    m.weights_bytes + m.gradients_bytes + m.optimizer_bytes + m.activations_bytes};
  st.measured_other_bytes = measured(MemCategory::kCommBuffers) + measured(MemCategory::kWorkspace);
  st.simulated_allowance_bytes = m.reserved_bytes + m.fragmentation_bytes;
  st.simulated_peak_bytes = m.peak_bytes;
}

// Stage s measured against the simulation: busy time, F and B + W per chunk, exposed
// data-parallel time (`dp_exposed`, measured), kernel classes (`sim_kernels`, simulated; none:
// not profiled), memory.
StageComparison CompareStage(const ExecuteResult& r, const SimulationReport& sim,
                             const MeasuredPasses& passes, const std::vector<double>& dp_exposed,
                             const std::vector<KernelClassTimes>& sim_kernels, int s) {
  StageComparison st;
  st.stage = s;
  st.busy_s = {r.stage_busy_s[static_cast<size_t>(s)],
               sim.sim.stages[static_cast<size_t>(s)].busy_s};
  double sim_forward = 0, sim_backward = 0;
  const PipelineSchedule& schedule = sim.schedule;
  for (int c = 0; c < schedule.chunks; ++c) {
    const ChunkCosts& ch =
        sim.estimate.costs.chunks[static_cast<size_t>(schedule.VirtualStage(s, c))];
    sim_forward += ch.forward_s / schedule.chunks;
    sim_backward += (ch.backward_input_s + ch.backward_weight_s) / schedule.chunks;
  }
  const auto k = static_cast<size_t>(s);
  st.forward_s = {
      passes.forwards[k] > 0 ? passes.forward[k] / static_cast<double>(passes.forwards[k]) : 0,
      sim_forward};
  st.backward_s = {
      passes.backwards[k] > 0 ? passes.backward[k] / static_cast<double>(passes.backwards[k]) : 0,
      sim_backward};
  st.dp_exposed_s = {dp_exposed[k], sim.sim.stages[k].dp_exposed_s};
  if (!sim_kernels.empty()) {
    const KernelSeconds& meas = r.stage_kernel_s[k];
    const KernelClassTimes& simk = sim_kernels[k];
    auto at = [&](KernelClass c) { return meas[static_cast<size_t>(c)]; };
    st.has_kernels = true;
    st.kernels_s = {Compared{at(KernelClass::kGemm), simk.gemm_s},
                    Compared{at(KernelClass::kAttention), simk.attention_s},
                    Compared{at(KernelClass::kMemory), simk.memory_s},
                    Compared{at(KernelClass::kOptimizer), simk.optimizer_s}};
  }
  CompareStageMemory(r, sim.memory.stages[k], st);
  return st;
}

}  // namespace

ValidationReport CompareRun(const Plan& executed, const ExecuteResult& r,
                            const SimulationReport& sim) {
  PTDP_CHECK(!r.steps.empty());
  const int p = executed.parallel.pp;
  PTDP_CHECK(static_cast<int>(sim.sim.stages.size()) == p &&
             static_cast<int>(sim.memory.stages.size()) == p &&
             static_cast<int>(r.stage_busy_s.size()) == p);
  ValidationReport v;
  v.profile_rank = r.profile_rank;
  if (r.profile_rank >= 0) PTDP_CHECK(r.ranks.size() == 1);
  v.model = executed.model.name;
  v.layout = LayoutLine(executed);
  v.profile = executed.cluster.name;
  v.ranks = static_cast<int>(executed.parallel.world_size());
  v.simulated_gpus_per_node = executed.cluster.gpus_per_node;
  v.first_step = r.first_step;
  v.steps_run = static_cast<int64_t>(r.steps.size());
  for (const StepLog& s : r.steps) v.step_times_s.push_back(s.time_s);
  const std::vector<double> after_first(
      v.step_times_s.begin() + (v.step_times_s.size() > 1 ? 1 : 0), v.step_times_s.end());
  v.step_time_s = {Median(after_first), sim.step_time_s};
  std::vector<double> pipelines;
  for (size_t i = r.steps.size() > 1 ? 1 : 0; i < r.steps.size(); ++i) {
    pipelines.push_back(r.steps[i].pipeline_s);
  }
  v.pipeline_s = {Median(pipelines), sim.sim.pipeline_end_s};

  const MeasuredPasses passes = MeasuredPassTimes(r, p);
  const std::vector<double> dp_exposed = MeasuredDpExposed(executed, r);
  v.bubble_fraction = {r.bubble_fraction, sim.bubble_fraction, /*difference=*/true};
  std::vector<KernelClassTimes> sim_kernels;
  if (!r.stage_kernel_s.empty()) {
    PTDP_CHECK(static_cast<int>(r.stage_kernel_s.size()) == p);
    sim_kernels = StageKernelClassTimes(executed, sim.estimate);
  }
  for (int s = 0; s < p; ++s) {
    if (r.profile_rank >= 0 && s != r.ranks[0].coords.pp) continue;
    v.stages.push_back(CompareStage(r, sim, passes, dp_exposed, sim_kernels, s));
  }
  return v;
}

void AddStandInRows(ValidationReport& report, const Plan& executed, const SimulationReport& sim,
                    const StandInTallies& per_step) {
  PTDP_CHECK(report.stages.size() == 1);
  const auto s = static_cast<size_t>(report.stages[0].stage);
  const StageBreakdown& br = sim.estimate.stages[s];
  const StageCosts& st = sim.estimate.costs.stages[s];
  const auto m = static_cast<double>(NumMicrobatches(executed.training, executed.parallel));
  // The simulator's bytes per step for the groups it models (cost_model.h: per micro-batch in
  // the stage's breakdown, per step in its costs).
  const std::map<std::string, double> simulated = {
      {"tp", m * br.tp_comm_bytes},     {"cp", m * br.cp_comm_bytes},
      {"ep", m * br.ep_comm_bytes},     {"etp", m * br.etp_comm_bytes},
      {"pp", m * br.pp_comm_bytes},     {"dp_cp", st.dp_comm_bytes - st.expert_dp_comm_bytes},
      {"edp", st.expert_dp_comm_bytes}, {"embedding", st.embedding_sync_bytes},
  };
  for (const char* group : {"tp", "cp", "ep", "etp", "pp", "dp_cp", "dp", "edp", "embedding",
                            "model_parallel", "world"}) {
    const auto it = simulated.find(group);
    const double sim_bytes = it != simulated.end() ? it->second : kNaN;
    const auto got = per_step.find(group);
    const StandInTally g = got != per_step.end() ? got->second : StandInTally{};
    if (g.calls == 0 && !(sim_bytes > 0)) continue;
    report.stand_in.push_back({group, {g.bytes, sim_bytes}, g.seconds, g.calls});
  }
}

std::string ValidationText(const ValidationReport& v) {
  const std::string who =
      v.profile_rank >= 0 ? fmt::format("rank {} of {} alone, its exchanges local stand-ins",
                                        v.profile_rank, v.ranks)
                          : fmt::format("{} rank{} ({} host{})", v.ranks, v.ranks == 1 ? "" : "s",
                                        v.hosts, v.hosts == 1 ? "" : "s");
  std::string out = fmt::format(
      "ptdp validate: {} on {}: {}\n"
      "measured: steps {}..{} of the {} executor (step time: median of the steps after the "
      "first)\nsimulated: profile {} ({}), {} ranks per node\n",
      v.model, who, v.layout, v.first_step, v.first_step + v.steps_run - 1,
      v.backend == "cpu" ? "CPU" : "CUDA", v.profile, v.profile_source, v.simulated_gpus_per_node);
  for (const std::string& n : v.notes) out += "note: " + n + "\n";
  out += "\n";
  Table t({{"figure"},
           {"measured", Table::Align::kRight},
           {"simulated", Table::Align::kRight},
           {"sim/meas", Table::Align::kRight},
           {"error", Table::Align::kRight}});
  auto row = [&](const std::string& name, const Compared& c, auto format) {
    t.AddRow({name, format(c.measured), format(c.simulated), RatioCell(c), ErrorCell(c)});
  };
  auto fraction = [](double f) { return fmt::format("{:.3f}", f); };
  if (v.profile_rank < 0) {
    row("step time", v.step_time_s, Seconds);
    row("pipeline phase", v.pipeline_s, Seconds);
    row("bubble fraction", v.bubble_fraction, fraction);
  }
  for (const StageComparison& s : v.stages) {
    row(fmt::format("stage {} busy per step", s.stage), s.busy_s, Seconds);
  }
  for (const StageComparison& s : v.stages) {
    row(fmt::format("stage {} forward (1 micro-batch)", s.stage), s.forward_s, Seconds);
    row(fmt::format("stage {} backward (B + W)", s.stage), s.backward_s, Seconds);
  }
  for (const StageComparison& s : v.stages) {
    if (s.dp_exposed_s.measured > 0 || s.dp_exposed_s.simulated > 0) {
      row(fmt::format("stage {} dp comm exposed per step", s.stage), s.dp_exposed_s, Seconds);
    }
  }
  for (const StageComparison& s : v.stages) {
    if (!s.has_kernels) continue;
    for (int c = 0; c < kNumKernelClasses; ++c) {
      row(fmt::format("stage {} {} kernels per step", s.stage, Name(static_cast<KernelClass>(c))),
          s.kernels_s[static_cast<size_t>(c)], Seconds);
    }
  }
  for (const StageComparison& s : v.stages) {
    const std::string prefix = fmt::format("stage {} ", s.stage);
    row(prefix + "weights", s.weights_bytes, Megabytes);
    row(prefix + "gradients", s.gradients_bytes, Megabytes);
    row(prefix + "optimizer", s.optimizer_bytes, Megabytes);
    row(prefix + "activations", s.activations_bytes, Megabytes);
    t.AddRow(
        {prefix + "comm buffers + workspace", Megabytes(s.measured_other_bytes), "-", "-", "-"});
    row(prefix + "total (no allowances)", s.total_bytes, Megabytes);
    t.AddRow({prefix + "allowances (reserved, fragm.)", "-", Megabytes(s.simulated_allowance_bytes),
              "-", "-"});
    if (s.measured_reserved_bytes > 0) {
      row(prefix + "reserved (GPU allocator) vs peak",
          {s.measured_reserved_bytes, s.simulated_peak_bytes}, Megabytes);
    }
  }
  for (const StandInComparison& c : v.stand_in) {
    t.AddRow({fmt::format("{} exchanges per step ({} call{}, {})", c.group, c.calls,
                          c.calls == 1 ? "" : "s", Seconds(c.seconds)),
              Megabytes(c.bytes.measured),
              std::isfinite(c.bytes.simulated) ? Megabytes(c.bytes.simulated) : "-",
              RatioCell(c.bytes), ErrorCell(c.bytes)});
  }
  out += t.Render();
  out +=
      "\nerror = simulated / measured - 1 (bubble fraction: simulated - measured). Measured "
      "memory: the\nexecutor's allocator accounting, peak per category over the stage's ranks; "
      "the simulator's peak\nadds the profile's allowances (reserved bytes, fragmentation) to "
      "its total. Kernels per step:\nthe backend's clock around each kernel (events on a GPU), "
      "mean over the stage's ranks; the\nsimulator's kernels of the same class, without "
      "communication or launch gaps.\n";
  return out;
}

std::string ValidationJson(const ValidationReport& v, const SimulationReport& sim) {
  std::string times, notes, stages;
  for (size_t i = 0; i < v.step_times_s.size(); ++i) {
    times += (i == 0 ? "" : ", ") + JsonNumber(v.step_times_s[i]);
  }
  for (size_t i = 0; i < v.notes.size(); ++i)
    notes += (i == 0 ? "" : ", ") + JsonString(v.notes[i]);
  std::string stand_in;
  for (size_t i = 0; i < v.stand_in.size(); ++i) {
    const StandInComparison& c = v.stand_in[i];
    stand_in += fmt::format("{}{{\"group\": {}, \"bytes\": {}, \"seconds\": {}, \"calls\": {}}}",
                            i == 0 ? "" : ",\n    ", JsonString(c.group), ComparedJson(c.bytes),
                            JsonNumber(c.seconds), c.calls);
  }
  for (size_t i = 0; i < v.stages.size(); ++i) {
    const StageComparison& s = v.stages[i];
    std::string kernels;
    if (s.has_kernels) {
      kernels = fmt::format(
          "\n     \"kernels_s\": {{\"gemm\": {}, \"attention\": {}, \"memory_bound\": {}, "
          "\"optimizer\": {}}},",
          ComparedJson(s.kernels_s[0]), ComparedJson(s.kernels_s[1]), ComparedJson(s.kernels_s[2]),
          ComparedJson(s.kernels_s[3]));
    }
    stages += fmt::format(
        "{}    {{\"stage\": {}, \"busy_s\": {},\n     \"forward_s\": {},\n     \"backward_s\": "
        "{},\n     \"dp_exposed_s\": {},{}\n     \"memory_bytes\": {{\"weights\": {}, "
        "\"gradients\": {}, \"optimizer\": {}, \"activations\": {}, \"total\": {}, "
        "\"measured_other\": {}, \"simulated_allowance\": {}, \"simulated_peak\": {}, "
        "\"measured_reserved\": {}}}}}",
        i == 0 ? "" : ",\n", s.stage, ComparedJson(s.busy_s), ComparedJson(s.forward_s),
        ComparedJson(s.backward_s), ComparedJson(s.dp_exposed_s), kernels,
        ComparedJson(s.weights_bytes), ComparedJson(s.gradients_bytes),
        ComparedJson(s.optimizer_bytes), ComparedJson(s.activations_bytes),
        ComparedJson(s.total_bytes), JsonNumber(s.measured_other_bytes),
        JsonNumber(s.simulated_allowance_bytes), JsonNumber(s.simulated_peak_bytes),
        JsonNumber(s.measured_reserved_bytes));
  }
  return fmt::format(
      "{{\n  \"plan\": {},\n  \"model\": {},\n  \"layout\": {},\n  \"profile\": {},\n"
      "  \"profile_source\": {},\n  \"ranks\": {},\n  \"hosts\": {},\n"
      "  \"simulated_gpus_per_node\": {},\n  \"first_step\": {},\n  \"steps_run\": {},\n"
      "  \"measured_step_times_s\": [{}],\n  \"step_time_s\": {},\n  \"pipeline_s\": {},\n"
      "  \"bubble_fraction\": {},\n"
      "  \"stages\": [\n{}\n  ],\n  \"profile_rank\": {},\n  \"stand_in\": [{}],\n"
      "  \"notes\": [{}],\n  \"simulation\": {}\n}}\n",
      JsonString(v.plan_path), JsonString(v.model), JsonString(v.layout), JsonString(v.profile),
      JsonString(v.profile_source), v.ranks, v.hosts, v.simulated_gpus_per_node, v.first_step,
      v.steps_run, times, ComparedJson(v.step_time_s), ComparedJson(v.pipeline_s),
      ComparedJson(v.bubble_fraction), stages,
      v.profile_rank >= 0 ? std::to_string(v.profile_rank) : "null", stand_in, notes,
      SimulationJson(sim, 2));
}

}  // namespace ptdp
