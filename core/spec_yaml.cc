#include "core/spec_yaml.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/limits.h"
#include "core/units.h"
#include "core/yaml_io.h"

namespace ptdp {
namespace {

int ToInt(const YamlMap& map, std::string_view key, int64_t value,
          int64_t max = kMaxModelDimension) {
  if (value > max) map.Fail(key, fmt::format("at most {}, got {}", max, value));
  return static_cast<int>(value);
}

int PositiveInt32(const YamlMap& map, std::string_view key) {
  return ToInt(map, key, map.PositiveInt(key));
}

std::string StemOf(const std::string& source) {
  const std::string stem = std::filesystem::path(source).stem().string();
  return stem.empty() || stem[0] == '<' ? "custom" : stem;
}

std::string_view Bool(bool b) { return b ? "true" : "false"; }

// A peak rate or a bandwidth in the profile's units (TFLOP/s, GB/s): positive, and within what
// any device has (a subnormal rate once made every time infinite).
double Rate(const YamlMap& map, std::string_view key) {
  constexpr double kLowest = 1e-6, kHighest = 1e9;
  const double value = map.PositiveNumber(key);
  if (value < kLowest || value > kHighest) {
    map.Fail(key, fmt::format("expected a rate between {:g} and {:g}, got {}", kLowest, kHighest,
                              YamlNumber(value)));
  }
  return value;
}

// An efficiency (achieved over peak): in [1e-4, 1]. The floor keeps every time finite and
// refuses subnormals (an efficiency of 1e-320 once printed `inf s` and `-nan%`); measured ones
// are far above it (the shipped profiles' smallest GEMMs: 0.002).
double Efficiency(const YamlMap& map, std::string_view key) {
  constexpr double kLowest = 1e-4;
  const double value = map.PositiveNumber(key);
  if (value < kLowest || value > 1) {
    map.Fail(key, fmt::format("expected an efficiency between {:g} and 1, got {}", kLowest,
                              YamlNumber(value)));
  }
  return value;
}

// A latency or a host overhead in microseconds: 0 or more, at most 1e7 (ten seconds), so that
// a step's sum of them stays finite.
double Microseconds(const YamlMap& map, std::string_view key) {
  constexpr double kHighest = 1e7;
  const double value = map.NonNegativeNumber(key);
  if (value > kHighest) {
    map.Fail(key, fmt::format("expected at most {:g} microseconds, got {}", kHighest,
                              YamlNumber(value)));
  }
  return value * units::kMicrosecond;
}

double Microseconds(const YamlMap& map, std::string_view key, double default_value) {
  return map.Has(key) ? Microseconds(map, key) : default_value;
}

// The GEMM efficiency table: a list of {m, n, k, efficiency} whose points cover every
// combination of their distinct m, n and k values exactly once (the cost model interpolates
// on that grid). Returned sorted by (m, n, k), so the cost model finds the axes by position.
std::vector<GemmEfficiencyPoint> ReadGemmTable(const YamlMap& gpu, std::string_view key) {
  std::vector<GemmEfficiencyPoint> points;
  std::set<int64_t> ms, ns, ks;
  std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
  for (const YamlMap& row : gpu.MapList(key)) {
    GemmEfficiencyPoint p{row.PositiveInt("m"), row.PositiveInt("n"), row.PositiveInt("k"),
                          Efficiency(row, "efficiency")};
    row.RejectUnknownKeys();
    if (!seen.emplace(p.m, p.n, p.k).second) {
      row.Fail("m", fmt::format("shape {}x{}x{} appears twice", p.m, p.n, p.k));
    }
    ms.insert(p.m), ns.insert(p.n), ks.insert(p.k);
    points.push_back(p);
  }
  for (const auto& [axis, values] : {std::pair{"m", &ms}, {"n", &ns}, {"k", &ks}}) {
    if (values->size() > 32) {
      gpu.Fail(key, fmt::format("at most 32 distinct values of {} are supported, got {}", axis,
                                values->size()));
    }
  }
  if (points.size() != ms.size() * ns.size() * ks.size()) {
    for (int64_t m : ms) {
      for (int64_t n : ns) {
        for (int64_t k : ks) {
          if (seen.count({m, n, k}) == 0) {
            gpu.Fail(key,
                     fmt::format("the shapes must form a full grid over m, n and k; {}x{}x{} is "
                                 "missing",
                                 m, n, k));
          }
        }
      }
    }
  }
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) {
    return std::tie(a.m, a.n, a.k) < std::tie(b.m, b.n, b.k);
  });
  return points;
}

// An attention efficiency table: a list of {seq_length, forward, backward}, distinct lengths,
// returned sorted by length.
std::vector<AttentionEfficiencyPoint> ReadAttentionTable(const YamlMap& gpu, std::string_view key) {
  std::vector<AttentionEfficiencyPoint> points;
  std::set<int64_t> seen;
  for (const YamlMap& row : gpu.MapList(key)) {
    AttentionEfficiencyPoint p{row.PositiveInt("seq_length"), Efficiency(row, "forward"),
                               Efficiency(row, "backward")};
    row.RejectUnknownKeys();
    if (!seen.insert(p.seq_length).second) {
      row.Fail("seq_length", fmt::format("sequence length {} appears twice", p.seq_length));
    }
    points.push_back(p);
  }
  std::sort(points.begin(), points.end(),
            [](const auto& a, const auto& b) { return a.seq_length < b.seq_length; });
  return points;
}

void WriteGemmTable(YamlWriter& w, std::string_view key,
                    const std::vector<GemmEfficiencyPoint>& table) {
  w.Begin(key);
  for (const GemmEfficiencyPoint& g : table) {
    w.Item(fmt::format("{{m: {}, n: {}, k: {}, efficiency: {}}}", g.m, g.n, g.k,
                       YamlNumber(g.efficiency)));
  }
  w.End();
}

