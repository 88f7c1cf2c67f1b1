// Today's Megatron layouts in the specs: the layer split (uneven first / last stages, the
// embedding and loss counted as layers) as Megatron computes it, its rules in Megatron's words,
// the plan file's `options` section and the new fields, and Megatron's flags for all of them,
// written and read back.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/presets.h"
#include "core/spec_yaml.h"
#include "megatron/plan_file.h"
#include "megatron/read_command.h"
#include "megatron/rules.h"
#include "megatron/write_flags.h"

namespace ptdp {
namespace {

std::vector<int> Repeat(int n, int value) { return std::vector<int>(n, value); }

TEST(SplitLayers, EvenUnevenAndAccountedAsMegatronBuildsThem) {
  // Even: 32 layers on 4 stages x 2 chunks, in model order chunk by chunk.
  LayerSplit even = SplitLayers(32, {.pp = 4, .virtual_stages = 2});
  EXPECT_EQ(even.layers, Repeat(8, 4));
  EXPECT_EQ(even.first_layer, (std::vector<int>{0, 4, 8, 12, 16, 20, 24, 28}));
  // Llama 3 405B's 126 layers on 16 stages: 7 on the first and last, 8 on the 14 others.
  const LayerSplit uneven =
      SplitLayers(126, {.pp = 16, .first_stage_layers = 7, .last_stage_layers = 7});
  std::vector<int> expected = Repeat(16, 8);
  expected.front() = expected.back() = 7;
  EXPECT_EQ(uneven.layers, expected);
  // Megatron-Bridge's 405B recipe: 126 + embedding + loss = 128 over PP 8 x VP 8, 2 per chunk;
  // the first chunk builds 1 layer beside the embedding, the last 1 beside the loss.
  const LayerSplit accounted = SplitLayers(126, {.pp = 8,
                                                 .virtual_stages = 8,
                                                 .schedule = Schedule::kInterleaved,
                                                 .account_for_embedding = true,
                                                 .account_for_loss = true});
  ASSERT_EQ(accounted.layers.size(), 64u);
  EXPECT_EQ(accounted.layers.front(), 1);
  EXPECT_EQ(accounted.layers.back(), 1);
  EXPECT_EQ(accounted.layers[1], 2);
  EXPECT_EQ(accounted.first_layer.back(), 125);
  // Uneven with chunks: the first stage's 4 layers over its 2 chunks (vs 0 and vs 4).
  const LayerSplit chunks = SplitLayers(
      20, {.pp = 4, .virtual_stages = 2, .first_stage_layers = 4, .last_stage_layers = 4});
  EXPECT_EQ(chunks.layers, (std::vector<int>{2, 3, 3, 2, 2, 3, 3, 2}));
}

TEST(SplitLayers, OneVirtualStageAtATimeAgrees) {
  // VirtualStageLayers (the cost model's allocation-free form) against SplitLayers, over every
  // split the rules accept for a range of depths, pipelines and chunk counts.
  ModelSpec m = ModelPreset("seed-example");
  TrainingSpec t;
  t.global_batch_size = 64;
  int checked = 0;
  for (int L : {7, 12, 22, 24, 126}) {
    m.num_layers = L;
    for (int pp : {1, 2, 3, 4, 8}) {
      for (int v : {1, 2, 3}) {
        for (int f : {0, 1, 2, 3, 6}) {
          for (int l : {0, 2, 3, 6}) {
            for (int acc = 0; acc < 4; ++acc) {
              ParallelConfig p{.pp = pp,
                               .micro_batch_size = 1,
                               .virtual_stages = v,
                               .schedule = v > 1 ? Schedule::kInterleaved : Schedule::k1F1B,
                               .first_stage_layers = f,
                               .last_stage_layers = l,
                               .account_for_embedding = (acc & 1) != 0,
                               .account_for_loss = (acc & 2) != 0};
              p.dp = 1;
              std::vector<Violation> v_ = CheckParallelConfig(m, t, p, pp);
              std::erase_if(v_, [](const Violation& x) {
                return x.rule == Rule::kInterleavedNeedsPp ||
                       x.rule == Rule::kInterleavedMicrobatches;
              });
              if (!v_.empty()) continue;
              const LayerSplit all = SplitLayers(L, p);
              for (int vs = 0; vs < pp * v; ++vs) {
                const StageSlice s = VirtualStageLayers(L, p, vs);
                ASSERT_EQ(s.layers, all.layers[vs]) << L << " " << pp << " " << v << " " << vs;
                ASSERT_EQ(s.first_layer, all.first_layer[vs]) << L << " " << pp << " " << vs;
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

std::vector<Violation> Check(int layers, const ParallelConfig& p, int64_t gbs = 64) {
  ModelSpec m = ModelPreset("llama3-8b");
  m.num_layers = layers;
  TrainingSpec t;
  t.global_batch_size = gbs;
  ParallelConfig q = p;
  q.dp = 1;
  return CheckParallelConfig(m, t, q, q.world_size());
}

TEST(SplitRules, InMegatronsWords) {
  EXPECT_TRUE(Check(126, {.pp = 16, .first_stage_layers = 7, .last_stage_layers = 7}).empty());
  EXPECT_TRUE(
      Check(126, {.pp = 16, .account_for_embedding = true, .account_for_loss = true}).empty());
  std::vector<Violation> v = Check(126, {.pp = 16});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, Rule::kLayersDivisibleByPp);
  EXPECT_EQ(v[0].message,
            "number of layers (126) should be divisible by the pipeline-model-parallel size (16)");
  v = Check(126, {.pp = 16, .first_stage_layers = 8, .last_stage_layers = 7});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].message,
            "number of layers at middle stage: 111 must be divisible by the middle pipeline "
            "model parallel size 14");
  v = Check(8, {.pp = 2, .first_stage_layers = 4, .last_stage_layers = 3});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].message, "Mismatch: 1 middle layers remaining but 0 middle PP stages available.");
  v = Check(32, {.pp = 4, .first_stage_layers = 6, .account_for_loss = true});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, Rule::kUnevenStages);
  v = Check(26, {.pp = 4,
                 .virtual_stages = 2,
                 .schedule = Schedule::kInterleaved,
                 .first_stage_layers = 5,
                 .last_stage_layers = 5});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].message,
            "number of layers at first stage: 5 must be divisible by virtual pipeline parallel "
            "degree 2");
  v = Check(32, {.pp = 4, .account_for_embedding = true});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].message,
            "number of layers (32 + 1 for the embedding / loss) should be divisible by the "
            "pipeline-model-parallel size (4)");
  v = Check(32, {.recompute = Recompute::kSelective, .recompute_num_layers = 2});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, Rule::kRecomputeNumLayers);
  v = Check(32, {.fsdp = Fsdp::kOptimGrads});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, Rule::kFsdpNeedsDistributedOptimizer);
}

