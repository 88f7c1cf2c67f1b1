#include "simulator/op_time.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/error.h"

namespace ptdp {
namespace {

// log2 within 2e-7 (absolute), cheaper than libm's: x = m 2^e with m in [0.5, 1), and
// ln m = 2 atanh(u), u = (m - 1) / (m + 1) in [-1/3, 0), by its series to u^11. The
// interpolation weights need no more; the cost model calls this in its hot path.
double Log2(double x) {
  // x > 0 and finite: split the IEEE-754 bits into exponent and a mantissa in [0.5, 1).
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1022;
  const double m = std::bit_cast<double>((bits & 0x000fffffffffffffULL) | 0x3fe0000000000000ULL);
  const double u = (m - 1) / (m + 1), u2 = u * u;
  const double series =
      u * (2 + u2 * (2.0 / 3 + u2 * (2.0 / 5 + u2 * (2.0 / 7 + u2 * (2.0 / 9 + u2 * 2.0 / 11)))));
  return exponent + series * 1.4426950408889634074;  // 1 / ln 2
}

// Position of lx = log2(x) on an ascending axis of `count` log2 values (inv_step[i]: one over
// the gap after value i): the index of the lower grid point and the weight of the upper one,
// clamped to the axis.
void Locate(double lx, int count, const double* axis, const double* inv_step, int* lower,
            double* weight) {
  if (count == 1 || lx <= axis[0]) {
    *lower = 0, *weight = 0;
    return;
  }
  if (lx >= axis[count - 1]) {
    *lower = count - 2, *weight = 1;
    return;
  }
  int lo = 0, hi = count - 1;  // axis[lo] < lx < axis[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (axis[mid] <= lx ? lo : hi) = mid;
  }
  *lower = lo;
  *weight = (lx - axis[lo]) * inv_step[lo];
}

}  // namespace

double PeakFlops(const GpuSpec& gpu, Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return gpu.peak_bf16_flops;
    case Precision::kFp16:
      return gpu.peak_fp16_flops;
    case Precision::kFp32:
      return gpu.peak_fp32_flops;
    case Precision::kFp8:
      return gpu.peak_fp8_flops;
  }
  return gpu.peak_fp32_flops;
}

double MfuPeakFlops(const GpuSpec& gpu, Precision precision) {
  return PeakFlops(gpu, precision == Precision::kFp8 ? Precision::kBf16 : precision);
}

GemmTable::GemmTable(const std::vector<GemmEfficiencyPoint>& t) : points_(t.data()) {
  const int64_t size = static_cast<int64_t>(t.size());
  PTDP_CHECK(size > 0);
  // Sorted full grid (ReadCluster): k varies fastest, then n, then m.
  int64_t nk = 1;
  while (nk < size && t[nk].m == t[0].m && t[nk].n == t[0].n) ++nk;
  int64_t nn = 1;
  while (nn * nk < size && t[nn * nk].m == t[0].m) ++nn;
  const int64_t nm = size / (nn * nk);
  PTDP_CHECK(nm * nn * nk == size && nm <= kMaxAxis && nn <= kMaxAxis && nk <= kMaxAxis);
  n_[0] = static_cast<int>(nm), n_[1] = static_cast<int>(nn), n_[2] = static_cast<int>(nk);
  for (int i = 0; i < n_[0]; ++i) log_[0][i] = Log2(static_cast<double>(t[i * nn * nk].m));
  for (int i = 0; i < n_[1]; ++i) log_[1][i] = Log2(static_cast<double>(t[i * nk].n));
  for (int i = 0; i < n_[2]; ++i) log_[2][i] = Log2(static_cast<double>(t[i].k));
  for (int a = 0; a < 3; ++a) {
    for (int i = 0; i + 1 < n_[a]; ++i) inv_step_[a][i] = 1 / (log_[a][i + 1] - log_[a][i]);
  }
}

double GemmTable::Efficiency(int64_t m, int64_t n, int64_t k) const {
  for (int i = 0; i < memo_size_; ++i) {
    if (memo_[i].m == m && memo_[i].n == n && memo_[i].k == k) return memo_[i].efficiency;
  }
  const double e = Interpolate(m, n, k);
  memo_[memo_size_ < kMemo ? memo_size_++ : (m + n + k) % kMemo] = {m, n, k, e};
  return e;
}