void WriteAttentionTable(YamlWriter& w, std::string_view key,
                         const std::vector<AttentionEfficiencyPoint>& table) {
  if (table.empty()) return;
  w.Begin(key);
  for (const AttentionEfficiencyPoint& a : table) {
    w.Item(fmt::format("{{seq_length: {}, forward: {}, backward: {}}}", a.seq_length,
                       YamlNumber(a.forward), YamlNumber(a.backward)));
  }
  w.End();
}

void WriteModel(YamlWriter& w, const ModelSpec& m) {
  w.Line("name", YamlQuote(m.name));
  w.Line("num_layers", std::to_string(m.num_layers));
  w.Line("hidden_size", std::to_string(m.hidden_size));
  w.Line("num_attention_heads", std::to_string(m.num_attention_heads));
  w.Line("num_query_groups", std::to_string(m.num_query_groups));
  w.Line("kv_channels", std::to_string(m.kv_channels));
  w.Line("ffn_hidden_size", std::to_string(m.ffn_hidden_size));
  w.Line("vocab_size", std::to_string(m.vocab_size));
  w.Line("make_vocab_size_divisible_by", std::to_string(m.make_vocab_size_divisible_by));
  w.Line("seq_length", std::to_string(m.seq_length));
  w.Line("max_position_embeddings", std::to_string(m.max_position_embeddings));
  w.Line("activation", Name(m.activation));
  w.Line("normalization", Name(m.normalization));
  w.Line("position_embedding", Name(m.position_embedding));
  w.Line("tied_embeddings", Bool(m.tied_embeddings));
  w.Line("add_bias_linear", Bool(m.add_bias_linear));
  w.Line("hidden_dropout", YamlNumber(m.hidden_dropout));
  w.Line("attention_dropout", YamlNumber(m.attention_dropout));
  if (m.qk_layernorm) w.Line("qk_layernorm", "true");
  if (m.moe()) {
    w.Line("num_experts", std::to_string(m.num_experts));
    w.Line("moe_router_topk", std::to_string(m.moe_router_topk));
    w.Line("moe_ffn_hidden_size", std::to_string(m.moe_ffn_hidden_size), "per expert");
    w.Line("moe_shared_expert_intermediate_size",
           std::to_string(m.moe_shared_expert_intermediate_size), "all shared experts; 0: none");
    w.Line("moe_layer_freq", std::to_string(m.moe_layer_freq));
    w.Line("moe_first_dense_layers", std::to_string(m.moe_first_dense_layers));
    if (m.moe_router_num_groups > 0) {
      w.Line("moe_router_num_groups", std::to_string(m.moe_router_num_groups));
      w.Line("moe_router_group_topk", std::to_string(m.moe_router_group_topk));
    }
    w.Line("moe_router_load_balancing_type", Name(m.moe_router_load_balancing_type));
    w.Line("moe_expert_capacity_factor", YamlNumber(m.moe_expert_capacity_factor), "0: dropless");
  }
  if (m.mtp_num_layers > 0) w.Line("mtp_num_layers", std::to_string(m.mtp_num_layers));
  if (m.multi_latent_attention) {
    w.Line("multi_latent_attention", "true");
    w.Line("q_lora_rank", std::to_string(m.q_lora_rank), "0: queries projected directly");
    w.Line("kv_lora_rank", std::to_string(m.kv_lora_rank));
    w.Line("qk_head_dim", std::to_string(m.qk_head_dim));
    w.Line("qk_pos_emb_head_dim", std::to_string(m.qk_pos_emb_head_dim));
    w.Line("v_head_dim", std::to_string(m.v_head_dim));
  }
  if (m.hybrid()) {
    w.Line("hybrid_layer_pattern", YamlQuote(m.hybrid_layer_pattern),
           "M Mamba, * attention, - MLP, E MoE");
    if (m.mamba_num_heads > 0) w.Line("mamba_num_heads", std::to_string(m.mamba_num_heads));
    w.Line("mamba_head_dim", std::to_string(m.mamba_head_dim));
    w.Line("mamba_state_dim", std::to_string(m.mamba_state_dim));
    w.Line("mamba_num_groups", std::to_string(m.mamba_num_groups));
    w.Line("mamba_conv_kernel", std::to_string(m.mamba_conv_kernel));
  }
}

