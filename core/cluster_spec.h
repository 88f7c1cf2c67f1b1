// ClusterSpec: a hardware profile (hwprofiles/*.yaml), the data the cost model times things with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

// One measured (or derived) point of a GEMM efficiency table: the fraction of the GPU's peak
// FLOP/s that a C[m x n] = A[m x k] B[k x n] product of this shape achieves in the training
// precision. A table's points form a full grid over their distinct m, n and k values and are
// sorted by m, then n, then k (the reader checks the first and sorts); the cost model
// interpolates in log2 of each dimension.
struct GemmEfficiencyPoint {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  double efficiency = 0;  // (0, 1]

  bool operator==(const GemmEfficiencyPoint&) const = default;
};

// Throughput of a flash-style attention kernel (core/cost_options.h AttentionBackend) at one
// sequence length, as fractions of the 16-bit matrix peak: forward and backward, causal mask,
// FLOPs counted as the kernels' benchmarks count them (forward 4 s^2 d per head, halved for the
// causal mask; backward 2.5 x the forward, its recomputation of the scores included). Points are
// sorted by seq_length; the cost model interpolates in log2(seq_length) and clamps at the ends.
struct AttentionEfficiencyPoint {
  int64_t seq_length = 0;
  double forward = 0;   // (0, 1]
  double backward = 0;  // (0, 1]

  bool operator==(const AttentionEfficiencyPoint&) const = default;
};

// One accelerator. Rates are SI: FLOP/s, bytes, bytes per second.
struct GpuSpec {
  std::string name;
  double peak_bf16_flops = 0;  // dense, tensor cores
  double peak_fp16_flops = 0;
  double peak_fp32_flops = 0;  // without TF32
  // Dense FP8 (E4M3 / E5M2) tensor-core peak; 0 when the GPU has no FP8 matrix units (A100).
  double peak_fp8_flops = 0;
  int64_t hbm_bytes = 0;  // as the driver reports it (nvidia-smi total), not the datasheet "GB"
  double hbm_bandwidth_bytes_per_s = 0;
  // Achieved fraction of hbm_bandwidth_bytes_per_s for streaming (memory-bound) kernels,
  // counting bytes read plus bytes written.
  double memory_efficiency = 0;
  // GEMM efficiency by shape: a full grid, sorted by (m, n, k).
  std::vector<GemmEfficiencyPoint> gemm_efficiency;
  // The same for FP8 GEMMs, fractions of peak_fp8_flops; present exactly when peak_fp8_flops is.
  std::vector<GemmEfficiencyPoint> gemm_efficiency_fp8;
  // Flash-style attention throughput by sequence length (AttentionEfficiencyPoint): the
  // FlashAttention kernels (attention backend `flash`) and cuDNN's fused attention (`fused`).
  // Either may be empty: the cost model then times the kernel's two products at the GEMM
  // table's efficiency for their shapes (op_time.h AttentionTime).
  std::vector<AttentionEfficiencyPoint> flash_attention;
  std::vector<AttentionEfficiencyPoint> fused_attention;
  // CUDA compute capability, major.minor (8.0 for A100, 9.0 for H100); 0 when not given. The
  // libraries size their workspaces by it (memory_model.h WorkspaceBytes).
  double compute_capability = 0;
  // Streaming multiprocessors; 0 when not given. Transformer Engine's TP-overlap kernels take
  // some of them from the GEMMs they run beside (layer_work.h TpOverlap).
  int sm_count = 0;
  // Device memory no tensor can use: CUDA context, NCCL buffers.
  int64_t reserved_bytes = 0;
  // Fraction of the rest lost to the caching allocator's fragmentation, [0, 1).
  double fragmentation = 0;

  bool operator==(const GpuSpec&) const = default;
};

// Host-side overheads of a training framework on a system, in seconds. The GPU can run a kernel
// only after the host has launched it: with small kernels the host, not the GPU, sets the pace.
struct HostSpec {
  // Host time to issue one GPU operation (a kernel or a collective) from the framework: Python
  // and PyTorch dispatch plus cudaLaunchKernel. The cost model lets the GPU run each pass's
  // operations as the host issues them, one every kernel_launch_s (cost_model.cc).
  double kernel_launch_s = 0;
  // Host time per micro-batch and pipeline stage outside the transformer layers' kernels (the
  // schedule's bookkeeping, fetching and broadcasting the batch, the loss), during which the
  // GPU of that stage waits.
  double microbatch_overhead_s = 0;
  // Host time of one optimizer step (launching the multi-tensor Adam, gradient-norm and copy
  // kernels, the loss-scale and NaN checks, logging), once per step on every GPU; it runs beside
  // those kernels, so the step takes the longer of the two (cost_model.cc StageCostsOf).
  double optimizer_step_s = 0;
  // Host time of a mixture-of-experts layer's forward or backward beyond the operations the cost
  // model issues for it (the router's top-k, auxiliary-loss and histogram kernels, the tokens'
  // permutation and its index bookkeeping). The forward also waits for the GPU once, where the
  // dispatcher copies the tokens per expert to the host (the all-to-all's splits, the grouped
  // GEMM's m_splits): the host's lead is lost there (cost_model.cc Times).
  double moe_layer_s = 0;

  bool operator==(const HostSpec&) const = default;
};

// A system built of identical nodes. Bandwidths are per GPU and per direction.
struct ClusterSpec {
  std::string name;
  std::string description;
  GpuSpec gpu;
  int gpus_per_node = 0;
  double nvlink_bytes_per_s = 0;        // datasheet intra-node link rate per GPU
  double nvlink_busbw_bytes_per_s = 0;  // achieved NCCL bus bandwidth inside a node
  int nics_per_node = 0;
  double nic_bytes_per_s = 0;        // datasheet rate of one NIC
  double nic_busbw_bytes_per_s = 0;  // achieved NCCL bus bandwidth per NIC across nodes
  // Collective latency, NCCL's own model (src/graph/tuning.cc, ring algorithm): a base cost per
  // collective plus a cost per algorithm step, by the link the step crosses.
  double collective_base_latency_s = 0;
  double nvlink_step_latency_s = 0;
  double nic_step_latency_s = 0;
  // What the host side (Python framework, PyTorch dispatch, CUDA launch) costs; zeros when a
  // profile does not model it (the YAML's optional `host` section).
  HostSpec host;
  // What-if changes made to the profile for this run (`--cluster-set`, core/cluster_override.h),
  // as typed (KEY=VALUE), in order; the fields above already hold them. Empty for a profile
  // as read.
  std::vector<std::string> overrides;

  bool operator==(const ClusterSpec&) const = default;
};

}  // namespace ptdp
