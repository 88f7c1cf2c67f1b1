#include "megatron/write_flags.h"

#include <fmt/format.h>

#include "core/model_spec.h"

namespace ptdp {

std::vector<std::string> MegatronArgs(const Plan& plan) {
  const ModelSpec& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  std::vector<std::string> a;
  auto add = [&](std::string flag, auto value) {
    a.push_back(std::move(flag));
    a.push_back(fmt::format("{}", value));
  };
  add("--tensor-model-parallel-size", p.tp);
  add("--pipeline-model-parallel-size", p.pp);
  if (p.cp > 1) {
    add("--context-parallel-size", p.cp);
    add("--cp-comm-type", Name(p.cp_comm));
  }
  if (m.moe()) {
    add("--expert-model-parallel-size", p.ep);
    add("--expert-tensor-parallel-size", p.expert_tp());
  }
  if (p.first_stage_layers > 0) add("--decoder-first-pipeline-num-layers", p.first_stage_layers);
  if (p.last_stage_layers > 0) add("--decoder-last-pipeline-num-layers", p.last_stage_layers);
  if (p.account_for_embedding) a.push_back("--account-for-embedding-in-pipeline-split");
  if (p.account_for_loss) a.push_back("--account-for-loss-in-pipeline-split");
  if (!p.layout.empty() && m.hybrid()) {
    // Written as '|' in the hybrid pattern below.
  } else if (!p.layout.empty()) {
    add("--pipeline-model-parallel-layout",
        fmt::format("'{}'", PipelineLayoutText(p.layout, m.mtp_num_layers)));
  } else if (p.schedule == Schedule::kInterleaved) {
    // Megatron takes the chunk count directly when the split is uneven.
    if (UnevenSplit(p)) {
      add("--num-virtual-stages-per-pipeline-rank", p.virtual_stages);
    } else {
      add("--num-layers-per-virtual-pipeline-stage", m.num_layers / p.pp / p.virtual_stages);
    }
  }
  add("--micro-batch-size", p.micro_batch_size);
  add("--global-batch-size", plan.training.global_batch_size);
  if (p.sequence_parallel) a.push_back("--sequence-parallel");
  if (p.recompute == Recompute::kSelective) {
    add("--recompute-granularity", "selective");
    if (p.recompute_modules != kRecomputeCoreAttn) {
      a.push_back("--recompute-modules");
      for (const auto& n : kRecomputeModuleNames) {
        if (p.recompute_modules & n.value) a.emplace_back(n.name);
      }
    }
  } else if (p.recompute == Recompute::kFull) {
    add("--recompute-granularity", "full");
    if (p.recompute_num_layers > 0) {
      add("--recompute-method", "block");
      add("--recompute-num-layers", p.recompute_num_layers);
    } else {
      add("--recompute-method", "uniform");
      add("--recompute-num-layers", 1);
    }
  }
  if (p.distributed_optimizer) a.push_back("--use-distributed-optimizer");
  if (p.fsdp != Fsdp::kNone) {
    a.push_back("--use-megatron-fsdp");
    add("--data-parallel-sharding-strategy", Name(p.fsdp));
    add("--ckpt-format", "fsdp_dtensor");
  }
  // The software options, as today's Megatron-Core names them (plans of older stacks describe
  // published runs; their flags are not written).
  const CostOptions& o = plan.options;
  if (o.stack == SoftwareStack::kCore) {
    // fp32 has no flash-style kernels: Megatron's default (auto) picks what runs.
    if (plan.training.precision != Precision::kFp32) add("--attention-backend", Name(o.attention));
    if (o.overlap_grad_reduce) a.push_back("--overlap-grad-reduce");
    if (o.overlap_param_gather) a.push_back("--overlap-param-gather");
    if (o.ddp_bucket_size > 0) add("--ddp-bucket-size", o.ddp_bucket_size);
    if (o.tp_comm_overlap) a.push_back("--tp-comm-overlap");
    // Megatron overlaps the interleaved schedule's sends unless told not to (arguments.py:
    // --no-overlap-p2p-communication, dest overlap_p2p_comm, default True).
    if (p.virtual_stages > 1 && !o.overlap_p2p_communication) {
      a.push_back("--no-overlap-p2p-communication");
    }
  }
  add("--num-layers", m.num_layers);
  add("--hidden-size", m.hidden_size);
  add("--num-attention-heads", m.num_attention_heads);
  if (m.num_query_groups != m.num_attention_heads) {
    a.push_back("--group-query-attention");
    add("--num-query-groups", m.num_query_groups);
  }
  if (m.kv_channels * m.num_attention_heads != m.hidden_size) add("--kv-channels", m.kv_channels);
  if (m.ffn_hidden_size != DefaultFfnHiddenSize(m.hidden_size, m.activation)) {
    add("--ffn-hidden-size", m.ffn_hidden_size);
  }
  add("--seq-length", m.seq_length);
  add("--max-position-embeddings", m.max_position_embeddings);
  if (m.activation == Activation::kSwiglu) a.push_back("--swiglu");
  if (m.activation == Activation::kSquaredRelu) a.push_back("--squared-relu");
  if (m.normalization == Normalization::kRmsNorm) add("--normalization", "RMSNorm");
  if (m.position_embedding == PositionEmbedding::kRope) add("--position-embedding-type", "rope");
  if (m.position_embedding == PositionEmbedding::kNone) add("--position-embedding-type", "none");
  if (!m.tied_embeddings) a.push_back("--untie-embeddings-and-output-weights");
  if (!m.add_bias_linear) a.push_back("--disable-bias-linear");
  if (m.hidden_dropout != 0.1) add("--hidden-dropout", m.hidden_dropout);
  if (m.attention_dropout != 0.1) add("--attention-dropout", m.attention_dropout);
  if (m.make_vocab_size_divisible_by != 128) {
    add("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  }
  if (m.qk_layernorm) a.push_back("--qk-layernorm");
  if (m.mtp_num_layers > 0) add("--mtp-num-layers", m.mtp_num_layers);
  if (m.hybrid()) {
    // pretrain_mamba.py's options; the pattern quoted for the shell ('*' is a glob).
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
    add("--hybrid-override-pattern", fmt::format("'{}'", pattern));
    if (m.mamba_num_heads > 0) add("--mamba-num-heads", m.mamba_num_heads);
    add("--mamba-head-dim", m.mamba_head_dim);
    add("--mamba-state-dim", m.mamba_state_dim);
    add("--mamba-num-groups", m.mamba_num_groups);
  }
  if (m.multi_latent_attention) {
    a.push_back("--multi-latent-attention");
    if (m.q_lora_rank > 0) add("--q-lora-rank", m.q_lora_rank);
    add("--kv-lora-rank", m.kv_lora_rank);
    add("--qk-head-dim", m.qk_head_dim);
    add("--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim);
    add("--v-head-dim", m.v_head_dim);
  }
  if (m.moe()) {
    add("--num-experts", m.num_experts);
    add("--moe-router-topk", m.moe_router_topk);
    add("--moe-ffn-hidden-size", m.moe_ffn_hidden_size);
    if (m.moe_shared_expert_intermediate_size > 0) {
      add("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size);
    }
    if (m.moe_first_dense_layers > 0) {
      // The list form, quoted for the shell: the dense layers, then every layer or the pattern.
      std::string rest;
      for (int l = m.moe_first_dense_layers; l < m.num_layers; ++l) {
        rest += fmt::format("{}{}", rest.empty() ? "" : ",", m.IsMoeLayer(l) ? 1 : 0);
      }
      add("--moe-layer-freq", m.moe_layer_freq == 1
                                  ? fmt::format("'([0]*{}+[1]*{})'", m.moe_first_dense_layers,
                                                m.num_layers - m.moe_first_dense_layers)
                                  : fmt::format("'([0]*{}+[{}])'", m.moe_first_dense_layers, rest));
    } else if (m.moe_layer_freq != 1) {
      add("--moe-layer-freq", m.moe_layer_freq);
    }
    add("--moe-router-load-balancing-type", Name(m.moe_router_load_balancing_type));
    if (m.moe_expert_capacity_factor > 0) {
      add("--moe-expert-capacity-factor", m.moe_expert_capacity_factor);
    }
    a.push_back("--moe-grouped-gemm");
    add("--moe-token-dispatcher-type", Name(plan.options.moe_token_dispatcher));
  }
  const TrainingSpec& t = plan.training;
  if (t.precision == Precision::kBf16 || t.precision == Precision::kFp8) a.push_back("--bf16");
  if (t.precision == Precision::kFp16) a.push_back("--fp16");
  if (t.precision == Precision::kFp8) {
    add("--fp8-format", "hybrid");
    add("--fp8-recipe", Name(t.fp8_recipe));
    if (t.fp8_bf16_layers_at_start > 0 || t.fp8_bf16_layers_at_end > 0) {
      a.push_back("--first-last-layers-bf16");
      add("--num-layers-at-start-in-bf16", t.fp8_bf16_layers_at_start);
      add("--num-layers-at-end-in-bf16", t.fp8_bf16_layers_at_end);
    }
    if (t.fp8_param_gather) a.push_back("--fp8-param-gather");
  }
  return a;
}

std::string MegatronArgsLine(const Plan& plan) {
  return fmt::format("{}", fmt::join(MegatronArgs(plan), " "));
}

}  // namespace ptdp