void WriteCluster(YamlWriter& w, const ClusterSpec& c) {
  w.Line("name", YamlQuote(c.name));
  w.Line("description", YamlQuote(c.description));
  if (!c.overrides.empty()) {
    w.Comment("changed from the profile (--cluster-set); the values below hold the changes");
    w.Begin("overrides");
    for (const std::string& o : c.overrides) w.Item(YamlQuote(o));
    w.End();
  }
  w.Begin("gpu");
  w.Line("name", YamlQuote(c.gpu.name));
  w.Line("peak_bf16_tflops", YamlScaled(c.gpu.peak_bf16_flops, units::kTflops));
  w.Line("peak_fp16_tflops", YamlScaled(c.gpu.peak_fp16_flops, units::kTflops));
  w.Line("peak_fp32_tflops", YamlScaled(c.gpu.peak_fp32_flops, units::kTflops));
  w.Line("hbm_bytes", std::to_string(c.gpu.hbm_bytes));
  w.Line("hbm_bandwidth_gb_per_s", YamlScaled(c.gpu.hbm_bandwidth_bytes_per_s, units::kGBPerS));
  w.Line("memory_efficiency", YamlNumber(c.gpu.memory_efficiency));
  if (c.gpu.compute_capability > 0) {
    w.Line("compute_capability", YamlNumber(c.gpu.compute_capability));
  }
  if (c.gpu.sm_count > 0) w.Line("sm_count", std::to_string(c.gpu.sm_count));
  w.Line("reserved_bytes", std::to_string(c.gpu.reserved_bytes));
  w.Line("fragmentation", YamlNumber(c.gpu.fragmentation));
  WriteGemmTable(w, "gemm_efficiency", c.gpu.gemm_efficiency);
  if (c.gpu.peak_fp8_flops > 0) {
    w.Line("peak_fp8_tflops", YamlScaled(c.gpu.peak_fp8_flops, units::kTflops));
    WriteGemmTable(w, "gemm_efficiency_fp8", c.gpu.gemm_efficiency_fp8);
  }
  WriteAttentionTable(w, "flash_attention", c.gpu.flash_attention);
  WriteAttentionTable(w, "fused_attention", c.gpu.fused_attention);
  w.End();
  w.Begin("node");
  w.Line("gpus_per_node", std::to_string(c.gpus_per_node));
  w.Line("nvlink_gb_per_s", YamlScaled(c.nvlink_bytes_per_s, units::kGBPerS));
  w.Line("nvlink_busbw_gb_per_s", YamlScaled(c.nvlink_busbw_bytes_per_s, units::kGBPerS));
  w.Line("nvlink_step_latency_us", YamlScaled(c.nvlink_step_latency_s, units::kMicrosecond));
  w.End();
  w.Begin("network");
  w.Line("nics_per_node", std::to_string(c.nics_per_node));
  w.Line("nic_gb_per_s", YamlScaled(c.nic_bytes_per_s, units::kGBPerS));
  w.Line("nic_busbw_gb_per_s", YamlScaled(c.nic_busbw_bytes_per_s, units::kGBPerS));
  w.Line("nic_step_latency_us", YamlScaled(c.nic_step_latency_s, units::kMicrosecond));
  w.Line("collective_base_latency_us",
         YamlScaled(c.collective_base_latency_s, units::kMicrosecond));
  w.End();
  if (c.host != HostSpec{}) {
    w.Begin("host");
    w.Line("kernel_launch_us", YamlScaled(c.host.kernel_launch_s, units::kMicrosecond));
    w.Line("microbatch_overhead_us", YamlScaled(c.host.microbatch_overhead_s, units::kMicrosecond));
    w.Line("optimizer_step_us", YamlScaled(c.host.optimizer_step_s, units::kMicrosecond));
    if (c.host.moe_layer_s > 0) {
      w.Line("moe_layer_us", YamlScaled(c.host.moe_layer_s, units::kMicrosecond));
    }
    w.End();
  }
}

void WriteTraining(YamlWriter& w, const TrainingSpec& t) {
  w.Line("global_batch_size", std::to_string(t.global_batch_size));
  w.Line("precision", Name(t.precision));
  if (t.precision == Precision::kFp8) {
    w.Line("fp8_recipe", Name(t.fp8_recipe));
    w.Line("fp8_bf16_layers_at_start", std::to_string(t.fp8_bf16_layers_at_start));
    w.Line("fp8_bf16_layers_at_end", std::to_string(t.fp8_bf16_layers_at_end));
    w.Line("fp8_param_gather", Bool(t.fp8_param_gather));
    if (t.keep_fp8_transpose_cache) w.Line("keep_fp8_transpose_cache", "true");
  }
  w.Line("optimizer", Name(t.optimizer));
  w.Line("lr", YamlNumber(t.lr));
  w.Line("weight_decay", YamlNumber(t.weight_decay));
  w.Line("clip_grad", YamlNumber(t.clip_grad));
  w.Line("adam_beta1", YamlNumber(t.adam_beta1));
  w.Line("adam_beta2", YamlNumber(t.adam_beta2));
  w.Line("adam_eps", YamlNumber(t.adam_eps));
  w.Line("seed", std::to_string(t.seed));
}

void WriteParallel(YamlWriter& w, const ParallelConfig& p, int mtp_layers) {
  w.Line("tp", std::to_string(p.tp));
  w.Line("pp", std::to_string(p.pp));
  w.Line("dp", std::to_string(p.dp));
  w.Line("cp", std::to_string(p.cp), "context parallel");
  w.Line("cp_comm", Name(p.cp_comm), "p2p (ring), a2a or allgather; with cp > 1");
  w.Line("ep", std::to_string(p.ep), "expert parallel (MoE models)");
  w.Line("etp", std::to_string(p.etp), "expert tensor parallel; 0: tp");
  w.Line("micro_batch_size", std::to_string(p.micro_batch_size));
  w.Line("virtual_stages", std::to_string(p.virtual_stages));
  w.Line("schedule", Name(p.schedule));
  w.Line("sequence_parallel", Bool(p.sequence_parallel));
  w.Line("recompute", Name(p.recompute));
  if (p.recompute == Recompute::kSelective && p.recompute_modules != kRecomputeCoreAttn) {
    w.Line("recompute_modules", YamlQuote(RecomputeModulesText(p.recompute_modules)),
           "Megatron's --recompute-modules");
  }
  w.Line("distributed_optimizer", Bool(p.distributed_optimizer));
  w.Line("first_stage_layers", std::to_string(p.first_stage_layers), "0: the even share");
  w.Line("last_stage_layers", std::to_string(p.last_stage_layers), "0: the even share");
  w.Line("account_for_embedding", Bool(p.account_for_embedding));
  w.Line("account_for_loss", Bool(p.account_for_loss));
  w.Line("recompute_num_layers", std::to_string(p.recompute_num_layers),
         "full recompute of the first N layers per chunk; 0: all");
  w.Line("fsdp", Name(p.fsdp));
  if (!p.layout.empty()) {
    w.Line("layout", YamlQuote(PipelineLayoutText(p.layout, mtp_layers)),
           "Megatron's --pipeline-model-parallel-layout");
  }
}

