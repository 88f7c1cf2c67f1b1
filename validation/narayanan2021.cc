#include "validation/narayanan2021.h"

#include <fmt/format.h>

#include <cmath>

#include "core/cost_options.h"
#include "core/schedule.h"
#include "simulator/cost_model.h"
#include "simulator/event_sim.h"
#include "simulator/flops.h"

namespace ptdp {
namespace {

// shared/reference/narayanan2021-table1.yaml, row by row.
constexpr NarayananRow kRows[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 16, 0, 137},
    {3.6, 32, 3072, 30, 2, 1, 64, 512, 16, 0, 138},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 16, 0, 142},
    {18.4, 48, 6144, 40, 8, 1, 256, 1024, 8, 0, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 4, 0, 138},
    {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 2, 5, 140},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 2, 5, 148},
    {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 1, 3, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 1, 1, 163},
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 1, 0, 163},
};

}  // namespace

std::span<const NarayananRow> NarayananTable1() { return kRows; }

ModelSpec NarayananModel(const NarayananRow& row) {
  return ClassicGpt(fmt::format("gpt-{}b", row.params_billion), row.layers, row.hidden, row.heads,
                    51200, 2048);
}

TrainingSpec NarayananTraining(const NarayananRow& row) {
  TrainingSpec t;
  t.global_batch_size = row.global_batch;
  t.precision = Precision::kFp16;
  return t;
}

ParallelConfig NarayananLayout(const NarayananRow& row) {
  ParallelConfig p;
  p.tp = row.tp;
  p.pp = row.pp;
  p.dp = row.gpus / (row.tp * row.pp);
  p.micro_batch_size = row.micro_batch;
  p.recompute = Recompute::kFull;
  if (row.layers_per_virtual_stage > 0) {
    p.virtual_stages = row.layers / row.pp / row.layers_per_virtual_stage;
  }
  p.schedule = p.virtual_stages > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  return p;
}

double PublishedStepTime(const NarayananRow& row) {
  return NarayananEq3Flops(NarayananModel(row), row.global_batch) /
         (row.tflops_per_gpu * 1e12 * row.gpus);
}

std::vector<ValidationResult> ValidateNarayanan2021(const ClusterSpec& cluster) {
  std::vector<ValidationResult> results;
  for (const NarayananRow& row : kRows) {
    const ModelSpec model = NarayananModel(row);
    const TrainingSpec training = NarayananTraining(row);
    const ParallelConfig layout = NarayananLayout(row);
    const StepEstimate est = EstimateStep(model, cluster, training, layout, Megatron2021Options());
    const PipelineSchedule schedule = MakeSchedule(
        layout.schedule, layout.pp, static_cast<int>(est.microbatches), layout.virtual_stages);
    ValidationResult r;
    r.row = row;
    r.published_s = PublishedStepTime(row);
    r.simulated_s = SimulateStep(schedule, est.costs).step_time_s;
    r.closed_form_s = ClosedFormStepTime(est.costs, layout.schedule, layout.pp, est.microbatches,
                                         layout.virtual_stages);
    r.simulated_tflops_per_gpu =
        NarayananEq3Flops(model, row.global_batch) / (r.simulated_s * row.gpus) / 1e12;
    results.push_back(r);
  }
  return results;
}

double MeanAbsoluteError(std::span<const ValidationResult> results) {
  double sum = 0;
  for (const ValidationResult& r : results) sum += std::abs(r.error());
  return results.empty() ? 0 : sum / static_cast<double>(results.size());
}

std::string ValidationMarkdown(std::span<const ValidationResult> results) {
  std::string out =
      "| model | GPUs | t | p | v | b | B | published s | simulated s | closed form s | "
      "published TFLOP/s/GPU | simulated TFLOP/s/GPU | error |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const ValidationResult& r : results) {
    const ParallelConfig p = NarayananLayout(r.row);
    out += fmt::format(
        "| {}B | {} | {} | {} | {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.0f} | {:.1f} | "
        "{:+.1f}% |\n",
        r.row.params_billion, r.row.gpus, p.tp, p.pp, p.virtual_stages, p.micro_batch_size,
        r.row.global_batch, r.published_s, r.simulated_s, r.closed_form_s, r.row.tflops_per_gpu,
        r.simulated_tflops_per_gpu, 100 * r.error());
  }
  out += fmt::format("\nMean absolute error: {:.1f}% over {} rows.\n",
                     100 * MeanAbsoluteError(results), results.size());
  return out;
}

