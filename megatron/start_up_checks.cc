// What Megatron-LM asserts of a command at start-up, beyond validate_args' rules on the layout
// (megatron/rules.h): ReadStartUpChecks (megatron/reader.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "megatron/reader.h"

namespace ptdp::reading {
namespace {

// Torch FSDP2's requirements (arguments.py validate_args, the `if args.use_torch_fsdp2:` block)
// and --deterministic-mode's (megatron/training/determinism.py), in Megatron's words.
void CheckFsdp2AndDeterminism(Reader& r, const MegatronCommand& c) {
  if (r.Has("--use-torch-fsdp2")) {
    const ParallelConfig& p = c.parallel;
    const std::string format = r.String("--ckpt-format").value_or("torch_dist");
    const std::pair<bool, const char*> rules[] = {
        {p.pp == 1, "--use-torch-fsdp2 is not supported with pipeline parallelism"},
        {p.ep == 1, "--use-torch-fsdp2 is not supported with expert parallelism"},
        {!r.Has("--use-distributed-optimizer"),
         "--use-torch-fsdp2 is not supported with MCore's distributed optimizer"},
        {r.Has("--no-gradient-accumulation-fusion"),
         "--use-torch-fsdp2 is not supported with gradient accumulation fusion (add "
         "--no-gradient-accumulation-fusion)"},
        {format == "torch_dist" || format == "torch_dcp",
         "--use-torch-fsdp2 requires --ckpt-format torch_dist or torch_dcp"},
        {r.Has("--untie-embeddings-and-output-weights"),
         "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"},
        {!r.Has("--fp16"), "--use-torch-fsdp2 not supported with fp16 yet"},
    };
    for (const auto& [holds, message] : rules) {
      if (!holds) r.Add(Severity::kError, "--use-torch-fsdp2", message, "");
    }
  }
  if (r.Has("--deterministic-mode")) {
    std::vector<std::string> mismatched;
    if (r.Has("--cross-entropy-loss-fusion"))
      mismatched.push_back("cross_entropy_loss_fusion=False (got True)");
    if (r.Has("--tp-comm-overlap")) mismatched.push_back("tp_comm_overlap=False (got True)");
    if (!mismatched.empty()) {
      std::string joined;
      for (const std::string& m : mismatched) joined += (joined.empty() ? "" : ", ") + m;
      r.Add(Severity::kError, "--deterministic-mode",
            fmt::format("--deterministic-mode requires: {}. Adjust these options to continue.",
                        joined),
            "");
    }
  }
}

// The output layer's deferred weight gradients (megatron/core/model_parallel_config.py
// __post_init__), in Megatron's words.
void CheckEmbeddingWgradDeferral(Reader& r, const MegatronCommand& c) {
  if (!r.Has("--defer-embedding-wgrad-compute")) return;
  const std::pair<bool, const char*> rules[] = {
      {c.parallel.pp > 1,
       "Cannot defer embedding wgrad compute when pipeline model parallel is not used"},
      {!r.Has("--no-gradient-accumulation-fusion"),
       "Cannot defer embedding wgrad compute when gradient accumulation fusion is not used"},
      {r.Int("--wgrad-deferral-limit").value_or(0) >= 0,
       "Wgrad deferral limit should be greater than or equal to 0 when it is enabled!"},
  };
  for (const auto& [holds, message] : rules) {
    if (!holds) r.Add(Severity::kError, "--defer-embedding-wgrad-compute", message, "");
  }
}

// CUDA_DEVICE_MAX_CONNECTIONS at launch, as validate_args asserts it on GPUs before Blackwell:
// FSDP (Megatron's or Torch's) needs it unset or above 1; otherwise tensor or context
// parallelism needs it at 1 (unless --overlap-moe-expert-parallel-comm, which only warns).
// When the script does not set it, the user's shell may: `check` then says what Megatron needs.
void CheckDeviceConnections(Reader& r, MegatronCommand& c, bool environment_complete) {
  const auto it = c.environment.find("CUDA_DEVICE_MAX_CONNECTIONS");
  const std::optional<std::string> value =
      it != c.environment.end() ? std::optional(it->second) : std::nullopt;
  const bool known = value || environment_complete;
  const ParallelConfig& p = c.parallel;
  if (r.Has("--use-torch-fsdp2") || r.Has("--use-megatron-fsdp")) {
    if (value == "1") {
      r.Add(Severity::kError,
            r.Has("--use-megatron-fsdp") ? "--use-megatron-fsdp" : "--use-torch-fsdp2",
            "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.",
            "do not export CUDA_DEVICE_MAX_CONNECTIONS=1 for this run");
    }
    return;
  }
  if ((p.tp <= 1 && p.cp <= 1) || r.Given("--overlap-moe-expert-parallel-comm") || value == "1") {
    return;
  }
  const char* flag = p.tp > 1 ? "--tensor-model-parallel-size" : "--context-parallel-size";
  if (known) {
    r.Add(Severity::kError, flag,
          fmt::format("Using tensor model parallelism or context parallelism require setting the "
                      "environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1 (it is {} at launch)",
                      value ? "'" + *value + "'" : "unset"),
          "export CUDA_DEVICE_MAX_CONNECTIONS=1 before launching");
  } else {
    r.Add(Severity::kWarning, flag,
          "with tensor or context parallelism Megatron-LM asserts the environment variable "
          "CUDA_DEVICE_MAX_CONNECTIONS=1 on GPUs before Blackwell; the command does not set it",
          "export CUDA_DEVICE_MAX_CONNECTIONS=1 before launching");
  }
}

// --overlap-moe-expert-parallel-comm's requirements (TransformerConfig.__post_init__, at
// start-up), in Megatron's words. The overlap itself is not simulated (issue 30): looked at with
// Given, so that check says so.
void CheckExpertParallelOverlap(Reader& r, const MegatronCommand& c) {
  if (!r.Given("--overlap-moe-expert-parallel-comm")) return;
  const ParallelConfig& p = c.parallel;
  const std::string dispatcher = r.String("--moe-token-dispatcher-type").value_or("allgather");
  bool recompute_moe = false;
  if (const auto* a = r.Last("--recompute-modules"); a != nullptr) {
    recompute_moe = std::find(a->values.begin(), a->values.end(), "moe") != a->values.end();
  }
  const std::pair<bool, const char*> rules[] = {
      {p.pp <= 1 || p.virtual_stages > 1,
       "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when "
       "pipeline_model_parallel_size > 1"},
      {p.ep > 1,
       "overlap_moe_expert_parallel_comm is only supported with expert model parallelism"},
      {dispatcher == "alltoall" || dispatcher == "flex",
       "overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher"},
      {r.String("--recompute-granularity").value_or("") != "full",
       "disable full recomputation when enabling overlap_moe_expert_parallel_comm"},
      {!r.Has("--recompute-method"),
       "disable recomputation method when enabling overlap_moe_expert_parallel_comm"},
      {!r.Has("--recompute-num-layers"),
       "recompute_num_layers must be None when enabling overlap_moe_expert_parallel_comm"},
      {!recompute_moe,
       "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm"},
      {r.Has("--bf16") || r.Has("--fp16"),
       "overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 model"},
      {!r.Given("--moe-shared-expert-overlap"),
       "disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm"},
      {c.model.mtp_num_layers <= 1,
       "MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm."},
  };
  for (const auto& [holds, message] : rules) {
    if (!holds) r.Add(Severity::kError, "--overlap-moe-expert-parallel-comm", message, "");
  }
}

}  // namespace

void ReadStartUpChecks(Reader& r, MegatronCommand& c, bool environment_complete) {
  ParallelConfig& p = c.parallel;
  if (auto world = r.Int("--world-size")) c.world_size = *world;
  if (const auto* a = r.Last("--hierarchical-context-parallel-sizes"); a != nullptr) {
    int64_t product = 1;
    for (const std::string& v : a->values) product *= std::max<int64_t>(1, std::atoll(v.c_str()));
    if (product != p.cp) {
      r.Add(Severity::kError, "--hierarchical-context-parallel-sizes",
            fmt::format("assert args.context_parallel_size == prod(args."
                        "hierarchical_context_parallel_sizes): {} != {}",
                        p.cp, product),
            "give sizes whose product is --context-parallel-size");
    }
  }
  if (auto g = r.Int("--microbatch-group-size-per-virtual-pipeline-stage")) {
    c.microbatch_group_size = ToInt(*g);
  }
  CheckExpertParallelOverlap(r, c);
  CheckFsdp2AndDeterminism(r, c);
  CheckEmbeddingWgradDeferral(r, c);
  CheckDeviceConnections(r, c, environment_complete);
}

}  // namespace ptdp::reading
