// Reading pasted Megatron-LM command lines and writing a plan's flags.
#include "megatron/read_command.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/presets.h"
#include "core/text.h"
#include "megatron/write_flags.h"

namespace ptdp {
namespace {

using Severity = MegatronFinding::Severity;

std::string ReadFixture(const std::string& name) {
  std::ifstream in(std::string(PTDP_TEST_FIXTURES) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "E 18 --num-microbatches" / "W 16 " per finding, to compare whole lists at a glance.
std::vector<std::string> Summary(const MegatronCommand& c) {
  std::vector<std::string> out;
  for (const MegatronFinding& f : c.findings) {
    out.push_back(
        fmt::format("{} {} {}", f.severity == Severity::kError ? 'E' : 'W', f.line, f.flag));
  }
  return out;
}

const MegatronFinding* FindingFor(const MegatronCommand& c, std::string_view flag) {
  for (const MegatronFinding& f : c.findings) {
    if (f.flag == flag) return &f;
  }
  return nullptr;
}

TEST(MegatronArgs, FlagTablesComeFromMegatronAndTorchrun) {
  EXPECT_GT(MegatronFlags().size(), 500u);
  auto arity = [](std::string_view name) {
    for (const KnownFlag& f : MegatronFlags()) {
      if (f.name == name) return static_cast<int>(f.arity);
    }
    return -1;
  };
  EXPECT_EQ(arity("--num-layers"), static_cast<int>(FlagArity::kOne));
  EXPECT_EQ(arity("--sequence-parallel"), static_cast<int>(FlagArity::kSwitch));
  EXPECT_EQ(arity("--data-path"), static_cast<int>(FlagArity::kMany));
  EXPECT_EQ(arity("--lr"), static_cast<int>(FlagArity::kOne));
  EXPECT_EQ(arity("--num-microbatches"), -1);
  EXPECT_EQ(arity("--learning-rate"), -1);
}

TEST(MegatronArgs, TheFoundingDocumentsCommand) {
  MegatronCommand c = ReadMegatronCommand(ReadFixture("seed-example.sh"), "seed-example.sh");
  EXPECT_EQ(c.script, "pretrain_gpt.py");
  EXPECT_TRUE(c.model_complete);
  EXPECT_EQ(c.model.num_layers, 24);
  EXPECT_EQ(c.model.hidden_size, 2048);
  EXPECT_EQ(c.model.num_attention_heads, 32);
  EXPECT_EQ(c.model.seq_length, 2048);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.pp, 4);
  EXPECT_EQ(c.parallel.micro_batch_size, 4);
  EXPECT_EQ(c.training.global_batch_size, 128);
  EXPECT_EQ(c.training.precision, Precision::kFp32);  // neither --bf16 nor --fp16
  EXPECT_FALSE(c.world_size.has_value());             // python, not torchrun
  EXPECT_EQ(Summary(c),
            (std::vector<std::string>{"W 16 ", "E 18 --num-microbatches", "E 21 --learning-rate",
                                      "E 0 --max-position-embeddings", "W 0 ",
                                      "W 11 --tensor-model-parallel-size"}));
  EXPECT_TRUE(c.has_errors());
  EXPECT_EQ(FindingFor(c, "--learning-rate")->fix, "write --lr");
  EXPECT_EQ(FindingFor(c, "--max-position-embeddings")->message,
            "max-position-embeddings argument is None: Megatron-LM requires it");

  ResolveWorldSize(c, 8);
  EXPECT_EQ(c.parallel.dp, 1);
  EXPECT_NE(
      FindingFor(c, "--num-microbatches")->message.find("here 128 / (4 x 1) = 32, the value given"),
      std::string::npos);
}

TEST(MegatronArgs, TorchrunVariablesAndEqualsSigns) {
  const std::string text =
      "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
      "TP=4\n"
      "GPUS_PER_NODE=8\n"
      "torchrun --nproc_per_node=$GPUS_PER_NODE --nnodes 2 pretrain_gpt.py \\\n"
      "  --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size=2 \\\n"
      "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \\\n"
      "  --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 256 \\\n"
      "  --bf16 --use-distributed-optimizer --sequence-parallel \\\n"
      "  --swiglu --normalization RMSNorm --position-embedding-type rope \\\n"
      "  --untie-embeddings-and-output-weights --disable-bias-linear \\\n"
      "  --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 \\\n"
      "  --vocab-size 128256 --lr 3e-4  # trailing comment\n";
  MegatronCommand c = ReadMegatronCommand(text, "llama.sh");
  EXPECT_EQ(c.world_size, 16);
  EXPECT_EQ(c.parallel.tp, 4);
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_TRUE(c.parallel.distributed_optimizer);
  EXPECT_EQ(c.training.precision, Precision::kBf16);
  EXPECT_DOUBLE_EQ(c.training.lr, 3e-4);
  const ModelSpec llama = ModelPreset("llama3-8b");
  EXPECT_EQ(c.model.num_query_groups, 8);
  EXPECT_EQ(c.model.activation, Activation::kSwiglu);
  EXPECT_EQ(c.model.normalization, Normalization::kRmsNorm);
  EXPECT_EQ(c.model.position_embedding, PositionEmbedding::kRope);
  EXPECT_FALSE(c.model.tied_embeddings);
  EXPECT_FALSE(c.model.add_bias_linear);
  EXPECT_EQ(CountParameters(c.model).total, CountParameters(llama).total);
  EXPECT_FALSE(c.has_errors()) << Summary(c).front();
  ResolveWorldSize(c, *c.world_size);
  EXPECT_EQ(c.parallel.dp, 2);
}

TEST(MegatronArgs, UnknownFlagsAreNamedWithASuggestion) {
  const MegatronCommand c = ReadMegatronCommand(
      "python pretrain_gpt.py --num-layer 4 --hidden-size 64 --num-attention-heads 4 "
      "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 --num_layers 4 "
      "--tensor-parallel-size 2",
      "cmd");
  const MegatronFinding* typo = FindingFor(c, "--num-layer");
  ASSERT_NE(typo, nullptr);
  EXPECT_EQ(typo->message, "unrecognized arguments: --num-layer");
  EXPECT_EQ(typo->fix, "did you mean --num-layers?");
  EXPECT_EQ(FindingFor(c, "--num_layers")->fix, "did you mean --num-layers?");
  EXPECT_EQ(FindingFor(c, "--tensor-parallel-size")->fix, "write --tensor-model-parallel-size");
}

TEST(MegatronArgs, NumbersAsPythonReadsThem) {
  // argparse's type=int is Python's int(): underscores between digits, blanks, a sign.
  EXPECT_EQ(PythonInt("220_000_000"), 220'000'000);
  EXPECT_EQ(PythonInt(" +8 "), 8);
  EXPECT_EQ(PythonInt("-3"), -3);
  EXPECT_EQ(PythonInt("007"), 7);
  for (const char* bad : {"", "1__0", "_1", "1_", "0x10", "1.0", "two", "1 2", "+"}) {
    EXPECT_FALSE(PythonInt(bad)) << bad;
  }
  EXPECT_EQ(PythonFloat("1_000.5"), 1000.5);
  EXPECT_EQ(PythonFloat("1e-4"), 1e-4);
  EXPECT_EQ(PythonFloat(".5"), 0.5);
  EXPECT_EQ(PythonFloat("-Infinity"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(*PythonFloat("NaN")));
  for (const char* bad : {"", "1e", "e5", "1._5", "--1", "0x1p3"}) {
    EXPECT_FALSE(PythonFloat(bad)) << bad;
  }
  const MegatronCommand c = ReadMegatronCommand(
      "python pretrain_gpt.py --num-layers 2_4 --hidden-size 2048 --num-attention-heads 32 "
      "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
      "--train-samples 220_000_000 --lr 1_0e-5",
      "cmd");
  for (const MegatronFinding& f : c.findings) {
    EXPECT_NE(f.severity, Severity::kError) << f.flag << ": " << f.message;
  }
  EXPECT_EQ(c.model.num_layers, 24);
  EXPECT_DOUBLE_EQ(c.training.lr, 10e-5);
}

TEST(MegatronArgs, MegatronsOwnRefusals) {
  const std::string base =
      "python pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 32 "
      "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 ";
  auto first_error = [&](const std::string& extra) {
    const MegatronCommand c = ReadMegatronCommand(base + extra, "cmd");
    for (const MegatronFinding& f : c.findings) {
      if (f.severity == Severity::kError) return f.message;
    }
    return std::string();
  };
  EXPECT_EQ(first_error("--recompute-granularity selective --recompute-method uniform"),
            "recompute method is not yet supported for selective recomputing granularity");
  EXPECT_EQ(first_error("--batch-size 8"), "--batch-size argument is no longer valid");
  EXPECT_EQ(first_error("--bf16 --fp16"), "assert not args.bf16: choose one of --fp16 and --bf16");
  EXPECT_EQ(first_error("--num-layers-per-virtual-pipeline-stage 2 "
                        "--num-virtual-stages-per-pipeline-rank 2"),
            "No more than one of the following arguments can be set at the same time: "
            "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank");
  EXPECT_EQ(first_error("--tensor-model-parallel-size two"),
            "argument --tensor-model-parallel-size: invalid int value: 'two'");
  EXPECT_EQ(first_error("--sequence-parallel=true"),
            "argument --sequence-parallel: ignored explicit argument 'true'");
  EXPECT_EQ(first_error("stray"), "unrecognized arguments: stray");
  EXPECT_EQ(first_error("--max-position-embeddings 1024"),
            "max_position_embeddings (1024) must be greater than or equal to seq_length (2048).");
  // Sizes ptdp cannot work with are errors, and nothing is simulated from them (a vocabulary
  // of 0 once reached the cost model as an internal error).
  EXPECT_EQ(first_error("--vocab-size 0"), "--vocab-size must be positive, got 0");
  EXPECT_FALSE(ReadMegatronCommand(base + "--vocab-size 0", "cmd").model_complete);
  EXPECT_EQ(first_error("--hidden-size 1000000000"),
            "--hidden-size is beyond what ptdp models (at most 16777216), got 1000000000");
  EXPECT_EQ(first_error("--pipeline-model-parallel-size 99999999999"),
            "--pipeline-model-parallel-size is beyond what ptdp models (at most 1048576), got "
            "99999999999");
  EXPECT_EQ(
      ReadMegatronCommand(base + "--pipeline-model-parallel-size 99999999999", "cmd").parallel.pp,
      1);

  // Sequence parallelism at TP 1 is switched off with Megatron's warning, not refused.
  const MegatronCommand sp = ReadMegatronCommand(base + "--sequence-parallel", "cmd");
  EXPECT_FALSE(sp.parallel.sequence_parallel);
  EXPECT_EQ(FindingFor(sp, "--sequence-parallel")->severity, Severity::kWarning);
}

TEST(MegatronArgs, AMegabyteLongFlagIsReportedWithoutComparingItToEveryFlag) {
  // The suggestions' edit distances stop where the lengths alone rule a flag out: a pasted
  // 1 MB word took 22 s (every known flag compared to it in full), now microseconds.
  EXPECT_EQ(EditDistance("--tensor-parallel", "--tensor-model-parallel-size"), 11u);
  EXPECT_EQ(EditDistance("--tensor-parallel", "--tensor-model-parallel-size", 2), 3u);
  EXPECT_EQ(EditDistance("--num-layer", "--num-layers", 2), 1u);
  const std::string huge = "--" + std::string(1'000'000, 'x');
  const MegatronCommand c = ReadMegatronCommand(
      "python pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
      "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 " +
          huge,
      "cmd");
  // issue 35: the finding quotes the flag by its first 60 bytes and its size, not whole.
  const std::string quoted = "--" + std::string(58, 'x') + "... (1000002 bytes)";
  const MegatronFinding* f = FindingFor(c, quoted);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->message, "unrecognized arguments: " + quoted);
  EXPECT_EQ(f->fix, "");
  for (const MegatronFinding& finding : c.findings) {
    EXPECT_LT(finding.message.size(), 400u) << finding.message.substr(0, 100);
  }
}

TEST(MegatronArgs, InterleavingFromEitherFlag) {
  const std::string base =
      "python pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 32 "
      "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
      "--pipeline-model-parallel-size 4 ";
  const MegatronCommand a =
      ReadMegatronCommand(base + "--num-layers-per-virtual-pipeline-stage 2", "cmd");
  EXPECT_EQ(a.parallel.virtual_stages, 3);
  EXPECT_EQ(a.parallel.schedule, Schedule::kInterleaved);
  const MegatronCommand b =
      ReadMegatronCommand(base + "--num-virtual-stages-per-pipeline-rank 2", "cmd");
  EXPECT_EQ(b.parallel.virtual_stages, 2);
  const MegatronCommand full = ReadMegatronCommand(
      base + "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
      "cmd");
  EXPECT_EQ(full.parallel.recompute, Recompute::kFull);
}

TEST(MegatronArgs, SyntaxErrorsAreInputErrors) {
  try {
    ReadMegatronCommand("echo hello\nls -l\n", "cmd.sh");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "cmd.sh: no Megatron-LM command found: no word ends in .py (hint: paste the "
                 "command that runs pretrain_gpt.py (python or torchrun))");
  }
  try {
    ReadMegatronCommand("python pretrain_gpt.py --data-path 'unclosed\n", "cmd.sh");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.where().line, 1);
    EXPECT_EQ(e.message(), "unclosed ' quote");
  }
}

TEST(MegatronArgs, WrittenFlagsReadBackToTheSamePlan) {
  Plan plan;
  plan.model = ModelPreset("llama2-70b");
  plan.cluster = ClusterPreset("dgx-h100");
  plan.num_gpus = 256;
  plan.training.global_batch_size = 1024;
  plan.training.precision = Precision::kBf16;
  plan.parallel = {.tp = 8,
                   .pp = 8,
                   .dp = 4,
                   .micro_batch_size = 1,
                   .virtual_stages = 5,
                   .schedule = Schedule::kInterleaved,
                   .sequence_parallel = true,
                   .recompute = Recompute::kFull,
                   .distributed_optimizer = true};
  const std::string line = MegatronArgsLine(plan);
  const std::string head =
      "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 "
      "--num-layers-per-virtual-pipeline-stage 2 --micro-batch-size 1 --global-batch-size 1024";
  EXPECT_EQ(line.substr(0, head.size()), head);
  MegatronCommand c = ReadMegatronCommand(
      "torchrun --nproc-per-node 8 --nnodes 32 pretrain_gpt.py " + line + " --vocab-size 32000",
      "cmd");
  ResolveWorldSize(c, *c.world_size);
  EXPECT_EQ(c.model, ([&] {
              ModelSpec m = plan.model;
              m.name = "megatron-command";
              return m;
            }()));
  EXPECT_EQ(c.parallel, plan.parallel);
  EXPECT_EQ(c.training.global_batch_size, plan.training.global_batch_size);
  EXPECT_EQ(c.training.precision, plan.training.precision);
  for (const MegatronFinding& f : c.findings) {
    EXPECT_NE(f.severity, Severity::kError) << f.flag << ": " << f.message;
  }
}

}  // namespace
}  // namespace ptdp

