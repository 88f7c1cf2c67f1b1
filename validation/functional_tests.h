// Megatron-LM's functional tests as ground truth for memory (and, where it means something, step
// time): each test case is a real Megatron command (tests/fixtures/megatron_corpus/
// functional-tests/<case>.sh) and NVIDIA's CI logged, on a DGX H100 or A100, what PyTorch's
// allocator counted on the last rank (rank world_size - 1, the TensorBoard writer's) and the
// iteration time (results/validation/megatron-functional-tests/golden.tsv, written by
// scripts/functional_tests_golden.py, which says what each column is and how the cases are split
// into a fit half and a test half).
//
// Each case is read as `ptdp check` reads it, simulated in its layout on the GPU it ran on, and
// the last pipeline stage's memory (the logging rank's: Megatron's rank order puts the last rank
// in the last stage) is compared with what was measured:
//   - peak allocated: everything the model says the stage holds at once (weights, gradients,
//     optimizer state, activations, FSDP buffers), without the allocator's and libraries'
//     allowance (StageMemory::reserved_bytes, fragmentation_bytes);
//   - allocated after the step: the weights, gradients, optimizer state and cuBLAS workspaces;
//   - the fit verdict: the stage's whole estimate (with the allowance) against the GPU's memory.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "core/plan.h"

namespace ptdp {

// One row of golden.tsv.
struct FunctionalTestRow {
  int line = 0;                           // 1-based, in its file
  std::string case_name, model_dir, gpu;  // gpu: "h100" | "a100"
  int64_t gpus = 0;
  double allocated_bytes = 0, max_allocated_bytes = 0;
  double iteration_time_s = 0;  // 0: none logged
  int steps = 0;
  std::string gpus_from;  // h100-recipe | gb200-recipe | default
  bool test_half = false;

  bool operator==(const FunctionalTestRow&) const = default;
};

// Whether `text` starts with golden.tsv's header.
bool IsFunctionalTestsTsv(std::string_view text);
// The header, then one row per line; a wrong header, field count or number is an InputError at
// `source`:line naming the column.
std::vector<FunctionalTestRow> ParseFunctionalTestsTsv(std::string_view text,
                                                       const std::string& source);

struct FunctionalTestResult {
  FunctionalTestRow row;
  std::string not_simulated;             // why the case was not simulated; "" when it was
  std::string layout;                    // the layout read from the command
  int not_modelled = 0;                  // flags `check` says it does not simulate
  double predicted_peak_bytes = 0;       // peak allocated (see above)
  double predicted_allocated_bytes = 0;  // after the step
  double predicted_total_bytes = 0;      // with the allowance: what the fit verdict reads
  bool fits = true;
  double predicted_step_s = 0;
  bool moe = false;  // a mixture-of-experts model

  double peak_error() const { return predicted_peak_bytes / row.max_allocated_bytes - 1; }
  double allocated_error() const { return predicted_allocated_bytes / row.allocated_bytes - 1; }
  double time_error() const { return predicted_step_s / row.iteration_time_s - 1; }
};

// The cluster profile a row's GPU stands for: dgx-h100 or dgx-a100-80gb.
std::string FunctionalTestCluster(const FunctionalTestRow& row);

// A case read from its launch script: the plan to simulate (its cluster left to the replay), or
// why there is none.
struct FunctionalTestCase {
  FunctionalTestRow row;
  std::string not_simulated;  // "" when `plan` holds the case
  int not_modelled = 0;
  Plan plan;
};

// Reads `command` (the case's launch script, from `source`) with the row's GPU count, as `ptdp
// check` reads it. A command ptdp cannot read or simulate gives a case whose not_simulated says
// why.
FunctionalTestCase ReadFunctionalTest(const FunctionalTestRow& row, std::string_view command,
                                      const std::string& source);

// Simulates the case on `cluster`.
FunctionalTestResult ReplayFunctionalTest(const FunctionalTestCase& test,
                                          const ClusterSpec& cluster);

// ---- Calibration of the host's costs (HostSpec) on the timed cases of `tests` (simulated, with
// a measured iteration time): the cost of issuing one operation, the host time of one step and,
// where a mixture-of-experts case is among them, the host time of a MoE layer's pass (its
// forward also waits for the GPU once: cost_model.cc Times), by a pattern search for the least
// mean |error| of the iteration time from a fixed start (20 us, 10 ms, 0), halving its steps
// down to a grid of 0.25 us, 100 us and 10 us; the result is on that grid and does not depend on
// the host costs `cluster` holds. The per-micro-batch cost is kept at 0: fitted as a further
// constant on the H100 fit half it came out 0, and on A100 (1.16 ms) it slowed Korthikanti et
// al. 2022's runs, the fit set of the A100 profile's levels, by 2-4%. (Until the MoE layer's
// host time was modelled, the fit took the dense cases only.)
struct HostFit {
  HostSpec host;
  double mape = 0;  // over the cases fitted on
  int cases = 0, evaluations = 0;
};
HostFit FitFunctionalTestsHost(const ClusterSpec& cluster,
                               std::span<const FunctionalTestCase> tests);

// Markdown: the summary per GPU and half (cases, peak allocated error: mean |error|, median,
// beyond 25%; allocated after the step; predicted not to fit; iteration time), then one row per
// case, then the cases not simulated with why.
std::string FunctionalTestsMarkdown(std::span<const FunctionalTestResult> results);

}  // namespace ptdp
