// Time of one kernel on one GPU, from the hardware profile: matrix products at the peak of the
// training precision times a shape-dependent efficiency (the profile's gemm_efficiency table),
// bounded below by their memory traffic; memory-bound kernels at the achieved HBM bandwidth.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cluster_spec.h"
#include "core/training_spec.h"

namespace ptdp {

// Dense peak FLOP/s of the GPU's matrix units in `precision` (profile: peak_*_tflops); fp8 is
// the FP8 peak (0 on GPUs without FP8 units).
double PeakFlops(const GpuSpec& gpu, Precision precision);

// The peak MFU is measured against: the precision's own, but bf16's for fp8 training (whose
// non-linear work runs in bf16), so that bf16 and fp8 plans compare on one scale.
double MfuPeakFlops(const GpuSpec& gpu, Precision precision);

// The profile's GEMM efficiency table prepared for repeated lookups (its axes found and their
// log2 taken once, the last shapes looked up remembered). Requires a sorted full grid of at most
// kMaxAxis values per dimension (ReadCluster guarantees both). Refers to `gpu`'s table: keep the
// GpuSpec alive. Not thread-safe (the memo); make one per thread.
class GemmTable {
 public:
  static constexpr int kMaxAxis = 32;
  explicit GemmTable(const GpuSpec& gpu) : GemmTable(gpu.gemm_efficiency) {}
  // Any table of the profile (gemm_efficiency, gemm_efficiency_fp8); refers to it: keep it alive.
  explicit GemmTable(const std::vector<GemmEfficiencyPoint>& table);

  // Efficiency for C[m x n] = A[m x k] B[k x n], interpolated linearly in log2(m), log2(n),
  // log2(k) on the grid and clamped to its edges. Dimensions must be positive.
  double Efficiency(int64_t m, int64_t n, int64_t k) const;

 private:
  double Interpolate(int64_t m, int64_t n, int64_t k) const;

  const GemmEfficiencyPoint* points_;
  int n_[3];                      // axis lengths: m, n, k
  double log_[3][kMaxAxis];       // log2 of each axis's values
  double inv_step_[3][kMaxAxis];  // 1 / (log_[a][i + 1] - log_[a][i])
  struct Memo {
    int64_t m, n, k;
    double efficiency;
  };
  static constexpr int kMemo = 16;  // a configuration has about a dozen distinct GEMM shapes
  mutable Memo memo_[kMemo];
  mutable int memo_size_ = 0;
  // Per axis, the dimensions already placed on the grid (their shapes share them: tokens,
  // hidden / tp, ...), so each distinct dimension pays for one log2 and one search.
  struct AxisMemo {
    int64_t value;
    int lower;
    double weight;
  };
  static constexpr int kAxisMemo = 8;
  mutable AxisMemo axis_memo_[3][kAxisMemo];
  mutable int axis_memo_size_[3] = {0, 0, 0};
};

// GemmTable(gpu).Efficiency(m, n, k), for one-off lookups.
double GemmEfficiency(const GpuSpec& gpu, int64_t m, int64_t n, int64_t k);

// One GEMM (or `batch` independent GEMMs of the same shape, as a batched kernel runs them).
struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t batch = 1;

  double flops() const { return 2.0 * m * n * k * batch; }  // a multiply-add is 2 FLOP
  bool operator==(const GemmShape&) const = default;
};

// Roofline time of a GEMM: max(flops / (peak * efficiency), bytes / (HBM bandwidth *
// memory_efficiency)). A batched GEMM looks its efficiency up as one product of m * batch rows
// (it fills the GPU's SMs like one). `bytes` is the HBM traffic (operands read, result written).
double GemmTime(const GpuSpec& gpu, Precision precision, const GemmShape& shape, double bytes);
double GemmTime(const GemmTable& table, const GpuSpec& gpu, Precision precision,
                const GemmShape& shape, double bytes);
// A grouped GEMM (the experts of a MoE layer: `batch` GEMMs of their own m, run as one kernel):
// each group's efficiency is the table's at its own shape (m rows, not m x batch).
double GroupedGemmTime(const GemmTable& table, const GpuSpec& gpu, Precision precision,
                       const GemmShape& shape, double bytes);

// Roofline time of a kernel of many small matrix products (the Mamba-2 SSD chunked scan,
// layer_work.h SsdScanWork): max(flops / (peak * the table's efficiency for `shape` looked up as
// GemmTime does, m * batch rows), memory time).
double ScanTime(const GemmTable& table, const GpuSpec& gpu, Precision precision,
                const GemmShape& shape, double flops, double bytes);

// Time of a memory-bound kernel moving `bytes` (reads plus writes) through HBM.
double MemoryTime(const GpuSpec& gpu, double bytes);

// A flash-style attention efficiency table (GpuSpec::flash_attention / fused_attention),
// interpolated linearly in log2(sequence length) and clamped at its ends. Refers to the table:
// keep it alive. An empty table answers 0 (no figure).
class AttentionTable {
 public:
  explicit AttentionTable(const std::vector<AttentionEfficiencyPoint>& table) : table_(&table) {}
  bool empty() const { return table_->empty(); }
  double Forward(int64_t seq_length) const { return Interpolate(seq_length, false); }
  double Backward(int64_t seq_length) const { return Interpolate(seq_length, true); }

 private:
  double Interpolate(int64_t seq_length, bool backward) const;
  const std::vector<AttentionEfficiencyPoint>* table_;
};

// One flash-style attention kernel (forward, or backward with its recomputation) over `heads`
// (micro-batch x heads per GPU) heads of `seq_length` queries and keys of head size `head_dim`,
// doing `flops` (the kernels' own count: forward 2 s^2 d per head for the causal mask, backward
// 2.5 x that) and moving `bytes` through HBM (Q, K, V, the output and their gradients):
// max(flops / (16-bit peak x efficiency), memory time), the efficiency from `table` at
// seq_length, or, when the table is empty, from the GEMM table for the score product's shape
// (m = heads x s, n = s, k = head_dim).
double AttentionTime(const AttentionTable& table, const GemmTable& gemm16, const GpuSpec& gpu,
                     bool backward, int64_t seq_length, int64_t heads, int64_t head_dim,
                     double flops, double bytes);

}  // namespace ptdp
