// `check` speaks today's Megatron-LM (issue 15): launch scripts as written, launchers, the
// launch environment, argparse's types and choices from the generated option table, today's
// rules (each test quotes the line of megatron/training/arguments.py, determinism.py or
// pipeline_parallel/schedules.py it mirrors, at the commit megatron/megatron_flags.inc names), and
// a warning for every flag that changes the run but is not simulated.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "megatron/read_command.h"
#include "megatron/write_flags.h"
#include "planner/check.h"

namespace ptdp {
namespace {

using Severity = MegatronFinding::Severity;

// A small GPT command Megatron accepts on 8 GPUs; tests add flags to it.
std::string Command(const std::string& extra, const std::string& launcher =
                                                  "torchrun "
                                                  "--nproc-per-node 8") {
  return launcher +
         " pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
         "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
         "--global-batch-size 64 --vocab-size 32000 --bf16 " +
         extra;
}

std::vector<std::string> Errors(const CheckReport& r) {
  std::vector<std::string> out;
  for (const MegatronFinding& f : r.command.findings) {
    if (f.severity == Severity::kError) out.push_back(f.flag + ": " + f.message);
  }
  for (const Violation& v : r.violations) out.push_back(v.message);
  return out;
}

bool Warns(const CheckReport& r, std::string_view flag, std::string_view text) {
  return std::any_of(r.command.findings.begin(), r.command.findings.end(), [&](const auto& f) {
    return f.severity == Severity::kWarning && f.flag == flag &&
           f.message.find(text) != std::string::npos;
  });
}

CheckReport Check(const std::string& text, bool environment_complete = false) {
  MegatronReadOptions options;
  options.environment_complete = environment_complete;
  return CheckMegatronCommand(text, "cmd.sh", std::nullopt, options);
}

TEST(CheckToday, TheOptionTableIsTodaysAndSaysWhichCommit) {
  EXPECT_NE(MegatronTableVersion().find("d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22)"),
            std::string::npos);
  // Options Megatron builds from config dataclasses are known, with their arity.
  for (const std::string extra :
       {"--experimental-attention-variant gated_delta_net", "--step-batch-size-schedule 0:16",
        "--moe-flex-dispatcher-backend deepep", "--megatron-fsdp-main-grads-dtype fp32",
        "--cuda-graph-modules attn mlp", "--verify-integrity"}) {
    for (const std::string& e : Errors(Check(Command(extra)))) {
      EXPECT_EQ(e.find("unrecognized"), std::string::npos) << extra << ": " << e;
    }
  }
}

TEST(CheckToday, ArgparseTypesAndChoicesComeFromTheTable) {
  EXPECT_EQ(Errors(Check(Command("--attention-backend sdpa"))).at(0),
            "--attention-backend: argument --attention-backend: invalid choice: 'sdpa' (choose "
            "from 'flash', 'fused', 'unfused', 'local', 'auto')");
  EXPECT_EQ(Errors(Check(Command("--lr fast"))).at(0),
            "--lr: argument --lr: invalid float value: 'fast'");
  // One quoted word where Megatron wants several ints (its functional test
  // gpt3_mcore_te_tp1_pp2_cp4_a2a_p2p_nondeterministic, refused by argparse).
  EXPECT_EQ(Errors(Check(Command("--context-parallel-size 4 --hierarchical-context-parallel-sizes "
                                 "'2 2'")))
                .at(0),
            "--hierarchical-context-parallel-sizes: argument --hierarchical-context-parallel-"
            "sizes: invalid int value: '2 2'");
  // A value the script computes at run time is not judged.
  EXPECT_TRUE(Errors(Check(Command("--lr $(cat lr.txt)"))).empty());
}

TEST(CheckToday, BashArraysExpandAsBashExpandsThem) {
  // The shape of Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh.
  const std::string script =
      "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
      "GPUS_PER_NODE=8\nNUM_NODES=2\n"
      "DISTRIBUTED_ARGS=(\n  --nproc_per_node $GPUS_PER_NODE\n  --nnodes $NUM_NODES\n)\n"
      "MODEL_ARGS=(\n  --num-layers 8   # layers\n  --hidden-size 1024\n"
      "  --num-attention-heads 16\n  --seq-length 2048\n  --max-position-embeddings 2048\n)\n"
      "TRAINING_ARGS=(--micro-batch-size 1 --global-batch-size 64 --vocab-size 32000 --bf16)\n"
      "PARALLEL_ARGS=()\n"
      "if [[ \"$NUM_NODES\" == \"2\" ]]; then\n"
      "  PARALLEL_ARGS+=(\"--tensor-model-parallel-size 2\" --sequence-parallel)\nfi\n"
      "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} ${TRAINING_ARGS[@]} \\\n"
      "  ${PARALLEL_ARGS[@]}\n";
  const CheckReport r = Check(script);
  EXPECT_TRUE(Errors(r).empty()) << Errors(r).at(0);
  EXPECT_EQ(r.gpus, 16);
  EXPECT_EQ(r.command.parallel.tp, 2);
  EXPECT_TRUE(r.command.parallel.sequence_parallel);
  EXPECT_EQ(r.command.environment.at("CUDA_DEVICE_MAX_CONNECTIONS"), "1");
  EXPECT_FALSE(Warns(r, "--tensor-model-parallel-size", "CUDA_DEVICE_MAX_CONNECTIONS"));
}

TEST(CheckToday, LaunchersGiveTheWorldSize) {
  EXPECT_EQ(Check(Command("", "torchrun --nproc_per_node=4 --nnodes=2")).gpus, 8);
  EXPECT_EQ(
      Check(Command("", "python -m torch.distributed.run --nproc-per-node 4 --nnodes 4")).gpus, 16);
  EXPECT_EQ(Check(Command("", "srun -N 2 --ntasks-per-node=8 python")).gpus, 16);
  EXPECT_EQ(Check(Command("", "srun --ntasks 32 python")).gpus, 32);
  EXPECT_EQ(Check(Command("", "mpirun -np 24 python")).gpus, 24);
  // The shell hands the command to `sh -c`, as sc21's SRUN.sh does.
  EXPECT_EQ(Check("CMD=\"" + Command("", "python") + "\"\nsrun --ntasks=8 sh -c \"${CMD}\"\n").gpus,
            8);
}

// arguments.py: with TP or CP on GPUs before Blackwell, `assert
// os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') == "1"`; FSDP: `assert
// os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') != "1", 'FSDP requires
// CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.'`
TEST(CheckToday, DeviceConnectionsFollowTheLaunchEnvironment) {
  const std::string tp = Command("--tensor-model-parallel-size 2");
  EXPECT_FALSE(Warns(Check("export CUDA_DEVICE_MAX_CONNECTIONS=1\n" + tp),
                     "--tensor-model-parallel-size", "CUDA_DEVICE_MAX_CONNECTIONS"));
  EXPECT_FALSE(Warns(Check("CUDA_DEVICE_MAX_CONNECTIONS=1 " + tp), "--tensor-model-parallel-size",
                     "CUDA_DEVICE_MAX_CONNECTIONS"));
  EXPECT_TRUE(Errors(Check("CUDA_DEVICE_MAX_CONNECTIONS=1 " + tp)).empty());
  // Not set by the script: the user's shell may set it, so a warning.
  const CheckReport unset = Check(tp);
  EXPECT_TRUE(Errors(unset).empty());
  EXPECT_TRUE(Warns(unset, "--tensor-model-parallel-size", "CUDA_DEVICE_MAX_CONNECTIONS=1"));
  // Set to something else, or known to be unset: Megatron refuses.
  EXPECT_EQ(Errors(Check("export CUDA_DEVICE_MAX_CONNECTIONS=8\n" + tp)).at(0),
            "--tensor-model-parallel-size: Using tensor model parallelism or context parallelism "
            "require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1 (it is "
            "'8' at launch)");
  EXPECT_EQ(Errors(Check(tp, /*environment_complete=*/true)).size(), 1u);
  // FSDP wants it unset or above 1, and is not warned about when the script leaves it alone.
  const std::string fsdp = Command(
      "--use-megatron-fsdp --use-distributed-optimizer --data-parallel-sharding-strategy "
      "optim_grads_params --ckpt-format fsdp_dtensor --tensor-model-parallel-size 2");
  EXPECT_TRUE(Errors(Check(fsdp)).empty());
  EXPECT_FALSE(Warns(Check(fsdp), "--tensor-model-parallel-size", "CUDA_DEVICE_MAX_CONNECTIONS"));
  EXPECT_EQ(Errors(Check("export CUDA_DEVICE_MAX_CONNECTIONS=1\n" + fsdp)).at(0),
            "--use-megatron-fsdp: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.");
}

// arguments.py: `if args.overlap_p2p_comm: assert args.pipeline_model_parallel_size > 1, ...
// else: assert args.pipeline_model_parallel_size > 2, 'When interleaved schedule is used and p2p
// communication overlap is disabled, ...'`; --no-overlap-p2p-communication is store_false into
// overlap_p2p_comm (default True), and --overlap-p2p-communication no longer exists.
TEST(CheckToday, InterleavingAtPipelineTwoNeedsTheDefaultOverlap) {
  const std::string pp2 = Command(
      "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
      "--global-batch-size 64");
  EXPECT_TRUE(Errors(Check(pp2)).empty()) << Errors(Check(pp2)).at(0);
  EXPECT_TRUE(Check(pp2).command.options.overlap_p2p_communication);
  const std::vector<std::string> refused = Errors(Check(pp2 + " --no-overlap-p2p-communication"));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find("greater than 2"), std::string::npos) << refused[0];
  EXPECT_NE(Errors(Check(pp2 + " --overlap-p2p-communication"))
                .at(0)
                .find("no longer has --overlap-p2p-communication"),
            std::string::npos);
}

// schedules.py, forward_backward_pipelining_with_interleaving: `if
// config.microbatch_group_size_per_vp_stage > num_microbatches or
// config.microbatch_group_size_per_vp_stage < pipeline_parallel_size: raise ValueError` and
// `final_microbatch_group_size = num_microbatches % config.microbatch_group_size_per_vp_stage; if
// 0 < final_microbatch_group_size < pipeline_parallel_size: raise RuntimeError`.
TEST(CheckToday, TheMicrobatchGroupSizeReplacesTheMultipleOfPpRule) {
  // pp 4, v 2, m = 20 / (1 x 2) = 10: not a multiple of 4, but groups of 5 leave 0.
  const std::string base = Command(
      "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 "
      "--global-batch-size 20");
  EXPECT_FALSE(Errors(Check(base)).empty());
  const CheckReport grouped = Check(base + " --microbatch-group-size-per-virtual-pipeline-stage 5");
  EXPECT_TRUE(Errors(grouped).empty()) << Errors(grouped).at(0);
  EXPECT_FALSE(grouped.simulatable());
  EXPECT_NE(grouped.not_simulated.find("groups of 5"), std::string::npos);
  EXPECT_NE(Errors(Check(base + " --microbatch-group-size-per-virtual-pipeline-stage 3"))
                .at(0)
                .find("should range in [PP=4 , M=10]"),
            std::string::npos);
  EXPECT_NE(Errors(Check(base + " --microbatch-group-size-per-virtual-pipeline-stage 8"))
                .at(0)
                .find("The remainder of M"),
            std::string::npos);
}

// arguments.py, `if args.use_torch_fsdp2:` block; determinism.py ARG_VALUES_REQUIRED_FOR_
// DETERMINISM = {"cross_entropy_loss_fusion": False, "tp_comm_overlap": False}; `if
// args.hierarchical_context_parallel_sizes: assert args.context_parallel_size ==
// prod(args.hierarchical_context_parallel_sizes)`; `if args.fp8_param_gather: assert
// args.use_distributed_optimizer or args.use_torch_fsdp2 or args.use_megatron_fsdp ...`.
TEST(CheckToday, TodaysRulesForFsdp2DeterminismAndHierarchicalCp) {
  const std::string fsdp2 = "export CUDA_DEVICE_MAX_CONNECTIONS=8\n" +
                            Command("--use-torch-fsdp2 --no-gradient-accumulation-fusion ");
  EXPECT_EQ(
      Errors(Check(fsdp2)),
      std::vector<std::string>{
          "--use-torch-fsdp2: --use-torch-fsdp2 requires --untie-embeddings-and-output-weights"});
  EXPECT_TRUE(Errors(Check(fsdp2 + " --untie-embeddings-and-output-weights")).empty());
  EXPECT_EQ(Errors(Check(fsdp2 + " --untie-embeddings-and-output-weights "
                                 "--pipeline-model-parallel-size 2"))
                .at(0),
            "--use-torch-fsdp2: --use-torch-fsdp2 is not supported with pipeline parallelism");
  EXPECT_EQ(Errors(Check("export CUDA_DEVICE_MAX_CONNECTIONS=1\n" +
                         Command("--deterministic-mode --tensor-model-parallel-size 2 "
                                 "--sequence-parallel --tp-comm-overlap")))
                .at(0),
            "--deterministic-mode: --deterministic-mode requires: tp_comm_overlap=False (got "
            "True). Adjust these options to continue.");
  EXPECT_NE(Errors(Check("export CUDA_DEVICE_MAX_CONNECTIONS=1\n" +
                         Command("--context-parallel-size 4 "
                                 "--hierarchical-context-parallel-sizes 2 4")))
                .at(0)
                .find("4 != 8"),
            std::string::npos);
  const CheckReport fp8 = Check(Command("--fp8-format hybrid --fp8-param-gather"));
  ASSERT_FALSE(Errors(fp8).empty());
  EXPECT_NE(Errors(fp8).at(0).find("distributed optimizer"), std::string::npos)
      << Errors(fp8).at(0);
}

// Megatron's checks at start-up, in TransformerConfig.__post_init__
// (megatron/core/transformer/transformer_config.py) and validate_args:
// `if self.num_moe_experts is not None and self.add_bias_linear: assert
// self.expert_tensor_parallel_size == 1, "Bias in Moe is only supported when ETP==1"`;
// `elif self.recompute_granularity != "selective": raise ValueError(... recompute_method must be
// "block" or "uniform")`; `if self.recompute_granularity != "selective" and
// self.recompute_num_layers is None: raise ValueError(...)`; selective: `recompute_num_layers
// must be None`; `fp8_param must be used together with fp8 mode.`; `moe_ffn_hidden_size is set
// but num_moe_experts is None`; arguments.py: `Group query attention is mutually exclusive with
// multi latent attention.`
TEST(CheckToday, StartUpChecksOfTheTransformerConfig) {
  const std::string cp1 = "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  EXPECT_EQ(Errors(Check(cp1 + Command("--num-experts 8 --tensor-model-parallel-size 2 "
                                       "--sequence-parallel")))
                .at(0),
            "--expert-tensor-parallel-size: Bias in Moe is only supported when ETP==1");
  EXPECT_TRUE(Errors(Check(cp1 + Command("--num-experts 8 --tensor-model-parallel-size 2 "
                                         "--sequence-parallel --disable-bias-linear")))
                  .empty());
  EXPECT_TRUE(Errors(Check(cp1 + Command("--num-experts 8 --tensor-model-parallel-size 2 "
                                         "--sequence-parallel --expert-tensor-parallel-size 1")))
                  .empty());
  EXPECT_EQ(Errors(Check(Command("--recompute-granularity full"))).at(0),
            "--recompute-granularity: Using recompute_granularity: full so recompute_method must "
            "be \"block\" or \"uniform\"");
  EXPECT_EQ(Errors(Check(Command("--recompute-granularity full --recompute-method uniform"))).at(0),
            "--recompute-granularity: When using recompute_granularity: full recompute_num_layers "
            "must be between 1 and num_layers_per_pipeline_rank: 8");
  EXPECT_TRUE(Errors(Check(Command("--recompute-granularity full --recompute-method uniform "
                                   "--recompute-num-layers 1")))
                  .empty());
  EXPECT_EQ(
      Errors(Check(Command("--recompute-granularity selective --recompute-num-layers 1"))).at(0),
      "--recompute-num-layers: When using recompute_granularity: selective "
      "recompute_num_layers must be None.");
  EXPECT_EQ(Errors(Check(Command("--fp8-param-gather --use-distributed-optimizer"))).at(0),
            "--fp8-param-gather: fp8_param must be used together with fp8 mode.");
  EXPECT_EQ(Errors(Check(Command("--moe-ffn-hidden-size 512"))).at(0),
            "--moe-ffn-hidden-size: moe_ffn_hidden_size is set but num_moe_experts is None. "
            "Please set num_moe_experts or remove moe_ffn_hidden_size.");
  EXPECT_EQ(Errors(Check(Command("--multi-latent-attention --group-query-attention "
                                 "--num-query-groups 4")))
                .at(0),
            "--group-query-attention: Group query attention is mutually exclusive with multi "
            "latent attention.");
  // Megatron-FSDP shards everything unless told otherwise (its default strategy at this commit).
  const CheckReport fsdp =
      Check(Command("--use-megatron-fsdp --use-distributed-optimizer --ckpt-format fsdp_dtensor"));
  EXPECT_EQ(fsdp.command.parallel.fsdp, Fsdp::kOptimGradsParams);
  EXPECT_TRUE(Errors(Check(Command("--fp8-format hybrid --fp8-recipe custom"))).empty());
}