void WriteOptions(YamlWriter& w, const CostOptions& o) {
  w.Line("megatron_version", Name(o.stack));
  w.Line("attention", Name(o.attention));
  w.Line("overlap_grad_reduce", Bool(o.overlap_grad_reduce));
  w.Line("overlap_param_gather", Bool(o.overlap_param_gather));
  w.Line("ddp_bucket_size", std::to_string(o.ddp_bucket_size), "parameters; 0: Megatron's default");
  w.Line("tp_comm_overlap", Bool(o.tp_comm_overlap));
  w.Line("overlap_p2p_communication", Bool(o.overlap_p2p_communication));
  w.Line("accumulate_allreduce_grads_in_fp32", Bool(o.accumulate_allreduce_grads_in_fp32));
  if (o.grad_reduce_in_bf16) {
    w.Line("grad_reduce_in_bf16", Bool(o.grad_reduce_in_bf16),
           "bf16 training: 2-byte main gradients");
  }
  if (o.defer_embedding_wgrad_compute) {
    w.Line("defer_embedding_wgrad_compute", Bool(o.defer_embedding_wgrad_compute),
           "the output layer's weight gradients wait for the pipeline flush");
    w.Line("wgrad_deferral_limit", std::to_string(o.wgrad_deferral_limit),
           "micro-batches deferred at most; 0: all");
  }
  if (o.cross_entropy_loss_fusion) {
    w.Line("cross_entropy_loss_fusion", Bool(o.cross_entropy_loss_fusion),
           "Megatron-Core's jit-fused (native) cross entropy");
  }
  w.Line("gradient_accumulation_fusion", Bool(o.gradient_accumulation_fusion));
  w.Line("scatter_gather_tensors_in_pipeline", Bool(o.scatter_gather_tensors_in_pipeline));
  w.Line("fused_softmax_max_seq_length", std::to_string(o.fused_softmax_max_seq_length));
  w.Line("async_tensor_parallel_allreduce", Bool(o.async_tensor_parallel_allreduce));
  w.Line("moe_token_dispatcher", Name(o.moe_token_dispatcher), "MoE models");
  w.Line("moe_load_imbalance", YamlNumber(o.moe_load_imbalance),
         "busiest expert-parallel rank's tokens over the mean; 1: balanced");
  if (o.cublas_workspace_bytes >= 0) {
    w.Line("cublas_workspace_bytes", std::to_string(o.cublas_workspace_bytes),
           "CUBLAS_WORKSPACE_CONFIG's; absent: PyTorch's default");
  }
}

}  // namespace

CostOptions ReadOptions(const YamlMap& map) {
  // The preset first, then every key given overrides its field.
  CostOptions o =
      CostOptionsFor(map.Enum("megatron_version", kSoftwareStackNames, SoftwareStack::kCore));
  o.attention = map.Enum("attention", kAttentionBackendNames, o.attention);
  for (auto [key, field] :
       {std::pair{"overlap_grad_reduce", &o.overlap_grad_reduce},
        {"overlap_param_gather", &o.overlap_param_gather},
        {"tp_comm_overlap", &o.tp_comm_overlap},
        {"overlap_p2p_communication", &o.overlap_p2p_communication},
        {"accumulate_allreduce_grads_in_fp32", &o.accumulate_allreduce_grads_in_fp32},
        {"grad_reduce_in_bf16", &o.grad_reduce_in_bf16},
        {"cross_entropy_loss_fusion", &o.cross_entropy_loss_fusion},
        {"defer_embedding_wgrad_compute", &o.defer_embedding_wgrad_compute},
        {"gradient_accumulation_fusion", &o.gradient_accumulation_fusion},
        {"scatter_gather_tensors_in_pipeline", &o.scatter_gather_tensors_in_pipeline},
        {"async_tensor_parallel_allreduce", &o.async_tensor_parallel_allreduce}}) {
    *field = map.Bool(key, *field);
  }
  if (map.Has("wgrad_deferral_limit")) {
    o.wgrad_deferral_limit = map.Int("wgrad_deferral_limit");
    if (o.wgrad_deferral_limit < 0) {
      map.Fail("wgrad_deferral_limit", "must be 0 (no limit) or a number of micro-batches");
    }
  }
  if (map.Has("ddp_bucket_size")) {
    o.ddp_bucket_size = map.Int("ddp_bucket_size");
    if (o.ddp_bucket_size < 0) {
      map.Fail("ddp_bucket_size", "must be 0 (Megatron's default) or a number of parameters");
    }
  }
  if (map.Has("fused_softmax_max_seq_length")) {
    o.fused_softmax_max_seq_length = PositiveInt32(map, "fused_softmax_max_seq_length");
  }
  o.moe_token_dispatcher =
      map.Enum("moe_token_dispatcher", kMoeDispatcherNames, o.moe_token_dispatcher);
  if (map.Has("moe_load_imbalance")) {
    o.moe_load_imbalance = map.PositiveNumber("moe_load_imbalance");
    if (o.moe_load_imbalance < 1) {
      map.Fail("moe_load_imbalance",
               fmt::format("the busiest rank holds at least the mean: must be 1 or more, got {}",
                           YamlNumber(o.moe_load_imbalance)));
    }
    if (o.moe_load_imbalance > static_cast<double>(kMaxGpus)) {
      map.Fail("moe_load_imbalance", fmt::format("at most {} (every token on one rank), got {}",
                                                 kMaxGpus, YamlNumber(o.moe_load_imbalance)));
    }
  }
  if (map.Has("cublas_workspace_bytes")) {
    o.cublas_workspace_bytes = map.Int("cublas_workspace_bytes");
    if (o.cublas_workspace_bytes < 0) {
      map.Fail("cublas_workspace_bytes",
               "must be 0 or more (CUBLAS_WORKSPACE_CONFIG's total), or absent for PyTorch's "
               "default");
    }
  }
  if (o.overlap_param_gather && !o.overlap_grad_reduce) {
    map.Fail("overlap_param_gather", "Must use --overlap-param-gather with --overlap-grad-reduce",
             "set overlap_grad_reduce: true, or overlap_param_gather: false");
  }
  map.RejectUnknownKeys();
  return o;
}

// A non-negative int key, `fallback` when absent.
int CountOr(const YamlMap& map, std::string_view key, int fallback,
            int64_t max = kMaxModelDimension) {
  if (!map.Has(key)) return fallback;
  const int64_t n = map.Int(key);
  if (n < 0) map.Fail(key, fmt::format("must be 0 or more, got {}", n));
  return ToInt(map, key, n, max);
}