namespace ptdp {
namespace {

constexpr const char* kSmallGpt =
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 512 "
    "--num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
    "--micro-batch-size 2 --global-batch-size 16 --vocab-size 50304 --bf16";

// The Megatron flags a read command's plan writes back (8 GPUs, dgx-h100).
std::string WrittenBack(MegatronCommand c) {
  ResolveWorldSize(c, 8);
  const Plan plan{.model = c.model,
                  .cluster = ClusterPreset("dgx-h100"),
                  .training = c.training,
                  .parallel = c.parallel,
                  .options = c.options};
  return MegatronArgsLine(plan);
}

TEST(MegatronArgs, GradientBytesFromTheirFlags) {
  MegatronCommand c = ReadMegatronCommand(kSmallGpt, "cmd");
  EXPECT_FALSE(c.options.grad_reduce_in_bf16);
  EXPECT_EQ(GradientBytes(c.training.precision, c.options), 4);
  c = ReadMegatronCommand(std::string(kSmallGpt) + " --grad-reduce-in-bf16", "cmd");
  EXPECT_TRUE(c.options.grad_reduce_in_bf16);
  EXPECT_EQ(GradientBytes(c.training.precision, c.options), 2);
  EXPECT_TRUE(
      std::count(c.simulated_flags.begin(), c.simulated_flags.end(), "--grad-reduce-in-bf16"));
  // Written back for a plan that has it.
  EXPECT_NE(WrittenBack(c).find("--grad-reduce-in-bf16"), std::string::npos);
  // fp16 keeps 2-byte main gradients unless told to accumulate in fp32.
  std::string fp16 = kSmallGpt;
  fp16.replace(fp16.find("--bf16"), 6, "--fp16");
  c = ReadMegatronCommand(fp16 + " --grad-reduce-in-bf16", "cmd");
  EXPECT_FALSE(c.options.grad_reduce_in_bf16);  // Megatron reads it under --bf16 only
  EXPECT_EQ(GradientBytes(c.training.precision, c.options), 2);
  c = ReadMegatronCommand(fp16 + " --accumulate-allreduce-grads-in-fp32", "cmd");
  EXPECT_EQ(GradientBytes(c.training.precision, c.options), 4);
}

TEST(MegatronArgs, TheJitFusedCrossEntropyKeepsOneMoreFp32Copy) {
  MegatronCommand c = ReadMegatronCommand(kSmallGpt, "cmd");
  EXPECT_FALSE(c.options.cross_entropy_loss_fusion);
  c = ReadMegatronCommand(std::string(kSmallGpt) + " --cross-entropy-loss-fusion", "cmd");
  EXPECT_TRUE(c.options.cross_entropy_loss_fusion);
  EXPECT_TRUE(std::count(c.simulated_flags.begin(), c.simulated_flags.end(),
                         "--cross-entropy-loss-fusion"));
  EXPECT_NE(WrittenBack(c).find("--cross-entropy-loss-fusion"), std::string::npos);
  // Transformer Engine's implementation is not modelled: simulated as the unfused loss, said.
  c = ReadMegatronCommand(
      std::string(kSmallGpt) + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te",
      "cmd");
  EXPECT_FALSE(c.options.cross_entropy_loss_fusion);
  bool said = false;
  for (const MegatronFinding& f : c.findings) {
    said = said || (f.flag == "--cross-entropy-fusion-impl" &&
                    f.message.find("not simulated") != std::string::npos);
  }
  EXPECT_TRUE(said);
}

TEST(MegatronArgs, DeferredEmbeddingWeightGradientsKeepTheirBuffers) {
  const std::string pipelined = std::string(kSmallGpt) + " --pipeline-model-parallel-size 2";
  MegatronCommand c = ReadMegatronCommand(
      pipelined + " --defer-embedding-wgrad-compute --wgrad-deferral-limit 2", "cmd");
  for (const MegatronFinding& f : c.findings) EXPECT_NE(f.severity, Severity::kError) << f.message;
  EXPECT_TRUE(c.options.defer_embedding_wgrad_compute);
  EXPECT_EQ(c.options.wgrad_deferral_limit, 2);
  const std::string written = WrittenBack(c);
  EXPECT_NE(written.find("--defer-embedding-wgrad-compute --wgrad-deferral-limit 2"),
            std::string::npos)
      << written;
  // Megatron's start-up rules on it (model_parallel_config.py), in its words.
  const auto refused = [](const std::string& command, const std::string& words) {
    const MegatronCommand bad =
        ReadMegatronCommand(command + " --defer-embedding-wgrad-compute", "cmd");
    for (const MegatronFinding& f : bad.findings) {
      if (f.severity == Severity::kError && f.message.find(words) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(refused(pipelined + " --wgrad-deferral-limit -1", "greater than or equal to 0"));
  EXPECT_TRUE(refused(pipelined + " --no-gradient-accumulation-fusion",
                      "gradient accumulation fusion is not used"));
  EXPECT_TRUE(refused(kSmallGpt, "pipeline model parallel is not used"));
  EXPECT_FALSE(refused(pipelined, "Cannot defer"));
  // Its timing is not modelled, and check says so.
  bool said = false;
  for (const MegatronFinding& f : c.findings) {
    said = said || (f.flag == "--defer-embedding-wgrad-compute" &&
                    f.message.find("not simulated") != std::string::npos);
  }
  EXPECT_TRUE(said);
}

// The workspace bytes a launch with CUBLAS_WORKSPACE_CONFIG=`config` gives.
int64_t CublasWorkspaceBytesOf(const std::string& config) {
  return ReadMegatronCommand("export CUBLAS_WORKSPACE_CONFIG=" + config + "\n" + kSmallGpt, "cmd")
      .options.cublas_workspace_bytes;
}

TEST(MegatronArgs, TheLaunchsCublasWorkspaceConfig) {
  EXPECT_EQ(ReadMegatronCommand(kSmallGpt, "cmd").options.cublas_workspace_bytes, -1);
  const MegatronCommand c = ReadMegatronCommand(
      std::string("export CUBLAS_WORKSPACE_CONFIG=:4096:8\n") + kSmallGpt, "cmd");
  EXPECT_EQ(c.options.cublas_workspace_bytes, 4096 * 8 * 1024);
  // PyTorch's default layout of pairs; sizes past any GPU saturate rather than overflow.
  EXPECT_EQ(CublasWorkspaceBytesOf(":4096:2:16:8"), (4096 * 2 + 16 * 8) * 1024);
  EXPECT_EQ(CublasWorkspaceBytesOf(":999999999999:999999999999"), int64_t{1} << 50);
  EXPECT_EQ(CublasWorkspaceBytesOf("4096"), -1);  // no pair: PyTorch keeps its default
}

TEST(MegatronArgs, LocalTransformerImplementationRunsUnfusedAttention) {
  EXPECT_EQ(ReadMegatronCommand(kSmallGpt, "cmd").options.attention, AttentionBackend::kFlash);
  MegatronCommand c = ReadMegatronCommand(
      std::string(kSmallGpt) + " --transformer-impl local --attention-backend flash", "cmd");
  EXPECT_EQ(c.options.attention, AttentionBackend::kUnfused);
  EXPECT_EQ(FindingFor(c, "--transformer-impl"), nullptr);  // read, not "not simulated"
  c = ReadMegatronCommand(std::string(kSmallGpt) + " --transformer-impl transformer_engine", "cmd");
  EXPECT_EQ(c.options.attention, AttentionBackend::kFlash);
  EXPECT_EQ(FindingFor(c, "--transformer-impl"), nullptr);
  c = ReadMegatronCommand(std::string(kSmallGpt) + " --transformer-impl inference_optimized",
                          "cmd");
  ASSERT_NE(FindingFor(c, "--transformer-impl"), nullptr);
  EXPECT_NE(FindingFor(c, "--transformer-impl")->message.find("not simulated"), std::string::npos);
}

}  // namespace
}  // namespace ptdp
