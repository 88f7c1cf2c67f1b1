#include "megatron/write_flags.h"

#include <fmt/format.h>

#include <utility>

#include "core/model_spec.h"

namespace ptdp {
namespace {

// The flags written so far: switches alone, other flags with their value.
class Flags {
 public:
  void Switch(std::string flag) { a_.push_back(std::move(flag)); }
  template <typename T>
  void Add(std::string flag, const T& value) {
    a_.push_back(std::move(flag));
    a_.push_back(fmt::format("{}", value));
  }
  std::vector<std::string> Take() { return std::move(a_); }

 private:
  std::vector<std::string> a_;
};

// The parallel sizes, the layer split and the virtual stages, the batch, sequence parallelism,
// recompute and sharding.
void WriteLayout(const Plan& plan, Flags& f) {
  const ModelSpec& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  f.Add("--tensor-model-parallel-size", p.tp);
  f.Add("--pipeline-model-parallel-size", p.pp);
  if (p.cp > 1) {
    f.Add("--context-parallel-size", p.cp);
    f.Add("--cp-comm-type", Name(p.cp_comm));
  }
  if (m.moe()) {
    f.Add("--expert-model-parallel-size", p.ep);
    f.Add("--expert-tensor-parallel-size", p.expert_tp());
  }
  if (p.first_stage_layers > 0) f.Add("--decoder-first-pipeline-num-layers", p.first_stage_layers);
  if (p.last_stage_layers > 0) f.Add("--decoder-last-pipeline-num-layers", p.last_stage_layers);
  if (p.account_for_embedding) f.Switch("--account-for-embedding-in-pipeline-split");
  if (p.account_for_loss) f.Switch("--account-for-loss-in-pipeline-split");
  if (!p.layout.empty() && m.hybrid()) {
    // Written as '|' in the hybrid pattern (WriteHybrid).
  } else if (!p.layout.empty()) {
    f.Add("--pipeline-model-parallel-layout",
          fmt::format("'{}'", PipelineLayoutText(p.layout, m.mtp_num_layers)));
  } else if (p.schedule == Schedule::kInterleaved) {
    // Megatron takes the chunk count directly when the split is uneven.
    if (UnevenSplit(p)) {
      f.Add("--num-virtual-stages-per-pipeline-rank", p.virtual_stages);
    } else {
      f.Add("--num-layers-per-virtual-pipeline-stage", m.num_layers / p.pp / p.virtual_stages);
    }
  }
  f.Add("--micro-batch-size", p.micro_batch_size);
  f.Add("--global-batch-size", plan.training.global_batch_size);
  if (p.sequence_parallel) f.Switch("--sequence-parallel");
  if (p.recompute == Recompute::kSelective) {
    f.Add("--recompute-granularity", "selective");
    if (p.recompute_modules != kRecomputeCoreAttn) {
      f.Switch("--recompute-modules");
      for (const auto& n : kRecomputeModuleNames) {
        if (p.recompute_modules & n.value) f.Switch(std::string(n.name));
      }
    }
  } else if (p.recompute == Recompute::kFull) {
    f.Add("--recompute-granularity", "full");
    if (p.recompute_num_layers > 0) {
      f.Add("--recompute-method", "block");
      f.Add("--recompute-num-layers", p.recompute_num_layers);
    } else {
      f.Add("--recompute-method", "uniform");
      f.Add("--recompute-num-layers", 1);
    }
  }
  if (p.distributed_optimizer) f.Switch("--use-distributed-optimizer");
  if (p.fsdp != Fsdp::kNone) {
    f.Switch("--use-megatron-fsdp");
    f.Add("--data-parallel-sharding-strategy", Name(p.fsdp));
    f.Add("--ckpt-format", "fsdp_dtensor");
  }
}

// The software options, as today's Megatron-Core names them (plans of older stacks describe
// published runs; their flags are not written).
void WriteSoftware(const Plan& plan, Flags& f) {
  const CostOptions& o = plan.options;
  if (o.stack != SoftwareStack::kCore) return;
  // fp32 has no flash-style kernels: Megatron's default (auto) picks what runs.
  if (plan.training.precision != Precision::kFp32) f.Add("--attention-backend", Name(o.attention));
  if (o.overlap_grad_reduce) f.Switch("--overlap-grad-reduce");
  if (o.overlap_param_gather) f.Switch("--overlap-param-gather");
  if (o.ddp_bucket_size > 0) f.Add("--ddp-bucket-size", o.ddp_bucket_size);
  if (o.grad_reduce_in_bf16 && plan.training.precision != Precision::kFp16 &&
      plan.training.precision != Precision::kFp32) {
    f.Switch("--grad-reduce-in-bf16");
  }
  if (o.tp_comm_overlap) f.Switch("--tp-comm-overlap");
  if (o.cross_entropy_loss_fusion) f.Switch("--cross-entropy-loss-fusion");
  if (o.defer_embedding_wgrad_compute) {
    f.Switch("--defer-embedding-wgrad-compute");
    if (o.wgrad_deferral_limit > 0) f.Add("--wgrad-deferral-limit", o.wgrad_deferral_limit);
  }
  // Megatron overlaps the interleaved schedule's sends unless told not to (arguments.py:
  // --no-overlap-p2p-communication, dest overlap_p2p_comm, default True).
  if (plan.parallel.virtual_stages > 1 && !o.overlap_p2p_communication) {
    f.Switch("--no-overlap-p2p-communication");
  }
}

// The transformer: sizes, attention, MLP, norms, positions, embeddings, dropout, MTP.
void WriteModel(const ModelSpec& m, Flags& f) {
  f.Add("--num-layers", m.num_layers);
  f.Add("--hidden-size", m.hidden_size);
  f.Add("--num-attention-heads", m.num_attention_heads);
  if (m.num_query_groups != m.num_attention_heads) {
    f.Switch("--group-query-attention");
    f.Add("--num-query-groups", m.num_query_groups);
  }
  if (m.kv_channels * m.num_attention_heads != m.hidden_size) f.Add("--kv-channels", m.kv_channels);
  if (m.ffn_hidden_size != DefaultFfnHiddenSize(m.hidden_size, m.activation)) {
    f.Add("--ffn-hidden-size", m.ffn_hidden_size);
  }
  f.Add("--seq-length", m.seq_length);
  f.Add("--max-position-embeddings", m.max_position_embeddings);
  if (m.activation == Activation::kSwiglu) f.Switch("--swiglu");
  if (m.activation == Activation::kSquaredRelu) f.Switch("--squared-relu");
  if (m.normalization == Normalization::kRmsNorm) f.Add("--normalization", "RMSNorm");
  if (m.position_embedding == PositionEmbedding::kRope) f.Add("--position-embedding-type", "rope");
  if (m.position_embedding == PositionEmbedding::kNone) f.Add("--position-embedding-type", "none");
  if (!m.tied_embeddings) f.Switch("--untie-embeddings-and-output-weights");
  if (!m.add_bias_linear) f.Switch("--disable-bias-linear");
  if (m.hidden_dropout != 0.1) f.Add("--hidden-dropout", m.hidden_dropout);
  if (m.attention_dropout != 0.1) f.Add("--attention-dropout", m.attention_dropout);
  if (m.make_vocab_size_divisible_by != 128) {
    f.Add("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  }
  if (m.qk_layernorm) f.Switch("--qk-layernorm");
  if (m.mtp_num_layers > 0) f.Add("--mtp-num-layers", m.mtp_num_layers);
}

// pretrain_mamba.py's options; the pattern quoted for the shell ('*' is a glob), with a '|'
// between pipeline stages when the plan has a layout.
void WriteHybrid(const ModelSpec& m, const ParallelConfig& p, Flags& f) {
  std::string pattern = m.hybrid_layer_pattern;
  if (!p.layout.empty()) {
    pattern.clear();
    size_t at = 0;
    for (size_t vs = 0; vs < p.layout.size(); ++vs) {
      if (vs > 0) pattern += '|';
      pattern += m.hybrid_layer_pattern.substr(at, p.layout[vs]);
      at += p.layout[vs];
    }
  }
  f.Add("--hybrid-override-pattern", fmt::format("'{}'", pattern));
  if (m.mamba_num_heads > 0) f.Add("--mamba-num-heads", m.mamba_num_heads);
  f.Add("--mamba-head-dim", m.mamba_head_dim);
  f.Add("--mamba-state-dim", m.mamba_state_dim);
  f.Add("--mamba-num-groups", m.mamba_num_groups);
}

void WriteMultiLatentAttention(const ModelSpec& m, Flags& f) {
  f.Switch("--multi-latent-attention");
  if (m.q_lora_rank > 0) f.Add("--q-lora-rank", m.q_lora_rank);
  f.Add("--kv-lora-rank", m.kv_lora_rank);
  f.Add("--qk-head-dim", m.qk_head_dim);
  f.Add("--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim);
  f.Add("--v-head-dim", m.v_head_dim);
}

void WriteExperts(const Plan& plan, Flags& f) {
  const ModelSpec& m = plan.model;
  f.Add("--num-experts", m.num_experts);
  f.Add("--moe-router-topk", m.moe_router_topk);
  f.Add("--moe-ffn-hidden-size", m.moe_ffn_hidden_size);
  if (m.moe_shared_expert_intermediate_size > 0) {
    f.Add("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size);
  }
  if (m.moe_router_num_groups > 0) {
    f.Add("--moe-router-num-groups", m.moe_router_num_groups);
    f.Add("--moe-router-group-topk", m.moe_router_group_topk);
  }
  if (m.moe_first_dense_layers > 0) {
    // The list form, quoted for the shell: the dense layers, then every layer or the pattern.
    std::string rest;
    for (int l = m.moe_first_dense_layers; l < m.num_layers; ++l) {
      rest += fmt::format("{}{}", rest.empty() ? "" : ",", m.IsMoeLayer(l) ? 1 : 0);
    }
    f.Add("--moe-layer-freq", m.moe_layer_freq == 1
                                  ? fmt::format("'([0]*{}+[1]*{})'", m.moe_first_dense_layers,
                                                m.num_layers - m.moe_first_dense_layers)
                                  : fmt::format("'([0]*{}+[{}])'", m.moe_first_dense_layers, rest));
  } else if (m.moe_layer_freq != 1) {
    f.Add("--moe-layer-freq", m.moe_layer_freq);
  }
  f.Add("--moe-router-load-balancing-type", Name(m.moe_router_load_balancing_type));
  if (m.moe_expert_capacity_factor > 0) {
    f.Add("--moe-expert-capacity-factor", m.moe_expert_capacity_factor);
  }
  f.Switch("--moe-grouped-gemm");
  f.Add("--moe-token-dispatcher-type", Name(plan.options.moe_token_dispatcher));
}

void WritePrecision(const TrainingSpec& t, Flags& f) {
  if (t.precision == Precision::kBf16 || t.precision == Precision::kFp8) f.Switch("--bf16");
  if (t.precision == Precision::kFp16) f.Switch("--fp16");
  if (t.precision != Precision::kFp8) return;
  f.Add("--fp8-format", "hybrid");
  f.Add("--fp8-recipe", Name(t.fp8_recipe));
  if (t.fp8_bf16_layers_at_start > 0 || t.fp8_bf16_layers_at_end > 0) {
    f.Switch("--first-last-layers-bf16");
    f.Add("--num-layers-at-start-in-bf16", t.fp8_bf16_layers_at_start);
    f.Add("--num-layers-at-end-in-bf16", t.fp8_bf16_layers_at_end);
  }
  if (t.fp8_param_gather) f.Switch("--fp8-param-gather");
  if (t.keep_fp8_transpose_cache) f.Switch("--keep-fp8-transpose-cache");
}

}  // namespace

std::vector<std::string> MegatronArgs(const Plan& plan) {
  const ModelSpec& m = plan.model;
  Flags f;
  WriteLayout(plan, f);
  WriteSoftware(plan, f);
  WriteModel(m, f);
  if (m.hybrid()) WriteHybrid(m, plan.parallel, f);
  if (m.multi_latent_attention) WriteMultiLatentAttention(m, f);
  if (m.moe()) WriteExperts(plan, f);
  WritePrecision(plan.training, f);
  return f.Take();
}

std::string MegatronArgsLine(const Plan& plan) {
  return fmt::format("{}", fmt::join(MegatronArgs(plan), " "));
}

}  // namespace ptdp
