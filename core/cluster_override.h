// What-if hardware: `--cluster-set KEY=VALUE` changes one number of a hardware profile
// (ClusterSpec) for one run: "a network twice as fast" (network.nic_gb_per_s=x2), "HBM +50%"
// (gpu.hbm_bytes=+50%), "an NVLink domain of 72 GPUs" (node.gpus_per_node=72).
//
// Keys are the profile YAML's own (core/spec_yaml.h ReadCluster), as dotted paths
// (gpu.hbm_bytes) or by their last part alone (hbm_bytes; every one is unique), in the YAML's
// unit (TFLOP/s, GB/s, bytes, microseconds, counts, fractions). A value is absolute (`450`,
// `96e9`) or relative: `x2` or `*2` (times), `+50%`, `-25%`.
//
// Fields that describe one thing move together, unless the same request sets the follower
// itself: a datasheet rate moves its achieved rate by the same factor (nic_gb_per_s moves
// nic_busbw_gb_per_s, nvlink_gb_per_s moves nvlink_busbw_gb_per_s; an absolute value by the
// ratio of new to old), peak_bf16_tflops moves peak_fp16_tflops (the same 16-bit tensor cores),
// and gpus_per_node moves nics_per_node (the NICs per GPU stay; a fractional NIC count is
// refused). The result is read back through the profile reader, so a change cannot make a
// profile that a file could not hold: every failure is an InputError naming `--cluster-set`, the
// key and what is wrong.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_spec.h"

namespace ptdp {

// One `[CLUSTER:]KEY=VALUE`, read.
struct ClusterOverride {
  std::string cluster;     // the profile's name before ':', "" = every cluster
  std::string key;         // the canonical dotted key ("network.nic_gb_per_s")
  bool relative = false;   // `amount` is a factor (x2, *2, +50% -> 1.5, -25% -> 0.75)
  double amount = 0;       // the factor, or the absolute value in the key's YAML unit
  std::string assignment;  // KEY=VALUE as typed (without the CLUSTER: prefix): what is recorded
  std::string text;        // all of it as typed

  bool operator==(const ClusterOverride&) const = default;
};

// Reads `[CLUSTER:]KEY=VALUE`. An unknown key (with the closest one, or the list of keys), a
// key that is no number (name, gemm_efficiency), a missing '=' or a bad value (`abc`, `x0`,
// `-150%`, a fractional count) is an InputError naming --cluster-set and the key.
ClusterOverride ParseClusterOverride(std::string_view assignment);

// Applies, in order, the overrides whose `cluster` is "" or `cluster.name` (the others are left
// out), moving followers as the header says, then checks the result as the profile reader does
// (and takes its values as that reader gives them back, so that a plan file holding the cluster
// round-trips exactly) and appends each applied `assignment` to `cluster.overrides`. On an
// InputError `cluster` is unchanged.
void ApplyClusterOverrides(const std::vector<ClusterOverride>& overrides, ClusterSpec& cluster);
void ApplyClusterOverride(const ClusterOverride& override, ClusterSpec& cluster);

// Refuses (InputError naming --cluster-set) an override whose CLUSTER: prefix names none of
// `cluster_names` (the clusters of the command).
void CheckOverrideClusters(const std::vector<ClusterOverride>& overrides,
                           const std::vector<std::string>& cluster_names);

// Every key, dotted, in the profile's order.
std::vector<std::string> ClusterOverrideKeys();

// One line for outputs: "dgx-h100 changed (--cluster-set): nic_gb_per_s=x2, hbm_bytes=+50%";
// "" when the cluster has no overrides.
std::string ClusterOverridesLine(const ClusterSpec& cluster);

}  // namespace ptdp
