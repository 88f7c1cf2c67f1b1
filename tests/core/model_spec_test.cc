// Parameter counts: hand-computed small models, published counts of real models, and the
// params column of Narayanan et al. 2021 Table 1.
#include "core/model_spec.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <limits>

#include "core/presets.h"
#include "core/spec_yaml.h"

namespace ptdp {
namespace {

TEST(ModelSpec, DefaultFfnFollowsMegatron) {
  EXPECT_EQ(DefaultFfnHiddenSize(2048, Activation::kGelu), 8192);
  // int((4 * 4096 * 2 / 3) / 64) * 64 = int(170.67) * 64 = 10880
  EXPECT_EQ(DefaultFfnHiddenSize(4096, Activation::kSwiglu), 10880);
}

TEST(ModelSpec, PaddedVocabularyIsCeilOfMultipleOf128TimesTp) {
  ModelSpec m = ModelPreset("gpt3-175b");
  EXPECT_EQ(PaddedVocabSize(m, 1), 50304);  // ceil(50257 / 128) * 128
  EXPECT_EQ(PaddedVocabSize(m, 8), 51200);  // ceil(50257 / 1024) * 1024
  m.vocab_size = 51200;
  EXPECT_EQ(PaddedVocabSize(m, 8), 51200);
}

TEST(ModelSpec, HandCountedGpt) {
  // L=3, h=96, a=4, f=384, V=300 (padded 384), 128 learned positions, tied, biases, LayerNorm.
  const ModelSpec m = ParseModelYaml(
      "num_layers: 3\nhidden_size: 96\nnum_attention_heads: 4\nvocab_size: 300\n"
      "seq_length: 128\n");
  const ParameterCounts c = CountParameters(m);
  EXPECT_EQ(c.per_layer, 27936 + 9312 + 37248 + 36960 + 384);  // qkv, proj, fc1, fc2, 2 norms
  EXPECT_EQ(c.word_embedding, 384 * 96);
  EXPECT_EQ(c.position_embedding, 128 * 96);
  EXPECT_EQ(c.output_layer, 0);
  EXPECT_EQ(c.final_norm, 192);
  EXPECT_EQ(c.total, 384864);
  // Eq. 2 is the same count without the final LayerNorm.
  EXPECT_DOUBLE_EQ(NarayananEq2Parameters(m), 384864.0 - 192.0);
}

TEST(ModelSpec, HandCountedLlamaWithGqa) {
  // L=4, h=256, 8 heads in 2 groups of 32, SwiGLU 688, V=1000 (padded 1024), no biases, RMSNorm.
  const ModelSpec m = ParseModelYaml(
      "num_layers: 4\nhidden_size: 256\nnum_attention_heads: 8\nnum_query_groups: 2\n"
      "ffn_hidden_size: 688\nvocab_size: 1000\nseq_length: 512\nactivation: swiglu\n"
      "normalization: rmsnorm\nposition_embedding: rope\ntied_embeddings: false\n"
      "add_bias_linear: false\n");
  const ParameterCounts c = CountParameters(m);
  EXPECT_EQ(c.per_layer, 98304 + 65536 + 352256 + 176128 + 512);
  EXPECT_EQ(c.position_embedding, 0);
  EXPECT_EQ(c.output_layer, 1024 * 256);
  EXPECT_EQ(c.total, 3295488);
}

TEST(ModelSpec, PublishedCountsOfRealModels) {
  // Hugging Face parameter counts (their vocabularies need no padding to 128).
  EXPECT_EQ(CountParameters(ModelPreset("llama2-7b")).total, 6738415616);
  EXPECT_EQ(CountParameters(ModelPreset("llama2-13b")).total, 13015864320);
  EXPECT_EQ(CountParameters(ModelPreset("llama2-70b")).total, 68976648192);
  EXPECT_EQ(CountParameters(ModelPreset("llama3-8b")).total, 8030261248);
  EXPECT_EQ(CountParameters(ModelPreset("llama3-70b")).total, 70553706496);
  EXPECT_EQ(CountParameters(ModelPreset("llama3-405b")).total, 405853388800);
  // GPT-3 as named in Brown et al. 2020 (to 2 significant digits; vocabulary padded to 50304).
  EXPECT_NEAR(CountParameters(ModelPreset("gpt3-175b")).total / 1e9, 175.0, 0.5);
  EXPECT_NEAR(CountParameters(ModelPreset("gpt3-13b")).total / 1e9, 13.0, 0.2);
  EXPECT_NEAR(CountParameters(ModelPreset("gpt3-6.7b")).total / 1e9, 6.7, 0.1);
  EXPECT_NEAR(CountParameters(ModelPreset("gpt3-2.7b")).total / 1e9, 2.7, 0.1);
  EXPECT_NEAR(CountParameters(ModelPreset("gpt3-1.3b")).total / 1e9, 1.3, 0.05);
  EXPECT_NEAR(CountParameters(ModelPreset("gpt3-350m")).total / 1e6, 350, 10);
  EXPECT_NEAR(CountParameters(ModelPreset("gpt3-125m")).total / 1e6, 125, 1);
}

// Each row of shared/reference/narayanan2021-table1.yaml: the preset's count and Megatron's
// Eq. 2 both agree with the published params column to 0.1 B.
struct TableRow {
  const char* preset;
  double params_b;
  int layers, hidden, heads;
};

class NarayananTable1 : public ::testing::TestWithParam<TableRow> {};

TEST_P(NarayananTable1, ParametersMatchThePaper) {
  const ModelSpec m = ModelPreset(GetParam().preset);
  EXPECT_EQ(m.num_layers, GetParam().layers);
  EXPECT_EQ(m.hidden_size, GetParam().hidden);
  EXPECT_EQ(m.num_attention_heads, GetParam().heads);
  EXPECT_EQ(m.vocab_size, 51200);
  EXPECT_EQ(m.seq_length, 2048);
  const double exact_b = static_cast<double>(CountParameters(m).total) / 1e9;
  const double eq2_b = NarayananEq2Parameters(m) / 1e9;
  EXPECT_NEAR(exact_b, GetParam().params_b, 0.1) << GetParam().preset;
  EXPECT_NEAR(eq2_b, GetParam().params_b, 0.1) << GetParam().preset;
  // Eq. 2 leaves out only the final LayerNorm (2h parameters).
  EXPECT_NEAR(static_cast<double>(CountParameters(m).total) - NarayananEq2Parameters(m),
              2.0 * m.hidden_size, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Rows, NarayananTable1,
                         ::testing::Values(TableRow{"megatron-1.7b", 1.7, 24, 2304, 24},
                                           TableRow{"megatron-3.6b", 3.6, 30, 3072, 32},
                                           TableRow{"megatron-7.5b", 7.5, 36, 4096, 32},
                                           TableRow{"megatron-18.4b", 18.4, 40, 6144, 48},
                                           TableRow{"megatron-39.1b", 39.1, 48, 8192, 64},
                                           TableRow{"megatron-76.1b", 76.1, 60, 10240, 80},
                                           TableRow{"megatron-145.6b", 145.6, 80, 12288, 96},
                                           TableRow{"megatron-310.1b", 310.1, 96, 16384, 128},
                                           TableRow{"megatron-529.6b", 529.6, 105, 20480, 128},
                                           TableRow{"megatron-1t", 1008.0, 128, 25600, 160}),
                         [](const auto& info) {
                           std::string name = info.param.preset;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace ptdp

namespace ptdp {
namespace {

// Found by fuzzing the check reader (tests/fuzz/corpus/megatron_command/ubsan-ffn-overflow.sh):
// a hidden size beyond ptdp's limits reached 4 x hidden in int before the reader reported it.
TEST(ModelSpec, TheDefaultFfnSizeOfAnAbsurdHiddenSizeDoesNotOverflow) {
  EXPECT_EQ(DefaultFfnHiddenSize(1'000'000'000, Activation::kGelu),
            std::numeric_limits<int>::max());
  EXPECT_EQ(DefaultFfnHiddenSize(1'000'000'000, Activation::kSwiglu),
            std::numeric_limits<int>::max());
  EXPECT_EQ(DefaultFfnHiddenSize(4096, Activation::kSwiglu), 10880);
  EXPECT_EQ(DefaultFfnHiddenSize(4096, Activation::kGelu), 16384);
}

}  // namespace
}  // namespace ptdp