// Group-limited routing, with Megatron-Core's rules (TransformerConfig.__post_init__): both
// keys or neither, the groups dividing the experts, the chosen groups among them.
void ReadRouterGroups(const YamlMap& map, ModelSpec& m) {
  if (!map.Has("moe_router_num_groups") && !map.Has("moe_router_group_topk")) return;
  for (const char* key : {"moe_router_num_groups", "moe_router_group_topk"}) {
    if (!map.Has(key)) {
      map.Fail(map.Has("moe_router_num_groups") ? "moe_router_num_groups" : "moe_router_group_topk",
               fmt::format("group-limited routing needs {} too", key));
    }
  }
  m.moe_router_num_groups = PositiveInt32(map, "moe_router_num_groups");
  m.moe_router_group_topk = PositiveInt32(map, "moe_router_group_topk");
  if (m.num_experts % m.moe_router_num_groups != 0) {
    map.Fail("moe_router_num_groups",
             fmt::format("num_experts ({}) should be divisible by moe_router_num_groups ({})",
                         m.num_experts, m.moe_router_num_groups));
  }
  if (m.moe_router_group_topk > m.moe_router_num_groups) {
    map.Fail("moe_router_group_topk",
             fmt::format("moe_router_group_topk ({}) should be smaller than moe_router_num_groups "
                         "({})",
                         m.moe_router_group_topk, m.moe_router_num_groups));
  }
}

void ReadMoe(const YamlMap& map, ModelSpec& m) {
  m.num_experts = CountOr(map, "num_experts", 0);
  if (m.num_experts == 0) {
    for (const char* key :
         {"moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
          "moe_layer_freq", "moe_first_dense_layers", "moe_router_num_groups",
          "moe_router_group_topk", "moe_router_load_balancing_type",
          "moe_expert_capacity_factor"}) {
      if (map.Has(key))
        map.Fail(key, "applies to mixture-of-experts models only (num_experts > 0)");
    }
    return;
  }
  m.moe_router_topk = map.Has("moe_router_topk") ? PositiveInt32(map, "moe_router_topk") : 2;
  if (m.moe_router_topk > m.num_experts) {
    map.Fail("moe_router_topk", fmt::format("moe_router_topk ({}) exceeds num_experts ({})",
                                            m.moe_router_topk, m.num_experts));
  }
  // Megatron: "moe_ffn_hidden_size is not set, using ffn_hidden_size for MoE instead."
  m.moe_ffn_hidden_size = map.Has("moe_ffn_hidden_size") ? PositiveInt32(map, "moe_ffn_hidden_size")
                                                         : m.ffn_hidden_size;
  m.moe_shared_expert_intermediate_size = CountOr(map, "moe_shared_expert_intermediate_size", 0);
  m.moe_layer_freq = map.Has("moe_layer_freq") ? PositiveInt32(map, "moe_layer_freq") : 1;
  m.moe_first_dense_layers = CountOr(map, "moe_first_dense_layers", 0);
  if (m.moe_first_dense_layers >= m.num_layers) {
    map.Fail("moe_first_dense_layers",
             fmt::format("leaves no MoE layer among the {} layers", m.num_layers));
  }
  ReadRouterGroups(map, m);
  m.moe_router_load_balancing_type = map.Enum("moe_router_load_balancing_type",
                                              kMoeLoadBalancingNames, MoeLoadBalancing::kAuxLoss);
  m.moe_expert_capacity_factor = map.NonNegativeNumber("moe_expert_capacity_factor", 0);
}

