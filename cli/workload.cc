#include "cli/workload.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <thread>

#include "core/hf_config.h"
#include "core/limits.h"
#include "core/presets.h"

namespace po = boost::program_options;

namespace ptdp::cli {

void AddWorkloadOptions(po::options_description& o, bool example_defaults) {
  auto value = [&](const char* fallback) {
    auto* v = po::value<std::string>();
    if (example_defaults) v->default_value(fallback);
    return v;
  };
  o.add_options()("model", value("seed-example")->value_name("M"),
                  "model: preset name (ptdp models), model YAML or Hugging Face config.json")(
      "cluster", value("dgx-a100-80gb")->value_name("C"),
      "hardware profile: name (ptdp profiles) or YAML file")("gpus", value("8")->value_name("N"),
                                                             "number of GPUs")(
      "global-batch", value("128")->value_name("B"), "global batch size, in sequences")(
      "seq-length", po::value<std::string>()->value_name("S"),
      fmt::format("the training sequence length (default: the model's; for a Hugging Face "
                  "config.json the smaller of its max_position_embeddings and {}, a pretraining "
                  "length, since the config gives the longest context the model serves)",
                  kHfTrainingSeqLength)
          .c_str())(
      "mtp-num-layers", po::value<std::string>()->value_name("N"),
      "override the model's multi-token prediction layers (Megatron's --mtp-num-layers; "
      "DeepSeek-V3 trains with 1)")(
      "precision", po::value<std::string>()->default_value("bf16")->value_name("P"),
      "bf16 | fp16 | fp32 | fp8 (Transformer Engine's hybrid FP8 for the layers' linears, bf16 "
      "elsewhere; needs a GPU with FP8 units)")(
      "fp8-recipe", po::value<std::string>()->value_name("R"),
      "with --precision fp8: delayed (Megatron's default) | tensorwise (current scaling) | "
      "blockwise")("num-layers-at-start-in-bf16", po::value<std::string>()->value_name("N"),
                   "with --precision fp8: keep the first N transformer layers in bf16 (Megatron's "
                   "--first-last-layers-bf16; not with delayed scaling)")(
      "num-layers-at-end-in-bf16", po::value<std::string>()->value_name("N"),
      "with --precision fp8: keep the last N transformer layers in bf16")(
      "fp8-param-gather", po::bool_switch(),
      "with --precision fp8: FP8 primary weights, gathered in FP8 (needs the distributed "
      "optimizer)")(
      "keep-fp8-transpose-cache", po::bool_switch(),
      "with --precision fp8 and --fsdp optim_grads_params: keep every FP8 weight's transpose "
      "(1 byte per weight) instead of making it again in each backward");
  AddClusterSetOption(o);
}

void AddClusterSetOption(po::options_description& o, bool several_clusters) {
  // The keys by section: gpu.{peak_bf16_tflops, ...}, node.{...}.
  std::string keys, section;
  for (const std::string& key : ClusterOverrideKeys()) {
    const size_t dot = key.find('.');
    if (key.substr(0, dot) != section) {
      keys += (section.empty() ? "" : "}, ") + key.substr(0, dot) + ".{";
      section = key.substr(0, dot);
    } else {
      keys += ", ";
    }
    keys += key.substr(dot + 1);
  }
  o.add_options()(
      "cluster-set",
      po::value<std::vector<std::string>>()->composing()->value_name(
          several_clusters ? "[CLUSTER:]KEY=VALUE" : "KEY=VALUE"),
      fmt::format(
          "what-if hardware (repeatable): change a number of the profile{}. KEY: the profile's, "
          "dotted or its last part alone: {}}}; VALUE in the key's unit (96e9), or relative: x2, "
          "*2, +50%, -25%. A link's rate moves its achieved rate (nic_gb_per_s: "
          "nic_busbw_gb_per_s; nvlink_gb_per_s: nvlink_busbw_gb_per_s), peak_bf16_tflops moves "
          "peak_fp16_tflops and gpus_per_node moves nics_per_node, unless those are set too",
          several_clusters ? " (CLUSTER:KEY=VALUE: of that cluster only)" : "", keys)
          .c_str());
}

std::vector<ClusterOverride> ReadClusterSets(const Flags& flags) {
  std::vector<ClusterOverride> overrides;
  for (const std::string& text : flags.Strings("cluster-set")) {
    overrides.push_back(ParseClusterOverride(text));
  }
  return overrides;
}

void ApplyClusterSets(const Flags& flags, ClusterSpec& cluster) {
  const std::vector<ClusterOverride> overrides = ReadClusterSets(flags);
  CheckOverrideClusters(overrides, {cluster.name});
  ApplyClusterOverrides(overrides, cluster);
}

void AddThreadsOption(po::options_description& o) {
  o.add_options()("threads", po::value<std::string>()->value_name("N"),
                  "threads the search runs on (default: every core this process may use); the "
                  "result is the same with any number");
}

int DefaultThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores, 1, kMaxThreads);
}