namespace {

// calculon-ai/calculon: validation/{22B,175B,530B,1T}_{full,seqsel}.json for the layouts,
// calculon/megatron/validation.py kProfile for the times (from Korthikanti et al. 2022).
constexpr KorthikantiRow kKorthikanti[] = {
    {"22B", 64, 6144, 48, 8, 1, 4, 4, 1, false, 1.42},
    {"175B", 96, 12288, 96, 8, 8, 64, 1, 3, false, 18.13},
    {"530B", 128, 20480, 105, 8, 35, 280, 1, 3, false, 49.05},
    {"1T", 160, 25600, 128, 8, 64, 512, 1, 1, false, 94.42},
    {"22B", 64, 6144, 48, 8, 1, 4, 4, 1, true, 1.10},
    {"175B", 96, 12288, 96, 8, 8, 64, 1, 3, true, 13.75},
    {"530B", 128, 20480, 105, 8, 35, 280, 1, 3, true, 37.83},
    {"1T", 160, 25600, 128, 8, 64, 512, 1, 1, true, 71.49},
};

}  // namespace

std::span<const KorthikantiRow> Korthikanti2022Table() { return kKorthikanti; }

ModelSpec KorthikantiModel(const KorthikantiRow& row) {
  return ClassicGpt(fmt::format("gpt-{}", row.name), row.layers, row.hidden, row.heads, 51200,
                    2048);
}

ParallelConfig KorthikantiLayout(const KorthikantiRow& row) {
  ParallelConfig p;
  p.tp = row.tp;
  p.pp = row.pp;
  p.dp = 1;
  p.micro_batch_size = row.micro_batch;
  p.virtual_stages = row.chunks;
  p.schedule = row.chunks > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  p.recompute = row.selective_sp ? Recompute::kSelective : Recompute::kFull;
  p.sequence_parallel = row.selective_sp;
  return p;
}

double SimulateKorthikanti(const ClusterSpec& cluster, const KorthikantiRow& row,
                           bool closed_form) {
  TrainingSpec training;
  training.global_batch_size = row.global_batch;
  training.precision = Precision::kFp16;
  const ParallelConfig p = KorthikantiLayout(row);
  const StepEstimate est =
      EstimateStep(KorthikantiModel(row), cluster, training, p, Megatron2022Options());
  if (closed_form) {
    return ClosedFormStepTime(est.costs, p.schedule, p.pp, est.microbatches, p.virtual_stages);
  }
  const PipelineSchedule schedule =
      MakeSchedule(p.schedule, p.pp, static_cast<int>(est.microbatches), p.virtual_stages);
  return SimulateStep(schedule, est.costs).step_time_s;
}

ClusterSpec WithEfficiencies(ClusterSpec cluster, double gemm_scale, double memory_efficiency) {
  for (GemmEfficiencyPoint& g : cluster.gpu.gemm_efficiency) g.efficiency *= gemm_scale;
  cluster.gpu.memory_efficiency = memory_efficiency;
  return cluster;
}

Calibration CalibrateOnKorthikanti2022(const ClusterSpec& cluster) {
  Calibration best;
  double best_cost = INFINITY;
  // Scales are relative to the profile's table; memory efficiencies are absolute.
  for (int gs = 70; gs <= 130; ++gs) {
    for (int me = 40; me <= 100; ++me) {
      const ClusterSpec c = WithEfficiencies(cluster, gs / 100.0, me / 100.0);
      double cost = 0, abs_err = 0;
      for (const KorthikantiRow& row : kKorthikanti) {
        const double err = SimulateKorthikanti(c, row, true) / row.step_s - 1;
        cost += err * err;
        abs_err += std::abs(err);
      }
      if (cost < best_cost) {
        best_cost = cost;
        best = {gs / 100.0, me / 100.0, abs_err / std::size(kKorthikanti)};
      }
    }
  }
  return best;
}

}  // namespace ptdp
