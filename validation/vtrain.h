// Fidelity on measured training steps: the 1,549 Megatron-DeepSpeed iterations on A100 clusters
// that vTrain (Bang et al., MICRO'24, VIA-Research/vTrain data/) published, as CSV files
// (results/validation/vtrain/: ground_truth_single.csv, one node of 2-8 GPUs; ground_truth_
// multi.csv, 64-512 GPUs). Each row is simulated in its exact layout and compared with the
// measured iteration time.
//
// What is known about the runs (the same repository's per-row simulator configurations): A100,
// 8 GPUs per node, fp16, GPT-2 vocabulary (50,257 tokens), activation checkpointing (full
// recompute) on every run, 1F1B, no gradient bucketing (the data-parallel gradient reduction
// runs after the backward), 800 Gbps inter-node and 150 GB/s intra-node bandwidth. The model of
// a row: hidden, heads, layers and sequence from its columns, a 4h GeLU MLP with biases,
// LayerNorm, learned positions (max_position_embeddings = sequence), tied embeddings.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "core/cost_options.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"
#include "simulator/simulate.h"

namespace ptdp {

// One measured iteration.
struct VtrainRow {
  int line = 0;               // 1-based line in its file
  double params_billion = 0;  // the multi-node file's first column; 0 in the single-node file
  int gpus = 0;
  int global_batch = 0;
  int micro_batch = 0;
  int hidden = 0;
  int heads = 0;
  int layers = 0;
  int seq = 0;
  int tp = 0;
  int dp = 0;
  int pp = 0;
  double measured_s = 0;  // the file gives milliseconds

  bool operator==(const VtrainRow&) const = default;
};

// Reads either file format: an optional UTF-8 byte-order mark, a header line that must be one
// of the two published headers (11 columns, or 12 with "Parameters (billion)" first), then one
// row per line (blank lines ignored, CRLF accepted). Every field is a positive integer, except
// the parameter count and the iteration time (positive numbers); # GPUs must equal tp dp pp.
// Anything else is an InputError at `source`:line with the key "column N (name)".
std::vector<VtrainRow> ParseVtrainCsv(std::string_view text, const std::string& source);
std::vector<VtrainRow> LoadVtrainCsv(const std::string& path);

ModelSpec VtrainModel(const VtrainRow& row);
TrainingSpec VtrainTraining(const VtrainRow& row);  // fp16, Adam, the row's global batch
ParallelConfig VtrainLayout(const VtrainRow& row);  // full recompute, 1F1B, no SP, no ZeRO

// "tp+dp", "pp", "tp+dp+pp", ...: which of the three dimensions are above 1 ("single" when
// none); " x-node" is appended when the tensor-parallel group crosses nodes.
std::string LayoutFamily(const VtrainRow& row, int gpus_per_node);
// "h1024 L12" for the single-node file (no parameter column), "39.1B" for the multi-node one.
std::string ModelFamily(const VtrainRow& row);

struct VtrainResult {
  VtrainRow row;
  std::string rejected;  // "" when simulated; else why ptdp rejects the row (Megatron's rules)
  std::string memory_problem;  // "" when every stage fits the GPU's memory (simulated anyway)
  double simulated_s = 0;
  StepBreakdown breakdown;
  double host_overhead_s = 0;  // the part of breakdown.compute_s the GPU waits for the host
  double peak_memory_bytes = 0;
  double error() const { return (simulated_s - row.measured_s) / row.measured_s; }  // signed
};

// Simulates every row (SimulatePlan with MegatronDeepSpeedOptions, cost_options.h) on `cluster`.
std::vector<VtrainResult> ReplayVtrain(const ClusterSpec& cluster, std::span<const VtrainRow> rows);

// Mean absolute percentage error over the simulated rows (rejected ones excluded; a row that
// does not fit in memory counts), as a fraction.
double VtrainMape(std::span<const VtrainResult> results);

// ---- Calibration: the profile's free constants fitted on measured rows (by the validation
// protocol, the single-node file only). Three constants: gpu.memory_efficiency,
// host.kernel_launch_us and host.microbatch_overhead_us; the GEMM table is taken as given.
struct VtrainFit {
  double memory_efficiency = 0;
  double kernel_launch_s = 0;
  double microbatch_overhead_s = 0;
  double mape = 0;  // of `rows` at the optimum
  int evaluations = 0;
};

// Minimises VtrainMape over `rows` by a pattern search from a fixed start (memory efficiency
// 0.8, launch 40 us, micro-batch overhead 1 ms), halving its steps down to a final grid of
// 0.005, 0.25 us and 10 us; the result is on that grid and does not depend on the constants
// `cluster` already holds. Memory efficiency stays in [0.3, 1], the overheads >= 0.
VtrainFit FitVtrain(const ClusterSpec& cluster, std::span<const VtrainRow> rows);

// `cluster` with the three fitted constants.
ClusterSpec WithVtrainFit(ClusterSpec cluster, const VtrainFit& fit);

// ---- Reports.
struct VtrainReportOptions {
  int worst_rows = 10;  // the largest |error| rows listed with their breakdown
};

// Markdown: a summary line per file (rows, simulated, rejected, over memory, MAPE, bias, rows
// within 10%, worst), tables per model size and per layout family (rows, MAPE, mean signed
// error), the worst rows with the simulator's breakdown (compute and its host-bound part, TP,
// PP and DP communication, optimizer, bubble), and every rejected or over-memory row.
std::string VtrainMarkdown(std::span<const VtrainResult> results, int gpus_per_node,
                           const VtrainReportOptions& options = {});

// A predicted-vs-measured scatter plot, log-log, one colour per layout family (circles: single-
// node rows, squares: multi-node rows), the y = x line and a +-10% band; an SVG document.
std::string VtrainScatterSvg(std::span<const VtrainResult> results, int gpus_per_node,
                             const std::string& title);

}  // namespace ptdp