Plan ModernPlan() {
  Plan p;
  p.model = ModelPreset("llama3-405b");
  p.cluster = ClusterPreset("dgx-h100");
  p.num_gpus = 1024;
  p.training.global_batch_size = 512;
  p.training.precision = Precision::kFp8;
  p.training.fp8_recipe = Fp8Recipe::kTensorwise;
  p.training.fp8_bf16_layers_at_start = 1;
  p.training.fp8_bf16_layers_at_end = 2;
  p.training.fp8_param_gather = true;
  p.parallel = {.tp = 8,
                .pp = 16,
                .dp = 8,
                .micro_batch_size = 1,
                .sequence_parallel = true,
                .recompute = Recompute::kFull,
                .distributed_optimizer = true,
                .first_stage_layers = 7,
                .last_stage_layers = 7,
                .recompute_num_layers = 3};
  p.options.attention = AttentionBackend::kFused;
  p.options.overlap_grad_reduce = p.options.overlap_param_gather = true;
  p.options.ddp_bucket_size = 50'000'000;
  p.options.tp_comm_overlap = true;
  return p;
}

TEST(PlanFile, NewFieldsAndOptionsRoundTrip) {
  for (Plan plan : {ModernPlan(),
                    [] {
                      Plan p = ModernPlan();
                      p.parallel.first_stage_layers = p.parallel.last_stage_layers = 0;
                      p.parallel.account_for_embedding = p.parallel.account_for_loss = true;
                      p.parallel.fsdp = Fsdp::kOptimGradsParams;
                      p.training.keep_fp8_transpose_cache = true;
                      p.options = Megatron2021Options();
                      return p;
                    }(),
                    [] {
                      Plan p = ModernPlan();
                      p.options.cross_entropy_loss_fusion = true;
                      p.options.defer_embedding_wgrad_compute = true;
                      p.options.wgrad_deferral_limit = 2;
                      return p;
                    }()}) {
    const std::string text = WritePlanYaml(plan);
    const Plan back = ParsePlanYaml(text, "plan.yaml");
    EXPECT_EQ(back, plan);
    EXPECT_EQ(WritePlanYaml(back), text);
  }
}