double GemmTable::Interpolate(int64_t m, int64_t n, int64_t k) const {
  PTDP_CHECK(m > 0 && n > 0 && k > 0);
  int lower[3];
  double w[3];
  const int64_t dims[3] = {m, n, k};
  for (int a = 0; a < 3; ++a) {
    const AxisMemo* hit = nullptr;
    for (int i = 0; i < axis_memo_size_[a]; ++i) {
      if (axis_memo_[a][i].value == dims[a]) hit = &axis_memo_[a][i];
    }
    if (hit != nullptr) {
      lower[a] = hit->lower, w[a] = hit->weight;
      continue;
    }
    Locate(Log2(static_cast<double>(dims[a])), n_[a], log_[a], inv_step_[a], &lower[a], &w[a]);
    if (axis_memo_size_[a] < kAxisMemo) {
      axis_memo_[a][axis_memo_size_[a]++] = {dims[a], lower[a], w[a]};
    }
  }
  // Trilinear interpolation over the (up to) eight surrounding grid points.
  double e = 0;
  for (int dm = 0; dm < (n_[0] > 1 ? 2 : 1); ++dm) {
    for (int dn = 0; dn < (n_[1] > 1 ? 2 : 1); ++dn) {
      for (int dk = 0; dk < (n_[2] > 1 ? 2 : 1); ++dk) {
        const double weight =
            (dm ? w[0] : 1 - w[0]) * (dn ? w[1] : 1 - w[1]) * (dk ? w[2] : 1 - w[2]);
        if (weight == 0) continue;
        e += weight * points_[((lower[0] + dm) * n_[1] + (lower[1] + dn)) * n_[2] + (lower[2] + dk)]
                          .efficiency;
      }
    }
  }
  return e;
}

double GemmEfficiency(const GpuSpec& gpu, int64_t m, int64_t n, int64_t k) {
  return GemmTable(gpu).Efficiency(m, n, k);
}

double GemmTime(const GpuSpec& gpu, Precision precision, const GemmShape& s, double bytes) {
  return GemmTime(GemmTable(gpu), gpu, precision, s, bytes);
}

double GemmTime(const GemmTable& table, const GpuSpec& gpu, Precision precision, const GemmShape& s,
                double bytes) {
  const double efficiency = table.Efficiency(s.m * s.batch, s.n, s.k);
  const double compute_s = s.flops() / (PeakFlops(gpu, precision) * efficiency);
  return std::max(compute_s, MemoryTime(gpu, bytes));
}

double GroupedGemmTime(const GemmTable& table, const GpuSpec& gpu, Precision precision,
                       const GemmShape& s, double bytes) {
  const double efficiency = table.Efficiency(s.m, s.n, s.k);
  return std::max(s.flops() / (PeakFlops(gpu, precision) * efficiency), MemoryTime(gpu, bytes));
}

double ScanTime(const GemmTable& table, const GpuSpec& gpu, Precision precision, const GemmShape& s,
                double flops, double bytes) {
  const double efficiency = table.Efficiency(s.m * s.batch, s.n, s.k);
  return std::max(flops / (PeakFlops(gpu, precision) * efficiency), MemoryTime(gpu, bytes));
}

double MemoryTime(const GpuSpec& gpu, double bytes) {
  return bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency);
}

double AttentionTable::Interpolate(int64_t seq_length, bool backward) const {
  const std::vector<AttentionEfficiencyPoint>& t = *table_;
  if (t.empty()) return 0;
  const auto value = [&](size_t i) { return backward ? t[i].backward : t[i].forward; };
  if (seq_length <= t.front().seq_length) return value(0);
  if (seq_length >= t.back().seq_length) return value(t.size() - 1);
  size_t hi = 1;
  while (t[hi].seq_length < seq_length) ++hi;
  const double lo_x = Log2(static_cast<double>(t[hi - 1].seq_length));
  const double hi_x = Log2(static_cast<double>(t[hi].seq_length));
  const double w = (Log2(static_cast<double>(seq_length)) - lo_x) / (hi_x - lo_x);
  return (1 - w) * value(hi - 1) + w * value(hi);
}

double AttentionTime(const AttentionTable& table, const GemmTable& gemm16, const GpuSpec& gpu,
                     bool backward, int64_t seq_length, int64_t heads, int64_t head_dim,
                     double flops, double bytes) {
  PTDP_CHECK(seq_length > 0 && heads > 0 && head_dim > 0);
  const double efficiency =
      table.empty() ? gemm16.Efficiency(seq_length * heads, seq_length, head_dim)
                    : (backward ? table.Backward(seq_length) : table.Forward(seq_length));
  return std::max(flops / (gpu.peak_bf16_flops * efficiency), MemoryTime(gpu, bytes));
}

}  // namespace ptdp