// Found by fuzzing (tests/fuzz/corpus/megatron_command/timeout-scripts-handed-on): job scripts
// that submit themselves multiply; the scripts played are bounded in all, not only in depth.
TEST(CheckToday, ScriptsHandedOnToShellsAreBoundedInAll) {
  const std::string job = "sbatch job.sh\nsbatch job.sh\nsbatch job.sh\n" + Command("");
  MegatronReadOptions options;
  options.read_file = [&](const std::string&) -> std::optional<std::string> { return job; };
  try {
    CheckMegatronCommand(job, "job.sh", std::nullopt, options);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("hands more than 16 scripts to shells"), std::string::npos)
        << e.what();
  }
  // Two levels, as sbatch -> srun -> bash -c, are read.
  options.read_file = [&](const std::string&) -> std::optional<std::string> {
    return "srun --ntasks=16 bash -c \"" + Command("", "python") + "\"\n";
  };
  EXPECT_EQ(CheckMegatronCommand("sbatch job.sh\n", "submit.sh", std::nullopt, options).gpus, 16);
}

// TransformerConfig.__post_init__: `if self.overlap_moe_expert_parallel_comm: ... assert
// self.expert_model_parallel_size > 1, 'overlap_moe_expert_parallel_comm is only supported with
// expert model parallelism'; assert self.moe_token_dispatcher_type in ['alltoall', 'flex'], ...;
// assert self.recompute_granularity != 'full', ...; assert self.bf16 or self.fp16, ...`.
TEST(CheckToday, ExpertParallelOverlapRequirements) {
  const std::string moe = Command(
      "--num-experts 8 --moe-ffn-hidden-size 512 --disable-bias-linear "
      "--overlap-moe-expert-parallel-comm ");
  EXPECT_EQ(Errors(Check(moe + "--expert-model-parallel-size 8 --moe-token-dispatcher-type "
                               "alltoall")),
            std::vector<std::string>{});
  const std::vector<std::string> errors = Errors(Check(moe));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0],
            "--overlap-moe-expert-parallel-comm: overlap_moe_expert_parallel_comm is only "
            "supported with expert model parallelism");
  EXPECT_EQ(errors[1],
            "--overlap-moe-expert-parallel-comm: overlap_moe_expert_parallel_comm is supported "
            "with alltoall/flex token dispatcher");
  EXPECT_EQ(Errors(Check(moe + "--expert-model-parallel-size 8 --moe-token-dispatcher-type "
                               "alltoall --recompute-granularity full --recompute-method uniform "
                               "--recompute-num-layers 1"))
                .size(),
            3u);
}