std::string PlanError(const std::string& text) {
  try {
    ParsePlanYaml(text, "p.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(PlanFile, OptionsAreAPresetThenOverrides) {
  std::string text = WritePlanYaml(ModernPlan());
  // A plan without the section (written before it existed) runs Megatron-Core's defaults.
  const size_t at = text.find("options:");
  ASSERT_NE(at, std::string::npos);
  const Plan old = ParsePlanYaml(text.substr(0, at), "old.yaml");
  EXPECT_EQ(old.options, MegatronCoreOptions());
  // Only the preset: its fields.
  EXPECT_EQ(
      ParsePlanYaml(text.substr(0, at) + "options:\n  megatron_version: 2021\n", "p.yaml").options,
      Megatron2021Options());
  EXPECT_NE(PlanError(Replace(text, "  attention: fused", "  attention: flashy"))
                .find("options.attention: unknown value \"flashy\" (expected one of: flash, "
                      "fused, unfused)"),
            std::string::npos);
  EXPECT_NE(PlanError(Replace(text, "  overlap_grad_reduce: true", "  overlap_grad_reduce: false"))
                .find("options.overlap_param_gather: Must use --overlap-param-gather with "
                      "--overlap-grad-reduce"),
            std::string::npos);
  EXPECT_NE(PlanError(Replace(text, "  fp8_recipe: tensorwise", "  fp8_recipe: delayed"))
                .find("Delayed scaling does not support first / last layer in BF16."),
            std::string::npos);
  // FP8 on a GPU without FP8 units is refused at training.precision.
  Plan a100 = ModernPlan();
  a100.cluster = ClusterPreset("dgx-a100-80gb");
  EXPECT_NE(PlanError(WritePlanYaml(a100))
                .find("training.precision: the cluster's A100-SXM4-80GB has no FP8 tensor cores"),
            std::string::npos);
  // fp8 keys with another precision.
  Plan bf16 = ModernPlan();
  bf16.training = TrainingSpec{.global_batch_size = 512};
  EXPECT_NE(PlanError(Replace(WritePlanYaml(bf16), "  precision: bf16",
                              "  precision: bf16\n  fp8_recipe: delayed"))
                .find("training.fp8_recipe: applies to precision fp8 only"),
            std::string::npos);
}

TEST(MegatronFlags, ModernPlansReadBackToTheSamePlan) {
  for (Plan plan : {ModernPlan(), [] {
                      Plan p = ModernPlan();
                      p.parallel.first_stage_layers = p.parallel.last_stage_layers = 0;
                      p.parallel.account_for_embedding = p.parallel.account_for_loss = true;
                      p.parallel.pp = 8;
                      p.parallel.dp = 16;
                      p.parallel.virtual_stages = 8;
                      p.parallel.schedule = Schedule::kInterleaved;
                      p.parallel.recompute = Recompute::kNone;
                      p.parallel.recompute_num_layers = 0;
                      p.parallel.fsdp = Fsdp::kOptimGrads;
                      p.training.keep_fp8_transpose_cache = true;
                      p.training.fp8_bf16_layers_at_start = p.training.fp8_bf16_layers_at_end = 0;
                      p.training.fp8_recipe = Fp8Recipe::kDelayed;
                      p.options.overlap_param_gather = false;
                      return p;
                    }()}) {
    const std::string line = MegatronArgsLine(plan);
    MegatronCommand c = ReadMegatronCommand(
        "torchrun --nproc-per-node 8 --nnodes 128 pretrain_gpt.py " + line + " --vocab-size 128256",
        "cmd");
    ResolveWorldSize(c, *c.world_size);
    for (const MegatronFinding& f : c.findings) {
      EXPECT_NE(f.severity, MegatronFinding::Severity::kError) << f.flag << ": " << f.message;
    }
    EXPECT_EQ(c.parallel, plan.parallel) << line;
    EXPECT_EQ(c.training.precision, plan.training.precision);
    EXPECT_EQ(c.training.fp8_recipe, plan.training.fp8_recipe);
    EXPECT_EQ(c.training.fp8_bf16_layers_at_start, plan.training.fp8_bf16_layers_at_start);
    EXPECT_EQ(c.training.fp8_bf16_layers_at_end, plan.training.fp8_bf16_layers_at_end);
    EXPECT_EQ(c.training.fp8_param_gather, plan.training.fp8_param_gather);
    EXPECT_EQ(c.training.keep_fp8_transpose_cache, plan.training.keep_fp8_transpose_cache);
    EXPECT_EQ(c.options, plan.options) << line;
    EXPECT_EQ(c.model.hidden_dropout, 0);
    EXPECT_TRUE(CheckParallelConfig(c.model, c.training, c.parallel, 1024).empty());
  }
  // With interleaving the uneven split names the chunk count, as Megatron requires.
  const std::string line = MegatronArgsLine([] {
    Plan p = ModernPlan();
    p.parallel.pp = 8, p.parallel.dp = 16, p.parallel.virtual_stages = 2;
    p.parallel.schedule = Schedule::kInterleaved;
    p.parallel.first_stage_layers = p.parallel.last_stage_layers = 14;
    return p;
  }());
  EXPECT_NE(line.find("--num-virtual-stages-per-pipeline-rank 2"), std::string::npos);
  EXPECT_EQ(line.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
}

TEST(MegatronFlags, RefusalsOfTheNewFlags) {
  const std::string base =
      "python pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
      "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
      "--global-batch-size 64 --vocab-size 32000 --bf16 --tensor-model-parallel-size 2 ";
  const auto first_error = [&](const std::string& extra) -> std::string {
    const MegatronCommand c = ReadMegatronCommand(base + extra, "cmd");
    for (const MegatronFinding& f : c.findings) {
      if (f.severity == MegatronFinding::Severity::kError) return f.flag + ": " + f.message;
    }
    return "";
  };
  EXPECT_EQ(first_error("--tp-comm-overlap"),
            "--tp-comm-overlap: Tensor parallel communication/GEMM overlap can happen only when "
            "sequence parallelism is enabled");
  EXPECT_EQ(first_error("--overlap-param-gather --use-distributed-optimizer"),
            "--overlap-param-gather: Must use --overlap-param-gather with --overlap-grad-reduce");
  EXPECT_EQ(first_error("--fp8-format hybrid --first-last-layers-bf16"),
            "--first-last-layers-bf16: Delayed scaling does not support first / last layer in "
            "BF16.");
  EXPECT_EQ(first_error("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads"),
            "--ckpt-format: Megatron-FSDP requires the `fsdp_dtensor` checkpointing format.");
  EXPECT_EQ(first_error("--attention-backend turbo"),
            "--attention-backend: argument --attention-backend: invalid choice: 'turbo' (choose "
            "from 'flash', 'fused', 'unfused', 'local', 'auto')");
  EXPECT_EQ(first_error("--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 0"),
            "--decoder-first-pipeline-num-layers: num_layers_in_first_pipeline_stage must be "
            "larger than 0");
  EXPECT_EQ(first_error("--recompute-granularity full --recompute-method block"),
            "--recompute-granularity: When using recompute_granularity: full recompute_num_layers "
            "must be between 1 and num_layers_per_pipeline_rank: 32");
  const MegatronCommand local =
      ReadMegatronCommand(base + "--attention-backend local --fp8-format hybrid", "cmd");
  EXPECT_EQ(local.options.attention, AttentionBackend::kUnfused);
  EXPECT_EQ(local.training.precision, Precision::kFp8);
}

TEST(ContextParallelFlags, WrittenReadAndCheckedAsMegatronDoes) {
  Plan plan = ModernPlan();
  plan.parallel.tp = 4;  // a2a needs the TP rank's 2 query groups to split over CP
  plan.parallel.cp = 2;
  for (CpComm comm : {CpComm::kP2p, CpComm::kA2a, CpComm::kAllGather}) {
    plan.parallel.cp_comm = comm;
    // The plan file.
    const std::string text = WritePlanYaml(plan);
    EXPECT_NE(text.find("  cp: 2"), std::string::npos);
    EXPECT_EQ(ParsePlanYaml(text, "plan.yaml"), plan);
    // The flags, and back.
    const std::string line = MegatronArgsLine(plan);
    EXPECT_NE(line.find(std::string("--context-parallel-size 2 --cp-comm-type ") +
                        std::string(Name(comm))),
              std::string::npos)
        << line;
    MegatronCommand c = ReadMegatronCommand(
        "torchrun --nproc-per-node 8 --nnodes 128 pretrain_gpt.py " + line + " --vocab-size 128256",
        "cmd");
    ResolveWorldSize(c, *c.world_size);
    for (const MegatronFinding& f : c.findings) {
      EXPECT_NE(f.severity, MegatronFinding::Severity::kError) << f.flag << ": " << f.message;
    }
    EXPECT_EQ(c.parallel, plan.parallel) << line;
  }
  // Without --context-parallel-size nothing is written.
  EXPECT_EQ(MegatronArgsLine(ModernPlan()).find("context-parallel"), std::string::npos);
  // A plan file's bad exchange names its key.
  const std::string text = WritePlanYaml(plan);
  EXPECT_NE(PlanError(Replace(text, "  cp_comm: allgather", "  cp_comm: ring"))
                .find("parallel.cp_comm: unknown value \"ring\" (expected one of: p2p, a2a, "
                      "allgather)"),
            std::string::npos);
  // A plan whose sequence CP cannot split is refused at parallel.cp.
  EXPECT_NE(PlanError(Replace(text, "  cp: 2", "  cp: 3")).find("parallel."), std::string::npos);
}

TEST(ContextParallelFlags, RefusalsInMegatronsWords) {
  const std::string base =
      "python pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
      "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
      "--global-batch-size 64 --vocab-size 32000 --bf16 --tensor-model-parallel-size 2 "
      "--context-parallel-size 2 ";
  const auto findings = [&](const std::string& extra) {
    std::string out;
    for (const MegatronFinding& f : ReadMegatronCommand(base + extra, "cmd").findings) {
      out += std::string(f.severity == MegatronFinding::Severity::kError ? "error " : "warning ") +
             f.flag + ": " + f.message + "\n";
    }
    return out;
  };
  EXPECT_NE(findings("--cp-comm-type a2a+p2p")
                .find("error --cp-comm-type: --hierarchical-context-parallel-sizes must be set "
                      "when a2a+p2p is used in cp comm"),
            std::string::npos);
  EXPECT_NE(findings("--cp-comm-type ring").find("error --cp-comm-type: cp_comm_type 'ring'"),
            std::string::npos);
  EXPECT_NE(findings("--cp-comm-type p2p a2a")
                .find("error --cp-comm-type: Length of cp_comm_type (2) should equal to the total "
                      "number of transformer layers (32)"),
            std::string::npos);
  EXPECT_NE(findings("--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 1")
                .find("warning --cp-comm-type: ptdp does not model the hierarchical a2a+p2p"),
            std::string::npos);
  EXPECT_NE(findings("--context-parallel-size 0").find("error --context-parallel-size"),
            std::string::npos);
  // The world is tp x pp x cp x dp.
  MegatronCommand c = ReadMegatronCommand(base, "cmd");
  ResolveWorldSize(c, 16);
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.parallel.cp, 2);
}

TEST(MoeFlags, ExpertModelsReadBackToTheSamePlan) {
  for (const char* name : {"deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b"}) {
    Plan plan;
    plan.model = ModelPreset(name);
    plan.cluster = ClusterPreset("dgx-h100");
    plan.num_gpus = 64;
    plan.training.global_batch_size = 512;
    plan.parallel = {.tp = 2,
                     .pp = 1,
                     .dp = 32,
                     .ep = 8,
                     .etp = 1,
                     .sequence_parallel = true,
                     .distributed_optimizer = true};
    plan.options.moe_token_dispatcher = MoeDispatcher::kAllToAll;
    const std::string line = MegatronArgsLine(plan);
    EXPECT_NE(line.find("--expert-model-parallel-size 8 --expert-tensor-parallel-size 1"),
              std::string::npos)
        << line;
    MegatronCommand c =
        ReadMegatronCommand("torchrun --nproc-per-node 8 --nnodes 8 pretrain_gpt.py " + line +
                                " --vocab-size " + std::to_string(plan.model.vocab_size),
                            "cmd");
    ResolveWorldSize(c, *c.world_size);
    for (const MegatronFinding& f : c.findings) {
      EXPECT_NE(f.severity, MegatronFinding::Severity::kError)
          << name << " " << f.flag << ": " << f.message;
    }
    EXPECT_EQ(c.parallel, plan.parallel) << name;
    EXPECT_EQ(c.options.moe_token_dispatcher, MoeDispatcher::kAllToAll);
    ModelSpec back = c.model;
    back.name = plan.model.name;
    back.max_position_embeddings = plan.model.max_position_embeddings;
    EXPECT_EQ(back, plan.model) << name << "\n" << line;
    // And the plan file.
    EXPECT_EQ(ParsePlanYaml(WritePlanYaml(plan), "plan.yaml"), plan) << name;
  }
  // DeepSeek's dense first layers in Megatron's list form.
  const std::string ds = MegatronArgsLine([] {
    Plan p;
    p.model = ModelPreset("deepseek-v3");
    p.training.global_batch_size = 8;
    p.parallel.ep = 8;
    return p;
  }());
  EXPECT_NE(ds.find("--moe-layer-freq '([0]*3+[1]*58)'"), std::string::npos) << ds;
  EXPECT_NE(ds.find("--moe-router-num-groups 8 --moe-router-group-topk 4"), std::string::npos)
      << ds;
  EXPECT_NE(ds.find("--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512"),
            std::string::npos);
}

TEST(MoeFlags, RefusalsAndLayerPatterns) {
  const std::string base =
      "python pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
      "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
      "--global-batch-size 64 --vocab-size 32000 --bf16 --num-experts 8 --moe-ffn-hidden-size "
      "512 ";
  const auto read = [&](const std::string& extra) {
    return ReadMegatronCommand(base + extra, "cmd");
  };
  const auto first_error = [&](const std::string& extra) -> std::string {
    for (const MegatronFinding& f : read(extra).findings) {
      if (f.severity == MegatronFinding::Severity::kError) return f.flag + ": " + f.message;
    }
    return "";
  };
  EXPECT_EQ(read("--moe-layer-freq 2").model.moe_layer_freq, 2);
  const MegatronCommand pattern = read("--moe-layer-freq '([0]*2+[1]*6)'");
  EXPECT_EQ(pattern.model.moe_first_dense_layers, 2);
  EXPECT_EQ(pattern.model.moe_layer_freq, 1);
  const MegatronCommand alternating = read("--moe-layer-freq [1,0,1,0,1,0,1,0]");
  EXPECT_EQ(alternating.model.moe_layer_freq, 2);
  EXPECT_EQ(first_error("--moe-layer-freq '([0]*2+[1]*5)'"),
            "--moe-layer-freq: Invalid length of moe_layer_pattern: 7, expected 8, current moe "
            "layer pattern: ([0]*2+[1]*5)");
  // A pattern Megatron takes but ptdp cannot model is a warning, not a refusal.
  EXPECT_EQ(first_error("--moe-layer-freq [1,1,0,1,1,0,1,1]"), "");
  const MegatronCommand irregular = read("--moe-layer-freq [1,1,0,1,1,0,1,1]");
  EXPECT_TRUE(std::any_of(irregular.findings.begin(), irregular.findings.end(),
                          [](const MegatronFinding& f) {
                            return f.flag == "--moe-layer-freq" &&
                                   f.message.starts_with("ptdp models MoE layer patterns");
                          }));
  EXPECT_EQ(first_error("--moe-router-topk 9"),
            "--moe-router-topk: moe_router_topk (9) must be between 1 and num_experts (8)");
  // Group-limited routing, with Megatron-Core's checks (TransformerConfig.__post_init__).
  EXPECT_EQ(first_error("--moe-router-group-topk 2"),
            "--moe-router-group-topk: When using group limited routing, moe_router_num_groups "
            "must be specified.");
  EXPECT_EQ(first_error("--moe-router-num-groups 3 --moe-router-group-topk 2"),
            "--moe-router-num-groups: num_moe_experts (8) should be divisible by "
            "moe_router_num_groups (3).");
  EXPECT_EQ(first_error("--moe-router-num-groups 4 --moe-router-group-topk 5"),
            "--moe-router-group-topk: moe_router_group_topk (5) should be smaller than "
            "moe_router_num_groups (4).");
  const MegatronCommand grouped = read("--moe-router-num-groups 4 --moe-router-group-topk 2");
  EXPECT_EQ(grouped.model.moe_router_num_groups, 4);
  EXPECT_EQ(grouped.model.moe_router_group_topk, 2);
  // The number of groups alone does not limit the routing.
  EXPECT_EQ(read("--moe-router-num-groups 4").model.moe_router_num_groups, 0);
  EXPECT_EQ(first_error("--moe-token-dispatcher-type a2a"),
            "--moe-token-dispatcher-type: argument --moe-token-dispatcher-type: invalid choice: "
            "'a2a' (choose from 'allgather', 'alltoall', 'flex')");
  // The expert grid: world 8 = ep 4 x etp 2.
  MegatronCommand c = read(
      "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 4 "
      "--expert-tensor-parallel-size 2");
  ResolveWorldSize(c, 8);
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.parallel.ep, 4);
  EXPECT_EQ(c.parallel.expert_tp(), 2);
  EXPECT_EQ(c.parallel.expert_dp(), 1);
  EXPECT_TRUE(CheckParallelConfig(c.model, c.training, c.parallel, 8).empty());
}

TEST(PipelineLayout, MegatronsStringsReadSplitAndWrittenBack) {
  // DeepSeek-V3 in Megatron-Bridge: the embedding alone, 30 stages of two layers, MTP and the
  // loss last (61 layers = 1 + 60).
  PipelineLayout ds = ParsePipelineLayout("Et|(tt|)*30mL");
  ASSERT_EQ(ds.error, "");
  ASSERT_EQ(ds.layers.size(), 32u);
  EXPECT_EQ(ds.layers.front(), 1);
  EXPECT_EQ(ds.layers[1], 2);
  EXPECT_EQ(ds.layers.back(), 0);
  EXPECT_EQ(ds.mtp, 1);
  EXPECT_EQ(PipelineLayoutText(ds.layers, ds.mtp), "Et|(tt|)*30mL");
  // "x*n", commas and spaces are cosmetic, nested groups.
  PipelineLayout small = ParsePipelineLayout("E, t*3 | ((t|)*2)*2 t L");
  ASSERT_EQ(small.error, "");
  EXPECT_EQ(small.layers, (std::vector<int>{3, 1, 1, 1, 1, 1}));
  EXPECT_EQ(PipelineLayoutText(small.layers, 0), "Ettt|(t|)*4tL");
  const ParallelConfig p{.pp = 4,
                         .virtual_stages = 2,
                         .schedule = Schedule::kInterleaved,
                         .layout = {1, 2, 2, 2, 2, 2, 2, 1}};
  const LayerSplit split = SplitLayers(14, p);
  EXPECT_EQ(split.layers, p.layout);
  EXPECT_EQ(split.first_layer, (std::vector<int>{0, 1, 3, 5, 7, 9, 11, 13}));
  EXPECT_TRUE(UnevenSplit(p));
  // Refusals in Megatron's words.
  EXPECT_EQ(ParsePipelineLayout("tE|tL").error, "The first layer must be embedding (E)");
  EXPECT_EQ(ParsePipelineLayout("Et|t").error,
            "Embedding (E) and loss (L) must be specified exactly once");
  EXPECT_EQ(ParsePipelineLayout("Et|Lt").error, "The last layer must be loss (L)");
  EXPECT_EQ(ParsePipelineLayout("Et|mtL").error, "decoder layers must be placed before MTP layers");
  EXPECT_EQ(ParsePipelineLayout("Et|x|L").error, "Invalid layer character: x (known: E, L, t, m)");
  EXPECT_EQ(ParsePipelineLayout("Et*|L").error,
            "cannot read the repetitions: write \"x*n\" or \"(...)*n\" (n below 100000)");
  EXPECT_NE(ParsePipelineLayout("E(t|)*99999999999L").error, "");
  EXPECT_EQ(ParsePipelineLayout("E((tttttttttt)*99999)*99999|L").error,
            "cannot read the repetitions: write \"x*n\" or \"(...)*n\" (n below 100000)");
}

TEST(PipelineLayout, RulesFlagsAndPlanFiles) {
  ModelSpec m = ModelPreset("seed-example");
  m.num_layers = 14;
  TrainingSpec t;
  t.global_batch_size = 64;
  ParallelConfig p{.pp = 4,
                   .dp = 1,
                   .virtual_stages = 2,
                   .schedule = Schedule::kInterleaved,
                   .layout = {1, 2, 2, 2, 2, 2, 2, 1}};
  EXPECT_TRUE(CheckParallelConfig(m, t, p, 4).empty());
  m.num_layers = 15;
  std::vector<Violation> v = CheckParallelConfig(m, t, p, 4);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, Rule::kUnevenStages);
  EXPECT_EQ(v[0].message, "Number of decoder layers 14 must match num_layers 15");
  m.num_layers = 14;
  p.first_stage_layers = 1;
  v = CheckParallelConfig(m, t, p, 4);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].message.find("cannot be combined"), std::string::npos);
  p.first_stage_layers = 0;
  // Flags out and back, with MTP; and the plan file.
  Plan plan;
  plan.model = m;
  plan.model.mtp_num_layers = 1;
  plan.cluster = ClusterPreset("dgx-h100");
  plan.num_gpus = 4;
  plan.training = t;
  plan.parallel = p;
  const std::string line = MegatronArgsLine(plan);
  EXPECT_NE(line.find("--pipeline-model-parallel-layout 'Et|(tt|)*6tmL'"), std::string::npos)
      << line;
  EXPECT_NE(line.find("--mtp-num-layers 1"), std::string::npos);
  EXPECT_EQ(line.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
  MegatronCommand c =
      ReadMegatronCommand("torchrun --nproc-per-node 4 pretrain_gpt.py " + line + " --vocab-size " +
                              std::to_string(plan.model.vocab_size),
                          "cmd");
  ResolveWorldSize(c, 4);
  for (const MegatronFinding& f : c.findings) {
    EXPECT_NE(f.severity, MegatronFinding::Severity::kError) << f.flag << ": " << f.message;
  }
  EXPECT_EQ(c.parallel, plan.parallel);
  EXPECT_EQ(c.model.mtp_num_layers, 1);
  EXPECT_EQ(ParsePlanYaml(WritePlanYaml(plan), "plan.yaml"), plan);
  // The layout's MTP count must match --mtp-num-layers, and pp must divide its stages.
  const auto errors = [](const std::string& cmd) {
    std::string out;
    for (const MegatronFinding& f : ReadMegatronCommand(cmd, "cmd").findings) {
      if (f.severity == MegatronFinding::Severity::kError) out += f.flag + ": " + f.message + "\n";
    }
    return out;
  };
  const std::string base =
      "python pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
      "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
      "--global-batch-size 64 --vocab-size 32000 --bf16 --pipeline-model-parallel-size 2 ";
  EXPECT_EQ(errors(base + "--pipeline-model-parallel-layout 'Ett|ttmL'"),
            "--pipeline-model-parallel-layout: Number of mtp layers in layout (1) must match "
            "mtp_num_layers (0)\n");
  EXPECT_EQ(errors(base + "--pipeline-model-parallel-layout 'Ett|t|tL'"),
            "--pipeline-model-parallel-layout: pipeline_model_parallel_layout must be divisible "
            "by pipeline_model_parallel_size (len(layout)=3, pipeline_model_parallel_size=2)\n");
}

