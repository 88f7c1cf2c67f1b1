// The calibrate room (executor/calibrate/): `ptdp calibrate`'s measurement of this machine as a
// hardware profile, on CPUs here and on a GPU in cuda.h; it builds on backend/ and comm/ only.
//
// `ptdp calibrate --backend cpu`: measures this machine and describes it as a hardware profile
// (core/cluster_spec.h, the format of hwprofiles/), so that the simulator's predictions can be
// checked against the executor here. A "GPU" is one executor rank: one CPU core running one
// OpenBLAS thread, as `ptdp execute` runs its ranks.
//
//   MeasureCpuCompute(backend, options)       sgemm peak and GEMM-efficiency grid through the
//                                             executor's own Backend::Gemm; streaming bandwidth
//                                             and the executor's element-wise kernels
//   MeasureComm(world, backend, options)      MPI between the ranks of this job (collective over
//                                             `world`; the figures are meaningful on rank 0)
//   CalibratedCluster(base, ...)              the profile: measured keys replaced, the others
//                                             (inter-node network, allowances, keys added later)
//                                             kept from `base`
//   CalibratedProfileYaml(cluster, ...)       its file: WriteClusterYaml's text with a header and
//                                             a comment on every key saying how it was obtained
//
// Conventions follow the profile's own: the GEMM grid holds achieved FLOP/s over the peak, for
// C[m x n] = A[m x k] B[k x n]; memory rates count bytes read plus bytes written; all-reduce bus
// bandwidth is nccl-tests' busbw = algbw * 2(n - 1)/n (doc/PERFORMANCE.md). Every figure is the
// median of repeated timings (the machine's cores are shared with other work). Nothing here
// prints: progress lines go to the stream the caller passes (or nowhere when it is null).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"
#include "executor/backend/backend.h"
#include "executor/comm/comm.h"

namespace ptdp {

struct CalibrateOptions {
  // The GEMM grid: every (m, n, k) with each value from the axis (the cost model interpolates
  // in log2 and clamps at the edges). Each point is timed as the executor's three kinds of
  // linear-layer products: forward X W^T (NT), input gradient dY W (NN), weight gradient
  // dY^T X (TN); its time is the mean of the three medians.
  std::vector<int64_t> gemm_axis = {32, 128, 512, 2048};
  int64_t peak_size = 2048;    // the peak: median of `repeats` square NN products of this size
  int repeats = 5;             // timings per figure (the median is kept)
  double min_timing_s = 2e-3;  // one timing repeats its kernel until at least this long
  // Streaming bandwidth: arrays of this many bytes each, far beyond the per-core caches, so
  // the figure is main memory's (the "HBM" of a CPU rank).
  int64_t stream_bytes = int64_t{256} << 20;
  // The executor's element-wise kernels are also timed on tensors of this size (a typical
  // activation of the small models the CPU path trains): reported, not used in the profile.
  int64_t kernel_bytes = int64_t{1} << 20;
  // MPI: all-reduce bus bandwidth and point-to-point bandwidth at these message sizes; the
  // profile takes the best of each (the plateau of nccl-tests' curve on a GPU; on a CPU the
  // curve falls again once the buffers outgrow the caches, the comments keep every size).
  std::vector<int64_t> allreduce_bytes = {int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20,
                                          int64_t{16} << 20, int64_t{64} << 20};
  int64_t latency_bytes = 8;  // small messages for the latencies

