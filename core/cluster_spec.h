// ClusterSpec: a hardware profile (hwprofiles/*.yaml), the data the cost model times things with.
#pragma once

#include <cstdint>
#include <string>

namespace ptdp {

// One accelerator. Rates are SI: FLOP/s, bytes, bytes per second.
struct GpuSpec {
  std::string name;
  double peak_bf16_flops = 0;  // dense, tensor cores
  double peak_fp16_flops = 0;
  double peak_fp32_flops = 0;  // without TF32
  int64_t hbm_bytes = 0;  // as the driver reports it (nvidia-smi total), not the datasheet "GB"
  double hbm_bandwidth_bytes_per_s = 0;

  bool operator==(const GpuSpec&) const = default;
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

  bool operator==(const ClusterSpec&) const = default;
};

}  // namespace ptdp