int ReadThreads(const Flags& flags) {
  const std::optional<int64_t> n = flags.OptionalPositiveInt("threads", kMaxThreads);
  return n ? static_cast<int>(*n) : DefaultThreads();
}

namespace {

// The training length of a Hugging Face config (ParseHfConfig's default), said.
std::string HfSeqLengthNote(const ModelSpec& m) {
  if (m.max_position_embeddings > m.seq_length) {
    return fmt::format(
        "sequence length {}, ptdp's default for a Hugging Face config (its "
        "max_position_embeddings, {}, is the longest context the model serves, not the length "
        "it trains at); --seq-length sets another",
        GroupThousands(m.seq_length), GroupThousands(m.max_position_embeddings));
  }
  return fmt::format(
      "sequence length {}, the Hugging Face config's max_position_embeddings; --seq-length sets "
      "another",
      GroupThousands(m.seq_length));
}

}  // namespace

Workload ReadWorkload(const Flags& flags) {
  Workload w;
  const ResolvedModel model = ResolveModelAndSource(flags.String("model"));
  w.model = model.model;
  w.cluster = ResolveCluster(flags.String("cluster"));
  ApplyClusterSets(flags, w.cluster);
  w.gpus = flags.PositiveInt("gpus", kMaxGpus);
  w.training.global_batch_size = flags.PositiveInt("global-batch", kMaxGlobalBatch);
  w.training.precision = flags.Enum("precision", kPrecisionNames, Precision::kBf16);
  ReadFp8Flags(flags, w.training, w.cluster);
  if (auto seq = flags.OptionalPositiveInt("seq-length", kMaxModelDimension)) {
    if (*seq > w.model.max_position_embeddings &&
        w.model.position_embedding == PositionEmbedding::kLearned) {
      flags.Fail("seq-length", fmt::format("{} exceeds the model's max_position_embeddings ({})",
                                           *seq, w.model.max_position_embeddings));
    }
    w.model.seq_length = static_cast<int>(*seq);
    w.model.max_position_embeddings = std::max(w.model.max_position_embeddings, w.model.seq_length);
  } else if (model.hf_config) {
    w.notes.push_back(HfSeqLengthNote(w.model));
  }
  if (flags.Has("mtp-num-layers")) {
    const int64_t n =
        flags.String("mtp-num-layers") == "0" ? 0 : *flags.OptionalPositiveInt("mtp-num-layers");
    if (n > w.model.num_layers) {
      flags.Fail("mtp-num-layers",
                 fmt::format("{} MTP layers for a model of {} layers", n, w.model.num_layers));
    }
    w.model.mtp_num_layers = static_cast<int>(n);
  }
  return w;
}

