// Fidelity on today's stack: the Megatron-Core pre-training runs NVIDIA measured on DGX-H100 and
// published in Megatron-Bridge's performance summaries (results/validation/megatron-bridge/
// h100_pretrain.csv: 37 runs, NeMo releases 25.09 to 26.06, with layouts, precision and the
// measured tokens/s per GPU). Each row ptdp can express is simulated in its layout and compared
// by tokens/s per GPU; the others are counted with why.
//
// What a row becomes (BridgePlan), from its columns and the `notes` column (the release's
// performance recipe, as the dataset's README describes it):
//  - the model: the preset of the same architecture (models.yaml: Llama3-8B -> llama3-8b,
//    Llama3-70B -> llama3-70b, Llama3.1-405B -> llama3-405b), at the row's sequence length;
//  - precision: bf16; fp8-cs -> fp8 with tensorwise (current) scaling and FP8 primary weights
//    (the recipe bf16_with_fp8_current_scaling_mixed sets fp8_param_gather); fp8-ds -> delayed;
//    fp8-blockwise -> blockwise; first and last layers in FP8 (the recipes say
//    first_last_layers_bf16=False);
//  - layout: tp, cp (with Megatron's default exchange, p2p ring attention: the recipes do not set
//    cp_comm_type), pp, dp = GPUs / (tp pp cp), the row's micro-batch and global batch, the
//    interleaved schedule with vp chunks when vp is given (a row flagged as inconsistent, the
//    table's GA x DP x MBS not its GBS, takes its recipe's micro-batch, said in its settings);
//    sequence parallelism when tp > 1 (the recipes' rule); the distributed optimizer (every
//    recipe), or Megatron-FSDP optim_grads_params when the fsdp column is above 0 (the strategy the
//    recipes name);
//    --account-for-embedding/loss-in-pipeline-split when the notes say so; recompute as the
//    notes say ("recompute=full/block/N layers" -> full recompute of N layers per chunk,
//    "recompute=selective" -> selective), else none;
//  - software: Megatron-Core with cuDNN's fused attention (Transformer Engine's choice on H100
//    in these containers; `attention` overrides it), --overlap-grad-reduce and
//    --overlap-param-gather (the recipes' distributed-optimizer settings), --tp-comm-overlap when
//    the notes turn it on ("TP comm overlap ON", "tp_comm_overlap=True") and sequence
//    parallelism is on.
// Not expressible (yet), each counted with its reason: mixture-of-experts models (expert
// parallelism, routers), models without a preset, rows without a measured tokens/s, rows whose
// layout breaks Megatron's rules as ptdp reads them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cost_options.h"
#include "core/plan.h"
#include "simulator/simulate.h"

namespace ptdp {

// One row of h100_pretrain.csv; 0 for n/a or empty numeric fields.
struct BridgeRow {
  int line = 0;  // 1-based line in its file
  std::string release, model, precision;
  int num_gpus = 0, gbs = 0, mbs = 0, seq_length = 0;
  int tp = 0, pp = 0, cp = 0, vp = 0, ep = 0, etp = 0, fsdp = 0;
  double tokens_per_s_per_gpu = 0;  // measured; 0 when the table gives none
  double model_tflops_per_gpu = 0;
  std::string notes, flags;