TEST(CheckToday, ContextParallelismIsNotFoldedIntoDataParallelism) {
  const CheckReport r = Check("export CUDA_DEVICE_MAX_CONNECTIONS=1\n" +
                              Command("--context-parallel-size 4 --global-batch-size 2"));
  EXPECT_TRUE(Errors(r).empty()) << Errors(r).at(0);
  EXPECT_EQ(r.command.parallel.cp, 4);
  EXPECT_EQ(r.command.parallel.dp, 2);
}

// arguments.py: `if args.hybrid_layer_pattern is not None: ... args.num_layers =
// num_layers_in_pattern` (--hybrid-override-pattern is its deprecated alias).
TEST(CheckToday, AHybridPatternGivesTheLayerCount) {
  const std::string cmd =
      "torchrun --nproc-per-node 8 pretrain_mamba.py --hidden-size 1024 --num-attention-heads 16 "
      "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
      "--global-batch-size 64 --vocab-size 32000 --bf16 --hybrid-layer-pattern 'M*M-M*M-'";
  const CheckReport r = Check(cmd);
  EXPECT_TRUE(Errors(r).empty()) << Errors(r).at(0);
  EXPECT_EQ(r.command.model.num_layers, 8);
  const CheckReport mtp = Check(cmd.substr(0, cmd.size() - 1) + "/MM' --mtp-num-layers 1");
  EXPECT_TRUE(Errors(mtp).empty()) << Errors(mtp).at(0);
  EXPECT_TRUE(Warns(mtp, "--hybrid-layer-pattern", "not simulated"));
}