void ReadFp8Flags(const Flags& flags, TrainingSpec& t, const ClusterSpec& cluster) {
  const bool fp8 = t.precision == Precision::kFp8;
  for (const char* flag : {"fp8-recipe", "num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16",
                           "fp8-param-gather", "keep-fp8-transpose-cache"}) {
    const bool is_switch = std::string_view(flag) == "fp8-param-gather" ||
                           std::string_view(flag) == "keep-fp8-transpose-cache";
    if (!fp8 && flags.Has(flag) && (!is_switch || flags.Switch(flag))) {
      flags.Fail(flag, fmt::format("applies to --precision fp8 only (precision is {})",
                                   Name(t.precision)));
    }
  }
  if (!fp8) return;
  if (cluster.gpu.peak_fp8_flops <= 0) {
    flags.Fail("precision",
               fmt::format("{}'s {} has no FP8 tensor cores (its profile gives no "
                           "peak_fp8_tflops)",
                           cluster.name, cluster.gpu.name),
               "use --precision bf16, or a profile of a GPU with FP8 units (dgx-h100, hgx-h200)");
  }
  t.fp8_recipe = flags.Enum("fp8-recipe", kFp8RecipeNames, Fp8Recipe::kDelayed);
  if (auto n = flags.OptionalPositiveInt("num-layers-at-start-in-bf16")) {
    t.fp8_bf16_layers_at_start = static_cast<int>(std::min<int64_t>(*n, 1'000'000));
  }
  if (auto n = flags.OptionalPositiveInt("num-layers-at-end-in-bf16")) {
    t.fp8_bf16_layers_at_end = static_cast<int>(std::min<int64_t>(*n, 1'000'000));
  }
  if ((t.fp8_bf16_layers_at_start > 0 || t.fp8_bf16_layers_at_end > 0) &&
      t.fp8_recipe == Fp8Recipe::kDelayed) {
    flags.Fail(t.fp8_bf16_layers_at_start > 0 ? "num-layers-at-start-in-bf16"
                                              : "num-layers-at-end-in-bf16",
               "Delayed scaling does not support first / last layer in BF16.",
               "add --fp8-recipe tensorwise (or blockwise)");
  }
  t.fp8_param_gather = flags.Switch("fp8-param-gather");
  t.keep_fp8_transpose_cache = flags.Switch("keep-fp8-transpose-cache");
}

void AddCostOptions(po::options_description& o) {
  o.add_options()(
      "megatron-version", po::value<std::string>()->value_name("V"),
      "the training code to model: core (today's Megatron-Core, the default), 2022 (Korthikanti "
      "et al.), 2021 (Narayanan et al.: scatter-gather p2p, no gradient-accumulation fusion), "
      "megatron-deepspeed (vTrain's runs); 2021, 2022 and megatron-deepspeed run unfused "
      "attention")(
      "attention-backend", po::value<std::string>()->value_name("A"),
      "Megatron's --attention-backend: flash (default for core), fused (cuDNN), unfused "
      "(scores in memory); auto is flash, local is unfused")(
      "overlap-grad-reduce", po::bool_switch(),
      "Megatron's --overlap-grad-reduce: the data-parallel reduction runs bucket by bucket "
      "during the backward")(
      "overlap-param-gather", po::bool_switch(),
      "Megatron's --overlap-param-gather: the distributed optimizer's parameter all-gather runs "
      "bucket by bucket during the next forward (needs --overlap-grad-reduce)")(
      "ddp-bucket-size", po::value<std::string>()->value_name("N"),
      "Megatron's --ddp-bucket-size, in parameters (default max(40M, 1M x dp))")(
      "tp-comm-overlap", po::bool_switch(),
      "Megatron's --tp-comm-overlap: tensor-parallel all-gathers and reduce-scatters pipelined "
      "with their GEMMs (needs --sequence-parallel)")(
      "overlap-p2p-communication", po::bool_switch(),
      "Megatron's --overlap-p2p-communication: pipeline sends run beside compute")(
      "moe-token-dispatcher", po::value<std::string>()->value_name("D"),
      "MoE models: Megatron's --moe-token-dispatcher-type: allgather (Megatron's default) | "
      "alltoall | flex (DeepEP)")(
      "moe-load-imbalance", po::value<std::string>()->value_name("X"),
      "MoE models: the busiest expert-parallel rank's tokens over the mean (default 1: "
      "balanced)");
}

