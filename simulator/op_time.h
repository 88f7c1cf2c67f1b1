// Time of one kernel on one GPU, from the hardware profile: matrix products at the peak of the
// training precision times a shape-dependent efficiency (the profile's gemm_efficiency table),
// bounded below by their memory traffic; memory-bound kernels at the achieved HBM bandwidth.
#pragma once

#include <cstdint>

#include "core/cluster_spec.h"
#include "core/training_spec.h"

namespace ptdp {

// Dense peak FLOP/s of the GPU's matrix units in `precision` (profile: peak_*_tflops).
double PeakFlops(const GpuSpec& gpu, Precision precision);

// The profile's GEMM efficiency table prepared for repeated lookups (its axes found and their
// log2 taken once, the last shapes looked up remembered). Requires a sorted full grid of at most
// kMaxAxis values per dimension (ReadCluster guarantees both). Refers to `gpu`'s table: keep the
// GpuSpec alive. Not thread-safe (the memo); make one per thread.
class GemmTable {
 public:
  static constexpr int kMaxAxis = 32;
  explicit GemmTable(const GpuSpec& gpu);

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

// Time of a memory-bound kernel moving `bytes` (reads plus writes) through HBM.
double MemoryTime(const GpuSpec& gpu, double bytes);

}  // namespace ptdp
