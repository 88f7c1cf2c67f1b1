#include "simulator/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json.h"
#include "simulator/flops.h"
#include "simulator/op_time.h"
#include "simulator/timeline.h"

namespace ptdp {
namespace {

// A time, a rate or a size that is negative or not finite is a bug (an overflow, a reader
// missing a bound), never an answer: an InternalError naming the figure rather than a printed
// `-6.7e+07 us` or `inf s`. Once per simulation, O(stages).
void CheckFigures(const SimulationReport& r) {
  const auto check = [](std::string_view name, double x, int stage = -1) {
    if (std::isfinite(x) && x >= 0) return;
    throw InternalError(fmt::format("SimulatePlan: {}{} is {}, not a finite non-negative figure",
                                    name, stage >= 0 ? fmt::format(" of stage {}", stage) : "", x));
  };
  check("step_time_s", r.step_time_s);
  check("tokens_per_s", r.tokens_per_s);
  check("model_tflops_per_gpu", r.model_tflops_per_gpu);
  check("hardware_tflops_per_gpu", r.hardware_tflops_per_gpu);
  check("mfu", r.mfu);
  check("bubble_fraction", r.bubble_fraction);
  check("peak_memory_bytes", r.peak_memory_bytes);
  for (size_t s = 0; s < r.memory.stages.size(); ++s) {
    const StageMemory& st = r.memory.stages[s];
    const int i = static_cast<int>(s);
    check("parameters", st.parameters, i);
    check("weights_bytes", st.weights_bytes, i);
    check("gradients_bytes", st.gradients_bytes, i);
    check("optimizer_bytes", st.optimizer_bytes, i);
    check("activations_bytes", st.activations_bytes, i);
    check("peak_bytes", st.peak_bytes, i);
  }
  for (size_t s = 0; s < r.sim.stages.size(); ++s) {
    check("busy_s", r.sim.stages[s].busy_s, static_cast<int>(s));
  }
  const StepBreakdown& b = r.breakdown;
  for (const auto& [name, x] : {std::pair{"compute_s", b.compute_s},
                                {"tp_comm_s", b.tp_comm_s},
                                {"cp_comm_s", b.cp_comm_s},
                                {"ep_comm_s", b.ep_comm_s},
                                {"pp_comm_s", b.pp_comm_s},
                                {"dp_comm_s", b.dp_comm_s},
                                {"optimizer_s", b.optimizer_s},
                                {"bubble_s", b.bubble_s}}) {
    check(name, x);
  }
}

}  // namespace

SimulationReport SimulatePlan(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  const CostOptions& options = plan.options;
  SimulationReport r;
  r.estimate = EstimateStep(plan.model, plan.cluster, plan.training, p, options);
  const int m = static_cast<int>(r.estimate.microbatches);
  r.schedule = MakeSchedule(p.schedule, p.pp, m, p.virtual_stages);
  r.sim = SimulateStep(r.schedule, r.estimate.costs);
  r.sim.cp_comm_label = CpCommLabel(p.cp_comm);
  r.memory = EstimateMemory(plan.model, plan.cluster, plan.training, p,
                            InFlightPerStage(r.schedule), options);
  r.memory_problem = MemoryProblem(r.memory, plan.cluster);

  const double gpus = static_cast<double>(plan.num_gpus);
  r.step_time_s = r.sim.step_time_s;
  r.tokens_per_s =
      static_cast<double>(plan.training.global_batch_size) * plan.model.seq_length / r.step_time_s;
  r.model_tflops_per_gpu = r.estimate.model_flops / (r.step_time_s * gpus) / 1e12;
  r.hardware_tflops_per_gpu = r.estimate.hardware_flops / (r.step_time_s * gpus) / 1e12;
  r.mfu = Mfu(r.estimate.model_flops, r.step_time_s, plan.num_gpus,
              MfuPeakFlops(plan.cluster.gpu, plan.training.precision));
  r.bubble_fraction = r.sim.bubble_fraction;
  r.peak_memory_bytes = r.memory.peak_bytes();

  StepBreakdown& b = r.breakdown;
  for (const StageBreakdown& st : r.estimate.stages) {
    b.compute_s += m * st.compute_s / p.pp;
    b.tp_comm_s += m * st.tp_comm_s / p.pp;
    b.tp_comm_hidden_s += m * st.tp_comm_hidden_s / p.pp;
    b.cp_comm_s += m * st.cp_comm_s / p.pp;
    b.cp_comm_hidden_s += m * st.cp_comm_hidden_s / p.pp;
    b.ep_comm_s += m * st.ep_comm_s / p.pp;
    b.etp_comm_s += m * st.etp_comm_s / p.pp;
    b.pp_comm_s += m * st.pp_comm_s / p.pp;
    b.tp_comm_bytes += m * st.tp_comm_bytes / p.pp;
    b.cp_comm_bytes += m * st.cp_comm_bytes / p.pp;
    b.ep_comm_bytes += m * st.ep_comm_bytes / p.pp;
    b.etp_comm_bytes += m * st.etp_comm_bytes / p.pp;
    b.pp_comm_bytes += m * st.pp_comm_bytes / p.pp;
  }
  for (int s = 0; s < p.pp; ++s) {
    const StageCosts& st = r.estimate.costs.stages[s];
    const StageBreakdown& br = r.estimate.stages[s];
    const double dp_comm_s = st.dp_grad_sync_s + st.embedding_sync_s + st.dp_param_gather_s +
                             st.dp_param_gather_hidden_s + m * br.dp_comm_s;
    if (s == 0 || dp_comm_s > b.dp_comm_s) {
      b.dp_comm_s = dp_comm_s;
      b.edp_comm_s = st.expert_dp_comm_s;
      b.embedding_comm_s = st.embedding_sync_s;
      b.dp_comm_bytes = st.dp_comm_bytes + st.embedding_sync_bytes + m * br.dp_comm_bytes;
      b.edp_comm_bytes = st.expert_dp_comm_bytes;
      b.embedding_comm_bytes = st.embedding_sync_bytes;
    }
    b.dp_exposed_s = std::max(b.dp_exposed_s, r.sim.stages[s].dp_exposed_s + m * br.dp_exposed_s);
    b.optimizer_s = std::max(b.optimizer_s, st.optimizer_s);
  }
  b.bubble_s = r.sim.bubble_s;
  // The exposed parts are totals less their other parts: where one is zero it can come out an
  // ulp or so below (-2e-19 s), which is zero, not a negative time.
  for (double* x : {&b.compute_s, &b.tp_comm_s, &b.cp_comm_s, &b.ep_comm_s, &b.etp_comm_s,
                    &b.pp_comm_s, &b.dp_comm_s, &b.dp_exposed_s, &b.edp_comm_s, &b.embedding_comm_s,
                    &b.optimizer_s, &b.bubble_s}) {
    if (*x < 0 && *x >= -1e-9 * r.step_time_s) *x = 0;
  }
  CheckFigures(r);
  return r;
}

std::string SimulationJson(const SimulationReport& r, int indent) {
  return "{" + SimulationJsonMembers(r, indent) + "}";
}

std::string SimulationJsonMembers(const SimulationReport& r, int indent) {
  const std::string pad(indent, ' ');
  const int p = r.schedule.stages, v = r.schedule.chunks;
  std::string stages;
  for (int s = 0; s < p; ++s) {
    double forward = 0, backward = 0;
    for (int c = 0; c < v; ++c) {
      const ChunkCosts& ch = r.estimate.costs.chunks[r.schedule.VirtualStage(s, c)];
      forward += ch.forward_s;
      backward += ch.backward_input_s + ch.backward_weight_s;
    }
    const StageMemory& mem = r.memory.stages[s];
    const StageResult& sim = r.sim.stages[s];
    stages += fmt::format(
        "{}{}  {{\"stage\": {}, \"forward_s\": {}, \"backward_s\": {}, \"busy_s\": {}, "
        "\"idle_s\": {}, \"bubble_fraction\": {}, \"parameters\": {}, \"weights_bytes\": {}, "
        "\"gradients_bytes\": {}, \"optimizer_bytes\": {}, \"activations_bytes\": {}, "
        "\"in_flight\": {}, \"workspace_bytes\": {}, \"allocated_bytes\": {}, "
        "\"reserved_bytes\": {}, \"fragmentation_bytes\": {}, "
        "\"peak_bytes\": {}}}",
        s ? ",\n" : "", pad, s, JsonNumber(forward), JsonNumber(backward), JsonNumber(sim.busy_s),
        JsonNumber(sim.idle_s), JsonNumber(sim.bubble_fraction), JsonNumber(mem.parameters),
        JsonNumber(mem.weights_bytes), JsonNumber(mem.gradients_bytes),
        JsonNumber(mem.optimizer_bytes), JsonNumber(mem.activations_bytes), mem.in_flight,
        JsonNumber(mem.workspace_bytes), JsonNumber(mem.allocated_bytes()),
        JsonNumber(mem.reserved_bytes), JsonNumber(mem.fragmentation_bytes),
        JsonNumber(mem.peak_bytes));
  }
  const StepBreakdown& b = r.breakdown;
  return fmt::format(
      "\"step_time_s\": {}, \"tokens_per_s\": {}, \"model_tflops_per_gpu\": {}, "
      "\"hardware_tflops_per_gpu\": {}, \"mfu\": {}, \"bubble_fraction\": {}, "
      "\"peak_memory_bytes\": {}, \"fits\": {}, \"memory_problem\": {}, \"microbatches\": {},\n"
      "{} \"stages\": [\n{}\n{} ],\n"
      "{} \"breakdown\": {{\"compute_s\": {}, \"tp_comm_s\": {}, \"tp_comm_hidden_s\": {}, "
      "\"cp_comm_s\": {}, \"cp_comm_hidden_s\": {}, \"ep_comm_s\": {}, \"pp_comm_s\": {}, "
      "\"dp_comm_s\": {}, "
      "\"dp_exposed_s\": {}, \"optimizer_s\": {}, "
      "\"bubble_s\": {}}}",
      JsonNumber(r.step_time_s), JsonNumber(r.tokens_per_s), JsonNumber(r.model_tflops_per_gpu),
      JsonNumber(r.hardware_tflops_per_gpu), JsonNumber(r.mfu), JsonNumber(r.bubble_fraction),
      JsonNumber(r.peak_memory_bytes), r.memory_problem.empty() ? "true" : "false",
      JsonString(r.memory_problem), r.estimate.microbatches, pad, stages, pad, pad,
      JsonNumber(b.compute_s), JsonNumber(b.tp_comm_s), JsonNumber(b.tp_comm_hidden_s),
      JsonNumber(b.cp_comm_s), JsonNumber(b.cp_comm_hidden_s), JsonNumber(b.ep_comm_s),
      JsonNumber(b.pp_comm_s), JsonNumber(b.dp_comm_s), JsonNumber(b.dp_exposed_s),
      JsonNumber(b.optimizer_s), JsonNumber(b.bubble_s));
}

}  // namespace ptdp
