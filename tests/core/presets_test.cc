// Every built-in preset and profile parses, is self-consistent, and round-trips.
#include "core/presets.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.h"
#include "core/spec_yaml.h"

namespace ptdp {
namespace {

TEST(Presets, TheContractsPresetsExist) {
  for (const char* name :
       {"seed-example",    "megatron-1.7b",   "megatron-3.6b",   "megatron-7.5b",
        "megatron-18.4b",  "megatron-39.1b",  "megatron-76.1b",  "megatron-145.6b",
        "megatron-310.1b", "megatron-529.6b", "megatron-1t",     "gpt3-125m",
        "gpt3-350m",       "gpt3-1.3b",       "gpt3-2.7b",       "gpt3-6.7b",
        "gpt3-13b",        "gpt3-175b",       "llama2-7b",       "llama2-13b",
        "llama2-70b",      "llama3-8b",       "llama3-70b",      "llama3-405b",
        "mixtral-8x7b",    "qwen3-30b-a3b",   "qwen3-235b-a22b", "gpt-oss-120b",
        "deepseek-v3",     "nemotron-3-nano"}) {
    EXPECT_NO_THROW(ModelPreset(name)) << name;
  }
  for (const char* name : {"dgx-a100-80gb", "dgx-a100-40gb", "vtrain-a100", "dgx-h100", "hgx-h200",
                           "dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72", "cpu-local"}) {
    EXPECT_NO_THROW(ClusterPreset(name)) << name;
  }
  EXPECT_EQ(ModelPresetFiles().size(), 30u);
  EXPECT_EQ(ClusterPresetFiles().size(), 10u);
}

TEST(Presets, EveryModelPresetIsNamedAfterItsFileAndRoundTrips) {
  for (const PresetFile& file : ModelPresetFiles()) {
    const ModelSpec m = ModelPreset(file.name);
    EXPECT_EQ(m.name, file.name);
    // Heads of hidden / heads each, except the models whose cards say otherwise.
    if (!m.moe()) {
      EXPECT_EQ(m.kv_channels * m.num_attention_heads, m.hidden_size) << file.name;
    }
    EXPECT_EQ(ParseModelYaml(WriteModelYaml(m)), m) << file.name;
  }
}

TEST(Presets, EveryProfileIsNamedAfterItsFileAndRoundTrips) {
  for (const PresetFile& file : ClusterPresetFiles()) {
    const ClusterSpec c = ClusterPreset(file.name);
    EXPECT_EQ(c.name, file.name);
    EXPECT_EQ(ParseClusterYaml(WriteClusterYaml(c)), c) << file.name;
  }
}

TEST(Presets, ModernModelsUseTheirOwnArchitecture) {
  const ModelSpec llama = ModelPreset("llama3-70b");
  EXPECT_EQ(llama.num_query_groups, 8);
  EXPECT_EQ(llama.activation, Activation::kSwiglu);
  EXPECT_EQ(llama.normalization, Normalization::kRmsNorm);
  EXPECT_EQ(llama.position_embedding, PositionEmbedding::kRope);
  EXPECT_FALSE(llama.tied_embeddings);
  EXPECT_FALSE(llama.add_bias_linear);
  EXPECT_EQ(llama.vocab_size, 128256);
  EXPECT_EQ(ModelPreset("llama2-7b").vocab_size, 32000);
}

// The mixture-of-experts presets against their published totals and active parameters
// (model cards: Mixtral 46.7B / 12.9B, Qwen3 30.5B / 3.3B and 235B / 22B, DeepSeek-V3 671B /
// 37B without its MTP layer, GPT-OSS-120B 117B).
TEST(Presets, MixturesOfExpertsCountAsTheirCardsSay) {
  const auto billions = [](const char* name) {
    const ParameterCounts c = CountParameters(ModelPreset(name));
    return std::pair{c.total / 1e9, c.active / 1e9};
  };
  EXPECT_NEAR(billions("mixtral-8x7b").first, 46.7, 0.1);
  EXPECT_NEAR(billions("mixtral-8x7b").second, 12.9, 0.1);
  EXPECT_NEAR(billions("qwen3-30b-a3b").first, 30.5, 0.1);
  EXPECT_NEAR(billions("qwen3-30b-a3b").second, 3.3, 0.1);
  EXPECT_NEAR(billions("qwen3-235b-a22b").first, 235, 0.5);
  EXPECT_NEAR(billions("qwen3-235b-a22b").second, 22, 0.5);
  EXPECT_NEAR(billions("deepseek-v3").first, 671, 1);
  EXPECT_NEAR(billions("deepseek-v3").second, 37.5, 1);
  EXPECT_NEAR(billions("gpt-oss-120b").first, 117, 1);
  const ModelSpec ds = ModelPreset("deepseek-v3");
  EXPECT_EQ(ds.NumMoeLayers(), 58);
  EXPECT_FALSE(ds.IsMoeLayer(2));
  EXPECT_TRUE(ds.IsMoeLayer(3));
}

TEST(Presets, SeedExampleIsTheFoundingDocumentsModel) {
  const ModelSpec m = ModelPreset("seed-example");
  EXPECT_EQ(m.num_layers, 24);
  EXPECT_EQ(m.hidden_size, 2048);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_EQ(m.seq_length, 2048);
}

TEST(Presets, ProfilesCarryDatasheetFigures) {
  const ClusterSpec a100 = ClusterPreset("dgx-a100-80gb");
  EXPECT_EQ(a100.gpu.peak_bf16_flops, 312e12);
  EXPECT_EQ(a100.gpu.hbm_bytes, 81920LL * 1024 * 1024);
  EXPECT_EQ(a100.gpus_per_node, 8);
  EXPECT_EQ(a100.nic_bytes_per_s, 25e9);
  EXPECT_EQ(ClusterPreset("dgx-h100").gpu.peak_bf16_flops, 989e12);
  EXPECT_EQ(ClusterPreset("hgx-h200").gpu.hbm_bandwidth_bytes_per_s, 4800e9);
}

// The Blackwell profiles (issue 31) against the figures their files cite, written out here:
// dense peaks per GPU, HBM as nvidia-smi reports it, NVLink and NICs per GPU and direction.
struct Figures {
  double bf16_tflops, fp16_tflops, fp8_tflops, fp32_tflops;
  int64_t hbm_mib;
  double hbm_gb_per_s;
  double compute_capability;
  int sm_count;
  int gpus_per_node;
  double nvlink_gb_per_s;
  int nics_per_node;
  double nic_gb_per_s;
};

void ExpectFigures(const char* profile, const Figures& f) {
  SCOPED_TRACE(profile);
  const ClusterSpec c = ClusterPreset(profile);
  EXPECT_EQ(c.name, profile);
  EXPECT_EQ(c.gpu.peak_bf16_flops, f.bf16_tflops * 1e12);
  EXPECT_EQ(c.gpu.peak_fp16_flops, f.fp16_tflops * 1e12);
  EXPECT_EQ(c.gpu.peak_fp8_flops, f.fp8_tflops * 1e12);
  EXPECT_EQ(c.gpu.peak_fp32_flops, f.fp32_tflops * 1e12);
  EXPECT_EQ(c.gpu.hbm_bytes, f.hbm_mib * 1024 * 1024);
  EXPECT_EQ(c.gpu.hbm_bandwidth_bytes_per_s, f.hbm_gb_per_s * 1e9);
  EXPECT_EQ(c.gpu.compute_capability, f.compute_capability);
  EXPECT_EQ(c.gpu.sm_count, f.sm_count);
  EXPECT_EQ(c.gpus_per_node, f.gpus_per_node);
  EXPECT_EQ(c.nvlink_bytes_per_s, f.nvlink_gb_per_s * 1e9);
  EXPECT_EQ(c.nics_per_node, f.nics_per_node);
  EXPECT_EQ(c.nic_bytes_per_s, f.nic_gb_per_s * 1e9);
  // Achieved never above the line rate; the FP8 table comes with the FP8 peak.
  EXPECT_LE(c.nvlink_busbw_bytes_per_s, c.nvlink_bytes_per_s);
  EXPECT_LE(c.nic_busbw_bytes_per_s, c.nic_bytes_per_s);
  EXPECT_FALSE(c.gpu.gemm_efficiency_fp8.empty());
}

TEST(Presets, DgxB200CarriesItsDatasheetFigures) {
  ExpectFigures("dgx-b200",
                {// DGX B200 datasheet: 72 PFLOPS FP8; HGX B200: 36 PFLOPS FP16/BF16, both with
                 // sparsity (halved), and 600 TFLOPS FP32; for 8 GPUs.
                 .bf16_tflops = 2250,
                 .fp16_tflops = 2250,
                 .fp8_tflops = 4500,
                 .fp32_tflops = 75,
                 // nvidia-smi, NVIDIA/k8s-test-infra hardware/qx-b200.xml (driver 580.105.08).
                 .hbm_mib = 183359,
                 // DGX B200 datasheet: 64 TB/s for 8 GPUs.
                 .hbm_gb_per_s = 8000,
                 // developer.nvidia.com/cuda-gpus; a device query in pytorch/ao PR 4002.
                 .compute_capability = 10.0,
                 .sm_count = 148,
                 .gpus_per_node = 8,
                 // NVLink 5: 1.8 TB/s bidirectional per GPU.
                 .nvlink_gb_per_s = 900,
                 // 8x single-port ConnectX-7 at 400 Gb/s (DGX BasePOD reference architecture).
                 .nics_per_node = 8,
                 .nic_gb_per_s = 50});
}

TEST(Presets, DgxB300CarriesItsDatasheetFigures) {
  ExpectFigures("dgx-b300",
                {// HGX B300: 36 PFLOPS FP16/BF16 and 72 PFLOPS FP8 with sparsity (halved), 600
                 // TFLOPS FP32; for 8 GPUs.
                 .bf16_tflops = 2250,
                 .fp16_tflops = 2250,
                 .fp8_tflops = 4500,
                 .fp32_tflops = 75,
                 // nvidia-smi, "NVIDIA B300 SXM6 AC" (BAEYUNSEON/XE9780_Performance_Test).
                 .hbm_mib = 275040,
                 // DGX B300 datasheet: 8 TB/s per GPU.
                 .hbm_gb_per_s = 8000,
                 // developer.nvidia.com/cuda-gpus; 148 SMs (stas00/ml-engineering).
                 .compute_capability = 10.3,
                 .sm_count = 148,
                 .gpus_per_node = 8,
                 // NVLink 5: 1.8 TB/s bidirectional per GPU.
                 .nvlink_gb_per_s = 900,
                 // 8x ConnectX-8 at 800 Gb/s (NVIDIA's HGX B300 reference architecture).
                 .nics_per_node = 8,
                 .nic_gb_per_s = 100});
}

TEST(Presets, Gb200Nvl72CarriesItsDatasheetFigures) {
  ExpectFigures("gb200-nvl72",
                {// GB200 NVL72, for 72 GPUs: 360 PFLOPS FP16/BF16 and 720 PFLOPS FP8 with
                 // sparsity (halved), 5,760 TFLOPS FP32.
                 .bf16_tflops = 2500,
                 .fp16_tflops = 2500,
                 .fp8_tflops = 5000,
                 .fp32_tflops = 80,
                 // nvidia-smi, NVIDIA/k8s-test-infra hardware/qx-gb200.xml (driver 580.173.02).
                 .hbm_mib = 189471,
                 // GB200 NVL72: 576 TB/s for 72 GPUs.
                 .hbm_gb_per_s = 8000,
                 // developer.nvidia.com/cuda-gpus; no published SM count: B200's 148.
                 .compute_capability = 10.0,
                 .sm_count = 148,
                 // ptdp's node is the NVLink domain: the rack, 18 compute trays of 4 GPUs.
                 .gpus_per_node = 72,
                 // NVLink 5: 130 TB/s for 72 GPUs, 1.8 TB/s bidirectional each.
                 .nvlink_gb_per_s = 900,
                 // 4x ConnectX-7 400G per tray, one per GPU (DGX GB200 user guide, hardware).
                 .nics_per_node = 72,
                 .nic_gb_per_s = 50});
}

TEST(Presets, Gb300Nvl72CarriesItsDatasheetFigures) {
  ExpectFigures("gb300-nvl72",
                {// GB300 NVL72, for 72 GPUs: 360 PFLOPS FP16/BF16 and 720 PFLOPS FP8 with
                 // sparsity (halved); FP32 80 (stas00/ml-engineering's table).
                 .bf16_tflops = 2500,
                 .fp16_tflops = 2500,
                 .fp8_tflops = 5000,
                 .fp32_tflops = 80,
                 // nvidia-smi, NVIDIA/k8s-test-infra hardware/qx-gb300.xml (driver 580.173.02).
                 .hbm_mib = 284208,
                 // GB300 NVL72: 576 TB/s for 72 GPUs.
                 .hbm_gb_per_s = 8000,
                 // developer.nvidia.com/cuda-gpus; no published SM count: B300's 148.
                 .compute_capability = 10.3,
                 .sm_count = 148,
                 // The NVLink domain, as gb200-nvl72.
                 .gpus_per_node = 72,
                 // NVLink 5: 130 TB/s for 72 GPUs.
                 .nvlink_gb_per_s = 900,
                 // 4x ConnectX-8 per tray, one per GPU, 800 Gb/s (NVL72 AI Factory reference
                 // architecture; ConnectX-8's line rate).
                 .nics_per_node = 72,
                 .nic_gb_per_s = 100});
}

TEST(Presets, ResolveNamesAPresetOrAFileAndRefusesAnythingElse) {
  EXPECT_EQ(ResolveModel("gpt3-175b").num_layers, 96);
  EXPECT_EQ(ResolveCluster("dgx-h100").gpu.name, "H100-SXM5-80GB");
  try {
    ResolveModel("gpt-5", "--model");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().key, "--model");
    EXPECT_EQ(e.message(), "\"gpt-5\" is neither a model preset nor a file");
  }
  try {
    ResolveCluster("dgx-z", "--cluster");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).substr(0, 57),
              "--cluster: \"dgx-z\" is neither a hardware profile nor a fi");
  }
}

