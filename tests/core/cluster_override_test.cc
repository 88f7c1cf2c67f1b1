// --cluster-set's core: reading [CLUSTER:]KEY=VALUE, applying it to a profile with the fields
// that move together, and refusing what would make a profile a file could not hold.
#include "core/cluster_override.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/presets.h"
#include "core/spec_yaml.h"

namespace ptdp {
namespace {

// `cluster` with every assignment applied at once.
ClusterSpec Applied(const std::string& cluster, const std::vector<std::string>& assignments) {
  ClusterSpec c = ClusterPreset(cluster);
  std::vector<ClusterOverride> overrides;
  for (const std::string& a : assignments) overrides.push_back(ParseClusterOverride(a));
  ApplyClusterOverrides(overrides, c);
  return c;
}

// The error text of parsing, or of applying to `cluster`; "" when there is none.
std::string ErrorOf(const std::vector<std::string>& assignments,
                    const std::string& cluster = "dgx-h100") {
  try {
    Applied(cluster, assignments);
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().key, "--cluster-set") << e.what();
    return e.what();
  }
  return "";
}

TEST(ClusterOverride, ParsesAbsoluteAndRelativeValues) {
  const ClusterOverride times = ParseClusterOverride("network.nic_gb_per_s=x2");
  EXPECT_EQ(times.cluster, "");
  EXPECT_EQ(times.key, "network.nic_gb_per_s");
  EXPECT_TRUE(times.relative);
  EXPECT_EQ(times.amount, 2);
  EXPECT_EQ(times.assignment, "network.nic_gb_per_s=x2");

  const ClusterOverride star = ParseClusterOverride("nic_gb_per_s=*2");  // the leaf alone
  EXPECT_EQ(star.key, "network.nic_gb_per_s");
  EXPECT_EQ(star.amount, 2);

  const ClusterOverride up = ParseClusterOverride("gpu.hbm_bytes=+50%");
  EXPECT_TRUE(up.relative);
  EXPECT_EQ(up.amount, 1.5);
  EXPECT_EQ(ParseClusterOverride("hbm_bandwidth_gb_per_s=-25%").amount, 0.75);

  const ClusterOverride absolute = ParseClusterOverride("dgx-h100:gpus_per_node=72");
  EXPECT_EQ(absolute.cluster, "dgx-h100");
  EXPECT_EQ(absolute.key, "node.gpus_per_node");
  EXPECT_FALSE(absolute.relative);
  EXPECT_EQ(absolute.amount, 72);
  EXPECT_EQ(absolute.assignment, "gpus_per_node=72");
  EXPECT_EQ(absolute.text, "dgx-h100:gpus_per_node=72");
  EXPECT_EQ(ParseClusterOverride("hbm_bytes=96e9").amount, 96e9);
}

TEST(ClusterOverride, AppliesAbsoluteAndRelativeValuesInTheYamlsUnits) {
  const ClusterSpec base = ClusterPreset("dgx-h100");
  const ClusterSpec c = Applied(
      "dgx-h100", {"hbm_bytes=+50%", "hbm_bandwidth_gb_per_s=4800", "gpu.memory_efficiency=x0.9",
                   "nic_step_latency_us=-50%", "kernel_launch_us=50"});
  EXPECT_EQ(c.gpu.hbm_bytes, 128281214976);  // 85,520,809,984 x 1.5, a whole number of bytes
  EXPECT_EQ(c.gpu.hbm_bandwidth_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(c.gpu.memory_efficiency, 0.77 * 0.9);
  EXPECT_DOUBLE_EQ(c.nic_step_latency_s, 4.8e-6);
  EXPECT_DOUBLE_EQ(c.host.kernel_launch_s, 50e-6);
  // Nothing else moved; the changes are recorded as typed, in order.
  EXPECT_EQ(c.nic_bytes_per_s, base.nic_bytes_per_s);
  EXPECT_EQ(c.gpu.peak_bf16_flops, base.gpu.peak_bf16_flops);
  EXPECT_EQ(c.gpu.gemm_efficiency, base.gpu.gemm_efficiency);
  EXPECT_EQ(c.name, "dgx-h100");
  EXPECT_EQ(c.overrides,
            (std::vector<std::string>{"hbm_bytes=+50%", "hbm_bandwidth_gb_per_s=4800",
                                      "gpu.memory_efficiency=x0.9", "nic_step_latency_us=-50%",
                                      "kernel_launch_us=50"}));
  EXPECT_TRUE(base.overrides.empty());
}

TEST(ClusterOverride, ARateMovesItsAchievedRateByTheSameFactor) {
  const ClusterSpec base = ClusterPreset("dgx-h100");  // NIC 50 GB/s, 47 achieved
  const ClusterSpec doubled = Applied("dgx-h100", {"nic_gb_per_s=x2"});
  EXPECT_EQ(doubled.nic_bytes_per_s, 100e9);
  EXPECT_EQ(doubled.nic_busbw_bytes_per_s, 94e9);
  // An absolute rate: by the ratio of new to old.
  const ClusterSpec set = Applied("dgx-h100", {"network.nic_gb_per_s=25"});
  EXPECT_EQ(set.nic_busbw_bytes_per_s, 23.5e9);
  const ClusterSpec nvlink = Applied("dgx-h100", {"nvlink_gb_per_s=+100%"});
  EXPECT_EQ(nvlink.nvlink_bytes_per_s, 900e9);
  EXPECT_EQ(nvlink.nvlink_busbw_bytes_per_s, 740e9);
  // The 16-bit peaks are one unit.
  const ClusterSpec peak = Applied("dgx-h100", {"peak_bf16_tflops=x2"});
  EXPECT_EQ(peak.gpu.peak_bf16_flops, 1978e12);
  EXPECT_EQ(peak.gpu.peak_fp16_flops, 1978e12);
  EXPECT_EQ(peak.gpu.peak_fp8_flops, base.gpu.peak_fp8_flops);
  // A follower set in the same request keeps its own value, in either order.
  for (const auto& order : {std::vector<std::string>{"nic_gb_per_s=x2", "nic_busbw_gb_per_s=60"},
                            std::vector<std::string>{"nic_busbw_gb_per_s=60", "nic_gb_per_s=x2"}}) {
    const ClusterSpec both = Applied("dgx-h100", order);
    EXPECT_EQ(both.nic_bytes_per_s, 100e9);
    EXPECT_EQ(both.nic_busbw_bytes_per_s, 60e9);
  }
}

TEST(ClusterOverride, GpusPerNodeKeepsTheNicsPerGpu) {
  EXPECT_EQ(Applied("dgx-h100", {"gpus_per_node=72"}).nics_per_node, 72);
  EXPECT_EQ(Applied("vtrain-a100", {"gpus_per_node=72"}).nics_per_node, 36);  // 4 NICs per 8
  EXPECT_EQ(Applied("vtrain-a100", {"gpus_per_node=72", "nics_per_node=18"}).nics_per_node, 18);
  EXPECT_EQ(ErrorOf({"gpus_per_node=9"}, "vtrain-a100"),
            "--cluster-set: gpus_per_node=9: network.nics_per_node would be 4.5 in vtrain-a100, "
            "not a whole number (hint: network.nics_per_node moves with node.gpus_per_node: give "
            "network.nics_per_node too)");
}

TEST(ClusterOverride, UnknownKeysAreRefusedNamingTheKey) {
  const std::string unknown = ErrorOf({"nic_bandwidth=x2"});
  EXPECT_NE(unknown.find("--cluster-set: unknown key \"nic_bandwidth\""), std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("keys: gpu.peak_bf16_tflops, "), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("network.nic_gb_per_s"), std::string::npos) << unknown;
  EXPECT_NE(ErrorOf({"hbm_byte=x2"}).find("did you mean hbm_bytes?"), std::string::npos);
  EXPECT_NE(ErrorOf({"gpu.nic_gb_per_s=x2"}).find("did you mean nic_gb_per_s?"), std::string::npos);
  EXPECT_NE(
      ErrorOf({"gpu.name=B200"}).find("\"gpu.name\" is not a number --cluster-set can change"),
      std::string::npos);
  EXPECT_EQ(ClusterOverrideKeys().size(), 23u);
}

TEST(ClusterOverride, BadValuesAreRefusedNamingTheKey) {
  EXPECT_EQ(ErrorOf({"nic_gb_per_s=x0"}),
            "--cluster-set: network.nic_gb_per_s: a factor must be above 0, got \"x0\" (hint: a "
            "value is a number (in GB/s), x<factor>, *<factor>, +<p>% or -<p>%)");
  EXPECT_EQ(ErrorOf({"hbm_bytes=-150%"}),
            "--cluster-set: gpu.hbm_bytes: a decrease must be below 100%, got \"-150%\" (hint: a "
            "value is a number (in bytes), x<factor>, *<factor>, +<p>% or -<p>%)");
  EXPECT_EQ(ErrorOf({"nic_gb_per_s"}),
            "--cluster-set: expected KEY=VALUE, got \"nic_gb_per_s\" (hint: e.g. --cluster-set "
            "network.nic_gb_per_s=x2 or --cluster-set gpu.hbm_bytes=+50%)");
  for (const char* bad :
       {"nic_gb_per_s=abc", "nic_gb_per_s=", "nic_gb_per_s=x", "nic_gb_per_s=xabc",
        "nic_gb_per_s=50%", "nic_gb_per_s=+50", "nic_gb_per_s=-100%", "nic_gb_per_s=x-2",
        "nic_gb_per_s=nan", "nic_gb_per_s=inf", "nic_gb_per_s=x1e999", "gpus_per_node=7.5",
        "hbm_bytes=1.5", "nic_gb_per_s=-5"}) {
    const std::string e = ErrorOf({bad});
    EXPECT_NE(e.find("--cluster-set: "), std::string::npos) << bad << ": " << e;
    EXPECT_TRUE(e.find("nic_gb_per_s") != std::string::npos ||
                e.find("gpus_per_node") != std::string::npos ||
                e.find("hbm_bytes") != std::string::npos)
        << bad << ": " << e;
  }
}

TEST(ClusterOverride, TheResultIsCheckedAsTheProfileReaderChecksIt) {
  EXPECT_EQ(ErrorOf({"nic_busbw_gb_per_s=x2"}),
            "--cluster-set: nic_busbw_gb_per_s=x2: network.nic_busbw_gb_per_s: achieved bus "
            "bandwidth (94 GB/s) exceeds the NIC's rate (50 GB/s) (hint: network.nic_gb_per_s "
            "moves network.nic_busbw_gb_per_s along; set them together)");
  EXPECT_NE(ErrorOf({"hbm_bytes=1000000"}).find("gpu.reserved_bytes: must be at least 0 and below"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"gpus_per_node=0"}).find("gpus_per_node=0: node.gpus_per_node: "),
            std::string::npos);
  EXPECT_NE(ErrorOf({"memory_efficiency=x2"}).find("expected an efficiency between"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"nic_gb_per_s=x1e10"}).find("expected a rate between"), std::string::npos);
  EXPECT_NE(ErrorOf({"gpus_per_node=x1e300"}).find("too large"), std::string::npos);
  EXPECT_NE(ErrorOf({"hbm_bytes=x1e300"}).find("too large"), std::string::npos);
  // A factor of a zero changes nothing; FP8 needs FP8 units.
  EXPECT_NE(ErrorOf({"microbatch_overhead_us=x2"}).find("is 0 in dgx-h100"), std::string::npos);
  EXPECT_NE(ErrorOf({"peak_fp8_tflops=1000"}, "dgx-a100-80gb").find("has no FP8 units"),
            std::string::npos);
  // A refused request leaves the cluster as it was.
  ClusterSpec c = ClusterPreset("dgx-h100");
  EXPECT_THROW(
      ApplyClusterOverrides(
          {ParseClusterOverride("nic_gb_per_s=x2"), ParseClusterOverride("gpus_per_node=0")}, c),
      InputError);
  EXPECT_EQ(c, ClusterPreset("dgx-h100"));
}