CostOptions ReadCostOptions(const Flags& flags, const CostOptions& base) {
  CostOptions o = base;
  if (flags.Has("megatron-version")) {
    o = CostOptionsFor(flags.Enum("megatron-version", kSoftwareStackNames, SoftwareStack::kCore));
  }
  if (auto attention = flags.OptionalString("attention-backend")) {
    if (*attention == "auto") {
      o.attention = AttentionBackend::kFlash;
    } else if (*attention == "local") {
      o.attention = AttentionBackend::kUnfused;
    } else {
      o.attention = flags.Enum("attention-backend", kAttentionBackendNames, o.attention);
    }
  }
  o.overlap_grad_reduce = o.overlap_grad_reduce || flags.Switch("overlap-grad-reduce");
  o.overlap_param_gather = o.overlap_param_gather || flags.Switch("overlap-param-gather");
  if (flags.Has("ddp-bucket-size"))
    o.ddp_bucket_size = flags.PositiveInt("ddp-bucket-size", std::numeric_limits<int64_t>::max());
  o.tp_comm_overlap = o.tp_comm_overlap || flags.Switch("tp-comm-overlap");
  o.overlap_p2p_communication =
      o.overlap_p2p_communication || flags.Switch("overlap-p2p-communication");
  if (flags.Has("moe-token-dispatcher")) {
    o.moe_token_dispatcher =
        flags.Enum("moe-token-dispatcher", kMoeDispatcherNames, o.moe_token_dispatcher);
  }
  if (auto text = flags.OptionalString("moe-load-imbalance")) {
    double x = 0;
    const auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), x);
    // At most every token on one rank: the EP size, itself at most kMaxGpus.
    if (ec != std::errc() || ptr != text->data() + text->size() || !(x >= 1) ||
        !(x <= static_cast<double>(kMaxGpus))) {
      flags.Fail("moe-load-imbalance",
                 fmt::format("expected a number from 1 to {} (the busiest rank over the mean), "
                             "got \"{}\"",
                             kMaxGpus, *text));
    }
    o.moe_load_imbalance = x;
  }
  if (o.overlap_param_gather && !o.overlap_grad_reduce) {
    flags.Fail("overlap-param-gather", "Must use --overlap-param-gather with --overlap-grad-reduce",
               "add --overlap-grad-reduce");
  }
  return o;
}

void AddMemoryUnitOption(po::options_description& o) {
  o.add_options()("memory-unit", po::value<std::string>()->value_name("U"),
                  "GiB (2^30 bytes, the default, as PyTorch and Megatron-LM report memory) | GB "
                  "(1e9 bytes)");
}

MemoryUnit ReadMemoryUnit(const Flags& flags) {
  const auto text = flags.OptionalString("memory-unit");
  if (!text) return MemoryUnit::kGiB;
  std::string lower;
  for (char ch : *text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "gib") return MemoryUnit::kGiB;
  if (lower == "gb") return MemoryUnit::kGB;
  flags.Fail("memory-unit", UnknownValueMessage<MemoryUnit>(kMemoryUnitNames, *text));
}

std::optional<int> VirtualStagesFromLayers(const Flags& flags, int num_layers,
                                           const ParallelConfig& p) {
  constexpr const char* kFlag = "num-layers-per-virtual-pipeline-stage";
  const auto per_vstage = flags.OptionalPositiveInt(kFlag);
  if (!per_vstage) return std::nullopt;
  // megatron/training/arguments.py, validate_args.
  if (flags.Has("virtual-stages")) {
    flags.Fail(kFlag,
               "No more than one of the following arguments can be set at the same time: "
               "--num-layers-per-virtual-pipeline-stage, --virtual-stages",
               "keep one");
  }
  if (p.first_stage_layers > 0 || p.last_stage_layers > 0 ||
      flags.Has("decoder-first-pipeline-num-layers") ||
      flags.Has("decoder-last-pipeline-num-layers")) {
    flags.Fail(kFlag,
               "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
               "parallel degree when enable uneven pipeline parallelism",
               "give --virtual-stages instead");
  }
  const int accounted =
      (p.account_for_embedding || flags.Switch("account-for-embedding-in-pipeline-split") ? 1 : 0) +
      (p.account_for_loss || flags.Switch("account-for-loss-in-pipeline-split") ? 1 : 0);
  const int total = num_layers + accounted;
  if (total % p.pp != 0) {
    flags.Fail(kFlag,
               fmt::format("number of layers ({}) should be divisible by the "
                           "pipeline-model-parallel size ({})",
                           total, p.pp),
               "use a pipeline size that divides the number of layers");
  }
  const int per_stage = total / p.pp;
  if (per_stage % *per_vstage != 0) {
    flags.Fail(kFlag,
               fmt::format("number of layers per pipeline stage must be divisible number of "
                           "layers per virtual pipeline stage ({} layers per stage, {} per "
                           "virtual stage)",
                           per_stage, *per_vstage),
               "give a number of layers dividing num_layers / pp");
  }
  return static_cast<int>(per_stage / *per_vstage);
}

}  // namespace ptdp::cli