  bool operator==(const BridgeRow&) const = default;
};

// Reads the CSV: the dataset's header line exactly, then one row per line (quoted fields with
// "" escapes, as the file writes its notes). A wrong header, field count or number is an
// InputError at `source`:line naming the column.
std::vector<BridgeRow> ParseBridgeCsv(std::string_view text, const std::string& source);
std::vector<BridgeRow> LoadBridgeCsv(const std::string& path);
// Whether `text` starts with the dataset's header (to tell the format from vTrain's).
bool IsBridgeCsv(std::string_view text);

struct BridgeSetup {
  std::string unexpressible;          // why the row cannot be simulated; "" when it can
  Plan plan;                          // when it can
  std::vector<std::string> settings;  // what was read from the notes, for the report
};
BridgeSetup BridgePlan(const BridgeRow& row, const ClusterSpec& cluster,
                       AttentionBackend attention = AttentionBackend::kFused);

struct BridgeResult {
  BridgeRow row;
  BridgeSetup setup;
  bool simulated = false;
  double simulated_tokens_per_s_per_gpu = 0;
  double simulated_step_s = 0, measured_step_s = 0;
  double peak_memory_bytes = 0;
  std::string memory_problem = {};
  StepBreakdown breakdown = {};
  // Signed relative error of the simulated tokens/s per GPU.
  double error() const {
    return (simulated_tokens_per_s_per_gpu - row.tokens_per_s_per_gpu) / row.tokens_per_s_per_gpu;
  }
};

std::vector<BridgeResult> ReplayBridge(const ClusterSpec& cluster, std::span<const BridgeRow> rows,
                                       AttentionBackend attention = AttentionBackend::kFused);

// Mean |error| over the simulated rows among `results` whose release is (or, with `exclude`, is
// not) `release`; "" for all. As a fraction.
double BridgeMape(std::span<const BridgeResult> results, const std::string& release = "",
                  bool exclude = false);

// A BF16 row whose notes carry the mark "[bf16 level fit row]": a row the BF16 GEMM level is
// fitted on (results/validation/dgxc-benchmarking/: NeMo 24.09's Llama 3.1 8B and 405B rows,
// chosen by the rule written there before their errors were computed).
bool IsBf16FitRow(const BridgeRow& row);
bool HasBf16FitRows(std::span<const BridgeRow> rows);

// Whether a row is in a fit set: a BF16 fit row; or a row the FP8 level is fitted on: an FP8 row
// of the given releases that ptdp could express when the shipped level was fitted (issue 10:
// dense models without context parallelism). Rows expressible since (context parallelism,
// mixture-of-experts) are held out whatever their release, so the constant was chosen without
// them.
bool InBridgeFit(const BridgeRow& row, const std::vector<std::string>& releases);

// ---- Calibration: one free constant, fitted by a golden-section search for the least mean
// |error| of tokens/s over [0.5, 1.5] (to 1e-4), the result rounded to 0.001: where `rows` hold
// BF16 fit rows, the level of the profile's BF16 GEMM table (its values scaled by `gemm_scale`)
// on them; else the level of its FP8 GEMM table on the InBridgeFit rows of the given releases.
struct BridgeFit {
  bool bf16 = false;  // which table was scaled
  double gemm_scale = 1;
  double mape = 0;  // on the fitted rows
  int rows = 0;
};
BridgeFit FitBridge(const ClusterSpec& cluster, std::span<const BridgeRow> rows,
                    const std::vector<std::string>& releases,
                    AttentionBackend attention = AttentionBackend::kFused);
// `cluster` with its FP8 (BF16) GEMM table scaled (values capped at 1).
ClusterSpec WithFp8GemmScale(ClusterSpec cluster, double scale);
ClusterSpec WithBf16GemmScale(ClusterSpec cluster, double scale);

// Issue 30's scoring rule (fixed before any MoE change): why a held-out row is not scored, or
// "". A row more than 40% below a row of the same model and layout (GPUs, precision, batch,
// micro-batch, sequence, tp, pp, cp, vp, ep, etp, fsdp) in the adjacent release of that model
// (the one before or after it in `rows`' order of releases) is a suspected regression; a row
// the dataset flags as differing from its recipe ("table vs recipe mismatch") is not scored
// until it is replayed in the recipe's layout.
std::string BridgeNotScored(const BridgeRow& row, std::span<const BridgeRow> rows);

// Markdown: one table row per dataset row (release, model, GPUs, precision, layout, measured
// and simulated tokens/s per GPU, error, the settings read from the notes), the mean |error|
// in and out of the fitted releases, the held-out rows by family under issue 30's scoring
// (dense; MoE with the expert group inside a node; across nodes), and the rows not simulated
// with their reasons.
std::string BridgeMarkdown(std::span<const BridgeResult> results,
                           const std::vector<std::string>& fitted_releases);

}  // namespace ptdp
