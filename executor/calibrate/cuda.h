// `ptdp calibrate --backend cuda`: measures one GPU as the executor's CUDA backend uses it and
// describes it as a hardware profile (core/cluster_spec.h), so that `ptdp validate --backend
// cuda` compares the executor with a simulation of the same machine.
//
//   MeasureCudaCompute(device, options)    cuBLASLt matrix products over the GEMM grid in bf16,
//                                          fp16 and fp32 (fp32 accumulation; the executor's
//                                          three kinds of linear-layer products) and, on GPUs
//                                          with FP8 units, in FP8 as Transformer Engine runs
//                                          its linears (E4M3 operands, bf16 output), the device's
//                                          copy bandwidth, the host's launch cost of a kernel,
//                                          and the executor's own flash-style attention kernel
//                                          (Backend::AttentionBlockForward / Backward) by
//                                          sequence length
//   CalibratedCudaCluster(base, figures)   the profile: measured keys replaced, the rest
//                                          (links, NICs, allowances) kept from `base`
//   CalibratedCudaProfileYaml(...)         its file, with a header saying how each figure was
//                                          taken
//
// Timing follows the device tool's method: device events around the region, a warm-up first,
// random (never zero) inputs, the median of `repeats` timings, each timing long enough
// (min_timing_s) that the events' resolution does not matter. Without a usable GPU (or built
// without CUDA) MeasureCudaCompute throws std::runtime_error saying why.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ptdp {

// core/cluster_spec.h (not included: this header is also read by nvcc, in C++17).
struct ClusterSpec;

struct CudaCalibrateOptions {
  int device = 0;
  // The GEMM grid: every (m, n, k) with each value from the axis, timed as the executor's three
  // kinds of products (forward X W^T, input gradient dY W, weight gradient dY^T X), the point's
  // time the mean of the three medians.
  std::vector<int64_t> gemm_axis = {256, 1024, 2048, 4096, 8192};
  int64_t peak_size = 8192;  // square products for each dtype's best rate
  // The executor's attention, (batch 1) x heads of head_dim, causal, by sequence length.
  std::vector<int64_t> attention_seq = {512, 1024, 2048, 4096, 8192};
  int64_t attention_heads = 16;
  int64_t attention_head_dim = 128;
  int repeats = 7;
  double min_timing_s = 5e-3;
  int64_t copy_bytes = int64_t{1} << 30;  // one buffer of the device-to-device copy
  int launch_count = 20000;               // empty kernels launched back to back

  static CudaCalibrateOptions Quick();  // two values per axis, fewer repeats: about 10 s
};

struct CudaGemmFigure {
  int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // achieved, mean over the three kinds of product
};

struct CudaAttentionFigure {
  int64_t seq_length = 0;
  double forward_flops_per_s = 0;   // causal forward: 2 s^2 d per head (the kernels' own count)
  double backward_flops_per_s = 0;  // 2.5 x the forward's FLOPs, its recomputation included
};

struct CudaComputeFigures {
  std::string device_name;
  int compute_capability = 0;  // major * 10 + minor
  int multiprocessors = 0;
  int64_t memory_bytes = 0;         // cudaMemGetInfo total
  int64_t used_at_start_bytes = 0;  // total - free after the context and cuBLAS were made
  std::string driver;               // "13.0" (cudaDriverGetVersion)
  // Best square product of peak_size per dtype.
  double bf16_flops_per_s = 0, fp16_flops_per_s = 0, fp32_flops_per_s = 0;
  std::vector<CudaGemmFigure> gemm_bf16, gemm_fp16, gemm_fp32;  // sorted by (m, n, k)
  // FP8 (compute capability 8.9 and later): E4M3 x E4M3 -> bf16, fp32 accumulation, the one
  // operand order cuBLASLt's FP8 kernels take (A transposed: Transformer Engine keeps transposed
  // copies so that all three of a linear's products run so); empty on GPUs without FP8 units
  // or when cuBLASLt offers no FP8 algorithm (fp8_skipped says why).
  double fp8_flops_per_s = 0;
  std::vector<CudaGemmFigure> gemm_fp8;
  std::string fp8_skipped;
  int64_t copy_bytes = 0;                      // the copy's buffer
  double copy_bytes_per_s = 0;                 // cudaMemcpyAsync device to device, read + write
  double launch_s = 0;                         // host time per launch of an empty kernel
  std::vector<CudaAttentionFigure> attention;  // the executor's fp32 flash-style kernel
  std::string attention_dtype = "fp32";
  int64_t attention_heads = 0, attention_head_dim = 0;
};

// Lines saying each figure go to `progress` when not null.
CudaComputeFigures MeasureCudaCompute(const CudaCalibrateOptions& options, std::ostream* progress);

struct CudaCalibrationRecord {
  std::string name;     // the profile's name
  std::string command;  // the command that measured it
  std::string date;     // UTC, ISO 8601
  std::string host;
  std::string base;  // the profile the unmeasured keys come from
  double elapsed_s = 0;
};

// The profile: gpu.name the device's, the GEMM grid (bf16 products over `base`'s datasheet bf16
// peak, at most 1), the FP8 grid when measured (over base's FP8 peak, at most 1; else base's),
// memory_efficiency (the copy over base's datasheet bandwidth, at most 1), hbm_bytes (the
// device's), reserved_bytes (what the CUDA context and cuBLAS held at start), flash_attention (the
// executor's kernel over the bf16 peak: what the simulator needs to time the attention the executor
// runs), host.kernel_launch_s (the launch cost). The datasheet peaks, links, NICs and latencies are
// `base`'s. Rounded to 3 significant digits; the result is what its YAML reads back as.
ClusterSpec CalibratedCudaCluster(const ClusterSpec& base, const CudaComputeFigures& figures,
                                  const CudaCalibrationRecord& record);

// The file: a header (where, when, the command, each measured figure and how, what is kept
// from `base`), then WriteClusterYaml's text. Throws InternalError unless it parses back to
// `cluster`.
std::string CalibratedCudaProfileYaml(const ClusterSpec& cluster, const CudaComputeFigures& figures,
                                      const CudaCalibrationRecord& record);

}  // namespace ptdp