TEST(Mtp, CountedInParametersAndMemoryOfTheLastStage) {
  ModelSpec m = ModelPreset("deepseek-v3");
  ASSERT_EQ(m.mtp_num_layers, 0);
  const int64_t without = CountParameters(m).total;
  m.mtp_num_layers = 1;
  const int64_t with = CountParameters(m).total;
  // DeepSeek-V3's MTP module is one more MoE layer with its projection (2h x h) and its norms;
  // Megatron shares the embedding and the output layer with the main model. The released
  // checkpoint's 685 B is 671 B + 14 B, where the 14 B also holds the MTP module's own copies of
  // the embedding and the head (2 x 129,280 x 7,168 = 1.85 B).
  EXPECT_NEAR(static_cast<double>(without) / 1e9, 671.0, 1.0) << without;
  const ParameterCounts counts = CountParameters(m);
  EXPECT_EQ(with - without, counts.mtp);
  EXPECT_EQ(counts.mtp, counts.per_moe_layer + 2 * int64_t{m.hidden_size} * m.hidden_size +
                            3 * int64_t{m.hidden_size});
  EXPECT_NEAR(static_cast<double>(with - without) / 1e9 + 1.85, 14.0, 0.6);  // "14 B", rounded
}

TEST(RecomputeModules, FlagsPlanFilesAndRefusals) {
  Plan plan;
  plan.model = ModelPreset("deepseek-v3");
  plan.cluster = ClusterPreset("dgx-h100");
  plan.num_gpus = 64;
  plan.training.global_batch_size = 512;
  plan.parallel = {.tp = 2,
                   .pp = 1,
                   .dp = 32,
                   .ep = 64,
                   .etp = 1,
                   .sequence_parallel = true,
                   .recompute = Recompute::kSelective,
                   .distributed_optimizer = true};
  plan.parallel.recompute_modules = kRecomputeMlaUpProj | kRecomputeMlp;
  plan.options.moe_token_dispatcher = MoeDispatcher::kAllToAll;
  const std::string line = MegatronArgsLine(plan);
  EXPECT_NE(line.find("--recompute-granularity selective --recompute-modules mla_up_proj mlp"),
            std::string::npos)
      << line;
  MegatronCommand c = ReadMegatronCommand(
      "torchrun --nproc-per-node 8 --nnodes 8 pretrain_gpt.py " + line + " --vocab-size 129280",
      "cmd");
  ResolveWorldSize(c, 64);
  EXPECT_EQ(c.parallel, plan.parallel);
  EXPECT_EQ(ParsePlanYaml(WritePlanYaml(plan), "plan.yaml"), plan);
  EXPECT_NE(WritePlanYaml(plan).find("recompute_modules: \"mla_up_proj,mlp\""), std::string::npos);
  // The default (core_attn) is not written.
  plan.parallel.recompute_modules = kRecomputeCoreAttn;
  EXPECT_EQ(MegatronArgsLine(plan).find("--recompute-modules"), std::string::npos);
  EXPECT_EQ(WritePlanYaml(plan).find("recompute_modules"), std::string::npos);
  // Refusals.
  std::string error;
  EXPECT_EQ(ParseRecomputeModules("moe_act+attn", &error), 0);
  EXPECT_EQ(error,
            "unknown value \"attn\" (expected one of: core_attn, moe_act, layernorm, mla_up_proj, "
            "mlp, moe, shared_experts)");
  EXPECT_EQ(ParseRecomputeModules("moe_act, layernorm", &error),
            kRecomputeMoeAct | kRecomputeLayernorm);
  const MegatronCommand bad = ReadMegatronCommand(
      "python pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
      "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
      "--global-batch-size 64 --vocab-size 32000 --bf16 --recompute-granularity selective "
      "--recompute-modules core_attn attn",
      "cmd");
  bool found = false;
  for (const MegatronFinding& f : bad.findings) {
    found |= f.flag == "--recompute-modules" && f.severity == MegatronFinding::Severity::kError;
  }
  EXPECT_TRUE(found);
  std::string yaml = WritePlanYaml(plan);
  yaml.replace(yaml.find("recompute: selective"), 20,
               "recompute: none\n  recompute_modules: \"moe\"");
  EXPECT_THROW(ParsePlanYaml(yaml, "plan.yaml"), InputError);
}

}  // namespace
}  // namespace ptdp