  // A smaller, noisier measurement (two values per GEMM axis, fewer repeats, smaller arrays)
  // that takes about a second, for tests and smoke checks.
  static CalibrateOptions Quick();
};

// A kernel's achieved rate on `bytes` (the bytes the cost model counts for it: reads plus
// writes), for the profile's comments.
struct KernelRate {
  std::string name;
  int64_t bytes = 0;
  double bytes_per_s = 0;
};

struct CpuComputeFigures {
  double peak_fp32_flops = 0;  // median square sgemm of options.peak_size
  int64_t peak_size = 0;
  // Achieved FLOP/s over the peak, sorted by (m, n, k), a full grid; values above 1 (a shape
  // timed faster than the peak) are written as 1 and counted in clamped_points.
  std::vector<GemmEfficiencyPoint> gemm_efficiency;
  int clamped_points = 0;
  int64_t stream_bytes = 0;
  double copy_bytes_per_s = 0;      // Backend::Copy (memmove), read + write
  double add_bytes_per_s = 0;       // Backend::Add, y += x: two reads and a write
  std::vector<KernelRate> kernels;  // the executor's element-wise kernels at kernel_bytes
  int blas_threads = 1;
};

// Single-process: run it while no other rank is busy. `backend` must be the CPU backend (its
// Gemm is cblas_sgemm, its element-wise kernels the executor's loops). Lines saying each
// figure go to `progress` when not null; `on_shape` (when set) is called after each GEMM shape
// with the shapes done and their number, for a progress line (a `progress` line follows each
// m of the grid, after axis^2 shapes).
CpuComputeFigures MeasureCpuCompute(
    Backend& backend, const CalibrateOptions& options, std::ostream* progress,
    const std::function<void(size_t done, size_t total)>& on_shape = {});

struct CommFigures {
  int ranks = 0;
  int hosts = 0;  // distinct host names among the ranks
  // (bytes, busbw) per options.allreduce_bytes, and the best busbw.
  std::vector<std::pair<int64_t, double>> allreduce_busbw;
  double allreduce_busbw_bytes_per_s = 0;
  double allreduce_small_s = 0;   // all-reduce of latency_bytes
  double p2p_latency_s = 0;       // half a ping-pong of latency_bytes between ranks 0 and 1
  double p2p_bytes_per_s = 0;     // one way, ranks 0 and 1: the best over allreduce_bytes
  int64_t p2p_bytes = 0;          // the message size of that best
  int64_t process_rss_bytes = 0;  // largest resident set among the ranks after MPI's start-up

  bool operator==(const CommFigures&) const = default;
};

// Collective over `world` (at least 2 ranks). Measures before allocating anything large, the
// resident set first; checks one all-reduce's sums before timing (throws if they are wrong).
// Progress lines (rank 0 only) go to `progress` when not null.
CommFigures MeasureComm(Comm& world, Backend& backend, const CalibrateOptions& options,
                        std::ostream* progress);

// The figures as "key value" lines, the form the MPI job hands back to `ptdp calibrate`; the
// parser reads exactly that form back (an InputError names source:line otherwise).
std::string CommFiguresText(const CommFigures& figures);
CommFigures ParseCommFigures(std::string_view text, const std::string& source);

// The resident set of this process (VmRSS), 0 where /proc is unavailable.
int64_t ProcessRssBytes();

struct MachineInfo {
  std::string host;
  std::string cpu_model;     // /proc/cpuinfo "model name", or "unknown CPU"
  int cores = 0;             // online cores
  int64_t memory_bytes = 0;  // physical memory
  std::string blas;          // OpenBLAS's configuration string
  double load_average = -1;  // /proc/loadavg, last minute (other work running), -1 if unknown
};
MachineInfo ReadMachineInfo();

// How and where the figures were taken, for the profile's header and comments.
struct CalibrationRecord {
  std::string name;     // the profile's name
  std::string command;  // the command line that measured it
  std::string date;     // UTC, ISO 8601
  MachineInfo machine;
  int ranks_per_node = 0;  // gpus_per_node: the ranks the MPI job ran (default: the cores)
  std::string base;        // where the keys that are not measured come from
  double elapsed_s = 0;
};

// The profile. Measured: the GPU's peak FLOP/s (bf16 and fp16 too: the CPU executor computes
// them in fp32), GEMM grid, hbm_bandwidth (copy) and memory_efficiency (Backend::Add over
// copy, at most 1), hbm_bytes (physical memory / ranks_per_node), reserved_bytes (the ranks'
// resident set after MPI's start-up), gpus_per_node, and with `comm`: nvlink_gb_per_s (point-
// to-point), nvlink_busbw_gb_per_s (all-reduce busbw), nvlink_step_latency_us (half a ping-
// pong) and collective_base_latency_us (a small all-reduce less its 2(n - 1) steps, at least
// 0). Everything else comes from `base`. Figures are rounded to 3 significant digits; the
// result is what its YAML reads back as.
ClusterSpec CalibratedCluster(const ClusterSpec& base, const CpuComputeFigures& compute,
                              const std::optional<CommFigures>& comm,
                              const CalibrationRecord& record);

// The profile file: a header (where, when, how; what is not measured) and WriteClusterYaml's
// text with a comment on each key; keys this code does not know (added to the format later)
// are marked as kept from the base profile. Throws InternalError unless the text parses back
// to `cluster`.
std::string CalibratedProfileYaml(const ClusterSpec& cluster, const CpuComputeFigures& compute,
                                  const std::optional<CommFigures>& comm,
                                  const CalibrationRecord& record);

}  // namespace ptdp