// What a new user types: a misspelt preset, a path that is not there, a Hugging Face folder.
TEST(Presets, ResolveSaysWhatWasMeant) {
  auto message = [](auto resolve, const std::string& arg) {
    try {
      resolve(arg);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  auto model = [](const std::string& a) { return ResolveModel(a, "--model"); };
  auto cluster = [](const std::string& a) { return ResolveCluster(a, "--cluster"); };
  EXPECT_EQ(message(model, "lama3-70b"),
            "--model: no model preset named \"lama3-70b\" (hint: did you mean llama3-70b? `ptdp "
            "models` lists them)");
  EXPECT_EQ(message(cluster, "dgx-h10"),
            "--cluster: no hardware profile named \"dgx-h10\" (hint: did you mean dgx-h100? `ptdp "
            "profiles` lists them)");
  EXPECT_EQ(message(model, "models/my-model.yaml"),
            "--model: no such file: models/my-model.yaml (hint: nor a model preset of that name; "
            "`ptdp models` lists them)");
  EXPECT_EQ(message(cluster, "my-cluster.yaml"),
            "--cluster: no such file: my-cluster.yaml (hint: nor a hardware profile of that name; "
            "`ptdp profiles` lists them)");
  const std::string folder = ::testing::TempDir();
  EXPECT_EQ(message(model, folder).rfind("--model: " + folder + " is a folder (hint:", 0), 0u);
  // A Hugging Face model folder reads as its config.json.
  const std::string hf = std::string(PTDP_TEST_FIXTURES) + "/tiny-llama";
  EXPECT_TRUE(ResolveModel(hf) == ResolveModel(hf + "/config.json"));
}

}  // namespace
}  // namespace ptdp
