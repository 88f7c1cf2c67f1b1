// Tiny GPT plans for the executor's tests: built in code, checked by the plan reader
// (written with WritePlanYaml and parsed back, so every plan a test runs is a valid plan file).
#pragma once

#include <string>

#include "core/plan.h"
#include "core/presets.h"
#include "core/spec_yaml.h"
#include "megatron/plan_file.h"

namespace ptdp::testing_executor {

struct TinyLayout {
  int tp = 1, pp = 1, dp = 1;
  int micro_batch = 1;
  int virtual_stages = 1;
  Schedule schedule = Schedule::k1F1B;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  bool distributed_optimizer = false;
  int first_stage_layers = 0, last_stage_layers = 0;  // an uneven split
  bool account_for_embedding = false, account_for_loss = false;
  int recompute_num_layers = 0;  // full recompute of the first N layers per chunk
  int cp = 1;                    // context parallelism
  CpComm cp_comm = CpComm::kP2p;
  int ep = 1, etp = 0;  // expert parallelism (MoE models); etp 0: tp
  // The attention the executor runs with cp == 1: unfused (the softmax kept) or flash-style
  // (context parallelism is flash-style only, as Megatron's rules say).
  AttentionBackend attention = AttentionBackend::kUnfused;
  // Megatron's data-parallel overlap (--overlap-grad-reduce, --overlap-param-gather) and
  // --ddp-bucket-size (0: Megatron's default).
  bool overlap_grad_reduce = false, overlap_param_gather = false;
  int64_t ddp_bucket_size = 0;
};

struct TinyModel {
  int layers = 8, hidden = 64, heads = 4, seq = 32, vocab = 256;
  int64_t global_batch = 8;
  double lr = 1e-4;  // TrainingSpec's default
  // Llama's choices instead of GPT's: SwiGLU, RMSNorm, rotary positions, untied output layer,
  // no biases, and `groups` query groups (grouped-query attention when below heads).
  bool llama = false;
  int groups = 0;  // 0: one per head
  int ffn = 0;     // 0: Megatron's default for the activation
  // Mixture of experts: `experts` experts (0: dense) of width `expert_ffn`, top-`topk` routing,
  // shared experts `shared_ffn` wide (0: none), the first `dense_layers` layers dense; no biases
  // (the executor's MoE layers have none).
  int experts = 0, topk = 2, expert_ffn = 64, shared_ffn = 0, dense_layers = 0;
};

inline Plan TinyPlan(const TinyLayout& l, const TinyModel& m = {}) {
  Plan p;
  p.model.name = "tiny";
  p.model.num_layers = m.layers;
  p.model.hidden_size = m.hidden;
  p.model.num_attention_heads = m.heads;
  p.model.num_query_groups = m.groups > 0 ? m.groups : m.heads;
  p.model.kv_channels = m.hidden / m.heads;
  p.model.ffn_hidden_size = 4 * m.hidden;
  if (m.llama) {
    p.model.activation = Activation::kSwiglu;
    p.model.ffn_hidden_size = DefaultFfnHiddenSize(m.hidden, Activation::kSwiglu);
    p.model.normalization = Normalization::kRmsNorm;
    p.model.position_embedding = PositionEmbedding::kRope;
    p.model.tied_embeddings = false;
    p.model.add_bias_linear = false;
  }
  if (m.ffn > 0) p.model.ffn_hidden_size = m.ffn;
  if (m.experts > 0) {
    p.model.num_experts = m.experts;
    p.model.moe_router_topk = m.topk;
    p.model.moe_ffn_hidden_size = m.expert_ffn;
    p.model.moe_shared_expert_intermediate_size = m.shared_ffn;
    p.model.moe_first_dense_layers = m.dense_layers;
    p.model.add_bias_linear = false;
  }
  p.model.vocab_size = m.vocab;
  p.model.seq_length = m.seq;
  p.model.max_position_embeddings = m.seq;
  p.cluster = ClusterPreset("cpu-local");
  p.num_gpus = int64_t{l.tp} * l.cp * l.pp * l.dp;
  p.training.global_batch_size = m.global_batch;
  // Megatron runs context parallelism only in Transformer Engine's 16-bit flash-style attention;
  // the executor computes in ExecuteOptions::dtype whatever the plan's precision.
  p.training.precision = l.cp > 1 ? Precision::kBf16 : Precision::kFp32;
  p.training.lr = m.lr;
  p.parallel.tp = l.tp;
  p.parallel.pp = l.pp;
  p.parallel.dp = l.dp;
  p.parallel.micro_batch_size = l.micro_batch;
  p.parallel.virtual_stages = l.virtual_stages;
  p.parallel.schedule = l.schedule;
  p.parallel.sequence_parallel = l.sequence_parallel;
  p.parallel.recompute = l.recompute;
  p.parallel.distributed_optimizer = l.distributed_optimizer;
  p.parallel.first_stage_layers = l.first_stage_layers;
  p.parallel.last_stage_layers = l.last_stage_layers;
  p.parallel.account_for_embedding = l.account_for_embedding;
  p.parallel.account_for_loss = l.account_for_loss;
  p.parallel.recompute_num_layers = l.recompute_num_layers;
  p.parallel.cp = l.cp;
  p.parallel.cp_comm = l.cp_comm;
  p.parallel.ep = l.ep;
  p.parallel.etp = l.etp;
  p.options.attention = l.cp > 1 ? AttentionBackend::kFlash : l.attention;
  p.options.overlap_grad_reduce = l.overlap_grad_reduce;
  p.options.overlap_param_gather = l.overlap_param_gather;
  p.options.ddp_bucket_size = l.ddp_bucket_size;
  return ParsePlanYaml(WritePlanYaml(p), "tiny-plan.yaml");
}

}  // namespace ptdp::testing_executor