TEST(CheckToday, FlagsThatChangeTheRunButAreNotSimulatedAreNamed) {
  const CheckReport r =
      Check(Command("--empty-unused-memory-level 1 --log-interval 10 --rotary-base 500000 "
                    "--init-method-std 0.02 --manual-gc --save /ckpt"));
  EXPECT_TRUE(Warns(r, "--empty-unused-memory-level",
                    "not simulated: ptdp simulates as if --empty-unused-memory-level were absent"));
  for (const char* inert :
       {"--log-interval", "--rotary-base", "--init-method-std", "--manual-gc", "--save"}) {
    EXPECT_FALSE(Warns(r, inert, "not simulated")) << inert;
  }
  // What the simulation reads is not warned about.
  const CheckReport read =
      Check(Command("--sequence-parallel --tensor-model-parallel-size 2 "
                    "--use-distributed-optimizer --overlap-grad-reduce"));
  for (const char* flag : {"--sequence-parallel", "--use-distributed-optimizer",
                           "--overlap-grad-reduce", "--tensor-model-parallel-size"}) {
    EXPECT_FALSE(Warns(read, flag, "not simulated")) << flag;
  }
}

TEST(CheckToday, WrittenPlansSayNoOverlapWhenTheyDoNotOverlap) {
  const CheckReport r =
      Check(Command("--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 "
                    "--no-overlap-p2p-communication --global-batch-size 64"));
  Plan plan;
  plan.model = r.command.model;
  plan.training = r.command.training;
  plan.parallel = r.command.parallel;
  plan.options = r.command.options;
  const std::string line = MegatronArgsLine(plan);
  EXPECT_NE(line.find("--no-overlap-p2p-communication"), std::string::npos) << line;
  plan.options.overlap_p2p_communication = true;
  EXPECT_EQ(MegatronArgsLine(plan).find("overlap-p2p"), std::string::npos);
}

}  // namespace
}  // namespace ptdp