void ReadMla(const YamlMap& map, ModelSpec& m) {
  m.multi_latent_attention = map.Bool("multi_latent_attention", false);
  if (!m.multi_latent_attention) {
    for (const char* key :
         {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"}) {
      if (map.Has(key)) {
        map.Fail(key, "applies to multi-latent attention only", "add multi_latent_attention: true");
      }
    }
    return;
  }
  // Megatron's defaults (arguments.py, the mla group): no q latent, kv 32, 128 + 64, v 128.
  m.q_lora_rank = CountOr(map, "q_lora_rank", 0);
  m.kv_lora_rank = map.Has("kv_lora_rank") ? PositiveInt32(map, "kv_lora_rank") : 32;
  m.qk_head_dim = map.Has("qk_head_dim") ? PositiveInt32(map, "qk_head_dim") : 128;
  m.qk_pos_emb_head_dim = CountOr(map, "qk_pos_emb_head_dim", 64);
  m.v_head_dim = map.Has("v_head_dim") ? PositiveInt32(map, "v_head_dim") : 128;
  if (m.num_query_groups != m.num_attention_heads) {
    map.Fail("num_query_groups", "multi-latent attention has no grouped-query attention",
             "leave num_query_groups out (it is num_attention_heads)");
  }
}

// A hybrid model's pattern and Mamba mixer (ModelSpec), with Megatron's defaults.
void ReadHybrid(const YamlMap& map, ModelSpec& m) {
  constexpr const char* kMambaKeys[] = {"mamba_num_heads", "mamba_head_dim", "mamba_state_dim",
                                        "mamba_num_groups", "mamba_conv_kernel"};
  if (!map.Has("hybrid_layer_pattern")) {
    for (const char* key : kMambaKeys) {
      if (map.Has(key)) {
        map.Fail(key, "applies to hybrid models only", "give hybrid_layer_pattern");
      }
    }
    return;
  }
  m.hybrid_layer_pattern = map.String("hybrid_layer_pattern");
  if (m.hybrid_layer_pattern.empty()) {
    map.Fail("hybrid_layer_pattern", "is empty", "one character of M * - E per layer");
  }
  m.mamba_head_dim = map.Has("mamba_head_dim") ? PositiveInt32(map, "mamba_head_dim") : 64;
  m.mamba_state_dim = map.Has("mamba_state_dim") ? PositiveInt32(map, "mamba_state_dim") : 128;
  m.mamba_num_groups = map.Has("mamba_num_groups") ? PositiveInt32(map, "mamba_num_groups") : 8;
  m.mamba_conv_kernel = map.Has("mamba_conv_kernel") ? PositiveInt32(map, "mamba_conv_kernel") : 4;
  if (map.Has("mamba_num_heads")) {
    m.mamba_num_heads = PositiveInt32(map, "mamba_num_heads");
  } else if (m.hybrid_layer_pattern.find('M') != std::string::npos) {
    // MambaMixer: d_inner = expand (2) x hidden, nheads = d_inner / headdim.
    if (2 * m.hidden_size % m.mamba_head_dim != 0) {
      map.Fail("mamba_head_dim", "d_inner must be evenly divisible by headdim",
               "give mamba_num_heads, or a head size dividing 2 x hidden_size");
    }
    m.mamba_num_heads = 2 * m.hidden_size / m.mamba_head_dim;
  }
  const std::string problem = HybridModelProblem(m);
  if (!problem.empty()) {
    const bool mixer = problem.starts_with("nheads") || problem.starts_with("mamba_");
    map.Fail(mixer ? "mamba_num_heads" : "hybrid_layer_pattern", problem);
  }
}

ModelSpec ReadModel(const YamlMap& map, std::string_view default_name) {
  ModelSpec m;
  m.name = map.OptionalString("name").value_or(std::string(default_name));
  m.num_layers = ToInt(map, "num_layers", map.PositiveInt("num_layers"), kMaxLayers);
  m.hidden_size = PositiveInt32(map, "hidden_size");
  m.num_attention_heads = PositiveInt32(map, "num_attention_heads");
  m.num_query_groups =
      map.Has("num_query_groups") ? PositiveInt32(map, "num_query_groups") : m.num_attention_heads;
  if (m.num_attention_heads % m.num_query_groups != 0) {
    map.Fail("num_query_groups",
             fmt::format("num_attention_heads ({}) must be a multiple of num_query_groups ({})",
                         m.num_attention_heads, m.num_query_groups));
  }
  if (map.Has("kv_channels")) {
    m.kv_channels = PositiveInt32(map, "kv_channels");
  } else if (m.hidden_size % m.num_attention_heads != 0) {
    map.Fail("hidden_size",
             fmt::format("hidden_size ({}) must be a multiple of num_attention_heads ({})",
                         m.hidden_size, m.num_attention_heads),
             "give kv_channels (the per-head size) explicitly");
  } else {
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  m.activation = map.Enum("activation", kActivationNames, Activation::kGelu);
  m.ffn_hidden_size = map.Has("ffn_hidden_size")
                          ? PositiveInt32(map, "ffn_hidden_size")
                          : DefaultFfnHiddenSize(m.hidden_size, m.activation);
  m.vocab_size = PositiveInt32(map, "vocab_size");
  m.make_vocab_size_divisible_by = map.Has("make_vocab_size_divisible_by")
                                       ? PositiveInt32(map, "make_vocab_size_divisible_by")
                                       : 128;
  m.seq_length = PositiveInt32(map, "seq_length");
  m.max_position_embeddings = map.Has("max_position_embeddings")
                                  ? PositiveInt32(map, "max_position_embeddings")
                                  : m.seq_length;
  if (m.max_position_embeddings < m.seq_length) {
    map.Fail("max_position_embeddings",
             fmt::format("max_position_embeddings ({}) must be at least seq_length ({})",
                         m.max_position_embeddings, m.seq_length));
  }
  m.normalization = map.Enum("normalization", kNormalizationNames, Normalization::kLayerNorm);
  m.position_embedding =
      map.Enum("position_embedding", kPositionEmbeddingNames, PositionEmbedding::kLearned);
  m.tied_embeddings = map.Bool("tied_embeddings", true);
  m.add_bias_linear = map.Bool("add_bias_linear", true);
  for (auto [key, field] : {std::pair{"hidden_dropout", &m.hidden_dropout},
                            {"attention_dropout", &m.attention_dropout}}) {
    *field = map.NonNegativeNumber(key, *field);
    if (*field >= 1) map.Fail(key, fmt::format("must be below 1, got {}", YamlNumber(*field)));
  }
  m.qk_layernorm = map.Bool("qk_layernorm", false);
  m.mtp_num_layers = CountOr(map, "mtp_num_layers", 0, kMaxLayers);
  ReadMoe(map, m);
  ReadMla(map, m);
  ReadHybrid(map, m);
  map.RejectUnknownKeys();
  return m;
}

ModelSpec ParseModelYaml(std::string_view text, const std::string& source) {
  return ReadModel(YamlMap(ParseYamlDocument(text, source), source, "", 1), StemOf(source));
}

std::string WriteModelYaml(const ModelSpec& model) {
  YamlWriter w;
  WriteModel(w, model);
  return w.text();
}

ClusterSpec ReadCluster(const YamlMap& map) {
  ClusterSpec c;
  c.name = map.String("name");
  c.description = map.OptionalString("description").value_or("");
  // What --cluster-set changed (a record: the values below already hold the changes).
  if (map.Has("overrides")) c.overrides = map.StringList("overrides");
  {
    const YamlMap gpu = map.Map("gpu");
    c.gpu.name = gpu.String("name");
    c.gpu.peak_bf16_flops = Rate(gpu, "peak_bf16_tflops") * units::kTflops;
    c.gpu.peak_fp16_flops = Rate(gpu, "peak_fp16_tflops") * units::kTflops;
    c.gpu.peak_fp32_flops = Rate(gpu, "peak_fp32_tflops") * units::kTflops;
    c.gpu.hbm_bytes = gpu.PositiveInt("hbm_bytes");
    c.gpu.hbm_bandwidth_bytes_per_s = Rate(gpu, "hbm_bandwidth_gb_per_s") * units::kGBPerS;
    c.gpu.memory_efficiency = Efficiency(gpu, "memory_efficiency");
    if (gpu.Has("compute_capability")) {
      c.gpu.compute_capability = gpu.PositiveNumber("compute_capability");
    }
    if (gpu.Has("sm_count")) {
      const int64_t sms = gpu.PositiveInt("sm_count");
      if (sms > 100000) gpu.Fail("sm_count", fmt::format("at most 100000, got {}", sms));
      c.gpu.sm_count = static_cast<int>(sms);
    }
    c.gpu.reserved_bytes = gpu.Int("reserved_bytes");
    if (c.gpu.reserved_bytes < 0 || c.gpu.reserved_bytes >= c.gpu.hbm_bytes) {
      gpu.Fail("reserved_bytes", fmt::format("must be at least 0 and below hbm_bytes ({}), got {}",
                                             c.gpu.hbm_bytes, c.gpu.reserved_bytes));
    }
    c.gpu.fragmentation = gpu.NonNegativeNumber("fragmentation");
    if (c.gpu.fragmentation >= 1) {
      gpu.Fail("fragmentation",
               fmt::format("must be below 1, got {}", YamlNumber(c.gpu.fragmentation)));
    }
    c.gpu.gemm_efficiency = ReadGemmTable(gpu, "gemm_efficiency");
    // FP8: both the peak and its table, or neither.
    if (gpu.Has("peak_fp8_tflops") || gpu.Has("gemm_efficiency_fp8")) {
      c.gpu.peak_fp8_flops = Rate(gpu, "peak_fp8_tflops") * units::kTflops;
      if (!gpu.Has("gemm_efficiency_fp8")) {
        gpu.Fail("peak_fp8_tflops", "needs its GEMM table, gpu.gemm_efficiency_fp8");
      }
      c.gpu.gemm_efficiency_fp8 = ReadGemmTable(gpu, "gemm_efficiency_fp8");
    }
    if (gpu.Has("flash_attention")) {
      c.gpu.flash_attention = ReadAttentionTable(gpu, "flash_attention");
    }
    if (gpu.Has("fused_attention")) {
      c.gpu.fused_attention = ReadAttentionTable(gpu, "fused_attention");
    }
    gpu.RejectUnknownKeys();
  }
  {
    const YamlMap node = map.Map("node");
    c.gpus_per_node = PositiveInt32(node, "gpus_per_node");
    c.nvlink_bytes_per_s = Rate(node, "nvlink_gb_per_s") * units::kGBPerS;
    c.nvlink_busbw_bytes_per_s = Rate(node, "nvlink_busbw_gb_per_s") * units::kGBPerS;
    c.nvlink_step_latency_s = Microseconds(node, "nvlink_step_latency_us");
    node.RejectUnknownKeys();
  }
  {
    const YamlMap net = map.Map("network");
    c.nics_per_node = PositiveInt32(net, "nics_per_node");
    c.nic_bytes_per_s = Rate(net, "nic_gb_per_s") * units::kGBPerS;
    c.nic_busbw_bytes_per_s = Rate(net, "nic_busbw_gb_per_s") * units::kGBPerS;
    if (c.nic_busbw_bytes_per_s > c.nic_bytes_per_s) {
      net.Fail("nic_busbw_gb_per_s",
               fmt::format("achieved bus bandwidth ({} GB/s) exceeds the NIC's rate ({} GB/s)",
                           YamlScaled(c.nic_busbw_bytes_per_s, units::kGBPerS),
                           YamlScaled(c.nic_bytes_per_s, units::kGBPerS)));
    }
    c.nic_step_latency_s = Microseconds(net, "nic_step_latency_us");
    c.collective_base_latency_s = Microseconds(net, "collective_base_latency_us");
    net.RejectUnknownKeys();
  }
  if (map.Has("host")) {
    // Optional: profiles without it leave host overheads unmodelled (zero).
    const YamlMap host = map.Map("host");
    c.host.kernel_launch_s = Microseconds(host, "kernel_launch_us");
    c.host.microbatch_overhead_s = Microseconds(host, "microbatch_overhead_us");
    c.host.optimizer_step_s = Microseconds(host, "optimizer_step_us", 0);
    c.host.moe_layer_s = Microseconds(host, "moe_layer_us", 0);
    host.RejectUnknownKeys();
  }
  map.RejectUnknownKeys();
  return c;
}

ClusterSpec ParseClusterYaml(std::string_view text, const std::string& source) {
  return ReadCluster(YamlMap(ParseYamlDocument(text, source), source, "", 1));
}

std::string WriteClusterYaml(const ClusterSpec& cluster) {
  YamlWriter w;
  WriteCluster(w, cluster);
  return w.text();
}

TrainingSpec ReadTraining(const YamlMap& map) {
  TrainingSpec t;
  t.global_batch_size = map.PositiveInt("global_batch_size");
  t.precision = map.Enum("precision", kPrecisionNames, t.precision);
  for (const char* key : {"fp8_recipe", "fp8_bf16_layers_at_start", "fp8_bf16_layers_at_end",
                          "fp8_param_gather", "keep_fp8_transpose_cache"}) {
    if (map.Has(key) && t.precision != Precision::kFp8) {
      map.Fail(key,
               fmt::format("applies to precision fp8 only (precision is {})", Name(t.precision)),
               "set precision: fp8, or drop the key");
    }
  }
  t.fp8_recipe = map.Enum("fp8_recipe", kFp8RecipeNames, t.fp8_recipe);
  for (auto [key, field] : {std::pair{"fp8_bf16_layers_at_start", &t.fp8_bf16_layers_at_start},
                            {"fp8_bf16_layers_at_end", &t.fp8_bf16_layers_at_end}}) {
    if (!map.Has(key)) continue;
    const int64_t n = map.Int(key);
    if (n < 0 || n > 1'000'000) map.Fail(key, fmt::format("must be 0 or more, got {}", n));
    *field = static_cast<int>(n);
  }
  if ((t.fp8_bf16_layers_at_start > 0 || t.fp8_bf16_layers_at_end > 0) &&
      t.fp8_recipe == Fp8Recipe::kDelayed) {
    map.Fail(t.fp8_bf16_layers_at_start > 0 ? "fp8_bf16_layers_at_start" : "fp8_bf16_layers_at_end",
             "Delayed scaling does not support first / last layer in BF16.",
             "use fp8_recipe: tensorwise or blockwise, or no bf16 layers");
  }
  t.fp8_param_gather = map.Bool("fp8_param_gather", false);
  t.keep_fp8_transpose_cache = map.Bool("keep_fp8_transpose_cache", false);
  t.optimizer = map.Enum("optimizer", kOptimizerNames, t.optimizer);
  t.lr = map.PositiveNumber("lr", t.lr);
  t.weight_decay = map.NonNegativeNumber("weight_decay", t.weight_decay);
  t.clip_grad = map.NonNegativeNumber("clip_grad", t.clip_grad);
  for (auto [key, field] :
       {std::pair{"adam_beta1", &t.adam_beta1}, {"adam_beta2", &t.adam_beta2}}) {
    *field = map.NonNegativeNumber(key, *field);
    if (*field >= 1) map.Fail(key, fmt::format("must be below 1, got {}", YamlNumber(*field)));
  }
  t.adam_eps = map.PositiveNumber("adam_eps", t.adam_eps);
  if (map.Has("seed")) t.seed = map.Int("seed");
  map.RejectUnknownKeys();
  return t;
}

ParallelConfig ReadParallel(const YamlMap& map, int* mtp_layers) {
  ParallelConfig p;
  p.tp = PositiveInt32(map, "tp");
  p.pp = PositiveInt32(map, "pp");
  p.dp = PositiveInt32(map, "dp");
  p.cp = map.Has("cp") ? PositiveInt32(map, "cp") : 1;
  p.cp_comm = map.Enum("cp_comm", kCpCommNames, p.cp_comm);
  p.ep = map.Has("ep") ? PositiveInt32(map, "ep") : 1;
  p.etp = CountOr(map, "etp", 0);
  p.micro_batch_size = PositiveInt32(map, "micro_batch_size");
  p.virtual_stages = map.Has("virtual_stages") ? PositiveInt32(map, "virtual_stages") : 1;
  p.schedule = map.Enum("schedule", kScheduleNames, p.schedule);
  p.sequence_parallel = map.Bool("sequence_parallel", false);
  p.recompute = map.Enum("recompute", kRecomputeNames, p.recompute);
  if (map.Has("recompute_modules")) {
    std::string error;
    p.recompute_modules = ParseRecomputeModules(map.String("recompute_modules"), &error);
    if (!error.empty()) map.Fail("recompute_modules", error);
    if (p.recompute != Recompute::kSelective) {
      map.Fail("recompute_modules", "recompute modules are for selective recompute only",
               "set recompute: selective, or drop recompute_modules");
    }
  }
  p.distributed_optimizer = map.Bool("distributed_optimizer", false);
  for (auto [key, field] : {std::pair{"first_stage_layers", &p.first_stage_layers},
                            {"last_stage_layers", &p.last_stage_layers},
                            {"recompute_num_layers", &p.recompute_num_layers}}) {
    if (!map.Has(key)) continue;
    const int64_t n = map.Int(key);
    if (n < 0 || n > std::numeric_limits<int>::max()) {
      map.Fail(key, fmt::format("must be 0 (not set) or a number of layers, got {}", n));
    }
    *field = static_cast<int>(n);
  }
  p.account_for_embedding = map.Bool("account_for_embedding", false);
  p.account_for_loss = map.Bool("account_for_loss", false);
  p.fsdp = map.Enum("fsdp", kFsdpNames, p.fsdp);
  if (map.Has("layout")) {
    const PipelineLayout layout = ParsePipelineLayout(map.String("layout"));
    if (!layout.error.empty()) map.Fail("layout", layout.error);
    p.layout = layout.layers;
    if (mtp_layers != nullptr) *mtp_layers = layout.mtp;
  }
  map.RejectUnknownKeys();
  return p;
}

Plan ParsePlanSpecs(std::string_view text, const std::string& source) {
  const YamlMap map(ParseYamlDocument(text, source), source, "", 1);
  const int64_t version = map.PositiveInt("version");
  if (version != kPlanVersion) {
    map.Fail("version", fmt::format("unsupported plan version {} (this ptdp reads version {})",
                                    version, kPlanVersion));
  }
  Plan plan;
  const YamlMap model = map.Map("model");
  model.String("name");  // optional in a model file, required in a plan
  plan.model = ReadModel(model, "");
  plan.cluster = ReadCluster(map.Map("cluster"));
  plan.num_gpus = map.PositiveInt("gpus");
  const YamlMap training = map.Map("training");
  plan.training = ReadTraining(training);
  if (plan.training.precision == Precision::kFp8 && plan.cluster.gpu.peak_fp8_flops <= 0) {
    training.Fail("precision",
                  fmt::format("the cluster's {} has no FP8 tensor cores (no gpu.peak_fp8_tflops)",
                              plan.cluster.gpu.name),
                  "use precision: bf16, or a cluster with FP8 units");
  }
  const YamlMap parallel = map.Map("parallel");
  int layout_mtp = -1;
  plan.parallel = ReadParallel(parallel, &layout_mtp);
  if (layout_mtp >= 0 && layout_mtp != plan.model.mtp_num_layers) {
    parallel.Fail("layout",
                  fmt::format("Number of mtp layers in layout ({}) must match mtp_num_layers ({})",
                              layout_mtp, plan.model.mtp_num_layers));
  }
  if (map.Has("options")) plan.options = ReadOptions(map.Map("options"));
  map.RejectUnknownKeys();

  return plan;
}

std::string WritePlanYaml(const Plan& plan) {
  YamlWriter w;
  w.Comment("ptdp plan: a fully resolved training layout (ptdp simulate|execute --plan FILE)");
  w.Line("version", std::to_string(kPlanVersion));
  w.Begin("model");
  WriteModel(w, plan.model);
  w.End();
  w.Begin("cluster");
  WriteCluster(w, plan.cluster);
  w.End();
  w.Line("gpus", std::to_string(plan.num_gpus));
  w.Begin("training");
  WriteTraining(w, plan.training);
  w.End();
  w.Begin("parallel");
  WriteParallel(w, plan.parallel, plan.model.mtp_num_layers);
  w.End();
  w.Begin("options");
  WriteOptions(w, plan.options);
  w.End();
  return w.text();
}

}  // namespace ptdp
