// Megatron-Bridge's measured H100 runs: the CSV reader (strict, errors naming the line and
// column), what rows become, the replay's accuracy on the rows held out of the fit, and that the
// shipped H100 profile is that fit.
#include "validation/bridge.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "core/presets.h"

namespace ptdp {
namespace {

const std::string kFile =
    std::string(PTDP_SOURCE_DIR) + "/results/validation/megatron-bridge/h100_pretrain.csv";

const std::string kHeader =
    "release,model,num_gpus,precision,gbs,mbs,seq_length,tp,pp,cp,vp,ep,etp,fsdp,"
    "tokens_per_s_per_gpu,model_tflops_per_gpu,notes,flags,source_commit,recipe_tag\n";

std::string Error(const std::string& text) {
  try {
    ParseBridgeCsv(text, "b.csv");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(BridgeCsv, ReadsQuotedNotesAndRefusesWhatItCannotRead) {
  const std::vector<BridgeRow> rows = ParseBridgeCsv(
      kHeader +
          "25.09,Llama3-70B,64,fp8-cs,128,1,8192,4,8,1,5,1,,0,1619,727,\"a, \"\"b\"\"\",,"
          "c,d\n",
      "b.csv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].line, 2);
  EXPECT_EQ(rows[0].notes, "a, \"b\"");
  EXPECT_EQ(rows[0].vp, 5);
  EXPECT_EQ(rows[0].etp, 0);
  EXPECT_DOUBLE_EQ(rows[0].tokens_per_s_per_gpu, 1619);
  EXPECT_EQ(Error("release,model\n"),
            "b.csv:1: not the Megatron-Bridge dataset's header (hint: the first line must be: " +
                kHeader.substr(0, kHeader.size() - 1) + ")");
  EXPECT_EQ(Error(kHeader + "25.09,Llama3-70B,64\n"), "b.csv:2: expected 20 fields, got 3");
  EXPECT_EQ(Error(kHeader + "25.09,Llama3-70B,sixty,fp8-cs,128,1,8192,4,8,1,5,1,,0,1,1,,,,\n"),
            "b.csv:2: column 3 (num_gpus): expected a non-negative integer or n/a, got \"sixty\"");
  EXPECT_EQ(Error(kHeader + "25.09,Llama3-70B,64,fp8-cs,128,0,8192,4,8,1,5,1,,0,1,1,,,,\n"),
            "b.csv:2: column 6 (mbs): must be positive");
  EXPECT_EQ(Error(kHeader + "25.09,Llama3-70B,64,fp8-cs,128,1,8192,4,8,1,5,1,,0,1,1,\"open,,,\n"),
            "b.csv:2: unclosed quote");
  // Sizes have the bounds of the fields they fill, measured rates are normal numbers (a
  // subnormal tokens/s once made the mean error `+inf%`), and a step too long a schedule to
  // simulate is a row ptdp cannot express, not a 4 GB allocation.
  EXPECT_EQ(Error(kHeader + "25.09,Llama3-70B,64,fp8-cs,1000000000,1,8192,4,8,1,5,1,,0,1,1,,,,\n"),
            "b.csv:2: column 5 (gbs): at most 1048576, got 1000000000");
  EXPECT_EQ(Error(kHeader + "25.09,Llama3-70B,64,fp8-cs,128,1,8192,4,8,1,5,1,,0,1e-320,1,,,,\n"),
            "b.csv:2: column 15 (tokens_per_s_per_gpu): expected 0 (not measured) or a number "
            "from 0.001 to 1000000000, got \"1e-320\"");
  const std::vector<BridgeRow> long_step = ParseBridgeCsv(
      kHeader + "25.09,Llama3-70B,64,bf16,1048576,1,8192,4,8,1,5,1,,0,1619,1,,,,\n", "b.csv");
  EXPECT_EQ(
      BridgePlan(long_step[0], ClusterPreset("dgx-h100"), AttentionBackend::kFused).unexpressible,
      "8 pipeline stages x 524288 micro-batches x 5 model chunks = 20971520 forward passes "
      "per step; ptdp builds schedules of at most 524288");
}

TEST(BridgeCsv, RowsBecomePlansFromTheirColumnsAndNotes) {
  const std::vector<BridgeRow> rows = LoadBridgeCsv(kFile);
  ASSERT_EQ(rows.size(), 37u);
  const ClusterSpec h100 = ClusterPreset("dgx-h100");
  int simulated = 0, nemotron = 0, no_tokens = 0;
  for (const BridgeRow& r : rows) {
    const BridgeSetup s = BridgePlan(r, h100);
    simulated += s.unexpressible.empty();
    no_tokens += s.unexpressible.starts_with("no measured");
    if (r.model == "Nemotron-3-Nano") {
      // The hybrid Mamba-2 / attention / MoE model: TP 1, EP 8 (ETP 1) over 16 H100s, the flex
      // (HybridEP) dispatcher, FP8 with current scaling.
      ASSERT_EQ(s.unexpressible, "") << r.line;
      ++nemotron;
      EXPECT_TRUE(s.plan.model.hybrid());
      EXPECT_EQ(s.plan.model.hybrid_layer_pattern.size(), 52u);
      EXPECT_EQ(s.plan.parallel.ep, 8);
      EXPECT_EQ(s.plan.parallel.expert_tp(), 1);
      EXPECT_EQ(s.plan.parallel.dp, 16);
      EXPECT_EQ(s.plan.options.moe_token_dispatcher, MoeDispatcher::kFlex);
      EXPECT_EQ(s.plan.training.fp8_recipe, Fp8Recipe::kTensorwise);
      EXPECT_EQ(s.plan.training.fp8_bf16_layers_at_start, 0);
    }
    if (r.model == "Qwen3-235B-A22B") {
      ASSERT_EQ(s.unexpressible, "") << r.line;
      EXPECT_EQ(s.plan.parallel.ep, 32);
      EXPECT_EQ(s.plan.parallel.etp, 1);
      EXPECT_TRUE(s.plan.parallel.account_for_embedding && s.plan.parallel.account_for_loss);
      EXPECT_EQ(s.plan.options.moe_token_dispatcher,
                r.notes.find("moe_dispatcher=flex") != std::string::npos
                    ? MoeDispatcher::kFlex
                    : MoeDispatcher::kAllToAll);
    }
    if (r.model == "Qwen3-30B-A3B" && r.release == "25.09") {
      ASSERT_EQ(s.unexpressible, "") << r.line;
      // PP 2 interleaved: Megatron-Bridge overlaps the p2p sends, which Megatron requires.
      EXPECT_TRUE(s.plan.options.overlap_p2p_communication);
      EXPECT_EQ(s.plan.model.moe_expert_capacity_factor, 1.0);  // token drop, padded
    }
    if (r.model == "DeepSeek-V3" && r.tokens_per_s_per_gpu > 0) {
      // The layout string of the notes: embedding alone, 30 stages of two layers (pp 16 x vp 2),
      // the last with MTP and the loss; the flex (DeepEP) dispatcher.
      ASSERT_EQ(s.unexpressible, "") << r.line;
      EXPECT_EQ(PipelineLayoutText(s.plan.parallel.layout, s.plan.model.mtp_num_layers),
                "Et|(tt|)*30mL");
      EXPECT_EQ(s.plan.model.mtp_num_layers, 1);
      EXPECT_EQ(s.plan.parallel.pp * s.plan.parallel.virtual_stages, 32);
    }
    if (r.model == "Llama3-70B") {
      ASSERT_EQ(s.unexpressible, "") << r.line;
      EXPECT_EQ(s.plan.parallel.schedule, Schedule::kInterleaved);
      EXPECT_EQ(s.plan.parallel.virtual_stages, 5);
      EXPECT_TRUE(s.plan.parallel.sequence_parallel);
      EXPECT_TRUE(s.plan.options.tp_comm_overlap);
      EXPECT_EQ(s.plan.training.fp8_recipe, Fp8Recipe::kTensorwise);
      EXPECT_TRUE(s.plan.training.fp8_param_gather);
    }
    if (r.model == "Llama3-8B") {
      ASSERT_EQ(s.unexpressible, "") << r.line;
      EXPECT_EQ(s.plan.parallel.fsdp, Fsdp::kOptimGradsParams);
      EXPECT_EQ(s.plan.parallel.recompute_num_layers, r.release == "25.11" ? 5 : 0);
    }
  }
  // Every row is expressible but the one without a measured throughput.
  EXPECT_EQ(simulated, 36);
  EXPECT_EQ(nemotron, 4);
  EXPECT_EQ(no_tokens, 1);
}

// Every run NVIDIA published trained on 80 GB: each simulated row, dense or MoE, fits. The 25.11
// GPT-OSS row's table is inconsistent (GA x DP x MBS != GBS); it runs its recipe's micro-batch.
TEST(BridgeReplay, SuspectedRegressionsAndRowsAwayFromTheirRecipeAreNotScored) {
  // Issue 30's rule: more than 40% below the same model and layout in the adjacent release.
  BridgeRow a{.release = "25.09",
              .model = "Qwen3-30B-A3B",
              .precision = "fp8-cs",
              .num_gpus = 16,
              .gbs = 512,
              .mbs = 2,
              .seq_length = 4096,
              .tp = 1,
              .pp = 2,
              .vp = 24,
              .ep = 8,
              .tokens_per_s_per_gpu = 10494,
              .notes = "",
              .flags = ""};
  BridgeRow b = a, c = a, d = a;
  b.release = "25.11", b.tokens_per_s_per_gpu = 5275;                // -49.7%
  c.release = "26.02", c.tokens_per_s_per_gpu = 6500;                // above 25.11's
  d.release = "26.04", d.gbs = 1024, d.tokens_per_s_per_gpu = 1000;  // another layout
  const std::vector<BridgeRow> rows = {a, b, c, d};
  EXPECT_NE(BridgeNotScored(b, rows).find("suspected regression: 5275 against 10494 in 25.09"),
            std::string::npos);
  EXPECT_EQ(BridgeNotScored(a, rows), "");
  EXPECT_EQ(BridgeNotScored(c, rows), "");  // above its neighbours
  EXPECT_EQ(BridgeNotScored(d, rows), "");  // no row of its layout next to it
  // Two releases apart is not adjacent.
  EXPECT_EQ(BridgeNotScored(b, std::vector<BridgeRow>{a, c, b}), "");
  BridgeRow flagged = a;
  flagged.flags = "table vs recipe mismatch (vp: table=24 recipe=12)";
  EXPECT_NE(BridgeNotScored(flagged, rows).find("not yet replayed in the recipe's layout"),
            std::string::npos);
  // A row whose table is inconsistent and whose recipe's micro-batch is taken is scored.
  flagged.flags =
      "inconsistent: table GA(2) * DP(16) * MBS(4) != GBS(512) || table vs recipe "
      "mismatch (mbs: table=4 recipe=1)";
  EXPECT_EQ(BridgeNotScored(flagged, rows), "");
}

TEST(BridgeReplay, EveryRowFitsInEightyGigabytes) {
  const std::vector<BridgeRow> rows = LoadBridgeCsv(kFile);
  int simulated = 0, from_recipe = 0;
  for (const BridgeResult& r : ReplayBridge(ClusterPreset("dgx-h100"), rows)) {
    if (!r.simulated) continue;
    ++simulated;
    EXPECT_EQ(r.memory_problem, "") << r.row.line << " " << r.row.model;
    if (r.setup.plan.parallel.micro_batch_size != r.row.mbs) {
      ++from_recipe;
      EXPECT_EQ(r.row.model, "GPT-OSS-120B");
      EXPECT_EQ(r.setup.plan.parallel.micro_batch_size, 1);
    }
  }
  EXPECT_EQ(simulated, 36);
  EXPECT_EQ(from_recipe, 1);
}

// Issue 12's bar, on the dense rows (the Llama 3 runs, 405B with context parallelism): the held-
// out rows within 10% on average and 25% each. The mixture-of-experts rows do not meet it yet
// (results/validation/megatron-bridge.md).
TEST(BridgeReplay, HeldOutDenseRowsWithinTenPercentOnAverageAndTwentyFiveEach) {
  const std::vector<BridgeRow> rows = LoadBridgeCsv(kFile);
  const std::vector<BridgeResult> results = ReplayBridge(ClusterPreset("dgx-h100"), rows);
  int held_out = 0;
  double sum = 0;
  for (const BridgeResult& r : results) {
    if (!r.simulated || r.setup.plan.model.moe()) continue;
    EXPECT_EQ(r.memory_problem, "") << r.row.line << " " << r.row.model;  // they ran
    if (InBridgeFit(r.row, {"25.09"})) continue;
    ++held_out;
    sum += std::abs(r.error());
    EXPECT_LT(std::abs(r.error()), 0.25) << r.row.line << " " << r.row.model;
  }
  EXPECT_EQ(held_out, 11);
  EXPECT_LT(sum / held_out, 0.10);
}

TEST(BridgeReplay, TheH100ProfileIsTheFitOnTheOldestRelease) {
  const std::vector<BridgeRow> rows = LoadBridgeCsv(kFile);
  const BridgeFit fit = FitBridge(ClusterPreset("dgx-h100"), rows, {"25.09"});
  EXPECT_EQ(fit.rows, 2);
  EXPECT_NEAR(fit.gemm_scale, 1.0, 0.005);
  // H200's FP8 table is H100's (the same die).
  EXPECT_EQ(ClusterPreset("hgx-h200").gpu.gemm_efficiency_fp8,
            ClusterPreset("dgx-h100").gpu.gemm_efficiency_fp8);
}

// results/validation/dgxc-benchmarking/: NeMo 24.09's Llama 3.1 runs, whose BF16 8B and 405B rows
// carry the BF16 level's fit mark.
const std::string kNemo2409 =
    std::string(PTDP_SOURCE_DIR) + "/results/validation/dgxc-benchmarking/h100_nemo2409.csv";

TEST(BridgeReplay, TheH100ProfileIsTheBf16FitOnNemo2409) {
  const std::vector<BridgeRow> rows = LoadBridgeCsv(kNemo2409);
  ASSERT_EQ(rows.size(), 6u);
  int marked = 0;
  for (const BridgeRow& r : rows) marked += IsBf16FitRow(r);
  EXPECT_EQ(marked, 2);
  EXPECT_TRUE(HasBf16FitRows(rows));
  EXPECT_FALSE(HasBf16FitRows(LoadBridgeCsv(kFile)));
  const BridgeFit fit = FitBridge(ClusterPreset("dgx-h100"), rows, {});
  EXPECT_TRUE(fit.bf16);
  EXPECT_EQ(fit.rows, 2);
  EXPECT_NEAR(fit.gemm_scale, 1.0, 0.005);
  EXPECT_EQ(ClusterPreset("hgx-h200").gpu.gemm_efficiency,
            ClusterPreset("dgx-h100").gpu.gemm_efficiency);
  // The held-out rows are labelled so; the FP8 rows read NeMo's FP8 primary weights.
  for (const BridgeResult& r : ReplayBridge(ClusterPreset("dgx-h100"), rows)) {
    ASSERT_TRUE(r.simulated) << r.row.line << ": " << r.setup.unexpressible;
    EXPECT_EQ(InBridgeFit(r.row, {"24.09"}), IsBf16FitRow(r.row)) << r.row.line;
    if (r.row.precision == "fp8-ds") {
      EXPECT_TRUE(r.setup.plan.training.fp8_param_gather) << r.row.line;
    }
    // The deferred embedding gradients the 70B and 405B recipes set are said not to be modelled.
    const bool deferred = std::count(r.setup.settings.begin(), r.setup.settings.end(),
                                     "deferred embedding wgrad (not modelled)") > 0;
    EXPECT_EQ(deferred, r.row.model != "Llama3-8B") << r.row.line;
  }
}

}  // namespace
}  // namespace ptdp
