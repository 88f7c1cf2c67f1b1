#include "simulator/layer_work.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/limits.h"

namespace ptdp {
namespace {

// Sizes shared by the three parts, per GPU. Names follow the header's notation.
struct Dims {
  double s, b, h, T, Tn, e, g_bytes;  // g_bytes: bytes of a main-gradient element
  int64_t t;
  int cp;  // context-parallel size (s is the local s / cp)
  CpComm cp_comm;
  bool sp;
  double a_t, g_t, d;  // query heads, key/value groups per GPU, kv_channels
  double f_t;          // FFN width per GPU (one branch)
  double fc1_t;        // first MLP linear's output width per GPU (2 f_t with SwiGLU)
  bool bias, swiglu, rope;
  bool flash;              // the core attention is one flash-style kernel
  bool fused_softmax;      // unfused attention: Megatron's fused scale-mask-softmax kernel applies
  bool fp8;                // this layer's linears run in FP8
  bool current_scaling;    // FP8 casts need an amax pass first (tensorwise, blockwise)
  bool tp_overlap;         // --tp-comm-overlap (with sequence parallelism)
  double mask;             // bytes of a hidden-dropout mask element: 1, or 0 without dropout
  bool attention_dropout;  // unfused attention: a dropout kernel and mask on the probabilities
  // A MoE layer (MakeDims' moe_layer): experts per GPU, top-k, an expert's width per GPU
  // (and its fc1's), the tokens the GPU's experts take (the busiest rank's: with the load
  // imbalance, capped by the capacity factor), per expert, the shared experts' width per GPU.
  bool moe;
  double E_l, k, f_e, fc1_e, R, m_e, f_s, fc1_s, imbalance;
  // Multi-head latent attention: the query latent (0: none), the key/value latent, per head the
  // query / key width without and with the rotary part, the value width. Then d is the mean of
  // the query/key and value head widths (the attention kernel's FLOPs and bytes) and g_t = a_t.
  bool mla;
  double q_lora, kv_lora, qk, rope_d, v_d;
  int ep, etp;
  MoeDispatcher dispatcher;
  ExpertSpread spread;  // the router's choice, for the flex dispatcher's de-duplicated copies
};

Dims MakeDims(const ModelSpec& m, const ParallelConfig& p, Precision precision,
              const CostOptions& options, bool fp8_layer, Fp8Recipe recipe = Fp8Recipe::kDelayed,
              bool moe_layer = false) {
  PTDP_CHECK(p.tp >= 1 && m.num_attention_heads % p.tp == 0);
  Dims d{};
  d.t = p.tp;
  d.cp = p.cp;
  d.cp_comm = p.cp_comm;
  d.sp = p.sequence_parallel && p.tp > 1;
  d.s = static_cast<double>(m.seq_length) / p.cp;
  d.b = p.micro_batch_size;
  d.h = m.hidden_size;
  d.T = d.s * d.b;
  d.Tn = d.sp ? d.T / p.tp : d.T;
  d.e = BytesPerElement(precision);
  d.g_bytes = GradientBytes(precision, options);
  d.a_t = static_cast<double>(m.num_attention_heads) / p.tp;
  // Megatron requires g % t == 0 or t % g == 0; with t > g each GPU holds one group (replicated).
  d.g_t = std::max(1.0, static_cast<double>(m.num_query_groups) / p.tp);
  d.d = m.kv_channels;
  d.f_t = static_cast<double>(m.ffn_hidden_size) / p.tp;
  d.swiglu = m.activation == Activation::kSwiglu;
  d.fc1_t = d.swiglu ? 2 * d.f_t : d.f_t;
  d.bias = m.add_bias_linear;
  d.rope = m.position_embedding == PositionEmbedding::kRope;
  d.flash = FlashAttention(precision, options, p);
  // FusedScaleMaskSoftmax.is_kernel_available (Megatron-LM megatron/core/fusions/
  // fused_softmax.py; Megatron-DeepSpeed megatron/model/fused_softmax.py): 16 < sk <= limit,
  // sq and sk multiples of 4, and b x (heads per GPU) a multiple of 4 (the kernel's batches per
  // block for sk > 128).
  const int64_t attn_batches = int64_t{p.micro_batch_size} * (m.num_attention_heads / p.tp);
  d.fused_softmax = m.seq_length > 16 && m.seq_length <= options.fused_softmax_max_seq_length &&
                    m.seq_length % 4 == 0 && attn_batches % 4 == 0;
  d.fp8 = fp8_layer;
  d.current_scaling = fp8_layer && recipe != Fp8Recipe::kDelayed;
  d.tp_overlap = options.tp_comm_overlap && d.sp;
  d.mask = m.hidden_dropout > 0 ? 1 : 0;
  d.attention_dropout = m.attention_dropout > 0;
  d.mla = m.multi_latent_attention;
  if (d.mla) {
    d.q_lora = m.q_lora_rank;
    d.kv_lora = m.kv_lora_rank;
    d.qk = m.qk_head_dim;
    d.rope_d = m.qk_pos_emb_head_dim;
    d.v_d = m.v_head_dim;
    d.d = (d.qk + d.rope_d + d.v_d) / 2;
    d.g_t = d.a_t;
  }
  d.moe = moe_layer && m.moe();
  if (d.moe) {
    d.ep = p.ep;
    d.etp = p.expert_tp();
    d.E_l = static_cast<double>(m.num_experts) / p.ep;
    d.k = m.moe_router_topk;
    d.f_e = static_cast<double>(m.moe_ffn_hidden_size) / d.etp;
    d.fc1_e = d.swiglu ? 2 * d.f_e : d.f_e;
    d.imbalance = options.moe_load_imbalance;
    if (m.moe_expert_capacity_factor > 0) {
      d.imbalance = std::min(d.imbalance, m.moe_expert_capacity_factor);
    }
    // Each GPU routes its T_n tokens; the expert tensor-parallel group gathers its ranks'.
    d.R = d.Tn * d.k * d.etp * d.imbalance;
    d.m_e = d.R / d.E_l;
    d.f_s = static_cast<double>(m.moe_shared_expert_intermediate_size) / p.tp;
    d.fc1_s = d.swiglu ? 2 * d.f_s : d.f_s;
    d.dispatcher = options.moe_token_dispatcher;
    d.spread = {m.num_experts, m.moe_router_topk, m.moe_router_num_groups, m.moe_router_group_topk};
  }
  return d;
}

int64_t I(double x) { return static_cast<int64_t>(x + 0.5); }

Work Memory(const char* name, double bytes) {
  return {name, WorkKind::kMemory, false, false, {}, 0, bytes};
}

// C[m x n] = A[m x k] B[k x n], `batch` times: operands of `in` bytes per element, result of
// `out`; on the FP8 units when `fp8`.
Work Gemm(const char* name, double m, double n, double k, double batch, double in, double out,
          bool fp8 = false) {
  const GemmShape shape{I(m), I(n), I(k), I(batch)};
  return {name,
          WorkKind::kGemm,
          fp8,
          false,
          shape,
          shape.flops(),
          batch * (in * (m * k + k * n) + out * m * n)};
}
Work Gemm(const char* name, double m, double n, double k, double batch, double e) {
  return Gemm(name, m, n, k, batch, e, e);
}

// A linear layer's GEMM: 16-bit operands, or FP8 operands (1 byte) with a 16-bit result.
Work Linear(const char* name, double m, double n, double k, const Dims& d) {
  return Gemm(name, m, n, k, 1, d.fp8 ? 1 : d.e, d.e, d.fp8);
}

// Casting `elements` 16-bit values to FP8 with the transpose Transformer Engine keeps for the
// other GEMM that needs the tensor (read e, write 1 + 1); current scaling reads the tensor once
// more for its amax first.
void AddCast(PassWork& pass, const char* name, double elements, const Dims& d) {
  pass.Add(Memory(name, elements * ((d.current_scaling ? 2 : 1) * d.e + 2)));
}

// The weight-gradient GEMM dW[m x n] = X^T dY summed over k = T tokens, plus the accumulation
// into the main gradient: fused into the GEMM's epilogue (read and write the g-byte main
// gradient) or as a separate kernel (read the e-byte gradient and the main gradient, write it).
void AddWeightGrad(PassWork& pass, const char* name, double m, double n, double k, const Dims& d,
                   const CostOptions& options) {
  Work w = Linear(name, m, n, k, d);
  if (options.gradient_accumulation_fusion) {
    w.bytes += m * n * (2 * d.g_bytes - d.e);  // C is read and written in g bytes, not written in e
    pass.Add(w);
  } else {
    pass.Add(w);
    pass.Add(Memory("main-grad accumulate", m * n * (d.e + 2 * d.g_bytes)));
  }
}

// Bias gradient: a reduction of the output gradient over the tokens, accumulated like weights.
void AddBiasGrad(PassWork& pass, const char* name, double tokens, double width, const Dims& d) {
  if (d.bias) pass.Add(Memory(name, tokens * width * d.e + width * 2 * d.g_bytes));
}

// A norm over `tokens` x h: the forward reads x and writes y; the backward reads x and dy and
// writes dx (B), and reads x and dy again for the scale/shift gradients (W). With FP8 and
// delayed scaling the norm writes the next linear's FP8 input and its transpose itself
// (Transformer Engine's LayerNormLinear); otherwise a cast follows it.
void AddNormForward(PassWork& f, const char* name, const Dims& d, double tokens) {
  f.Add(Memory(name, tokens * d.h * (d.e + (d.fp8 && !d.current_scaling ? 2 : d.e))));
}
void AddNormBackward(PassWork& b, PassWork& w, const char* name, const Dims& d, double tokens) {
  b.Add(Memory(name, 3 * tokens * d.h * d.e));
  w.Add(Memory(name, 2 * tokens * d.h * d.e));
}

// A sequence-parallel all-gather of a linear's input (FP8 bytes when the linear is FP8).
void AddInputAllGather(PassWork& f, const char* name, const Dims& d) {
  if (d.sp) f.Add(CommWork{name, Collective::kAllGather, d.T * d.h * (d.fp8 ? 1 : d.e)});
}

// What a tensor-parallel collective does around its GEMM (OverlapLast).
enum class TpRole { kGatherBefore, kReduceAfterForward, kReduceInputGrad };

// Marks the last collective of `pass` as pipelined with kernel `work` (--tp-comm-overlap), the
// way Transformer Engine's userbuffers run it on H100 (Megatron-Bridge's configurations, cited
// at TpOverlap): an all-gather before a GEMM (qkv and fc1 forward, projection and fc2 input
// gradients) by ring exchange; the reduce-scatter after the projection's and fc2's forward GEMM
// pipelined in 4 chunks beside `sms` SMs of reduce-scatter kernels in bf16 (24 and 16), by ring
// exchange in FP8; a column-parallel linear's input-gradient reduce-scatter in bulk beside its
// weight-gradient GEMM (24 SMs for qkv, 4 for fc1), timed here beside the input-gradient GEMM of
// the same size.
void OverlapLast(PassWork& pass, int work, const Dims& d, TpRole role, int sms = 16) {
  if (!d.tp_overlap || pass.num_comm == 0) return;
  const int i = pass.num_comm - 1;
  pass.overlap_with[i] = static_cast<int8_t>(work);
  const auto ring = [&] {
    pass.overlap_kind[i] = TpOverlap::kRing;
    pass.overlap_parts[i] = static_cast<int8_t>(std::min<int64_t>(d.t, 64));
  };
  switch (role) {
    case TpRole::kGatherBefore:
      ring();
      return;
    case TpRole::kReduceAfterForward:
      if (d.fp8) {
        ring();
      } else {
        pass.overlap_kind[i] = TpOverlap::kPipeline;
        pass.overlap_parts[i] = 4;
        pass.overlap_sms[i] = static_cast<int8_t>(sms);
      }
      return;
    case TpRole::kReduceInputGrad:
      pass.overlap_kind[i] = TpOverlap::kBulk;
      pass.overlap_sms[i] = static_cast<int8_t>(sms);
      return;
  }
}

// Flash-style attention kernels (forward; backward with the recomputed scores). FLOPs as the
// kernels' benchmarks count them: 4 s^2 d per head forward, halved by the causal mask; the
// backward 2.5 x. Bytes: Q, K, V (grouped, not repeated), the output and the fp32 softmax
// statistics; the backward also reads the output gradient and writes dQ, dK, dV. `seq` is the
// queries' (and keys') length, `heads` the heads per GPU, `share` the part of the causal s x s
// work the kernel does (1 / cp per step of ring attention), `calls` its launches.
Work FlashKernel(const Dims& d, bool backward, double seq, double heads_per_gpu, double groups,
                 double share, const char* name) {
  const double heads = d.b * heads_per_gpu, tokens = seq * d.b;
  const double qkv = d.e * tokens * d.d * (heads_per_gpu + 2 * groups);
  const double out = d.e * tokens * d.d * heads_per_gpu;
  Work w{name,
         backward ? WorkKind::kAttentionBackward : WorkKind::kAttentionForward,
         false,
         true,
         {I(seq), I(seq), I(d.d), I(heads)},
         2 * seq * seq * d.d * heads * share * (backward ? 2.5 : 1),
         qkv + out + 4 * heads * seq};
  if (backward) w.bytes = 2 * w.bytes + out;  // read Q K V O dO stats, write dQ dK dV
  return w;
}

Work FlashForward(const Dims& d) {
  return FlashKernel(d, false, d.s, d.a_t, d.g_t, 1, "flash attention");
}
Work FlashBackward(const Dims& d) {
  return FlashKernel(d, true, d.s, d.a_t, d.g_t, 1, "flash attention backward");
}

// The core attention of a context-parallel layer (the header's list), forward or backward.
void AddContextParallelAttention(PassWork& pass, const Dims& d, bool backward) {
  const double cp = d.cp;
  const double kv = 2 * d.T * d.g_t * d.d * d.e;  // the local K and V
  const double qkv = d.T * d.d * (d.a_t + 2 * d.g_t) * d.e, out = d.T * d.d * d.a_t * d.e;
  switch (d.cp_comm) {
    case CpComm::kP2p: {
      // cp steps of 2 (s/cp)^2 d FLOPs per head (d.s is s / cp here): the diagonal block with
      // the causal mask, or, thanks to the 2 cp chunks, half of an off-diagonal block; in all
      // the causal total over cp.
      Work steps = FlashKernel(d, backward, d.s, d.a_t, d.g_t, 1,
                               backward ? "ring attention backward steps" : "ring attention steps");
      Work last = steps;
      last.name = backward ? "ring attention backward last step" : "ring attention last step";
      steps.flops *= cp - 1;
      steps.bytes *= cp - 1;
      pass.Add(steps);
      pass.Add(CommWork{backward ? "cp ring k v and their grads" : "cp ring k v",
                        Collective::kSendRecv, backward ? 2 * kv : kv, CommGroup::kCp,
                        static_cast<int>(cp) - 1});
      pass.overlap_with[pass.num_comm - 1] = static_cast<int8_t>(pass.num_work - 1);
      pass.Add(last);
      // Each step's partial output (and statistics) merged into the fp32 running output.
      if (!backward)
        pass.Add(Memory("ring attention output correction", cp * out / d.e * (d.e + 8)));
      return;
    }
    case CpComm::kA2a:
      // Trade s / cp tokens of a_t heads for s tokens of a_t / cp heads, and back.
      pass.Add(CommWork{backward ? "cp all-to-all output grad" : "cp all-to-all q k v",
                        Collective::kAllToAll, backward ? out : qkv, CommGroup::kCp});
      pass.Add(FlashKernel(d, backward, d.s * cp, d.a_t / cp, d.g_t / cp, 1,
                           backward ? "flash attention backward" : "flash attention"));
      pass.Add(CommWork{backward ? "cp all-to-all q k v grads" : "cp all-to-all output",
                        Collective::kAllToAll, backward ? qkv : out, CommGroup::kCp});
      return;
    case CpComm::kAllGather:
      pass.Add(CommWork{"cp all-gather k v", Collective::kAllGather, kv * cp, CommGroup::kCp});
      pass.Add(FlashKernel(d, backward, d.s, d.a_t, d.g_t, cp,
                           backward ? "flash attention backward" : "flash attention"));
      if (backward) {
        pass.Add(CommWork{"cp reduce-scatter k v grads", Collective::kReduceScatter, kv * cp,
                          CommGroup::kCp});
      }
      return;
  }
}

// Marks the kernels added to `pass` from index `first` on as the core attention's.
void MarkCoreAttention(PassWork& pass, int first) {
  for (int i = first; i < pass.num_work; ++i) pass.work[i].core_attention = true;
}

// The core attention forward for one micro-batch: the flash-style kernel, or Megatron's unfused
// path (Q K^T, softmax, dropout, x V).
void AddCoreAttentionForward(PassWork& f, const Dims& d) {
  if (d.cp > 1) {
    PTDP_CHECK(d.flash);  // the rules refuse context parallelism without it
    AddContextParallelAttention(f, d, false);
    return;
  }
  if (d.flash) {
    f.Add(FlashForward(d));
    return;
  }
  const int first = f.num_work;
  const double heads = d.b * d.a_t, s2 = d.s * d.s * heads;
  if (d.a_t != d.g_t) {
    // Megatron repeats each key/value group for its heads before the batched GEMMs.
    f.Add(Memory("gqa expand k v", 2 * d.T * d.d * (d.g_t + d.a_t) * d.e));
  }
  f.Add(Gemm("attention scores q k^t", d.s, d.s, d.d, heads, d.e));
  if (d.fused_softmax) {
    f.Add(Memory("scale mask softmax", 2 * s2 * d.e));
  } else {
    // forward_torch_softmax in fp32: input.float(), * scale, masked_fill_, softmax, .half().
    f.Add(Memory("softmax input to fp32", s2 * (d.e + 4)));
    f.Add(Memory("softmax scale", 8 * s2));
    f.Add(Memory("causal mask fill", 8 * s2));
    f.Add(Memory("softmax", 8 * s2));
    f.Add(Memory("softmax output to fp16", s2 * (4 + d.e)));
  }
  if (d.attention_dropout) f.Add(Memory("attention dropout", s2 * (2 * d.e + 1)));
  f.Add(Gemm("attention probs x v", d.s, d.d, d.s, heads, d.e));
  MarkCoreAttention(f, first);
}

void AddCoreAttentionBackward(PassWork& b, const Dims& d) {
  if (d.cp > 1) {
    PTDP_CHECK(d.flash);
    AddContextParallelAttention(b, d, true);
    return;
  }
  if (d.flash) {
    b.Add(FlashBackward(d));
    return;
  }
  const int first = b.num_work;
  const double heads = d.b * d.a_t, s2 = d.s * d.s * heads;
  b.Add(Gemm("attention probs grad", d.s, d.s, d.d, heads, d.e));
  b.Add(Gemm("attention v grad", d.s, d.d, d.s, heads, d.e));
  if (d.attention_dropout) b.Add(Memory("attention dropout backward", s2 * (2 * d.e + 1)));
  if (d.fused_softmax) {
    b.Add(Memory("softmax backward", 3 * s2 * d.e));
  } else {
    // The autograd chain of the unfused forward, in fp32.
    b.Add(Memory("softmax grad to fp32", s2 * (d.e + 4)));
    b.Add(Memory("softmax backward", 12 * s2));
    b.Add(Memory("causal mask fill backward", 8 * s2));
    b.Add(Memory("softmax scale backward", 8 * s2));
    b.Add(Memory("softmax grad to fp16", s2 * (4 + d.e)));
  }
  b.Add(Gemm("attention q grad", d.s, d.d, d.s, heads, d.e));
  b.Add(Gemm("attention k grad", d.s, d.d, d.s, heads, d.e));
  if (d.a_t != d.g_t) b.Add(Memory("gqa reduce k v grads", 2 * d.T * d.d * (d.g_t + d.a_t) * d.e));
  MarkCoreAttention(b, first);
}

// The experts' grouped GEMM: `groups` GEMMs of m x n x k, FP8 operands in an FP8 layer. One
// of m, n, k is the tokens per expert, a mean that falls below one token when the experts
// outnumber the tokens' copies (DeepSeek-V3's 256 experts at a high tp x cp): then only that
// many experts run, one token each (the same FLOPs; never a GEMM of no rows).
Work GroupedLinear(const char* name, double m, double n, double k, double groups, const Dims& d) {
  const double fewest = std::min({m, n, k});
  if (fewest < 1) {
    groups = std::max(groups * fewest, 1.0);
    m = std::max(m, 1.0), n = std::max(n, 1.0), k = std::max(k, 1.0);
  }
  Work w = Gemm(name, m, n, k, groups, d.fp8 ? 1 : d.e, d.e, d.fp8);
  w.kind = WorkKind::kGroupedGemm;
  return w;
}

// A dense MLP of f_t (its fc1 fc1_t) per GPU on the T tokens, with its sequence-parallel gather
// and tensor-parallel reduction: a dense layer's MLP, or a MoE layer's shared experts (`shared`).
void AddDenseMlpForward(PassWork& f, const Dims& d, double f_t, double fc1_t, bool shared) {
  const double act = d.T * d.h * d.e;
  if (d.fp8 && d.current_scaling) {
    AddCast(f, shared ? "shared fc1 input cast fp8" : "fc1 input cast fp8", d.Tn * d.h, d);
  }
  AddInputAllGather(f, shared ? "sp all-gather before shared fc1" : "sp all-gather before fc1", d);
  f.Add(Linear(shared ? "shared fc1" : "fc1", d.T, fc1_t, d.h, d));
  OverlapLast(f, f.num_work - 1, d, TpRole::kGatherBefore);
  f.Add(Memory(shared     ? "shared experts activation"
               : d.swiglu ? "swiglu"
                          : "bias gelu",
               (fc1_t + f_t) * d.T * d.e));
  if (d.fp8) AddCast(f, shared ? "shared fc2 input cast fp8" : "fc2 input cast fp8", d.T * f_t, d);
  f.Add(Linear(shared ? "shared fc2" : "fc2", d.T, d.h, f_t, d));
  if (d.t > 1) {
    f.Add(CommWork{shared ? "tp reduce after shared fc2" : "tp reduce after fc2",
                   d.sp ? Collective::kReduceScatter : Collective::kAllReduce, act});
    OverlapLast(f, f.num_work - 1, d, TpRole::kReduceAfterForward, 16);
  }
}

// Its input gradient; returns the index of fc1's input-gradient reduction in b.comm (-1: none).
int AddDenseMlpBackward(PassWork& b, const Dims& d, double f_t, double fc1_t, bool shared) {
  const double act = d.T * d.h * d.e;
  if (d.sp) {
    b.Add(
        CommWork{shared ? "sp all-gather shared fc2 output grad" : "sp all-gather fc2 output grad",
                 Collective::kAllGather, act});
  }
  if (d.fp8)
    AddCast(b, shared ? "shared fc2 output grad cast fp8" : "fc2 output grad cast fp8", d.T * d.h,
            d);
  b.Add(Linear(shared ? "shared fc2 dgrad" : "fc2 dgrad", d.T, f_t, d.h, d));
  if (d.sp) OverlapLast(b, b.num_work - 1, d, TpRole::kGatherBefore);
  b.Add(Memory(shared     ? "shared experts activation backward"
               : d.swiglu ? "swiglu backward"
                          : "bias gelu backward",
               (f_t + 2 * fc1_t) * d.T * d.e));
  if (d.fp8)
    AddCast(b, shared ? "shared fc1 output grad cast fp8" : "fc1 output grad cast fp8", d.T * fc1_t,
            d);
  b.Add(Linear(shared ? "shared fc1 dgrad" : "fc1 dgrad", d.T, d.h, fc1_t, d));
  if (d.t == 1) return -1;
  const int comm = b.num_comm;
  b.Add(CommWork{shared ? "tp reduce shared fc1 input grad" : "tp reduce fc1 input grad",
                 d.sp ? Collective::kReduceScatter : Collective::kAllReduce, act});
  OverlapLast(b, b.num_work - 1, d, TpRole::kReduceInputGrad, 4);
  return comm;
}

// Its weight gradients; returns [begin, end) of fc1's weight-gradient kernels in w.work.
std::pair<int, int> AddDenseMlpWeightGrad(PassWork& w, const Dims& d, double f_t, double fc1_t,
                                          bool shared, const CostOptions& options) {
  AddWeightGrad(w, shared ? "shared fc2 wgrad" : "fc2 wgrad", d.h, f_t, d.T, d, options);
  AddBiasGrad(w, "fc2 bias grad", d.Tn, d.h, d);
  const int begin = w.num_work;
  AddWeightGrad(w, shared ? "shared fc1 wgrad" : "fc1 wgrad", fc1_t, d.h, d.T, d, options);
  const int end = w.num_work;
  AddBiasGrad(w, "fc1 bias grad", d.T, fc1_t, d);
  return {begin, end};
}

// The names of one pass's way to the experts or back: the gradients of the backward travel
// the forward's tensors' way in reverse.
struct ExpertRoute {
  const char* gather;      // the all-gather dispatcher's collective over EP x ETP
  const char* all_to_all;  // over EP
  const char* etp;         // over expert TP
  const char* shuffle;     // the sort by expert (to) or its undoing (back)
};

// The exchange over EP: the all-to-all dispatcher sends each of a token's k copies (the busiest
// rank receiving `imbalance` times the mean); the flex dispatcher one copy per node and GPU its
// experts touch.
CommWork EpExchange(const char* name, const Dims& d) {
  if (d.dispatcher == MoeDispatcher::kFlex) {
    CommWork w{name, Collective::kAllToAll, d.Tn * d.h * d.e * d.imbalance, CommGroup::kEp};
    w.spread = d.spread;
    return w;
  }
  return {name, Collective::kAllToAll, d.Tn * d.k * d.h * d.e * d.imbalance, CommGroup::kEp};
}

// To the experts' ranks: every token of the EP x ETP group to every rank with the all-gather
// dispatcher; else each rank's k copies all-to-all over EP, gathered over ETP and sorted by
// expert.
void AddToExperts(PassWork& p, const Dims& d, const ExpertRoute& n) {
  if (d.dispatcher == MoeDispatcher::kAllGather) {
    p.Add(CommWork{n.gather, Collective::kAllGather, d.Tn * d.h * d.e * d.ep * d.etp,
                   CommGroup::kEpEtp});
    return;
  }
  const double tok = d.Tn * d.k;
  p.Add(EpExchange(n.all_to_all, d));
  if (d.etp > 1) {
    p.Add(CommWork{n.etp, Collective::kAllGather, tok * d.etp * d.h * d.e * d.imbalance,
                   CommGroup::kEtp});
  }
  if (d.ep > 1 || d.etp > 1) p.Add(Memory(n.shuffle, 2 * d.R * d.h * d.e));
}

// Back from the experts' ranks, the reverse of AddToExperts.
void AddFromExperts(PassWork& p, const Dims& d, const ExpertRoute& n) {
  if (d.dispatcher == MoeDispatcher::kAllGather) {
    p.Add(CommWork{n.gather, Collective::kReduceScatter, d.Tn * d.h * d.e * d.ep * d.etp,
                   CommGroup::kEpEtp});
    return;
  }
  const double tok = d.Tn * d.k;
  if (d.ep > 1 || d.etp > 1) p.Add(Memory(n.shuffle, 2 * d.R * d.h * d.e));
  if (d.etp > 1) {
    p.Add(CommWork{n.etp, Collective::kReduceScatter, tok * d.etp * d.h * d.e * d.imbalance,
                   CommGroup::kEtp});
  }
  p.Add(EpExchange(n.all_to_all, d));
}

// A MoE layer's routed experts (Megatron's MoELayer with the token dispatcher of
// options.moe_token_dispatcher), on the GPU's T_n tokens after the second norm: the router (a
// replicated h x E linear, then softmax / top-k on fp32 scores), the dispatch of each token's k
// copies to its experts' ranks, the experts' grouped GEMMs on the R tokens the busiest rank
// takes, and the combine back with the routing weights. All-to-all bytes are what one GPU
// sends (its T_n k copies, the busiest rank receiving `imbalance` times the mean).
void AddMoeForward(PassWork& f, const Dims& d) {
  const double tok = d.Tn * d.k, experts = d.E_l * d.ep;
  const bool all_gather = d.dispatcher == MoeDispatcher::kAllGather;
  f.Add(Gemm("router", d.Tn, experts, d.h, 1, d.e));
  f.Add(Memory("router softmax top-k", d.Tn * experts * (d.e + 8) + tok * 8));
  if (!all_gather) f.Add(Memory("permute tokens", 2 * tok * d.h * d.e));
  // Every dispatcher needs the tokens per expert on the host (the all-to-all's splits, the
  // grouped GEMM's m_splits): the host waits for the GPU here.
  f.moe_host = true;
  if (f.host_sync_at < 0) f.host_sync_at = static_cast<int8_t>(f.num_work);
  AddToExperts(f, d,
               {"moe all-gather tokens", "ep all-to-all dispatch",
                "etp all-gather dispatched tokens", "sort tokens by expert"});
  if (all_gather) {
    // Each rank keeps its experts' copies of the gathered tokens.
    f.Add(
        Memory("select local experts' tokens", d.Tn * d.ep * d.etp * d.h * d.e + d.R * d.h * d.e));
  }
  if (d.fp8) AddCast(f, "experts fc1 input cast fp8", d.R * d.h, d);
  f.Add(GroupedLinear("experts fc1", d.m_e, d.fc1_e, d.h, d.E_l, d));
  f.Add(Memory("experts activation", (d.fc1_e + d.f_e) * d.R * d.e));
  if (d.fp8) AddCast(f, "experts fc2 input cast fp8", d.R * d.f_e, d);
  f.Add(GroupedLinear("experts fc2", d.m_e, d.h, d.f_e, d.E_l, d));
  AddFromExperts(f, d,
                 {"moe reduce-scatter outputs", "ep all-to-all combine",
                  "etp reduce-scatter expert outputs", "unsort tokens"});
  f.Add(Memory("unpermute and weight", tok * d.h * d.e + d.Tn * d.h * d.e + tok * 4));
}

void AddMoeBackward(PassWork& b, const Dims& d) {
  const double tok = d.Tn * d.k, experts = d.E_l * d.ep;
  b.moe_host = true;
  b.Add(Memory("unpermute backward", tok * d.h * d.e + d.Tn * d.h * d.e + tok * 4));
  AddToExperts(b, d,
               {"moe all-gather output grads", "ep all-to-all combine backward",
                "etp all-gather output grads", "sort output grads by expert"});
  if (d.fp8) AddCast(b, "experts fc2 output grad cast fp8", d.R * d.h, d);
  b.Add(GroupedLinear("experts fc2 dgrad", d.m_e, d.f_e, d.h, d.E_l, d));
  b.Add(Memory("experts activation backward", (d.f_e + 2 * d.fc1_e) * d.R * d.e));
  if (d.fp8) AddCast(b, "experts fc1 output grad cast fp8", d.R * d.fc1_e, d);
  b.Add(GroupedLinear("experts fc1 dgrad", d.m_e, d.h, d.fc1_e, d.E_l, d));
  AddFromExperts(b, d,
                 {"moe reduce-scatter input grads", "ep all-to-all dispatch backward",
                  "etp reduce-scatter input grads", "unsort input grads"});
  if (d.dispatcher != MoeDispatcher::kAllGather) {
    b.Add(Memory("permute backward", 2 * tok * d.h * d.e));
  }
  b.Add(Memory("router softmax top-k backward", d.Tn * experts * (d.e + 8)));
  b.Add(Gemm("router dgrad", d.Tn, d.h, experts, 1, d.e));
}

void AddMoeWeightGrad(PassWork& w, const Dims& d, const CostOptions& options) {
  const double experts = d.E_l * d.ep;
  // dW of each expert over its m_e tokens, accumulated into the main gradients as the dense
  // linears' are.
  const double accumulate =
      options.gradient_accumulation_fusion ? 2 * d.g_bytes - d.e : d.e + 2 * d.g_bytes;
  Work fc2 = GroupedLinear("experts fc2 wgrad", d.h, d.f_e, d.m_e, d.E_l, d);
  fc2.bytes += d.E_l * d.h * d.f_e * accumulate;
  w.Add(fc2);
  Work fc1 = GroupedLinear("experts fc1 wgrad", d.fc1_e, d.h, d.m_e, d.E_l, d);
  fc1.bytes += d.E_l * d.fc1_e * d.h * accumulate;
  w.Add(fc1);
  Work router = Gemm("router wgrad", experts, d.h, d.Tn, 1, d.e);
  router.bytes += experts * d.h * accumulate;
  w.Add(router);
}

// Multi-head latent attention's projections (Megatron's MLASelfAttention with Transformer
// Engine): the down projections (to the query latent, and to the key/value latent with the
// shared rotary key) are replicated over TP and run on the GPU's T_n tokens, each latent
// normed; with sequence parallelism the latents (not the h-wide input) are all-gathered before
// the column-parallel up projections (a_t heads each); the rotary parts rotated.
// MLA's up projections from the latents, with the rotary part (what the mla_up_proj recompute
// module re-runs).
void AddMlaUpForward(PassWork& f, const Dims& d) {
  const double q_width = d.a_t * (d.qk + d.rope_d);
  f.Add(Linear(d.q_lora > 0 ? "q up" : "q", d.T, q_width, d.q_lora > 0 ? d.q_lora : d.h, d));
  f.Add(Linear("kv up", d.T, d.a_t * (d.qk + d.v_d), d.kv_lora, d));
  if (d.rope) f.Add(Memory("rotary q k", 2 * d.T * (d.a_t + 1) * d.rope_d * d.e));
  // The rotary key broadcast to every head and joined to the keys.
  f.Add(Memory("mla key concat", 2 * d.T * d.a_t * (d.qk + d.rope_d) * d.e));
}

void AddMlaForward(PassWork& f, const Dims& d) {
  if (d.fp8 && d.current_scaling) AddCast(f, "mla down input cast fp8", d.Tn * d.h, d);
  if (d.q_lora > 0) {
    f.Add(Linear("q down", d.Tn, d.q_lora, d.h, d));
    f.Add(Memory("q latent norm", 2 * d.Tn * d.q_lora * d.e));
  }
  f.Add(Linear("kv down", d.Tn, d.kv_lora + d.rope_d, d.h, d));
  f.Add(Memory("kv latent norm", 2 * d.Tn * d.kv_lora * d.e));
  if (d.sp) {
    f.Add(CommWork{"sp all-gather q latent", Collective::kAllGather,
                   d.T * (d.q_lora > 0 ? d.q_lora : d.h) * d.e});
    f.Add(CommWork{"sp all-gather kv latent", Collective::kAllGather,
                   d.T * (d.kv_lora + d.rope_d) * d.e});
  }
  AddMlaUpForward(f, d);
}

// Its input gradient; returns the index of the latents' first input-gradient reduction
// (-1: none).
int AddMlaBackward(PassWork& b, const Dims& d) {
  const double q_width = d.a_t * (d.qk + d.rope_d);
  b.Add(Memory("mla key concat backward", 2 * d.T * d.a_t * (d.qk + d.rope_d) * d.e));
  if (d.rope) b.Add(Memory("rotary backward", 2 * d.T * (d.a_t + 1) * d.rope_d * d.e));
  b.Add(Linear("kv up dgrad", d.T, d.kv_lora, d.a_t * (d.qk + d.v_d), d));
  b.Add(Linear(d.q_lora > 0 ? "q up dgrad" : "q dgrad", d.T, d.q_lora > 0 ? d.q_lora : d.h, q_width,
               d));
  // The up projections' input gradients are partial over the heads: reduce-scattered back to
  // the sequence shards (all-reduced without sequence parallelism).
  int comm = -1;
  if (d.t > 1) {
    const Collective c = d.sp ? Collective::kReduceScatter : Collective::kAllReduce;
    comm = b.num_comm;
    b.Add(CommWork{"tp reduce q latent grad", c, d.T * (d.q_lora > 0 ? d.q_lora : d.h) * d.e});
    b.Add(CommWork{"tp reduce kv latent grad", c, d.T * (d.kv_lora + d.rope_d) * d.e});
  }
  b.Add(Memory("kv latent norm backward", 3 * d.Tn * d.kv_lora * d.e));
  b.Add(Linear("kv down dgrad", d.Tn, d.h, d.kv_lora + d.rope_d, d));
  if (d.q_lora > 0) {
    b.Add(Memory("q latent norm backward", 3 * d.Tn * d.q_lora * d.e));
    b.Add(Linear("q down dgrad", d.Tn, d.h, d.q_lora, d));
    b.Add(Memory("mla input grads add", 3 * d.Tn * d.h * d.e));
  }
  return comm;
}

// Its weight gradients; returns [begin, end) of the up projections' kernels.
std::pair<int, int> AddMlaWeightGrad(PassWork& w, const Dims& d, const CostOptions& options) {
  const int begin = w.num_work;
  AddWeightGrad(w, "kv up wgrad", d.a_t * (d.qk + d.v_d), d.kv_lora, d.T, d, options);
  AddWeightGrad(w, d.q_lora > 0 ? "q up wgrad" : "q wgrad", d.a_t * (d.qk + d.rope_d),
                d.q_lora > 0 ? d.q_lora : d.h, d.T, d, options);
  const int end = w.num_work;
  AddWeightGrad(w, "kv down wgrad", d.kv_lora + d.rope_d, d.h, d.Tn, d, options);
  if (d.q_lora > 0) AddWeightGrad(w, "q down wgrad", d.q_lora, d.h, d.Tn, d, options);
  return {begin, end};
}

}  // namespace

bool FlashAttention(Precision precision, const CostOptions& options,
                    const ParallelConfig& parallel) {
  return FlashStyleAttention(precision, options) || parallel.cp > 1;
}

void PassWork::Append(const PassWork& other) {
  const int base = num_work;
  for (int i = 0; i < other.num_work; ++i) Add(other.work[i]);
  for (int i = 0; i < other.num_comm; ++i) {
    Add(other.comm[i]);
    comm_position[num_comm - 1] = static_cast<int8_t>(base + other.comm_position[i]);
    if (other.overlap_with[i] >= 0) {
      overlap_with[num_comm - 1] = static_cast<int8_t>(base + other.overlap_with[i]);
      overlap_kind[num_comm - 1] = other.overlap_kind[i];
      overlap_parts[num_comm - 1] = other.overlap_parts[i];
      overlap_sms[num_comm - 1] = other.overlap_sms[i];
    }
  }
  moe_host = moe_host || other.moe_host;
  if (host_sync_at < 0 && other.host_sync_at >= 0) {
    host_sync_at = static_cast<int8_t>(base + other.host_sync_at);
  }
}

double PassWork::flops() const {
  double sum = 0;
  for (int i = 0; i < num_work; ++i) sum += work[i].flops;
  return sum;
}

double PassWork::bytes() const {
  double sum = 0;
  for (int i = 0; i < num_work; ++i) sum += work[i].bytes;
  return sum;
}

namespace {

// A layer with an attention block and / or an MLP block (dense or MoE), each with its norm and
// bias-dropout-add (a transformer layer has both; a hybrid model's layers one): what its passes
// share besides its sizes.
struct Blocks {
  bool attention, mlp;  // the blocks it has
  double qkv_n;         // QKV output width per GPU
  double ctx;           // attention context width per GPU
  double act;           // one full activation [T, h], for the collectives
  // Sequence parallelism turns each all-reduce into an all-gather before the column-parallel
  // linear and a reduce-scatter after the row-parallel one (Korthikanti et al. 2022, Fig. 5).
  Collective after;
  bool separate_input_cast;  // the QKV input's FP8 cast is a kernel of its own, else fused
                             // into the norm
};

Blocks MakeBlocks(const Dims& d, LayerKind kind) {
  Blocks k;
  k.attention = HasAttention(kind);
  k.mlp = kind != LayerKind::kAttention;
  k.qkv_n = (d.a_t + 2 * d.g_t) * d.d;
  k.ctx = d.a_t * (d.mla ? d.v_d : d.d);
  k.act = d.T * d.h * d.e;
  k.after = d.sp ? Collective::kReduceScatter : Collective::kAllReduce;
  k.separate_input_cast = d.fp8 && d.current_scaling;
  return k;
}

// ---- Forward (F).
void AddBlocksForward(PassWork& f, const Dims& d, const Blocks& k) {
  if (k.attention) {
    AddNormForward(f, "norm 1", d, d.Tn);
    if (d.mla) {
      AddMlaForward(f, d);
    } else {
      if (k.separate_input_cast) AddCast(f, "qkv input cast fp8", d.Tn * d.h, d);
      AddInputAllGather(f, "sp all-gather before qkv", d);
      f.Add(Linear("qkv", d.T, k.qkv_n, d.h, d));
      OverlapLast(f, f.num_work - 1, d, TpRole::kGatherBefore);
      if (d.rope) f.Add(Memory("rotary q k", 2 * d.T * (d.a_t + d.g_t) * d.d * d.e));
    }
    AddCoreAttentionForward(f, d);
    if (!d.flash) f.Add(Memory("context permute", 2 * d.T * k.ctx * d.e));
    if (d.fp8) AddCast(f, "projection input cast fp8", d.T * k.ctx, d);
    f.Add(Linear("attention projection", d.T, d.h, k.ctx, d));
    if (d.t > 1) {
      f.Add(CommWork{"tp reduce after projection", k.after, k.act});
      OverlapLast(f, f.num_work - 1, d, TpRole::kReduceAfterForward, 24);
    }
    // bias-dropout-add: read the projection output and the residual, write the sum and the mask.
    f.Add(Memory("bias dropout add 1", d.Tn * d.h * (3 * d.e + d.mask)));
  }
  if (k.mlp) {
    AddNormForward(f, "norm 2", d, d.Tn);
    if (d.moe) {
      AddMoeForward(f, d);
      if (d.f_s > 0) AddDenseMlpForward(f, d, d.f_s, d.fc1_s, /*shared=*/true);
    } else {
      AddDenseMlpForward(f, d, d.f_t, d.fc1_t, /*shared=*/false);
    }
    f.Add(Memory("bias dropout add 2", d.Tn * d.h * (3 * d.e + d.mask)));
  }
}

// The input-gradient reductions of fc1 and QKV (-1: none), which may overlap their weight
// gradients (AsyncOverlap).
struct InputGradComms {
  int fc1 = -1, qkv = -1;
};

// ---- Input gradient (B), in backward order (the norms' weight gradients into `w`). The backward
// of a reduce-scatter is an all-gather and vice versa; the backward of the forward all-reduce
// after a row-parallel linear is the identity, the column-parallel linear's input gradient needs
// an all-reduce.
InputGradComms AddBlocksInputGrad(PassWork& b, PassWork& w, const Dims& d, const Blocks& k) {
  InputGradComms comms;
  if (k.mlp) {
    b.Add(Memory("bias dropout add 2 backward", d.Tn * d.h * (2 * d.e + d.mask)));
    if (d.moe) {
      if (d.f_s > 0) comms.fc1 = AddDenseMlpBackward(b, d, d.f_s, d.fc1_s, true);
      AddMoeBackward(b, d);
      if (d.f_s > 0) b.Add(Memory("shared and routed input grads add", 3 * d.Tn * d.h * d.e));
    } else {
      comms.fc1 = AddDenseMlpBackward(b, d, d.f_t, d.fc1_t, false);
    }
    AddNormBackward(b, w, "norm 2 backward", d, d.Tn);
    b.Add(Memory("residual grad add", 3 * d.Tn * d.h * d.e));
  }
  if (k.attention) {
    b.Add(Memory("bias dropout add 1 backward", d.Tn * d.h * (2 * d.e + d.mask)));
    if (d.sp) {
      b.Add(CommWork{"sp all-gather projection output grad", Collective::kAllGather, k.act});
    }
    if (d.fp8) AddCast(b, "projection output grad cast fp8", d.T * d.h, d);
    b.Add(Linear("attention projection dgrad", d.T, k.ctx, d.h, d));
    if (d.sp) OverlapLast(b, b.num_work - 1, d, TpRole::kGatherBefore);
    if (!d.flash) b.Add(Memory("context permute backward", 2 * d.T * k.ctx * d.e));
    AddCoreAttentionBackward(b, d);
    if (d.mla) {
      comms.qkv = AddMlaBackward(b, d);
    } else {
      if (d.rope) b.Add(Memory("rotary backward", 2 * d.T * (d.a_t + d.g_t) * d.d * d.e));
      if (d.fp8) AddCast(b, "qkv output grad cast fp8", d.T * k.qkv_n, d);
      b.Add(Linear("qkv dgrad", d.T, d.h, k.qkv_n, d));
      if (d.t > 1) {
        comms.qkv = b.num_comm;
        b.Add(CommWork{"tp reduce qkv input grad",
                       d.sp ? Collective::kReduceScatter : Collective::kAllReduce, k.act});
        OverlapLast(b, b.num_work - 1, d, TpRole::kReduceInputGrad, 24);
      }
    }
    AddNormBackward(b, w, "norm 1 backward", d, d.Tn);
    b.Add(Memory("residual grad add", 3 * d.Tn * d.h * d.e));
  }
  return comms;
}

// [begin, end) of fc1's and of QKV's (or MLA's up projections') weight-gradient kernels.
struct WeightGradSpans {
  std::pair<int, int> fc1{0, 0}, qkv{0, 0};
};

// ---- Weight gradient (W). With sequence parallelism Megatron all-gathers the norm outputs
// again for the QKV and fc1 weight gradients, asynchronously during the input-gradient GEMM;
// that traffic is taken as hidden and not timed.
WeightGradSpans AddBlocksWeightGrad(PassWork& w, const Dims& d, const Blocks& k,
                                    const CostOptions& options) {
  WeightGradSpans spans;
  if (k.mlp) {
    if (d.moe) {
      AddMoeWeightGrad(w, d, options);
      if (d.f_s > 0) spans.fc1 = AddDenseMlpWeightGrad(w, d, d.f_s, d.fc1_s, true, options);
    } else {
      spans.fc1 = AddDenseMlpWeightGrad(w, d, d.f_t, d.fc1_t, false, options);
    }
  }
  if (k.attention) {
    AddWeightGrad(w, "attention projection wgrad", d.h, k.ctx, d.T, d, options);
    AddBiasGrad(w, "projection bias grad", d.Tn, d.h, d);
    if (d.mla) {
      spans.qkv = AddMlaWeightGrad(w, d, options);
    } else {
      spans.qkv.first = w.num_work;
      AddWeightGrad(w, "qkv wgrad", k.qkv_n, d.h, d.T, d, options);
      spans.qkv.second = w.num_work;
      AddBiasGrad(w, "qkv bias grad", d.T, k.qkv_n, d);
    }
  }
  return spans;
}

// ---- Selective recomputation (Korthikanti et al. 2022, section 5): the modules of
// --recompute-modules re-run their forward before their backward (transformer_layer.py,
// moe_layer.py, multi_latent_attention.py checkpoints).
void AddBlocksSelectiveRecompute(PassWork& r, const ParallelConfig& p, const Dims& d,
                                 const Blocks& k) {
  const uint8_t modules = p.recompute_modules;
  if (modules & kRecomputeLayernorm) {
    if (k.attention) AddNormForward(r, "norm 1 recompute", d, d.Tn);
    if (k.mlp) AddNormForward(r, "norm 2 recompute", d, d.Tn);
  }
  if (k.attention) {
    if ((modules & kRecomputeMlaUpProj) && d.mla) AddMlaUpForward(r, d);
    if (modules & kRecomputeCoreAttn) AddCoreAttentionForward(r, d);
  }
  if (k.mlp && !d.moe) {
    if (modules & kRecomputeMlp) AddDenseMlpForward(r, d, d.f_t, d.fc1_t, /*shared=*/false);
  } else if (!k.mlp) {
    // A hybrid model's attention-only layer: nothing more.
  } else if (modules & kRecomputeMoe) {
    AddMoeForward(r, d);
    if (d.f_s > 0) AddDenseMlpForward(r, d, d.f_s, d.fc1_s, /*shared=*/true);
  } else {
    if (modules & kRecomputeMoeAct) {
      r.Add(Memory("experts activation recompute", (d.fc1_e + d.f_e) * d.R * d.e));
    }
    if ((modules & kRecomputeSharedExperts) && d.f_s > 0) {
      AddDenseMlpForward(r, d, d.f_s, d.fc1_s, /*shared=*/true);
    }
  }
}

LayerWork BlocksLayerWork(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                          const CostOptions& options, bool bf16_layer, Fp8Recipe fp8_recipe,
                          LayerKind kind) {
  const bool fp8 = precision == Precision::kFp8 && !bf16_layer;
  const Dims d = MakeDims(m, p, precision, options, fp8, fp8_recipe, HasExperts(kind));
  const Blocks blocks = MakeBlocks(d, kind);
  LayerWork lw;
  AddBlocksForward(lw.forward, d, blocks);
  const InputGradComms comms = AddBlocksInputGrad(lw.backward_input, lw.backward_weight, d, blocks);
  const WeightGradSpans wgrad = AddBlocksWeightGrad(lw.backward_weight, d, blocks, options);
  if (d.t > 1 && options.async_tensor_parallel_allreduce && !d.tp_overlap) {
    if (comms.fc1 >= 0) {
      lw.async_overlap[lw.num_async_overlap++] = {comms.fc1, wgrad.fc1.first, wgrad.fc1.second};
    }
    if (comms.qkv >= 0) {
      lw.async_overlap[lw.num_async_overlap++] = {comms.qkv, wgrad.qkv.first, wgrad.qkv.second};
    }
  }
  // ---- Recomputation (Korthikanti et al. 2022, section 5).
  if (p.recompute == Recompute::kFull) {
    lw.recompute = lw.forward;
  } else if (p.recompute == Recompute::kSelective) {
    AddBlocksSelectiveRecompute(lw.recompute, p, d, blocks);
  }
  const LayerParams params = LayerKindParams(m, p, kind);
  lw.parameters = params.total();
  lw.fp8_parameters = fp8 ? params.linear_weights : 0;
  return lw;
}

// A hybrid model's Mamba layer (the header's list), per GPU: its sizes besides Dims.
struct MambaSizes {
  double act;        // one full activation [T, h], for the collectives
  Collective after;  // the reduction after the row-parallel out_proj
  // Per GPU: heads, groups, d_inner and in_proj's output (z, x, B, C, dt).
  double heads, groups, inner, in_width;
  // What the scan sees: with context parallelism all s tokens of heads / cp heads, the groups
  // split likewise or, when fewer than cp, each replicated (mamba_context_parallel.py).
  double scan_tokens, conv_channels;
  SsdScan scan;
  GemmShape chunk_shape;
  double kernel;  // the causal conv1d's width
};

MambaSizes MakeMambaSizes(const ModelSpec& m, const ParallelConfig& p, const Dims& d) {
  MambaSizes s;
  s.act = d.T * d.h * d.e;
  s.after = d.sp ? Collective::kReduceScatter : Collective::kAllReduce;
  const double P = m.mamba_head_dim, N = m.mamba_state_dim;
  s.heads = static_cast<double>(m.mamba_num_heads) / p.tp;
  s.groups = static_cast<double>(m.mamba_num_groups) / p.tp;
  s.inner = s.heads * P;
  s.in_width = 2 * s.inner + 2 * s.groups * N + s.heads;
  const double cp = d.cp;
  s.scan_tokens = d.T * cp;
  const double scan_heads = s.heads / cp;
  const double scan_groups = std::max(1.0, s.groups / cp);
  s.conv_channels = scan_heads * P + 2 * scan_groups * N;
  const double chunks =
      std::ceil(static_cast<double>(m.seq_length) / kMambaChunkSize) * p.micro_batch_size;
  s.scan = SsdScanWork(s.scan_tokens, chunks, scan_heads, P, N, scan_groups, d.e);
  s.chunk_shape = {kMambaChunkSize, m.mamba_head_dim, m.mamba_state_dim, I(chunks * scan_heads)};
  s.kernel = m.mamba_conv_kernel;
  return s;
}

// ---- Forward.
void AddMambaForward(PassWork& f, const Dims& d, const MambaSizes& s) {
  AddNormForward(f, "norm", d, d.Tn);
  if (d.fp8 && d.current_scaling) AddCast(f, "in_proj input cast fp8", d.Tn * d.h, d);
  AddInputAllGather(f, "sp all-gather before in_proj", d);
  f.Add(Linear("mamba in_proj", d.T, s.in_width, d.h, d));
  OverlapLast(f, f.num_work - 1, d, TpRole::kGatherBefore);
  if (d.cp > 1) {
    f.Add(CommWork{"cp all-to-all z x b c dt", Collective::kAllToAll, d.T * s.in_width * d.e,
                   CommGroup::kCp});
  }
  // Depthwise causal conv1d + SiLU (causal_conv1d_fwd): read x B C, write them convolved.
  // (2 x kernel FLOPs per element: memory-bound, not counted as a matrix product.)
  f.Add(Memory("causal conv1d", 2 * s.scan_tokens * s.conv_channels * d.e));
  f.Add({"mamba ssd chunk scan", WorkKind::kScan, false, false, s.chunk_shape, s.scan.forward_flops,
         s.scan.forward_bytes});
  if (d.cp > 1) {
    f.Add(CommWork{"cp all-to-all y", Collective::kAllToAll, d.T * s.inner * d.e, CommGroup::kCp});
  }
  // The grouped RMSNorm over the gated output (RMSNormGated, group size d_inner / g).
  f.Add(Memory("mamba gated rmsnorm", 2 * d.T * s.inner * d.e + 4 * d.T * s.groups));
  if (d.fp8) AddCast(f, "out_proj input cast fp8", d.T * s.inner, d);
  f.Add(Linear("mamba out_proj", d.T, d.h, s.inner, d));
  if (d.t > 1) {
    f.Add(CommWork{"tp reduce after out_proj", s.after, s.act});
    OverlapLast(f, f.num_work - 1, d, TpRole::kReduceAfterForward, 16);
  }
  f.Add(Memory("bias dropout add", d.Tn * d.h * (3 * d.e + d.mask)));
}

// ---- Input gradient (the norm's weight gradients into `w`). Returns in_proj's input-gradient
// reduction (-1: none), which may overlap its weight gradient.
int AddMambaInputGrad(PassWork& b, PassWork& w, const Dims& d, const MambaSizes& s) {
  b.Add(Memory("bias dropout add backward", d.Tn * d.h * (2 * d.e + d.mask)));
  if (d.sp) b.Add(CommWork{"sp all-gather out_proj output grad", Collective::kAllGather, s.act});
  if (d.fp8) AddCast(b, "out_proj output grad cast fp8", d.T * d.h, d);
  b.Add(Linear("mamba out_proj dgrad", d.T, s.inner, d.h, d));
  if (d.sp) OverlapLast(b, b.num_work - 1, d, TpRole::kGatherBefore);
  b.Add(Memory("mamba gated rmsnorm backward", 3 * d.T * s.inner * d.e + 4 * d.T * s.groups));
  if (d.cp > 1) {
    b.Add(CommWork{"cp all-to-all y grad", Collective::kAllToAll, d.T * s.inner * d.e,
                   CommGroup::kCp});
  }
  b.Add(Memory("causal conv1d recompute", 2 * s.scan_tokens * s.conv_channels * d.e));
  b.Add({"mamba ssd chunk scan backward", WorkKind::kScan, false, false, s.chunk_shape,
         s.scan.backward_flops, s.scan.backward_bytes});
  // causal_conv1d_bwd: read x B C and their gradient, write the input gradient; the weight
  // and bias gradients (kernel + 1 per channel) reduced in the same kernel.
  b.Add(Memory("causal conv1d backward",
               3 * s.scan_tokens * s.conv_channels * d.e + s.conv_channels * (s.kernel + 1) * 4));
  if (d.cp > 1) {
    b.Add(CommWork{"cp all-to-all z x b c dt grads", Collective::kAllToAll, d.T * s.in_width * d.e,
                   CommGroup::kCp});
  }
  if (d.fp8) AddCast(b, "in_proj output grad cast fp8", d.T * s.in_width, d);
  b.Add(Linear("mamba in_proj dgrad", d.T, d.h, s.in_width, d));
  int in_proj_input_grad_comm = -1;
  if (d.t > 1) {
    in_proj_input_grad_comm = b.num_comm;
    b.Add(CommWork{"tp reduce in_proj input grad", s.after, s.act});
    OverlapLast(b, b.num_work - 1, d, TpRole::kReduceInputGrad, 16);
  }
  AddNormBackward(b, w, "norm backward", d, d.Tn);
  b.Add(Memory("residual grad add", 3 * d.Tn * d.h * d.e));
  return in_proj_input_grad_comm;
}

LayerWork MambaLayerWork(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                         const CostOptions& options, bool bf16_layer, Fp8Recipe fp8_recipe) {
  const bool fp8 = precision == Precision::kFp8 && !bf16_layer;
  const Dims d = MakeDims(m, p, precision, options, fp8, fp8_recipe);
  PTDP_CHECK(m.mamba_num_heads % p.tp == 0 && m.mamba_num_groups % p.tp == 0);
  const MambaSizes s = MakeMambaSizes(m, p, d);
  LayerWork lw;
  PassWork& w = lw.backward_weight;
  AddMambaForward(lw.forward, d, s);
  const int in_proj_input_grad_comm = AddMambaInputGrad(lw.backward_input, w, d, s);

  // ---- Weight gradient.
  AddWeightGrad(w, "mamba out_proj wgrad", d.h, s.inner, d.T, d, options);
  const int in_proj_begin = w.num_work;
  AddWeightGrad(w, "mamba in_proj wgrad", s.in_width, d.h, d.T, d, options);
  if (in_proj_input_grad_comm >= 0 && options.async_tensor_parallel_allreduce && !d.tp_overlap) {
    lw.async_overlap[lw.num_async_overlap++] = {in_proj_input_grad_comm, in_proj_begin, w.num_work};
  }

  // Full recompute redoes the layer; selective recompute (the core attention) has nothing here.
  if (p.recompute == Recompute::kFull) lw.recompute = lw.forward;

  const LayerParams params = LayerKindParams(m, p, LayerKind::kMamba);
  lw.parameters = params.total();
  lw.fp8_parameters = fp8 ? params.linear_weights : 0;
  return lw;
}

}  // namespace

SsdScan SsdScanWork(double T, double chunks, double h, double P, double N, double g, double e,
                    double Q) {
  SsdScan s;
  const double S = chunks * h * P * N;  // chunk states
  s.forward_flops = T * (2 * Q * N * g + Q * P * h + 4 * N * P * h);
  s.backward_flops = T * (6 * Q * N * g + 3 * Q * P * h + 10 * N * P * h);
  s.forward_bytes =
      e * T * (5 * h * P + 4 * g * N) + S * (8 + 2 * e) + 8 * T * g * Q + T * h * (e + 24);
  s.backward_bytes =
      e * T * (16 * h * P + 15 * g * N) + S * (24 + 5 * e) + 24 * T * g * Q + 64 * T * h;
  return s;
}

LayerWork TransformerLayerWork(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                               const CostOptions& options, bool bf16_layer, Fp8Recipe fp8_recipe,
                               bool moe_layer) {
  return BlocksLayerWork(
      m, p, precision, options, bf16_layer, fp8_recipe,
      moe_layer && m.moe() ? LayerKind::kMoeTransformer : LayerKind::kTransformer);
}

LayerWork LayerKindWork(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                        const CostOptions& options, LayerKind kind, bool bf16_layer,
                        Fp8Recipe fp8_recipe) {
  if (kind == LayerKind::kMamba) {
    return MambaLayerWork(m, p, precision, options, bf16_layer, fp8_recipe);
  }
  return BlocksLayerWork(m, p, precision, options, bf16_layer, fp8_recipe, kind);
}

LayerWork EmbeddingWork(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                        const CostOptions& options) {
  const Dims d = MakeDims(m, p, precision, options, false);
  LayerWork lw;
  const double vocab_t = static_cast<double>(PaddedVocabSize(m, p.tp)) / p.tp;
  const double act = d.T * d.h * d.e;
  // Vocabulary-parallel lookup (megatron/core/tensor_parallel/layers.py VocabParallelEmbedding):
  // gather the rows of this GPU's vocabulary shard, zero the others, reduce across the group.
  lw.forward.Add(Memory("word embedding lookup", 2 * d.T * d.h * d.e));
  if (d.t > 1) {
    lw.forward.Add(Memory("vocab mask", 2 * d.T * d.h * d.e));
    lw.forward.Add(CommWork{"tp reduce embedding",
                            d.sp ? Collective::kReduceScatter : Collective::kAllReduce, act});
  }
  if (m.position_embedding == PositionEmbedding::kLearned) {
    lw.forward.Add(Memory("position embedding add", 3 * d.Tn * d.h * d.e));
  }
  if (d.mask > 0) lw.forward.Add(Memory("embedding dropout", d.Tn * d.h * (2 * d.e + 1)));

  if (d.mask > 0) {
    lw.backward_input.Add(Memory("embedding dropout backward", d.Tn * d.h * (2 * d.e + 1)));
  }
  if (d.sp) {
    lw.backward_input.Add(CommWork{"sp all-gather embedding grad", Collective::kAllGather, act});
  }
  // Dense embedding backward: a zeroed [V/t, h] gradient, the token rows scattered into it, then
  // accumulated into the main gradient.
  lw.backward_weight.Add(
      Memory("word embedding grad", vocab_t * d.h * (2 * d.e + 2 * d.g_bytes) + d.T * d.h * d.e));
  if (m.position_embedding == PositionEmbedding::kLearned) {
    lw.backward_weight.Add(
        Memory("position embedding grad", d.s * d.h * 2 * d.g_bytes + d.T * d.h * d.e));
  }
  lw.parameters = EmbeddingParameters(m, p.tp);
  return lw;
}

LayerWork OutputWork(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                     const CostOptions& options) {
  const Dims d = MakeDims(m, p, precision, options, false);
  LayerWork lw;
  PassWork& f = lw.forward;
  PassWork& b = lw.backward_input;
  PassWork& w = lw.backward_weight;
  const double vocab_t = static_cast<double>(PaddedVocabSize(m, p.tp)) / p.tp;
  const double logits = d.T * vocab_t;  // elements per GPU
  const double act = d.T * d.h * d.e;

  AddNormForward(f, "final norm", d, d.Tn);
  if (d.sp) f.Add(CommWork{"sp all-gather before lm head", Collective::kAllGather, act});
  f.Add(Gemm("lm head", d.T, vocab_t, d.h, 1, d.e));
  // Vocabulary-parallel cross entropy (megatron/core/tensor_parallel/cross_entropy.py) on
  // logits.float(): convert (read e, write 4), max (read 4), subtract in place (read and write
  // 4), exp in place (8), sum (4), divide in place (8): (e + 36) bytes per logit. Three
  // all-reduces of T floats: the max, the target logit, the sum of exponentials.
  f.Add(Memory("cross entropy", logits * (d.e + 36)));
  if (d.t > 1) {
    for (const char* name : {"ce all-reduce max", "ce all-reduce target", "ce all-reduce sum"}) {
      f.Add(CommWork{name, Collective::kAllReduce, d.T * 4});
    }
  }
  // Backward: softmax minus one-hot times the loss gradient (read and write 4), back to e bytes.
  b.Add(Memory("cross entropy backward", logits * (8 + 4 + d.e)));
  b.Add(Gemm("lm head dgrad", d.T, d.h, vocab_t, 1, d.e));
  if (d.t > 1) {
    b.Add(CommWork{"tp reduce lm head input grad",
                   d.sp ? Collective::kReduceScatter : Collective::kAllReduce, act});
  }
  AddNormBackward(b, w, "final norm backward", d, d.Tn);
  AddWeightGrad(w, "lm head wgrad", vocab_t, d.h, d.T, d, options);

  lw.parameters = OutputParameters(m, p);
  return lw;
}

namespace {

// The hybrid kinds (Mamba, attention, MLP, MoE) counted in one word, 16 bits each: each pattern
// symbol's lane (0 for a symbol of no kind, which the counts' total catches).
constexpr int kFirstHybridKind = static_cast<int>(LayerKind::kMamba);
constexpr int kHybridLanes = kNumLayerKinds - kFirstHybridKind;
static_assert(kHybridLanes == 4 && kMaxLayers < (int64_t{1} << 16));

const std::array<uint64_t, 256>& HybridLanes() {
  static const std::array<uint64_t, 256> kLaneOf = [] {
    std::array<uint64_t, 256> lanes{};
    for (int c = 0; c < 256; ++c) {
      const std::optional<LayerKind> kind = HybridSymbolKind(static_cast<char>(c));
      if (kind) lanes[c] = uint64_t{1} << (16 * (static_cast<int>(*kind) - kFirstHybridKind));
    }
    return lanes;
  }();
  return kLaneOf;
}

}  // namespace

ChunkKinds::ChunkKinds(const ModelSpec& m, const TrainingSpec& training, const ParallelConfig& p)
    : pattern_(m.hybrid_layer_pattern),
      stages_(m.num_layers, p),
      fp8_(training.precision == Precision::kFp8),
      start_(fp8_ ? std::min(training.fp8_bf16_layers_at_start, m.num_layers) : 0),
      end_(fp8_ ? std::max(m.num_layers - training.fp8_bf16_layers_at_end, start_) : 0),
      recompute_(p.recompute),
      recompute_num_layers_(p.recompute_num_layers),
      moe_(m.moe()),
      moe_first_(m.moe_first_dense_layers),
      moe_freq_(std::max(1, m.moe_layer_freq)) {
  if (pattern_.empty()) return;
  const int n = static_cast<int>(pattern_.size());
  uint64_t* prefix = inline_prefix_.data();
  if (n > kInlineLayers) {
    long_prefix_.resize(n + 1);
    prefix = long_prefix_.data();
  }
  prefix[0] = 0;
  const std::array<uint64_t, 256>& lanes = HybridLanes();
  uint64_t counts = 0;
  for (int i = 0; i < n; ++i) {
    counts += lanes[static_cast<unsigned char>(pattern_[i])];
    prefix[i + 1] = counts;
  }
  prefix_ = prefix;
}

int ChunkKinds::MoeIn(int a, int b) const {
  if (!moe_) return 0;
  a = std::max(a, moe_first_);
  if (b <= a) return 0;
  // Multiples of moe_freq_ in [a, b).
  const auto below = [&](int x) { return (x + moe_freq_ - 1) / moe_freq_; };  // in [0, x)
  return below(b) - below(a);
}

ChunkLayers ChunkKinds::operator()(int vs) const {
  const StageSlice slice = stages_(vs);
  const int first = slice.first_layer, n = slice.layers;
  const int recomputed = recompute_ == Recompute::kNone
                             ? 0
                             : (recompute_num_layers_ > 0 ? std::min(n, recompute_num_layers_) : n);
  if (pattern_.empty() && !fp8_ && !moe_) {
    // A dense transformer in 16 bits: its layers, recomputed or not.
    ChunkLayers c;
    auto& k = c.count[static_cast<int>(LayerKind::kTransformer)][0];
    k[1] = static_cast<int16_t>(recomputed);
    k[0] = static_cast<int16_t>(n - recomputed);
    return c;
  }
  // The chunk [first, first + n); its recomputed prefix [first, first + recomputed); the FP8
  // layers [start, end). Each pair's intersection is an interval: count the layers of each
  // kind in it, then the four (fp8, recompute) kinds by inclusion and exclusion:
  //   (fp8, rc) = F8RC; (fp8, -) = F8 - F8RC; (-, rc) = RC - F8RC; (-, -) = ALL - F8 - RC + F8RC.
  const auto clip = [](int a0, int a1, int b0, int b1) {
    return std::pair{std::max(a0, b0), std::max(std::max(a0, b0), std::min(a1, b1))};
  };
  const std::pair<int, int> all{first, first + n}, rc{first, first + recomputed};
  const std::pair<int, int> f8 = fp8_ ? clip(first, first + n, start_, end_) : std::pair{0, 0};
  const std::pair<int, int> f8rc =
      fp8_ ? clip(first, first + recomputed, start_, end_) : std::pair{0, 0};
  ChunkLayers c;
  if (pattern_.empty()) {
    // A transformer: dense and MoE layers, MoE ones counted in O(1) per interval.
    for (int moe = 0; moe < 2; ++moe) {
      const auto count = [&](std::pair<int, int> r) {
        const int layers = r.second - r.first, in_moe = MoeIn(r.first, r.second);
        return moe == 1 ? in_moe : layers - in_moe;
      };
      const int n_all = count(all), n_rc = count(rc), n_f = count(f8), n_frc = count(f8rc);
      auto& k = c.count[static_cast<int>(moe == 1 ? LayerKind::kMoeTransformer
                                                  : LayerKind::kTransformer)];
      k[1][1] = static_cast<int16_t>(n_frc);
      k[1][0] = static_cast<int16_t>(n_f - n_frc);
      k[0][1] = static_cast<int16_t>(n_rc - n_frc);
      k[0][0] = static_cast<int16_t>(n_all - n_f - n_rc + n_frc);
    }
    return c;
  }
  // A hybrid model: each interval's counts of the four kinds as one word (prefix_), and the
  // four (fp8, recompute) words by the same inclusion and exclusion, lane by lane: every lane of
  // each result is a count in [0, 2^16), so the words' wrap-around arithmetic is exact.
  const auto counts = [&](std::pair<int, int> r) {
    return r.second > r.first ? prefix_[r.second] - prefix_[r.first] : uint64_t{0};
  };
  const uint64_t n_all = counts(all), n_rc = counts(rc), n_f = counts(f8), n_frc = counts(f8rc);
  const uint64_t words[2][2] = {{n_all - n_f - n_rc + n_frc, n_rc - n_frc}, {n_f - n_frc, n_frc}};
  int total = 0;
  for (int lane = 0; lane < kHybridLanes; ++lane) {
    auto& k = c.count[kFirstHybridKind + lane];
    for (int f = 0; f < 2; ++f) {
      for (int r = 0; r < 2; ++r) {
        k[f][r] = static_cast<int16_t>((words[f][r] >> (16 * lane)) & 0xffff);
        total += k[f][r];
      }
    }
  }
  PTDP_CHECK(total == n);  // every layer's symbol names a kind
  return c;
}

bool UniformChunks(const ModelSpec& m, const TrainingSpec& training, const ParallelConfig& p) {
  const bool bf16_layers =
      training.precision == Precision::kFp8 &&
      (training.fp8_bf16_layers_at_start > 0 || training.fp8_bf16_layers_at_end > 0);
  const bool mixed_moe = m.moe() && (m.moe_first_dense_layers > 0 || m.moe_layer_freq > 1);
  return !UnevenSplit(p) && !bf16_layers && p.recompute_num_layers == 0 && !mixed_moe &&
         !m.hybrid();
}

bool MiddleStagesAlike(const ModelSpec& m, const TrainingSpec& training, const ParallelConfig& p) {
  if (UniformChunks(m, training, p) || p.pp <= 2) return true;
  if (m.moe() && m.moe_layer_freq > 1) return false;
  if (m.hybrid()) return false;  // each stage has its share of the pattern
  const bool fp8 = training.precision == Precision::kFp8;
  if (!fp8 && m.moe_first_dense_layers == 0) return true;
  const VirtualStages stages(m.num_layers, p);
  int first = 0, last = 0;  // layers of the first and the last pipeline stage
  for (int c = 0; c < p.virtual_stages; ++c) {
    first += stages(c * p.pp).layers;
    last += stages(c * p.pp + p.pp - 1).layers;
  }
  // With interleaving a stage's layers are spread over the model: only the first and last
  // chunks of the model are at its ends.
  if (p.virtual_stages > 1) {
    first = stages(0).layers;
    last = stages(p.pp * p.virtual_stages - 1).layers;
  }
  const int at_start =
      std::max(fp8 ? training.fp8_bf16_layers_at_start : 0, m.moe() ? m.moe_first_dense_layers : 0);
  return at_start <= first && (fp8 ? training.fp8_bf16_layers_at_end : 0) <= last;
}

std::vector<ChunkLayers> ChunkLayerKinds(const ModelSpec& m, const TrainingSpec& training,
                                         const ParallelConfig& p) {
  const ChunkKinds kinds(m, training, p);
  std::vector<ChunkLayers> out(static_cast<size_t>(p.pp) * p.virtual_stages);
  for (size_t vs = 0; vs < out.size(); ++vs) out[vs] = kinds(static_cast<int>(vs));
  return out;
}

namespace {

// The attention block's linear weights on one GPU (QKV or MLA's projections, the output
// projection).
double AttentionLinearWeights(const ModelSpec& m, int tp) {
  const double h = m.hidden_size, d = m.kv_channels;
  const double a_t = static_cast<double>(m.num_attention_heads) / tp;
  const double g_t = std::max(1.0, static_cast<double>(m.num_query_groups) / tp);
  if (m.multi_latent_attention) {
    // Down projections replicated, up projections and the output projection split by heads.
    const double qk = m.qk_head_dim + m.qk_pos_emb_head_dim;
    const double q = m.q_lora_rank > 0
                         ? h * m.q_lora_rank + static_cast<double>(m.q_lora_rank) * a_t * qk
                         : h * a_t * qk;
    const double kv = h * (m.kv_lora_rank + m.qk_pos_emb_head_dim) +
                      static_cast<double>(m.kv_lora_rank) * a_t * (m.qk_head_dim + m.v_head_dim);
    return q + kv + a_t * m.v_head_dim * h;
  }
  const double qkv_n = (a_t + 2 * g_t) * d, ctx = a_t * d;
  return h * qkv_n + ctx * h;
}

// The attention block's parameters on one GPU: its linears, its norm (and MLA's latent norms),
// the QKV and projection biases.
double AttentionBlockParameters(const ModelSpec& m, int tp) {
  const double h = m.hidden_size;
  const double a_t = static_cast<double>(m.num_attention_heads) / tp;
  const double g_t = std::max(1.0, static_cast<double>(m.num_query_groups) / tp);
  const double qkv_n = (a_t + 2 * g_t) * m.kv_channels;
  const double norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;
  const double norm_per = m.normalization == Normalization::kLayerNorm ? 2 : 1;
  const double latent_norms =
      m.multi_latent_attention ? norm_per * (m.q_lora_rank + m.kv_lora_rank) : 0;
  return AttentionLinearWeights(m, tp) + norm + latent_norms + (m.add_bias_linear ? qkv_n + h : 0);
}

}  // namespace

double LayerLinearWeights(const ModelSpec& m, int tp) {
  const double h = m.hidden_size;
  const double f_t = static_cast<double>(m.ffn_hidden_size) / tp;
  const double fc1_t = m.activation == Activation::kSwiglu ? 2 * f_t : f_t;
  return AttentionLinearWeights(m, tp) + h * fc1_t + f_t * h;
}

double LayerParameters(const ModelSpec& m, int tp) {
  const double h = m.hidden_size, d = m.kv_channels;
  const double a_t = static_cast<double>(m.num_attention_heads) / tp;
  const double g_t = std::max(1.0, static_cast<double>(m.num_query_groups) / tp);
  const double f_t = static_cast<double>(m.ffn_hidden_size) / tp;
  const double fc1_t = m.activation == Activation::kSwiglu ? 2 * f_t : f_t;
  const double qkv_n = (a_t + 2 * g_t) * d;
  const double norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;
  const double norm_per = m.normalization == Normalization::kLayerNorm ? 2 : 1;
  const double latent_norms =
      m.multi_latent_attention ? norm_per * (m.q_lora_rank + m.kv_lora_rank) : 0;
  return LayerLinearWeights(m, tp) + 2 * norm + latent_norms +
         (m.add_bias_linear ? qkv_n + h + fc1_t + h : 0);
}

LayerParams LayerKindParams(const ModelSpec& m, const ParallelConfig& p, LayerKind kind) {
  const double h = m.hidden_size;
  const double bias = m.add_bias_linear ? 1 : 0;
  const double norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;
  const double swiglu = m.activation == Activation::kSwiglu ? 2 : 1;
  LayerParams out;
  if (HasAttention(kind)) {
    out.dense += AttentionBlockParameters(m, p.tp);
    out.linear_weights += AttentionLinearWeights(m, p.tp);
  }
  if (HasDenseMlp(kind)) {
    const double f_t = static_cast<double>(m.ffn_hidden_size) / p.tp, fc1_t = swiglu * f_t;
    out.dense += h * fc1_t + f_t * h + norm + bias * (fc1_t + h);
    out.linear_weights += h * fc1_t + f_t * h;
  }
  if (HasExperts(kind)) {
    PTDP_CHECK(m.moe());
    // Norm, router (replicated h x E), shared experts (TP-split), the experts of this EP rank.
    const double shared_t = static_cast<double>(m.moe_shared_expert_intermediate_size) / p.tp;
    const double shared = shared_t * h * (swiglu + 1);
    const double f_e = static_cast<double>(m.moe_ffn_hidden_size) / p.expert_tp();
    out.dense += norm + shared + h * m.num_experts;
    out.experts = static_cast<double>(m.num_experts) / p.ep * f_e * h * (swiglu + 1);
    out.linear_weights += shared + out.experts;
  }
  if (kind == LayerKind::kMamba) {
    // MambaMixer's tensors split over TP by heads and groups; the layer's norm replicated.
    const double heads = static_cast<double>(m.mamba_num_heads) / p.tp;
    const double inner = heads * m.mamba_head_dim;
    const double bc = 2.0 * m.mamba_num_groups / p.tp * m.mamba_state_dim;
    const double linears = h * (2 * inner + bc + heads) + inner * h;
    out.dense = linears + (inner + bc) * (m.mamba_conv_kernel + 1) + 3 * heads + inner + norm;
    out.linear_weights = linears;
  }
  return out;
}

MoeLayerParams MoeLayerParameters(const ModelSpec& m, const ParallelConfig& p) {
  return LayerKindParams(m, p, LayerKind::kMoeTransformer);
}

double EmbeddingParameters(const ModelSpec& m, int tp) {
  const double vocab_t = static_cast<double>(PaddedVocabSize(m, tp)) / tp;
  const double positions = m.position_embedding == PositionEmbedding::kLearned
                               ? static_cast<double>(m.max_position_embeddings)
                               : 0;
  return (vocab_t + positions) * m.hidden_size;
}

double OutputParameters(const ModelSpec& m, const ParallelConfig& p) {
  const double h = m.hidden_size;
  const double vocab_t = static_cast<double>(PaddedVocabSize(m, p.tp)) / p.tp;
  const double norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;
  return norm + (!m.tied_embeddings || p.pp > 1 ? vocab_t * h : 0);
}

KernelTimer::KernelTimer(const ClusterSpec& cluster, Precision precision,
                         const CostOptions& options)
    : gpu_(&cluster.gpu),
      gemm_precision_(precision == Precision::kFp8 ? Precision::kBf16 : precision),
      gemm_(cluster.gpu),
      attention_(options.attention == AttentionBackend::kFused &&
                         !cluster.gpu.fused_attention.empty()
                     ? cluster.gpu.fused_attention
                     : cluster.gpu.flash_attention) {
  if (precision == Precision::kFp8) {
    PTDP_CHECK(cluster.gpu.peak_fp8_flops > 0 && !cluster.gpu.gemm_efficiency_fp8.empty());
    fp8_.emplace(cluster.gpu.gemm_efficiency_fp8);
  }
}

double KernelTimer::operator()(const Work& w) const {
  // Tests in order of frequency (a switch here compiles to a jump table whose indirect branch
  // the planner's loop mispredicts).
  if (w.kind == WorkKind::kGemm) {
    return w.fp8 ? GemmTime(*fp8_, *gpu_, Precision::kFp8, w.gemm, w.bytes)
                 : GemmTime(gemm_, *gpu_, gemm_precision_, w.gemm, w.bytes);
  }
  if (w.kind == WorkKind::kMemory) return MemoryTime(*gpu_, w.bytes);
  if (w.kind == WorkKind::kAttentionForward || w.kind == WorkKind::kAttentionBackward) {
    return AttentionTime(attention_, gemm_, *gpu_, w.kind == WorkKind::kAttentionBackward, w.gemm.m,
                         w.gemm.batch, w.gemm.k, w.flops, w.bytes);
  }
  if (w.kind == WorkKind::kGroupedGemm) {
    return w.fp8 ? GroupedGemmTime(*fp8_, *gpu_, Precision::kFp8, w.gemm, w.bytes)
                 : GroupedGemmTime(gemm_, *gpu_, gemm_precision_, w.gemm, w.bytes);
  }
  PTDP_CHECK(w.kind == WorkKind::kScan);
  return ScanTime(gemm_, *gpu_, gemm_precision_, w.gemm, w.flops, w.bytes);
}

double PassComputeTime(const KernelTimer& timer, const PassWork& pass) {
  double t = 0;
  for (int i = 0; i < pass.num_work; ++i) t += timer(pass.work[i]);
  return t;
}

double CommTime(const ClusterSpec& cluster, const CommWork& comm, const GroupPlacements& groups) {
  if (comm.spread.experts > 0) {
    return comm.repeat * FlexDispatchTime(cluster, comm.bytes, comm.spread, groups[comm.group]);
  }
  return comm.repeat * CollectiveTime(cluster, comm.collective, comm.bytes, groups[comm.group]);
}

double PassCommTime(const ClusterSpec& cluster, const PassWork& pass,
                    const GroupPlacements& groups) {
  double t = 0;
  for (int i = 0; i < pass.num_comm; ++i) t += CommTime(cluster, pass.comm[i], groups);
  return t;
}

double PassTime(const ClusterSpec& cluster, Precision precision, const CostOptions& options,
                const PassWork& pass, const GroupPlacements& groups) {
  return PassComputeTime(KernelTimer(cluster, precision, options), pass) +
         PassCommTime(cluster, pass, groups);
}

}  // namespace ptdp
