// The layout, recompute and sharding, cost options and training settings of a Megatron-LM command
// (megatron/reader.h).
#include <fmt/format.h>

#include <algorithm>

#include "core/limits.h"
#include "megatron/reader.h"

namespace ptdp::reading {
namespace {

// --cp-comm-type: one type for every layer, or one per layer (ptdp models one for all).
void ReadContextParallelExchange(Reader& r, MegatronCommand& c) {
  const ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  if (const auto* a = r.Last("--cp-comm-type"); a != nullptr && !a->values.empty()) {
    const std::string& first = a->values.front();
    const bool hierarchical = r.Has("--hierarchical-context-parallel-sizes");
    for (const std::string& type : a->values) {
      if (type != "p2p" && type != "a2a" && type != "allgather" && type != "all_gather" &&
          type != "a2a+p2p") {
        r.Add(Severity::kError, "--cp-comm-type",
              fmt::format("cp_comm_type '{}' is not one of p2p, a2a, allgather, a2a+p2p", type),
              "");
      } else if (type == "a2a+p2p" && !hierarchical) {
        r.Add(Severity::kError, "--cp-comm-type",
              "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm",
              "add --hierarchical-context-parallel-sizes A B with A x B the context-parallel "
              "size, or use p2p");
      }
    }
    if (a->values.size() > 1 && a->values.size() != static_cast<size_t>(m.num_layers) &&
        m.num_layers > 0) {
      r.Add(Severity::kError, "--cp-comm-type",
            fmt::format("Length of cp_comm_type ({}) should equal to the total number of "
                        "transformer layers ({})",
                        a->values.size(), m.num_layers),
            "give one type for all layers");
    } else if (std::any_of(a->values.begin(), a->values.end(),
                           [&](const std::string& t) { return t != first; })) {
      r.Add(Severity::kWarning, "--cp-comm-type",
            fmt::format("ptdp models one context-parallel exchange for all layers: simulated "
                        "with the first layer's ({})",
                        first),
            "");
    }
    if (first == "a2a") {
      p.cp_comm = CpComm::kA2a;
    } else if (first == "allgather" || first == "all_gather") {
      p.cp_comm = CpComm::kAllGather;
    } else if (first == "a2a+p2p" && hierarchical) {
      r.Add(Severity::kWarning, "--cp-comm-type",
            "ptdp does not model the hierarchical a2a+p2p exchange yet: simulated as p2p over "
            "the whole context-parallel group",
            "");
    }
  }
}

// The first and last stages' layer counts of an uneven split (the rules check the divisions;
// megatron/rules.h).
void ReadUnevenStages(Reader& r, ParallelConfig& p) {
  for (auto [flag, field] :
       {std::pair{"--decoder-first-pipeline-num-layers", &p.first_stage_layers},
        {"--decoder-last-pipeline-num-layers", &p.last_stage_layers}}) {
    if (auto n = r.Int(flag)) {
      if (*n <= 0) {
        r.Add(Severity::kError, flag,
              fmt::format("num_layers_in_{}_pipeline_stage must be larger than 0",
                          std::string_view(flag).find("first") != std::string_view::npos ? "first"
                                                                                         : "last"),
              "give a positive number of layers, or drop the flag");
      } else {
        *field = ToInt(*n);
      }
    }
  }
}

// --pipeline-model-parallel-layout: the layout names the stages, virtual stages = its stages / pp
// (arguments.py). `chunk_flags`: the virtual stages were also given by a flag.
void ReadLayoutString(Reader& r, MegatronCommand& c, const std::string& text, bool chunk_flags) {
  const ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  const PipelineLayout layout = ParsePipelineLayout(text);
  if (!layout.error.empty()) {
    r.Add(Severity::kError, "--pipeline-model-parallel-layout", layout.error, "");
  } else if (layout.layers.size() % static_cast<size_t>(p.pp) != 0) {
    r.Add(Severity::kError, "--pipeline-model-parallel-layout",
          fmt::format("pipeline_model_parallel_layout must be divisible by "
                      "pipeline_model_parallel_size (len(layout)={}, "
                      "pipeline_model_parallel_size={})",
                      layout.layers.size(), p.pp),
          "");
  } else {
    p.layout = layout.layers;
    p.virtual_stages = static_cast<int>(layout.layers.size()) / p.pp;
    if (layout.mtp != m.mtp_num_layers) {
      r.Add(Severity::kError, "--pipeline-model-parallel-layout",
            fmt::format("Number of mtp layers in layout ({}) must match mtp_num_layers ({})",
                        layout.mtp, m.mtp_num_layers),
            "");
    }
  }
  if (chunk_flags) {
    r.Add(Severity::kError, "--pipeline-model-parallel-layout",
          "the layout gives the virtual stages: drop --num-layers-per-virtual-pipeline-stage and "
          "--num-virtual-stages-per-pipeline-rank",
          "");
  }
}

// A hybrid pattern's '|' separators give the stages (arguments.py: virtual stages = segments /
// pp).
void ReadHybridSegments(Reader& r, ParallelConfig& p, const std::vector<int>& hybrid_segments,
                        bool chunk_flags) {
  if (hybrid_segments.size() % static_cast<size_t>(p.pp) != 0) {
    r.Add(Severity::kError, "--hybrid-override-pattern",
          fmt::format("The number of hybrid pipeline segments described by "
                      "--hybrid-layer-pattern must be evenly divisible by "
                      "--pipeline-model-parallel-size. Got {} segments and {}",
                      hybrid_segments.size(), p.pp),
          "");
  } else {
    p.layout = hybrid_segments;
    p.virtual_stages = static_cast<int>(hybrid_segments.size()) / p.pp;
  }
  if (chunk_flags || p.first_stage_layers > 0 || p.last_stage_layers > 0) {
    r.Add(Severity::kError, "--hybrid-override-pattern",
          "If --hybrid-layer-pattern contains pipe separators, the pipeline layout is "
          "explicitly defined: drop the other pipeline split options",
          "");
  }
}

// --num-layers-per-virtual-pipeline-stage: virtual stages = layers per stage / this.
void ReadLayersPerVirtualStage(Reader& r, MegatronCommand& c, int64_t per_vstage) {
  const ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  if (p.first_stage_layers > 0 || p.last_stage_layers > 0) {
    r.Add(Severity::kError, "--num-layers-per-virtual-pipeline-stage",
          "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
          "parallel degree when enable uneven pipeline parallelism",
          "write --num-virtual-stages-per-pipeline-rank");
    return;
  }
  const int total = m.num_layers + (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0);
  if (total % p.pp != 0) return;  // the rules say so
  const int per_stage = total / p.pp;
  if (per_stage % per_vstage != 0) {
    r.Add(Severity::kError, "--num-layers-per-virtual-pipeline-stage",
          "number of layers per pipeline stage must be divisible number of layers per "
          "virtual pipeline stage",
          "");
  } else {
    p.virtual_stages = per_stage / ToInt(per_vstage);
  }
}

// The layer split and the virtual stages: uneven first / last stages, the embedding and the loss
// counted as layers, a pipeline layout string or a hybrid pattern's segments.
void ReadLayerSplit(Reader& r, MegatronCommand& c, const std::vector<int>& hybrid_segments) {
  ParallelConfig& p = c.parallel;
  const auto per_vstage = r.Int("--num-layers-per-virtual-pipeline-stage");
  const auto vstages = r.Int("--num-virtual-stages-per-pipeline-rank");
  if (per_vstage && vstages) {
    r.Add(Severity::kError, "--num-virtual-stages-per-pipeline-rank",
          "No more than one of the following arguments can be set at the same time: "
          "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank",
          "keep one");
  }
  ReadUnevenStages(r, p);
  p.account_for_embedding = r.Has("--account-for-embedding-in-pipeline-split");
  p.account_for_loss = r.Has("--account-for-loss-in-pipeline-split");
  p.virtual_stages = 1;
  const bool chunk_flags = per_vstage || vstages;
  if (auto text = r.String("--pipeline-model-parallel-layout")) {
    ReadLayoutString(r, c, *text, chunk_flags);
  } else if (!hybrid_segments.empty()) {
    ReadHybridSegments(r, p, hybrid_segments, chunk_flags);
  } else if (vstages && *vstages > 0) {
    p.virtual_stages = ToInt(*vstages);
  } else if (per_vstage && *per_vstage > 0) {
    ReadLayersPerVirtualStage(r, c, *per_vstage);
  }
}

}  // namespace

void ReadLayout(Reader& r, MegatronCommand& c, const std::vector<int>& hybrid_segments) {
  ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  p.tp = ToInt(r.Int("--tensor-model-parallel-size").value_or(1));
  p.pp = ToInt(r.Int("--pipeline-model-parallel-size").value_or(1));
  p.cp = ToInt(r.Int("--context-parallel-size").value_or(1));
  p.ep = ToInt(r.Int("--expert-model-parallel-size").value_or(1));
  p.etp = ToInt(r.Int("--expert-tensor-parallel-size").value_or(0));
  p.dp = 1;
  if (auto mbs = r.Int("--micro-batch-size")) {
    p.micro_batch_size = ToInt(*mbs);
  } else if (!r.Has("--micro-batch-size")) {
    r.Add(Severity::kError, "--micro-batch-size", "assert args.micro_batch_size is not None",
          "add --micro-batch-size");
  }
  for (auto [flag, size] : {std::pair{"--tensor-model-parallel-size", &p.tp},
                            {"--pipeline-model-parallel-size", &p.pp},
                            {"--context-parallel-size", &p.cp},
                            {"--expert-model-parallel-size", &p.ep},
                            {"--micro-batch-size", &p.micro_batch_size}}) {
    if (*size <= 0) {
      r.Add(Severity::kError, flag, fmt::format("{} must be positive, got {}", flag, *size), "");
    } else if (*size > kMaxGpus) {
      // Said, and checked as if 1 (core/limits.h).
      r.Add(Severity::kError, flag,
            fmt::format("{} is beyond what ptdp models (at most {}), got {}", flag, kMaxGpus,
                        *r.Int(flag)),
            "");
      *size = 1;
    }
  }
  p.tp = std::max(p.tp, 1);
  p.pp = std::max(p.pp, 1);
  p.cp = std::max(p.cp, 1);
  p.ep = std::max(p.ep, 1);
  if (r.Has("--expert-tensor-parallel-size") && p.etp <= 0) {
    r.Add(Severity::kError, "--expert-tensor-parallel-size",
          fmt::format("--expert-tensor-parallel-size must be positive, got {}", p.etp), "");
  }
  p.etp = std::max(p.etp, 0);
  // TransformerConfig.__post_init__ (at start-up); the expert tensor-parallel size defaults to
  // the tensor-parallel size (arguments.py).
  if (m.num_experts > 0 && m.add_bias_linear && (p.etp > 0 ? p.etp : p.tp) != 1) {
    r.Add(Severity::kError, "--expert-tensor-parallel-size",
          "Bias in Moe is only supported when ETP==1",
          "add --disable-bias-linear, or --expert-tensor-parallel-size 1");
  }
  ReadContextParallelExchange(r, c);
  p.micro_batch_size = std::max(p.micro_batch_size, 1);
  ReadLayerSplit(r, c, hybrid_segments);
}

namespace {

// The schedule, sequence parallelism and recompute (granularity, method, modules).
void ReadScheduleAndRecompute(Reader& r, MegatronCommand& c) {
  ModelSpec& m = c.model;
  ParallelConfig& p = c.parallel;
  p.schedule = p.virtual_stages > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  p.sequence_parallel = r.Has("--sequence-parallel");
  if (p.sequence_parallel && p.tp == 1) {
    r.Add(Severity::kWarning, "--sequence-parallel",
          "Disabling sequence parallelism because tensor model parallelism is disabled",
          "drop --sequence-parallel or use tensor parallelism");
    p.sequence_parallel = false;
  }
  const auto granularity = r.String("--recompute-granularity");
  if (r.Has("--recompute-activations")) p.recompute = Recompute::kSelective;
  if (granularity) {
    if (*granularity == "full") {
      p.recompute = Recompute::kFull;
      const auto method = r.String("--recompute-method");
      const auto count = r.Int("--recompute-num-layers");
      if (!method) {
        // TransformerConfig.__post_init__ (at start-up).
        r.Add(Severity::kError, "--recompute-granularity",
              "Using recompute_granularity: full so recompute_method must be \"block\" or "
              "\"uniform\"",
              "add --recompute-method uniform --recompute-num-layers 1");
      } else if (!count) {
        r.Add(Severity::kError, "--recompute-granularity",
              fmt::format("When using recompute_granularity: full recompute_num_layers must be "
                          "between 1 and num_layers_per_pipeline_rank: {}",
                          m.num_layers / std::max(p.pp, 1)),
              "add --recompute-num-layers");
      }
      if (method == "block") {
        // The first N layers of each model chunk recompute, the rest keep their activations.
        if (count && *count <= 0) {
          r.Add(Severity::kError, "--recompute-num-layers",
                "the block method needs --recompute-num-layers N > 0", "");
        } else if (count) {
          p.recompute_num_layers = ToInt(*count);
        }
      } else if (method == "uniform" && count.value_or(1) != 1) {
        r.Add(Severity::kWarning, "--recompute-num-layers",
              "uniform recompute in groups of several layers keeps one input per group; ptdp "
              "simulates groups of one layer (a little more memory, the same time)",
              "");
      }
    } else if (*granularity == "selective") {
      p.recompute = Recompute::kSelective;
      if (r.Has("--recompute-num-layers")) {
        r.Add(Severity::kError, "--recompute-num-layers",
              "When using recompute_granularity: selective recompute_num_layers must be None.",
              "drop --recompute-num-layers");
      }
      if (r.Has("--recompute-method")) {
        r.Add(Severity::kError, "--recompute-method",
              "recompute method is not yet supported for selective recomputing granularity",
              "drop --recompute-method");
      }
    }
  }
  if (const auto* a = r.Last("--recompute-modules"); a != nullptr) {
    std::string joined, error;
    for (const std::string& v : a->values) joined += v + " ";
    const uint8_t modules = ParseRecomputeModules(joined, &error);
    if (!error.empty()) {
      r.Add(Severity::kError, "--recompute-modules",
            "Invalid choices for recompute_modules: " + error, "");
    } else if (p.recompute == Recompute::kSelective) {
      p.recompute_modules = modules;
    } else {
      r.Add(Severity::kWarning, "--recompute-modules",
            "recompute modules apply to --recompute-granularity selective only: ignored",
            "add --recompute-granularity selective, or drop --recompute-modules");
    }
  }
}

// The distributed optimizer and Megatron-FSDP.
void ReadSharding(Reader& r, MegatronCommand& c) {
  ParallelConfig& p = c.parallel;
  p.distributed_optimizer = r.Has("--use-distributed-optimizer");
  if (r.Has("--use-megatron-fsdp")) {
    const std::string strategy =
        r.String("--data-parallel-sharding-strategy").value_or("optim_grads_params");
    if (strategy == "optim") {
      p.fsdp = Fsdp::kOptim;
    } else if (strategy == "optim_grads") {
      p.fsdp = Fsdp::kOptimGrads;
    } else if (strategy == "optim_grads_params") {
      p.fsdp = Fsdp::kOptimGradsParams;
    } else if (strategy != "no_shard") {
      r.Add(Severity::kError, "--data-parallel-sharding-strategy",
            fmt::format("argument --data-parallel-sharding-strategy: invalid choice: '{}' (choose "
                        "from 'no_shard', 'optim', 'optim_grads', 'optim_grads_params')",
                        strategy),
            "");
    }
    if (!p.distributed_optimizer) {
      r.Add(Severity::kWarning, "--use-megatron-fsdp",
            "Megatron-FSDP v1 is only compatible with --use-distributed-optimizer. Using "
            "DistributedOptimizer...",
            "add --use-distributed-optimizer");
      p.distributed_optimizer = true;
    }
    if (r.String("--ckpt-format").value_or("torch_dist") != "fsdp_dtensor") {
      r.Add(Severity::kError, "--ckpt-format",
            "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format.",
            "add --ckpt-format fsdp_dtensor");
    }
  } else if (r.Has("--data-parallel-sharding-strategy")) {
    r.Add(Severity::kWarning, "--data-parallel-sharding-strategy",
          "has no effect without --use-megatron-fsdp", "add --use-megatron-fsdp");
  }
}

}  // namespace

void ReadRecomputeAndSharding(Reader& r, MegatronCommand& c) {
  ReadScheduleAndRecompute(r, c);
  ReadSharding(r, c);
}

void ReadCostOptions(Reader& r, MegatronCommand& c) {
  ParallelConfig& p = c.parallel;
  CostOptions& o = c.options;
  if (auto backend = r.String("--attention-backend")) {
    if (*backend == "flash" || *backend == "auto") {
      o.attention = AttentionBackend::kFlash;
    } else if (*backend == "fused") {
      o.attention = AttentionBackend::kFused;
    } else if (*backend == "unfused" || *backend == "local") {
      o.attention = AttentionBackend::kUnfused;
    } else {
      r.Add(Severity::kError, "--attention-backend",
            fmt::format("argument --attention-backend: invalid choice: '{}' (choose from "
                        "'flash', 'fused', 'unfused', 'local', 'auto')",
                        *backend),
            "");
    }
  }
  // Megatron-Core's own modules (--transformer-impl local, megatron/core/models/backends.py
  // LocalSpecProvider) compute attention with DotProductAttention, the unfused core attention,
  // whatever --attention-backend says. Transformer Engine's (the default) is what the rest
  // models; inference_optimized is not for training.
  if (auto impl = r.String("--transformer-impl")) {
    if (*impl == "local") {
      o.attention = AttentionBackend::kUnfused;
    } else if (*impl != "transformer_engine") {
      r.Add(Severity::kWarning, "--transformer-impl",
            fmt::format("not simulated: ptdp simulates as if --transformer-impl were "
                        "transformer_engine, not {}",
                        *impl),
            "");
    }
  }
  if (auto d = r.String("--moe-token-dispatcher-type")) {
    if (auto v = ValueOf<MoeDispatcher>(kMoeDispatcherNames, *d)) {
      o.moe_token_dispatcher = *v;
    } else {
      r.Add(Severity::kError, "--moe-token-dispatcher-type",
            fmt::format("argument --moe-token-dispatcher-type: invalid choice: '{}' (choose from "
                        "'allgather', 'alltoall', 'flex')",
                        *d),
            "");
    }
  }
  o.overlap_grad_reduce = r.Has("--overlap-grad-reduce");
  o.overlap_param_gather = r.Has("--overlap-param-gather");
  o.tp_comm_overlap = r.Has("--tp-comm-overlap");
  // On by default, for the interleaved schedule only (validate_args turns it off otherwise).
  o.overlap_p2p_communication = p.virtual_stages > 1 && !r.Has("--no-overlap-p2p-communication");
  if (auto bucket = r.Int("--ddp-bucket-size")) o.ddp_bucket_size = std::max<int64_t>(*bucket, 0);
  if (o.overlap_param_gather) {
    if (!p.distributed_optimizer) {
      r.Add(Severity::kError, "--overlap-param-gather",
            "--overlap-param-gather only supported with distributed optimizer, megatron fsdp, or "
            "dist_muon",
            "add --use-distributed-optimizer");
    }
    if (!o.overlap_grad_reduce) {
      r.Add(Severity::kError, "--overlap-param-gather",
            "Must use --overlap-param-gather with --overlap-grad-reduce",
            "add --overlap-grad-reduce");
    }
  }
  if (o.tp_comm_overlap && !r.Has("--sequence-parallel")) {
    r.Add(Severity::kError, "--tp-comm-overlap",
          "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism "
          "is enabled",
          "add --sequence-parallel");
  }
  if (auto config = c.environment.find("CUBLAS_WORKSPACE_CONFIG"); config != c.environment.end()) {
    o.cublas_workspace_bytes = CublasWorkspaceConfigBytes(config->second);
  }
}

int64_t CublasWorkspaceConfigBytes(std::string_view config) {
  // PyTorch reads every ":SIZE:COUNT" in the value (KiB, count) and sums SIZE x COUNT; a value
  // without one gets its default (aten/src/ATen/cuda/CublasHandlePool.cpp).
  int64_t total = 0;
  bool any = false;
  size_t at = 0;
  while ((at = config.find(':', at)) != std::string_view::npos) {
    size_t i = at + 1;
    const auto digits = [&](int64_t& v) {
      const size_t start = i;
      v = 0;
      while (i < config.size() && config[i] >= '0' && config[i] <= '9' && i - start < 12) {
        v = v * 10 + (config[i++] - '0');
      }
      return i > start;
    };
    int64_t size = 0, count = 0;
    if (digits(size) && i < config.size() && config[i] == ':' && (++i, digits(count))) {
      // In double, capped far past any GPU's memory (12 digits each would overflow 64 bits).
      total = static_cast<int64_t>(
          std::min(0x1p50, static_cast<double>(total) +
                               1024.0 * static_cast<double>(size) * static_cast<double>(count)));
      any = true;
      at = i;
    } else {
      at = at + 1;
    }
  }
  return any ? total : -1;
}

void ReadTraining(Reader& r, MegatronCommand& c) {
  TrainingSpec& t = c.training;
  if (r.Has("--bf16") && r.Has("--fp16")) {
    r.Add(Severity::kError, "--fp16", "assert not args.bf16: choose one of --fp16 and --bf16", "");
  }
  t.precision = r.Has("--bf16")   ? Precision::kBf16
                : r.Has("--fp16") ? Precision::kFp16
                                  : Precision::kFp32;
  // The main gradients' bytes: fp16 keeps 2 unless --accumulate-allreduce-grads-in-fp32; bf16
  // keeps 4 unless --grad-reduce-in-bf16 (arguments.py; ignored without --bf16).
  c.options.accumulate_allreduce_grads_in_fp32 = r.Has("--accumulate-allreduce-grads-in-fp32");
  c.options.grad_reduce_in_bf16 = r.Has("--grad-reduce-in-bf16") && r.Has("--bf16");
  // The output layer's deferred weight gradients: their memory is modelled, their timing not.
  if (r.Has("--defer-embedding-wgrad-compute")) {
    c.options.defer_embedding_wgrad_compute = true;
    c.options.wgrad_deferral_limit =
        std::max(0, static_cast<int>(r.Int("--wgrad-deferral-limit").value_or(0)));
    r.Add(Severity::kWarning, "--defer-embedding-wgrad-compute",
          "not simulated: the output layer's weight-gradient GEMMs are timed where they run "
          "without it, not in the pipeline flush (the memory they keep is simulated)",
          "");
  }
  // The loss's fusion: the native (jit) implementation keeps one more fp32 copy of the logits;
  // Transformer Engine's (te) is not modelled and is simulated as the unfused loss.
  if (r.Has("--cross-entropy-loss-fusion")) {
    const std::string impl = r.String("--cross-entropy-fusion-impl").value_or("native");
    c.options.cross_entropy_loss_fusion = impl == "native";
    if (impl != "native") {
      r.Add(Severity::kWarning, "--cross-entropy-fusion-impl",
            "not simulated: ptdp simulates Transformer Engine's fused cross entropy as the "
            "unfused loss",
            "");
    }
  }
  if (auto format = r.String("--fp8-format")) {
    if (*format != "hybrid" && *format != "e4m3") {
      r.Add(Severity::kError, "--fp8-format",
            fmt::format("argument --fp8-format: invalid choice: '{}' (choose from 'e4m3', "
                        "'hybrid')",
                        *format),
            "");
    } else if (t.precision != Precision::kBf16) {
      r.Add(Severity::kWarning, "--fp8-format",
            "ptdp models FP8 training with bf16 parameters (--bf16 --fp8-format); simulated "
            "without FP8",
            "add --bf16");
    } else {
      t.precision = Precision::kFp8;
      if (*format == "e4m3") {
        r.Add(Severity::kWarning, "--fp8-format",
              "e4m3 for the gradients too: simulated as hybrid (the same GEMM rates)", "");
      }
    }
  }
  if (auto recipe = r.String("--fp8-recipe")) {
    if (*recipe == "delayed") {
      t.fp8_recipe = Fp8Recipe::kDelayed;
    } else if (*recipe == "tensorwise") {
      t.fp8_recipe = Fp8Recipe::kTensorwise;
    } else if (*recipe == "blockwise") {
      t.fp8_recipe = Fp8Recipe::kBlockwise;
    } else if (*recipe == "mxfp8") {
      t.fp8_recipe = Fp8Recipe::kBlockwise;
      r.Add(Severity::kWarning, "--fp8-recipe",
            "mxfp8 is for Blackwell GPUs; ptdp simulates it as blockwise scaling", "");
    } else if (*recipe == "custom") {
      r.Add(Severity::kWarning, "--fp8-recipe",
            "a custom FP8 recipe is simulated as delayed scaling", "");
    }
  } else {
    t.fp8_recipe = Fp8Recipe::kDelayed;  // Megatron's default
  }
  if (r.Has("--first-last-layers-bf16")) {
    t.fp8_bf16_layers_at_start = ToInt(r.Int("--num-layers-at-start-in-bf16").value_or(1));
    t.fp8_bf16_layers_at_end = ToInt(r.Int("--num-layers-at-end-in-bf16").value_or(1));
    if (t.precision == Precision::kFp8 && t.fp8_recipe == Fp8Recipe::kDelayed) {
      r.Add(Severity::kError, "--first-last-layers-bf16",
            "Delayed scaling does not support first / last layer in BF16.",
            "add --fp8-recipe tensorwise (or blockwise)");
    }
  }
  t.fp8_param_gather = r.Has("--fp8-param-gather");  // the rules check its optimizer
  if (t.fp8_param_gather && !r.Has("--fp8-format")) {
    r.Add(Severity::kError, "--fp8-param-gather", "fp8_param must be used together with fp8 mode.",
          "add --fp8-format, or drop it");
  }
  if (t.fp8_param_gather && r.Has("--use-torch-fsdp2")) {
    // validate_args turns it off (Transformer Engine 2.0 and later).
    r.Add(Severity::kWarning, "--fp8-param-gather",
          "FSDP2 FP8 param gather is not supported yet in TE 2.0, will fallback to bf16 "
          "all_gather instead, turning off fp8_param_gather",
          "");
    t.fp8_param_gather = false;
  }
  t.keep_fp8_transpose_cache = r.Has("--keep-fp8-transpose-cache");
  if (t.precision != Precision::kFp8) {
    t.fp8_bf16_layers_at_start = t.fp8_bf16_layers_at_end = 0;
    t.fp8_param_gather = t.keep_fp8_transpose_cache = false;
  }
  if (auto opt = r.String("--optimizer"))
    t.optimizer = *opt == "sgd" ? Optimizer::kSgd : Optimizer::kAdam;
  if (auto lr = r.Number("--lr")) t.lr = *lr;
  if (auto wd = r.Number("--weight-decay")) t.weight_decay = *wd;
  if (auto clip = r.Number("--clip-grad")) t.clip_grad = *clip;
  if (auto b1 = r.Number("--adam-beta1")) t.adam_beta1 = *b1;
  if (auto b2 = r.Number("--adam-beta2")) t.adam_beta2 = *b2;
  if (auto eps = r.Number("--adam-eps")) t.adam_eps = *eps;
  if (auto seed = r.Int("--seed")) t.seed = *seed;
  t.global_batch_size = r.Int("--global-batch-size").value_or(0);
  if (r.Has("--global-batch-size") && t.global_batch_size <= 0) {
    r.Add(Severity::kError, "--global-batch-size", "assert args.global_batch_size > 0", "");
  }
}

}  // namespace ptdp::reading