TEST(ClusterOverride, TheChangedProfileRoundTripsThroughItsYaml) {
  // x1.1 of 47e9 has no exact decimal: the value kept is the one a file reads back.
  for (const auto& request : {std::vector<std::string>{"nic_gb_per_s=x1.1", "hbm_bytes=+7%"},
                              std::vector<std::string>{"host.moe_layer_us=x3"}}) {
    const ClusterSpec c = Applied("dgx-h100", request);
    EXPECT_EQ(ParseClusterYaml(WriteClusterYaml(c)), c);
  }
  const std::string yaml = WriteClusterYaml(Applied("dgx-h100", {"nic_gb_per_s=x2"}));
  EXPECT_NE(yaml.find("overrides:\n  - \"nic_gb_per_s=x2\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("nic_gb_per_s: 100\n"), std::string::npos) << yaml;
  // A profile without a host section gets one when a host cost is set.
  const ClusterSpec host = Applied("dgx-a100-80gb", {"kernel_launch_us=10"});
  EXPECT_EQ(ParseClusterYaml(WriteClusterYaml(host)), host);
}

TEST(ClusterOverride, AClusterPrefixAppliesToThatClusterOnly) {
  const ClusterSpec other = Applied("dgx-h100", {"hgx-h200:hbm_bytes=x2", "nic_gb_per_s=x2"});
  EXPECT_EQ(other.gpu.hbm_bytes, ClusterPreset("dgx-h100").gpu.hbm_bytes);
  EXPECT_EQ(other.overrides, std::vector<std::string>{"nic_gb_per_s=x2"});
  EXPECT_EQ(Applied("hgx-h200", {"hgx-h200:hbm_bytes=x2"}).gpu.hbm_bytes,
            2 * ClusterPreset("hgx-h200").gpu.hbm_bytes);
  const std::vector<ClusterOverride> typo = {ParseClusterOverride("dgx-h10:hbm_bytes=x2")};
  EXPECT_NO_THROW(CheckOverrideClusters(typo, {"dgx-h10", "hgx-h200"}));
  try {
    CheckOverrideClusters(typo, {"dgx-h100", "hgx-h200"});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--cluster-set: \"dgx-h10:hbm_bytes=x2\" names cluster \"dgx-h10\", not one of this "
              "command's (dgx-h100, hgx-h200) (hint: did you mean dgx-h100:hbm_bytes=x2? without a "
              "CLUSTER: prefix it changes every cluster)");
  }
}

TEST(ClusterOverride, OneLineSaysWhatChanged) {
  EXPECT_EQ(ClusterOverridesLine(ClusterPreset("dgx-h100")), "");
  EXPECT_EQ(ClusterOverridesLine(Applied("dgx-h100", {"nic_gb_per_s=x2", "hbm_bytes=+50%"})),
            "dgx-h100 changed (--cluster-set): nic_gb_per_s=x2, hbm_bytes=+50%");
}

}  // namespace
}  // namespace ptdp
