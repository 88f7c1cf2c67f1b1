// Public validation of the cost model: Narayanan et al. 2021 (SC'21, arXiv 2104.04473), Table 1,
// ten GPT models trained with Megatron-LM on Selene (DGX A100 80 GB), as collected in
// shared/reference/narayanan2021-table1.yaml. Each row is simulated in its exact layout (fp16,
// full recomputation, 1F1B or interleaved as published) with the dgx-a100-80gb profile and
// Megatron 2021's behaviour (cost_options.h), and compared with the published step time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/training_spec.h"

namespace ptdp {

struct NarayananRow {
  double params_billion = 0;
  int heads = 0;
  int hidden = 0;
  int layers = 0;
  int tp = 0;
  int pp = 0;
  int gpus = 0;
  int global_batch = 0;
  int micro_batch = 0;
  int layers_per_virtual_stage = 0;  // 0: not interleaved
  double tflops_per_gpu = 0;         // published
};

// The ten rows of Table 1, in the paper's order.
std::span<const NarayananRow> NarayananTable1();

// The row's model (seq 2048, vocabulary 51200, 4h GeLU MLP, LayerNorm, learned positions, tied
// embeddings, biases), training (fp16, Adam, the row's global batch) and layout (dp = gpus /
// (tp pp), full recomputation, interleaved with (layers / pp) / layers_per_virtual_stage chunks
// when given, else 1F1B).
ModelSpec NarayananModel(const NarayananRow& row);
TrainingSpec NarayananTraining(const NarayananRow& row);
ParallelConfig NarayananLayout(const NarayananRow& row);

// The published step time: the paper's FLOP count (Narayanan et al. 2021, Eq. 3) over the
// published throughput, F / (tflops_per_gpu * gpus).
double PublishedStepTime(const NarayananRow& row);

struct ValidationResult {
  NarayananRow row;
  double published_s = 0;
  double simulated_s = 0;    // event simulation (SimulateStep) of the cost model's durations
  double closed_form_s = 0;  // ClosedFormStepTime of the same durations
  double simulated_tflops_per_gpu = 0;  // Eq. 3 FLOPs over the simulated time, as the paper
  double error() const { return (simulated_s - published_s) / published_s; }  // signed
};

// Simulates every row on `cluster` (normally the dgx-a100-80gb profile).
std::vector<ValidationResult> ValidateNarayanan2021(const ClusterSpec& cluster);

// Mean of |error| over the results.
double MeanAbsoluteError(std::span<const ValidationResult> results);

// A markdown table: one line per row (model, layout, published and simulated seconds and
// TFLOP/s per GPU, closed form, error), then the mean absolute error.
std::string ValidationMarkdown(std::span<const ValidationResult> results);

// ---- Calibration set: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models"), measured end-to-end step times of four GPT models on Selene (DGX A100
// 80 GB, fp16), with full recomputation and with selective recomputation plus sequence
// parallelism; step times as reproduced in calculon-ai/calculon calculon/megatron/validation.py,
// layouts from its validation/*.json. Used to calibrate the A100 profile's two efficiency
// levels; never the validation table above.
struct KorthikantiRow {
  const char* name = "";
  int heads = 0;
  int hidden = 0;
  int layers = 0;
  int tp = 0;
  int pp = 0;
  int global_batch = 0;  // = micro-batches per step (dp = 1)
  int micro_batch = 0;
  int chunks = 0;             // virtual stages per pipeline rank
  bool selective_sp = false;  // selective recompute + sequence parallel (else full recompute)
  double step_s = 0;          // measured
};
std::span<const KorthikantiRow> Korthikanti2022Table();

// The row's model (as NarayananModel), fp16 training and layout.
ModelSpec KorthikantiModel(const KorthikantiRow& row);
ParallelConfig KorthikantiLayout(const KorthikantiRow& row);

// Step time of a row with Megatron2022Options: the event simulation, or the closed form.
double SimulateKorthikanti(const ClusterSpec& cluster, const KorthikantiRow& row,
                           bool closed_form = false);

// The two efficiency levels that fit the calibration set best: every gemm_efficiency point
// scaled by gemm_scale, and memory_efficiency replaced, chosen on a grid (gemm_scale in steps of
// 0.01, memory_efficiency in steps of 0.01) to minimise the mean squared relative error of the
// closed-form step times over the eight rows.
struct Calibration {
  double gemm_scale = 1;
  double memory_efficiency = 0;
  double mean_abs_error = 0;  // at the optimum, closed form
};
Calibration CalibrateOnKorthikanti2022(const ClusterSpec& cluster);

// `cluster` with its GEMM table scaled and its memory efficiency replaced.
ClusterSpec WithEfficiencies(ClusterSpec cluster, double gemm_scale, double memory_efficiency);

}  // namespace ptdp
