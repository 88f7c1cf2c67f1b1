#include "simulator/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <new>
#include <optional>
#include <span>
#include <type_traits>
#include <unordered_map>

#include "core/error.h"
#include "simulator/bounds.h"
#include "simulator/collectives.h"
#include "simulator/flops.h"
#include "simulator/layer_work.h"
#include "simulator/memory_model.h"
#include "simulator/op_time.h"

namespace ptdp {
namespace {

struct PassTimes {
  double compute = 0, comm = 0, overhead = 0;
  double comm_hidden = 0;                  // collective time pipelined away with --tp-comm-overlap
  double cp_comm = 0, cp_hidden = 0;       // the context-parallel part of comm and of comm_hidden
  double ep_comm = 0;                      // the MoE dispatch and combine part of comm
  double etp_comm = 0;                     // of ep_comm, over the expert tensor-parallel group
  double ep_dispatch = 0, ep_combine = 0;  // of ep_comm, to the experts' ranks and back
  std::array<double, kCommGroups> comm_bytes{};  // by CommGroup, over groups of > 1 rank
  double total() const { return compute + comm + overhead; }
  double tp_comm() const { return comm - cp_comm - ep_comm; }  // the rest of comm
  // Each kernel's and each collective's own time (the collective's exposed part), for the
  // async overlap below.
  std::array<double, PassWork::kMaxWork> work_s;
  std::array<double, PassWork::kMaxComm> comm_s;
};

// A collective run beside GEMM j of `pass` (TpOverlap): what of the collective stays exposed,
// and what the GEMM takes longer for being split into chunks (each timed at its own shape) or
// for the SMs the collective's kernels hold (the GEMM running on the rest: `sms` of the profile's
// sm_count; none when the profile does not say). With c the collective's time and g the GEMM's:
//   kPaired:   exposed max(0, c - g);
//   kRing:     n = tp chunks, g_1 one chunk's GEMM: exposed (n - 1) max(0, c / (n - 1) - g_1),
//              the GEMM n g_1;
//   kPipeline: s chunks on the remaining SMs, g_1' = g_1 / (1 - f): exposed c / s (the last
//              chunk's) + (s - 1) max(0, c / s - g_1'), the GEMM s g_1';
//   kBulk:     the GEMM at (1 - f) of its speed while the collective runs: exposed
//              max(0, c - g / (1 - f)), the GEMM longer by f min(c, g / (1 - f)).
struct OverlapResult {
  double exposed = 0, gemm_added = 0;
};
OverlapResult Overlapped(const KernelTimer& timer, const ClusterSpec& c, const PassWork& pass,
                         int i, int j, double comm, double gemm) {
  const TpOverlap kind = pass.overlap_kind[i];
  const int parts = std::max<int>(pass.overlap_parts[i], 1);
  const double f = c.gpu.sm_count > pass.overlap_sms[i]
                       ? static_cast<double>(pass.overlap_sms[i]) / c.gpu.sm_count
                       : 0.0;
  const auto chunk = [&] {  // one of `parts` chunks of the GEMM, by its rows
    Work w = pass.work[j];
    if (w.kind != WorkKind::kGemm || parts == 1) return gemm / parts;
    w.gemm.m = std::max<int64_t>(w.gemm.m / parts, 1);
    w.flops = w.gemm.flops();
    w.bytes /= parts;
    return timer(w);
  };
  OverlapResult r;
  switch (kind) {
    case TpOverlap::kPaired:
      r.exposed = std::max(0.0, comm - gemm);
      break;
    case TpOverlap::kRing: {
      const double g1 = chunk();
      r.exposed = parts > 1 ? (parts - 1) * std::max(0.0, comm / (parts - 1) - g1) : comm;
      r.gemm_added = parts * g1 - gemm;
      break;
    }
    case TpOverlap::kPipeline: {
      const double g1 = chunk() / (1 - f);
      r.exposed = comm / parts + (parts - 1) * std::max(0.0, comm / parts - g1);
      r.gemm_added = parts * g1 - gemm;
      break;
    }
    case TpOverlap::kBulk: {
      const double slow = gemm / (1 - f);
      r.exposed = std::max(0.0, comm - slow);
      r.gemm_added = f * std::min(comm, slow);
      break;
    }
  }
  return r;
}

// A pass's kernel and collective times, and what the host adds when it cannot launch them fast
// enough (profile host.kernel_launch_us = h per kernel or collective). The host issues the
// pass's n operations one every h and runs ahead of the GPU (CUDA queues about a thousand
// launches), so the queue is carried across passes: a pass takes max(n h, sum t_i), and the
// overhead is n h - sum t_i where that is positive. (Until issue 29 the queue started empty at
// each pass, end_i = max(end_{i-1}, i h) + t_i, which charged every layer of a large model the
// first launches' wait. With the vTrain constants refitted for each, the single-node rows favour
// the empty queue, 6.6% against 6.9%, the multi-node rows the carried one, 9.0% against 8.2%.)
// A collective pipelined with a GEMM (--tp-comm-overlap, Transformer Engine's userbuffers)
// exposes what its method leaves exposed, and its GEMM takes what the method costs it
// (Overlapped above).
// The ring attention's block exchanges (context parallelism, p2p) are pipelined with the
// attention kernels the same way: each step's exchange against one step's kernel.
// The expert groups' collectives issued before the pass's first grouped GEMM carry the tokens
// (backward: the gradients of the combine's output) to the experts' ranks; those after it bring
// them back.
PassTimes Times(const KernelTimer& timer, const ClusterSpec& c, const PassWork& pass,
                const GroupPlacements& groups) {
  PassTimes t;
  int experts_at = pass.num_work;
  for (int i = 0; i < pass.num_work; ++i) {
    t.work_s[i] = timer(pass.work[i]);
    t.compute += t.work_s[i];
    if (pass.work[i].kind == WorkKind::kGroupedGemm && experts_at == pass.num_work) experts_at = i;
  }
  for (int i = 0; i < pass.num_comm; ++i) {
    t.comm_s[i] = CommTime(c, pass.comm[i], groups);
    const bool cp = pass.comm[i].group == CommGroup::kCp;
    if (pass.overlap_with[i] >= 0) {
      const int j = pass.overlap_with[i];
      const OverlapResult o = Overlapped(timer, c, pass, i, j, t.comm_s[i], t.work_s[j]);
      (cp ? t.cp_hidden : t.comm_hidden) += t.comm_s[i] - o.exposed;
      t.comm_s[i] = o.exposed;
      t.work_s[j] += o.gemm_added;
      t.compute += o.gemm_added;
    }
    t.comm += t.comm_s[i];
    if (cp) t.cp_comm += t.comm_s[i];
    const CommWork& w = pass.comm[i];
    if (w.group >= CommGroup::kEp) {
      t.ep_comm += t.comm_s[i];
      if (w.group == CommGroup::kEtp) t.etp_comm += t.comm_s[i];
      (pass.comm_position[i] <= experts_at ? t.ep_dispatch : t.ep_combine) += t.comm_s[i];
    }
    if (groups[w.group].ranks > 1) t.comm_bytes[static_cast<int>(w.group)] += w.repeat * w.bytes;
  }
  // The host issues the pass's operations one every kernel_launch_s, ahead of the GPU: CUDA
  // queues them (up to ~1,000 launches), so the host runs on into the next layers and only a
  // pass whose operations take the host longer to issue than the GPU to run is host-bound, by
  // the difference.
  const double launch = c.host.kernel_launch_s;
  const double moe = pass.moe_host ? c.host.moe_layer_s : 0;
  if (launch <= 0 && moe <= 0) return t;
  if (pass.host_sync_at < 0) {
    t.overhead =
        std::max(0.0, (pass.num_work + pass.num_comm) * launch + moe - (t.compute + t.comm));
    return t;
  }
  // A MoE forward whose host waits for the GPU before work k: the operations before (the
  // attention, the router, the permutation; the MoE layer's extra host time) and after run
  // ahead each on their own, and after the wait the GPU idles until the first launch.
  const int k = pass.host_sync_at;
  double before_s = 0, after_s = 0;
  int before_n = k, after_n = pass.num_work - k;
  for (int i = 0; i < pass.num_work; ++i) (i < k ? before_s : after_s) += t.work_s[i];
  for (int i = 0; i < pass.num_comm; ++i) {
    const bool before = pass.comm_position[i] < k;
    (before ? before_s : after_s) += t.comm_s[i];
    ++(before ? before_n : after_n);
  }
  t.overhead = std::max(0.0, before_n * launch + moe - before_s) +
               std::max(0.0, after_n * launch - after_s) + launch;
  return t;
}

// Time the async input-gradient reductions of a layer's backward (in `b`) spend beside the
// weight-gradient kernels (in `w`) they overlap (layer_work.h AsyncOverlap): each hides at most
// the shorter of the two.
double AsyncOverlapTime(const LayerWork& lw, const PassTimes& b, const PassTimes& w) {
  double hidden = 0;
  for (int i = 0; i < lw.num_async_overlap; ++i) {
    const AsyncOverlap& o = lw.async_overlap[i];
    double work = 0;
    for (int k = o.work_begin; k < o.work_end; ++k) work += w.work_s[k];
    hidden += std::min(b.comm_s[o.comm], work);
  }
  return hidden;
}

// HBM bytes the optimizer step moves per parameter of its shard, following Megatron's
// MixedPrecisionOptimizer.step (megatron/core/optimizer/optimizer.py): copy 2-byte main
// gradients to fp32 (read 2, write 4), unscale them under fp16 loss scaling (read and write
// 4), the gradient norm for clipping (read 4), the fused Adam update (read weight, gradient, m,
// v: 16; write weight, m, v: 12; SGD with momentum: read 12, write 8), and the copy of the fp32
// master weight back into the 16-bit model weight (read 4, write e).
double OptimizerBytesPerParam(const TrainingSpec& training, const CostOptions& options) {
  const bool fp32 = training.precision == Precision::kFp32;
  const double update = training.optimizer == Optimizer::kAdam ? 28 : 20;
  double bytes = 4 + update;  // norm, update
  if (GradientBytes(training.precision, options) == 2) bytes += 2 + 4;
  if (training.precision == Precision::kFp16) bytes += 8;
  if (!fp32) bytes += 4 + BytesPerElement(training.precision);
  return bytes;
}

// The activation (or its gradient) one pipeline send carries, the whole of it.
double SendActivationBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision) {
  // Each context-parallel rank sends its s / cp tokens.
  return static_cast<double>(m.seq_length) / p.cp * p.micro_batch_size * m.hidden_size *
         BytesPerElement(precision);
}

// What each GPU sends of it: 1/t when it is split over the TP group (sequence parallelism or
// Megatron 2021's scatter-gather), all of it otherwise.
double SendBytes(const ModelSpec& m, const ParallelConfig& p, Precision precision,
                 const CostOptions& options) {
  const double act = SendActivationBytes(m, p, precision);
  const bool split =
      p.tp > 1 && (p.sequence_parallel || options.scatter_gather_tensors_in_pipeline);
  return split ? act / p.tp : act;
}

// One pipeline send of the activation (or its gradient) across `pair`, per GPU.
double SendTime(const ClusterSpec& c, const ModelSpec& m, const ParallelConfig& p,
                Precision precision, const CostOptions& options, const GroupPlacement& pair,
                const GroupPlacement& tp) {
  const double act = SendActivationBytes(m, p, precision);
  if (p.tp > 1 && p.sequence_parallel) {
    // The activation is already split along the sequence: each GPU sends its 1/t.
    return CollectiveTime(c, Collective::kSendRecv, act / p.tp, pair);
  }
  if (p.tp > 1 && options.scatter_gather_tensors_in_pipeline) {
    // Megatron 2021: send 1/t per GPU, then all-gather inside the receiving TP group.
    return CollectiveTime(c, Collective::kSendRecv, act / p.tp, pair) +
           CollectiveTime(c, Collective::kAllGather, act, tp);
  }
  // Every GPU of the TP group sends the whole (replicated) activation to its peer.
  return CollectiveTime(c, Collective::kSendRecv, act, pair);
}

// What one transformer layer of one kind costs per micro-batch, ready to be summed per chunk.
struct LayerCost {
  double forward = 0, backward_input = 0, backward_weight = 0;
  double compute = 0, comm = 0, overhead = 0, recompute = 0;
  double comm_hidden = 0;             // TP collectives' time hidden by --tp-comm-overlap
  double cp_comm = 0, cp_hidden = 0;  // of comm, the context-parallel exchanges; and hidden
  double ep_comm = 0;                 // of comm, the MoE token dispatch and combine
  double etp_comm = 0;                // of ep_comm, over the expert tensor-parallel group
  // For the timeline (costs.h ChunkCosts): F's and the backward's CP exchanges (busy) and MoE
  // dispatch and combine.
  double f_cp = 0, f_dispatch = 0, f_combine = 0, b_cp = 0, b_dispatch = 0, b_combine = 0;
  double f_tp = 0, b_tp = 0, w_tp = 0;           // and the TP collectives (exposed) of F, B and W
  std::array<double, kCommGroups> comm_bytes{};  // by CommGroup
  double activation_bytes = 0, weight_grad_activation_bytes = 0;
};

LayerCost CostOfLayer(const ModelSpec& m, const ClusterSpec& c, const TrainingSpec& training,
                      const ParallelConfig& p, const CostOptions& options, const KernelTimer& timer,
                      const GroupPlacements& groups, bool fp8_layer, LayerKind kind) {
  const Precision precision = training.precision;
  const bool bf16_layer = precision == Precision::kFp8 && !fp8_layer;
  const LayerWork layer =
      LayerKindWork(m, p, precision, options, kind, bf16_layer, training.fp8_recipe);
  const PassTimes lf = Times(timer, c, layer.forward, groups);
  const PassTimes lb = Times(timer, c, layer.backward_input, groups);
  const PassTimes lw = Times(timer, c, layer.backward_weight, groups);
  // Full recomputation redoes exactly the forward: reuse its time.
  const PassTimes lr =
      p.recompute == Recompute::kFull ? lf : Times(timer, c, layer.recompute, groups);
  // The async reductions hide behind W only when B and W run as one backward.
  const double async_hidden = p.schedule == Schedule::kZbH1 ? 0 : AsyncOverlapTime(layer, lb, lw);
  LayerCost k;
  k.forward = lf.total();
  k.backward_input = lr.total() + lb.total();
  k.backward_weight = lw.total() - async_hidden;
  k.overhead = lf.overhead + lr.overhead + lb.overhead + lw.overhead;
  k.compute = lf.compute + lr.compute + lb.compute + lw.compute + k.overhead;
  k.comm = lf.comm + lr.comm + lb.comm + lw.comm - async_hidden;
  k.comm_hidden = lf.comm_hidden + lr.comm_hidden + lb.comm_hidden + lw.comm_hidden;
  k.cp_comm = lf.cp_comm + lr.cp_comm + lb.cp_comm + lw.cp_comm;
  k.cp_hidden = lf.cp_hidden + lr.cp_hidden + lb.cp_hidden + lw.cp_hidden;
  k.ep_comm = lf.ep_comm + lr.ep_comm + lb.ep_comm + lw.ep_comm;
  k.etp_comm = lf.etp_comm + lr.etp_comm + lb.etp_comm + lw.etp_comm;
  k.f_cp = lf.cp_comm + lf.cp_hidden;
  k.f_dispatch = lf.ep_dispatch;
  k.f_combine = lf.ep_combine;
  k.b_cp = lr.cp_comm + lr.cp_hidden + lb.cp_comm + lb.cp_hidden + lw.cp_comm + lw.cp_hidden;
  k.b_dispatch = lr.ep_dispatch + lb.ep_dispatch + lw.ep_dispatch;
  k.b_combine = lr.ep_combine + lb.ep_combine + lw.ep_combine;
  // W's own; where B and W run as one backward (every schedule but zb-h1) the event simulation
  // adds W's to B, less what the async reductions hide beside W's kernels.
  const bool split = p.schedule == Schedule::kZbH1;
  k.f_tp = lf.tp_comm();
  k.b_tp = lr.tp_comm() + lb.tp_comm() - (split ? 0 : async_hidden);
  k.w_tp = lw.tp_comm();
  for (int g = 0; g < kCommGroups; ++g) {
    k.comm_bytes[g] = lf.comm_bytes[g] + lr.comm_bytes[g] + lb.comm_bytes[g] + lw.comm_bytes[g];
  }
  k.recompute = lr.total();
  k.activation_bytes = LayerActivationBytes(m, p, precision, options, bf16_layer, kind);
  k.weight_grad_activation_bytes =
      LayerWeightGradActivationBytes(m, p, precision, bf16_layer, kind);
  return k;
}

static_assert(std::is_trivially_destructible_v<LayerCost>);

// The embedding's and the output layer's passes (virtual stages 0 and last) and what they add.
struct EndParts {
  PassTimes ef, eb, ew, of, ob, ow;
  double emb_parameters = 0, out_parameters = 0, emb_act = 0, out_act = 0;
};

EndParts CostOfEnds(const ModelSpec& m, const ClusterSpec& c, const TrainingSpec& training,
                    const ParallelConfig& p, const CostOptions& options, const KernelTimer& timer,
                    const GroupPlacements& groups) {
  const Precision precision = training.precision;
  const LayerWork emb = EmbeddingWork(m, p, precision, options);
  const LayerWork out = OutputWork(m, p, precision, options);
  EndParts e;
  e.ef = Times(timer, c, emb.forward, groups);
  e.eb = Times(timer, c, emb.backward_input, groups);
  e.ew = Times(timer, c, emb.backward_weight, groups);
  e.of = Times(timer, c, out.forward, groups);
  e.ob = Times(timer, c, out.backward_input, groups);
  e.ow = Times(timer, c, out.backward_weight, groups);
  e.emb_parameters = emb.parameters;
  e.out_parameters = out.parameters;
  e.emb_act = EmbeddingActivationBytes(m, p);
  e.out_act = OutputActivationBytes(m, p, precision);
  return e;
}

// What a layer's (or the ends') costs depend on besides the model, cluster, training and
// software (LayerCostCache).
struct PartKey {
  int tp, cp, cp_comm, micro_batch_size;
  int part;  // 4 kind + 2 fp8 + recompute for a layer kind; kEndsPart: the embedding and output
  int recompute;  // the granularity of a recomputing layer kind, selective's modules << 4
  bool sequence_parallel, split_backward, tp_overlap, pipelined;
  int dispatcher, ep, etp;  // MoE: the token dispatcher and the expert grid
  GroupPlacement tp_group, cp_group, ep_group, etp_group, ep_etp_group;
  bool operator==(const PartKey&) const = default;
};

struct PartKeyHash {
  size_t operator()(const PartKey& k) const {
    size_t h = 0;
    for (int64_t x : {int64_t{k.tp}, int64_t{k.cp}, int64_t{k.cp_comm}, int64_t{k.micro_batch_size},
                      int64_t{k.part}, int64_t{k.recompute}, int64_t{k.sequence_parallel},
                      int64_t{k.split_backward}, int64_t{k.tp_overlap}, int64_t{k.pipelined},
                      int64_t{k.dispatcher}, int64_t{k.ep}, int64_t{k.etp}}) {
      h = h * 1'000'003 + static_cast<size_t>(x);
    }
    for (const GroupPlacement* g :
         {&k.tp_group, &k.cp_group, &k.ep_group, &k.etp_group, &k.ep_etp_group}) {
      h = ((h * 1'000'003 + static_cast<size_t>(g->ranks)) * 1'000'003 +
           static_cast<size_t>(g->nodes)) *
              1'000'003 +
          static_cast<size_t>(g->ranks_per_node);
    }
    return h;
  }
};

constexpr int kEndsPart = ChunkLayers::kSlots;

// Collectives' bytes by CommGroup into a stage's breakdown.
void AddCommBytes(const std::array<double, kCommGroups>& bytes, StageBreakdown& br) {
  const auto of = [&](CommGroup g) { return bytes[static_cast<int>(g)]; };
  br.tp_comm_bytes += of(CommGroup::kTp);
  br.cp_comm_bytes += of(CommGroup::kCp);
  br.ep_comm_bytes += of(CommGroup::kEp) + of(CommGroup::kEpEtp);
  br.etp_comm_bytes += of(CommGroup::kEtp);
}

// A chunk's layers' (or one layer's) costs into the stage's breakdown (compute, overhead,
// recompute, TP / CP / EP / ETP communication and what overlap hides, all their bytes) and their
// TP, CP and MoE collectives into the chunk's timeline figures.
void AddLayerBreakdown(const LayerCost& l, ChunkCosts& ch, StageBreakdown& br) {
  br.compute_s += l.compute;
  br.overhead_s += l.overhead;
  br.tp_comm_s += l.comm - l.cp_comm - l.ep_comm;
  br.cp_comm_s += l.cp_comm;
  br.recompute_s += l.recompute;
  br.tp_comm_hidden_s += l.comm_hidden;
  br.cp_comm_hidden_s += l.cp_hidden;
  br.ep_comm_s += l.ep_comm;
  ch.forward_cp_s += l.f_cp;
  ch.forward_ep_dispatch_s += l.f_dispatch;
  ch.forward_ep_combine_s += l.f_combine;
  ch.backward_cp_s += l.b_cp;
  ch.backward_ep_dispatch_s += l.b_dispatch;
  ch.backward_ep_combine_s += l.b_combine;
  ch.forward_tp_s += l.f_tp;
  ch.backward_tp_s += l.b_tp;
  ch.weight_tp_s += l.w_tp;
  br.etp_comm_s += l.etp_comm;
  AddCommBytes(l.comm_bytes, br);
}

// A breakdown's figures added to another's (each field; the order of the sums is the same as
// adding their parts one by one when `from` was built from zero).
void AddBreakdown(const StageBreakdown& from, StageBreakdown& to) {
  to.compute_s += from.compute_s;
  to.tp_comm_s += from.tp_comm_s;
  to.tp_comm_hidden_s += from.tp_comm_hidden_s;
  to.cp_comm_s += from.cp_comm_s;
  to.cp_comm_hidden_s += from.cp_comm_hidden_s;
  to.ep_comm_s += from.ep_comm_s;
  to.etp_comm_s += from.etp_comm_s;
  to.pp_comm_s += from.pp_comm_s;
  to.recompute_s += from.recompute_s;
  to.overhead_s += from.overhead_s;
  to.dp_comm_s += from.dp_comm_s;
  to.dp_exposed_s += from.dp_exposed_s;
  to.tp_comm_bytes += from.tp_comm_bytes;
  to.cp_comm_bytes += from.cp_comm_bytes;
  to.ep_comm_bytes += from.ep_comm_bytes;
  to.etp_comm_bytes += from.etp_comm_bytes;
  to.pp_comm_bytes += from.pp_comm_bytes;
  to.dp_comm_bytes += from.dp_comm_bytes;
}

PartKey KeyOf(const ParallelConfig& p, const CostOptions& options, const GroupPlacements& groups,
              int part) {
  return {p.tp,
          p.cp,
          static_cast<int>(p.cp_comm),
          p.micro_batch_size,
          part,
          part < kEndsPart
              ? static_cast<int>(p.recompute) |
                    (p.recompute == Recompute::kSelective ? p.recompute_modules << 4 : 0)
              : 0,
          p.sequence_parallel,
          p.schedule == Schedule::kZbH1,
          options.tp_comm_overlap && p.sequence_parallel && p.tp > 1,
          p.pp > 1,
          static_cast<int>(options.moe_token_dispatcher),
          p.ep,
          p.expert_tp(),
          groups.tp,
          groups.cp,
          groups.ep,
          groups.etp,
          groups.ep_etp};
}

// The options without the fields a layer's costs do not depend on (or that PartKey holds).
CostOptions LayerOptions(CostOptions o) {
  o.overlap_grad_reduce = o.overlap_param_gather = o.tp_comm_overlap = false;
  o.moe_token_dispatcher = MoeDispatcher::kAllGather;
  o.ddp_bucket_size = 0;
  return o;
}

}  // namespace

struct SizesHash {
  size_t operator()(const std::array<int, 6>& k) const {
    size_t h = 0;
    for (int x : k) h = h * 1'000'003 + static_cast<size_t>(x);
    return h;
  }
};

// What EstimatePrepared works out, each repeated virtual stage and pipeline stage held once
// (StepCostsView), with what each distinct virtual stage adds to its stage's breakdown.
struct CompactCosts {
  std::vector<ChunkCosts> chunks;
  std::vector<StageBreakdown> breakdowns;  // beside chunks, when asked for
  std::vector<int> chunk_of;               // by virtual stage
  std::vector<StageCosts> stages;
  std::vector<int> stage_of;       // by pipeline stage
  std::vector<ChunkLayers> kinds;  // each virtual stage's layers, where the chunks differ
  StepCostsView View() const { return {chunks, chunk_of, stages, stage_of}; }
};

struct LayerCostCache::Impl {
  // tp, cp, dp, pp, ep, etp
  std::unordered_map<std::array<int, 6>, LayoutPlacements, SizesHash> placements;
  const ModelSpec* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  const TrainingSpec* training = nullptr;
  CostOptions options;
  std::optional<KernelTimer> timer;
  // A configuration's layer costs by slot [kind][fp8][recompute] (the key's part 0 stands for
  // them all: one lookup per evaluation), each computed when first met.
  using Slots = std::array<std::unique_ptr<LayerCost>, ChunkLayers::kSlots>;
  std::unordered_map<PartKey, Slots, PartKeyHash> layers;
  std::unordered_map<PartKey, EndParts, PartKeyHash> ends;
  double model_flops = -1;  // per step (flops.h), once known
  CompactCosts scratch;     // the last evaluation's (its vectors' storage is reused)

  // The timer for this model, cluster, training and software; checks that they do not change.
  const KernelTimer& Bind(const ModelSpec& m, const ClusterSpec& c, const TrainingSpec& t,
                          const CostOptions& o) {
    if (!timer) {
      model = &m, cluster = &c, training = &t, options = LayerOptions(o);
      timer.emplace(c, t.precision, o);
    }
    PTDP_CHECK(model == &m && cluster == &c && training == &t && options == LayerOptions(o));
    return *timer;
  }
};

LayerCostCache::LayerCostCache() : impl_(std::make_unique<Impl>()) {}
LayerCostCache::~LayerCostCache() = default;

namespace {

// What EstimateStep needs besides the configuration: the layout's group placements (and the
// groups the passes' collectives name), the kernel timer, the embedding's and output layer's
// passes, and a search's cache (null: none), which keeps the layer costs met before and the
// model's FLOPs per step.
struct Prepared {
  const LayoutPlacements& placed;
  const GroupPlacements& groups;
  const KernelTimer& timer;
  const EndParts& ends;
  LayerCostCache::Impl* shared;
};

// ---- EstimatePrepared, in phases: what the evaluation shares (Evaluation: the figures every
// phase reads, the pipeline's sends; beside it the layer costs and parameters met so far), every
// virtual stage's costs (FillChunks: each distinct chunk's layers summed once, SumLayers, then
// its other parts, AddChunkParts), every pipeline stage's (FillStages, StageCostsOf). The
// planner runs them millions of times per search (results/bench/cost_model.md): they are inline
// functions, as the lambdas of the single function they were.

// Sends from each stage to the next (r: r -> r + 1 mod p). The pairs r -> r + 1 < p share
// one placement when the ranks between stages fill whole nodes (or more); then time it once,
// else each (kept only then).
struct PipelineSends {
  int pp = 1;
  double bytes = 0;  // what each GPU sends of an activation (or its gradient)
  bool same_pairs = false;
  double uniform = 0, wrap = 0;
  std::span<const double> pair;  // by r < p - 1, when the pairs differ
  // The time of a send from stage r to the next.
  double operator()(int r) const { return r == pp - 1 ? wrap : same_pairs ? uniform : pair[r]; }
};

// The sends' times, each pair's into `pair` (which holds them) when the pairs differ.
inline PipelineSends Sends(const ModelSpec& m, const ClusterSpec& c, const ParallelConfig& p,
                           const CostOptions& options, Precision precision,
                           const LayoutPlacements& placed, std::vector<double>& pair) {
  const int pp = p.pp;
  PipelineSends s;
  s.pp = pp;
  s.bytes = pp > 1 ? SendBytes(m, p, precision, options) : 0;
  const int64_t stage_ranks = p.tp * p.dp_cp();
  s.same_pairs = stage_ranks % c.gpus_per_node == 0 || stage_ranks >= c.gpus_per_node;
  if (pp > 1) {
    if (s.same_pairs) {
      s.uniform = SendTime(c, m, p, precision, options, placed.first_pair, placed.tp);
    } else {
      pair.resize(pp - 1);
      for (int r = 0; r < pp - 1; ++r) {
        pair[r] =
            SendTime(c, m, p, precision, options, PipelinePair(p, r, c.gpus_per_node), placed.tp);
      }
      s.pair = pair;
    }
    s.wrap = SendTime(c, m, p, precision, options, placed.last_pair, placed.tp);
  }
  return s;
}

// Megatron-FSDP's sharding: gradients (optim_grads, optim_grads_params) and parameters
// (optim_grads_params), whose traffic AddFsdpTraffic adds per micro-batch.
struct FsdpTraffic {
  bool grads = false, params = false;
};
// One layer's gather and reduce-scatter, for the last unit size met (most chunks share it).
struct FsdpUnit {
  double params = -1, experts = -1, gather = 0, scatter = 0;
};

// An MTP layer (CountParameters): the last layer's kind, and its projection and norms.
struct MtpLayer {
  int kind = 0, fp8 = 0;
  double extra = 0;    // the projection and norms
  double params = 0;   // with the layer's (the projection and norms alone without MTP layers)
  double experts = 0;  // of params, the layer's experts
};

// One cost per layer slot [kind][fp8][recompute], computed when a chunk first has such
// layers (kept by pointer: most configurations meet two or three of the slots).
class LayerCosts {
 public:
  LayerCosts(const ModelSpec& m, const ClusterSpec& c, const TrainingSpec& training,
             const ParallelConfig& p, const CostOptions& options, const Prepared& prepared)
      : m_(m), c_(c), training_(training), p_(p), options_(options), prepared_(prepared) {}

  const LayerCost& operator()(int e, int f, int r) {
    const int slot = 4 * e + 2 * f + r;
    if (layer_[slot] == nullptr) {
      ParallelConfig q = p_;
      if (r == 0) q.recompute = Recompute::kNone;
      const LayerKind kind = static_cast<LayerKind>(e);
      const KernelTimer& timer = prepared_.timer;
      const GroupPlacements& groups = prepared_.groups;
      LayerCostCache::Impl* shared = prepared_.shared;
      if (shared != nullptr) {
        if (cached_ == nullptr) cached_ = &shared->layers[KeyOf(p_, options_, groups, 0)];
        std::unique_ptr<LayerCost>& known = (*cached_)[slot];
        if (!known) {
          known = std::make_unique<LayerCost>(
              CostOfLayer(m_, c_, training_, q, options_, timer, groups, f == 1, kind));
        }
        layer_[slot] = known.get();
      } else {
        layer_[slot] = new (&own_.slot[own_used_++])
            LayerCost(CostOfLayer(m_, c_, training_, q, options_, timer, groups, f == 1, kind));
      }
    }
    return *layer_[slot];
  }

 private:
  const ModelSpec& m_;
  const ClusterSpec& c_;
  const TrainingSpec& training_;
  const ParallelConfig& p_;
  const CostOptions& options_;
  const Prepared& prepared_;
  const LayerCost* layer_[ChunkLayers::kSlots] = {};
  // Without a cache, the costs live here, each constructed when first needed (LayerCost is
  // plain doubles: nothing to destroy).
  union OwnLayers {
    OwnLayers() {}
    LayerCost slot[ChunkLayers::kSlots];
  } own_;
  int own_used_ = 0;
  LayerCostCache::Impl::Slots* cached_ = nullptr;  // with a cache: this configuration's there
};

// Each layer kind's parameters on this GPU, computed when first met.
class KindParams {
 public:
  KindParams(const ModelSpec& m, const ParallelConfig& p) : m_(m), p_(p) {}
  const LayerParams& operator()(int kind) {
    if (!have_[kind]) {
      params_[kind] = LayerKindParams(m_, p_, static_cast<LayerKind>(kind));
      have_[kind] = true;
    }
    return params_[kind];
  }
  // As far as met: zero before the kind's are asked for.
  const LayerParams& Met(int kind) const { return params_[kind]; }

 private:
  const ModelSpec& m_;
  const ParallelConfig& p_;
  LayerParams params_[kNumLayerKinds];
  bool have_[kNumLayerKinds] = {};
};

// What the phases of one evaluation share: its configuration and preparation and the figures
// they read. The layer costs and parameters met so far and each virtual stage's layers are
// objects of their own, referred to: the functions that work them out see them, while the
// figures here, seen by no such function, stay at hand (in registers) through the phases.
struct Evaluation {
  Evaluation(const ModelSpec& model, const ClusterSpec& cluster, const TrainingSpec& train,
             const ParallelConfig& parallel, const CostOptions& opts, const Prepared& prep,
             LayerCosts& layer_costs, KindParams& kind_params, const ChunkKinds& kinds,
             std::vector<double>& pair_sends)
      : m(model),
        c(cluster),
        training(train),
        p(parallel),
        options(opts),
        prepared(prep),
        ends(prep.ends),
        pp(parallel.pp),
        v(parallel.virtual_stages),
        layer(layer_costs),
        params(kind_params),
        chunk_kinds(kinds),
        sends(Sends(model, cluster, parallel, opts, train.precision, prep.placed, pair_sends)),
        gbytes(GradientBytes(train.precision, opts)),
        ebytes(BytesPerElement(train.precision)),
        uniform(UniformChunks(model, train, parallel)),
        alike(MiddleStagesAlike(model, train, parallel)),
        kind_end(LayerKindEnd(model)) {
    fsdp.grads = p.fsdp == Fsdp::kOptimGrads || p.fsdp == Fsdp::kOptimGradsParams;
    fsdp.params = p.fsdp == Fsdp::kOptimGradsParams;
    mtp.kind = static_cast<int>(m.IsMoeLayer(m.num_layers - 1) ? LayerKind::kMoeTransformer
                                                               : LayerKind::kTransformer);
    mtp.fp8 = training.precision == Precision::kFp8 && training.fp8_bf16_layers_at_end == 0 ? 1 : 0;
    mtp.extra = 2.0 * m.hidden_size * m.hidden_size / p.tp + 3.0 * m.hidden_size;
    mtp.params = m.mtp_num_layers > 0 ? params(mtp.kind).total() + mtp.extra : mtp.extra;
    mtp.experts = m.mtp_num_layers > 0 ? params(mtp.kind).experts : 0;
  }

  const ModelSpec& m;
  const ClusterSpec& c;
  const TrainingSpec& training;
  const ParallelConfig& p;
  const CostOptions& options;
  const Prepared& prepared;
  const EndParts& ends;  // prepared.ends
  const int pp, v;       // pipeline stages, virtual stages per pipeline stage
  LayerCosts& layer;
  KindParams& params;
  const ChunkKinds& chunk_kinds;
  const PipelineSends sends;
  const double gbytes, ebytes;  // a gradient's and a weight's bytes
  const bool uniform;           // every chunk's layers are the first's (UniformChunks)
  const bool alike;             // the stages between the first and the last are (MiddleStagesAlike)
  const int kind_end;           // the layer kinds are [0, kind_end)
  FsdpTraffic fsdp;
  MtpLayer mtp;
};

// The layers' part of a chunk, the same for every chunk of the same kinds (most of them): as
// it enters the chunk's costs and the stage's breakdown, worked out once per distinct chunk.
struct LayerSums {
  ChunkLayers kinds;
  LayerCost sum = {};
  double params = 0, expert_params = 0;  // of params, the experts'
  ChunkCosts chunk = {};
  StageBreakdown breakdown = {};
};

// The layers `k` summed into `sums` (its previous contents dropped): n times each slot's costs,
// slot by slot in the order of the kinds.
inline void SumLayers(const Evaluation& ev, const ChunkLayers& k, LayerSums& sums) {
  sums = LayerSums{.kinds = k};
  for (int e = 0; e < ev.kind_end; ++e) {
    if (k.OfKind(static_cast<LayerKind>(e)) == 0) continue;
    for (int slot = 0; slot < 4; ++slot) {
      const int f = slot / 2, rc = slot % 2;
      const double n = k.count[e][f][rc];
      if (n == 0) continue;
      const LayerCost& l = ev.layer(e, f, rc);
      LayerCost& s = sums.sum;
      s.forward += n * l.forward;
      s.backward_input += n * l.backward_input;
      s.backward_weight += n * l.backward_weight;
      s.activation_bytes += n * l.activation_bytes;
      s.weight_grad_activation_bytes += n * l.weight_grad_activation_bytes;
      s.compute += n * l.compute;
      s.overhead += n * l.overhead;
      s.comm += n * l.comm;
      s.recompute += n * l.recompute;
      s.comm_hidden += n * l.comm_hidden;
      s.cp_comm += n * l.cp_comm;
      s.cp_hidden += n * l.cp_hidden;
      s.ep_comm += n * l.ep_comm;
      s.etp_comm += n * l.etp_comm;
      s.f_cp += n * l.f_cp;
      s.f_dispatch += n * l.f_dispatch;
      s.f_combine += n * l.f_combine;
      s.b_cp += n * l.b_cp;
      s.b_dispatch += n * l.b_dispatch;
      s.b_combine += n * l.b_combine;
      s.f_tp += n * l.f_tp;
      s.b_tp += n * l.b_tp;
      s.w_tp += n * l.w_tp;
      for (int g = 0; g < kCommGroups; ++g) s.comm_bytes[g] += n * l.comm_bytes[g];
      sums.params += n * ev.params(e).total();
      sums.expert_params += n * ev.params(e).experts;
    }
  }
  const LayerCost& s = sums.sum;
  sums.chunk.forward_s = s.forward;
  sums.chunk.backward_input_s = s.backward_input;
  sums.chunk.backward_weight_s = s.backward_weight;
  sums.chunk.activation_bytes = s.activation_bytes;
  sums.chunk.weight_grad_activation_bytes = s.weight_grad_activation_bytes;
  AddLayerBreakdown(s, sums.chunk, sums.breakdown);
}

// The embedding's (first virtual stage) or the output layer's (last) passes added to a chunk's
// costs and its stage's breakdown.
inline void AddEndPart(const PassTimes& pf, const PassTimes& pb, const PassTimes& pw, double act,
                       ChunkCosts& ch, StageBreakdown& br) {
  ch.forward_s += pf.total();
  ch.backward_input_s += pb.total();
  ch.backward_weight_s += pw.total();
  ch.activation_bytes += act;
  br.compute_s += pf.compute + pb.compute + pw.compute + pf.overhead + pb.overhead + pw.overhead;
  br.overhead_s += pf.overhead + pb.overhead + pw.overhead;
  br.tp_comm_s += pf.comm + pb.comm + pw.comm;
  ch.forward_tp_s += pf.comm, ch.backward_tp_s += pb.comm, ch.weight_tp_s += pw.comm;
  for (const PassTimes* t : {&pf, &pb, &pw}) AddCommBytes(t->comm_bytes, br);
}

// One collective over data parallel (the dense bytes) and one over expert data parallel (the
// experts' bytes; none without experts), one after the other (Megatron keeps the experts'
// buffers apart): their times.
struct DenseAndExpertTimes {
  double dense, expert;
  double total() const { return dense + expert; }
};
inline DenseAndExpertTimes DataParallelTimes(const Evaluation& ev, Collective collective,
                                             double dense_bytes, double expert_bytes) {
  const LayoutPlacements& placed = ev.prepared.placed;
  return {CollectiveTime(ev.c, collective, dense_bytes, placed.dp),
          CollectiveTime(ev.c, collective, expert_bytes, placed.edp)};
}

// Megatron-FSDP's per-micro-batch data-parallel traffic of one layer (Megatron-FSDP v1,
// megatron/core/distributed/fsdp): sharded gradients are reduce-scattered after each layer's
// backward in every micro-batch; sharded parameters are all-gathered before each layer's
// forward and again before its backward. The experts are sharded over the expert data-parallel
// group, as the distributed optimizer shards them (megatron/core/distributed/fsdp/
// mcore_fsdp_adapter.py passes Megatron-FSDP the expert data-parallel group for them): their
// gathers and reduce-scatters run over it, the rest over data parallel. A separate stream runs them
// while neighbouring layers compute (prefetch); the first gather and the last reduce-scatter of a
// pass are exposed. Here a chunk's, of `layers` layers and `chunk_params` parameters (with the
// embedding or output part, `has_end`), added to its costs and its stage's breakdown; `last`
// is the unit met before.
inline void AddFsdpTraffic(const Evaluation& ev, FsdpUnit& last, int layers, bool has_end,
                           double chunk_params, double chunk_experts, ChunkCosts& ch,
                           StageBreakdown& br) {
  const FsdpTraffic& fsdp = ev.fsdp;
  const GroupPlacement& dp = ev.prepared.placed.dp;
  // Per layer, as Megatron-FSDP's units; the embedding and output parts as one more.
  const double units = std::max(1, layers) + (has_end ? 1 : 0);
  const double unit = (chunk_params - chunk_experts) / units, experts = chunk_experts / units;
  if (unit != last.params || experts != last.experts) {
    last.params = unit;
    last.experts = experts;
    last.gather = fsdp.params ? DataParallelTimes(ev, Collective::kAllGather, unit * ev.ebytes,
                                                  experts * ev.ebytes)
                                    .total()
                              : 0.0;
    last.scatter = fsdp.grads ? DataParallelTimes(ev, Collective::kReduceScatter, unit * ev.gbytes,
                                                  experts * ev.gbytes)
                                    .total()
                              : 0.0;
  }
  const double gather = units * last.gather, scatter = units * last.scatter;
  const double forward = ch.forward_s, backward = ch.backward_input_s + ch.backward_weight_s;
  const double exposed_f = std::max(forward, gather) - forward + last.gather;
  const double exposed_b = std::max(backward, gather + scatter) - backward + last.scatter;
  ch.forward_s += exposed_f;
  ch.backward_weight_s += exposed_b;
  ch.forward_fsdp_s += gather;
  ch.backward_fsdp_s += gather;
  ch.weight_fsdp_s += scatter;
  br.dp_comm_s += 2 * gather + scatter;
  br.dp_exposed_s += exposed_f + exposed_b;
  if (dp.ranks > 1) {
    br.dp_comm_bytes += chunk_params * ((fsdp.params ? 2 * ev.ebytes : 0) + ev.gbytes);
  }
}

// Virtual stage (chunk, r)'s parts besides its layers (`sums`, in `ch` and `br` already), into
// its costs and what it adds to its stage's breakdown: its sends, the framework's work per
// micro-batch, the embedding's and output layer's passes, MTP layers, Megatron-FSDP's traffic
// (`fsdp_unit`: the unit met before).
inline void AddChunkParts(const Evaluation& ev, FsdpUnit& fsdp_unit, const LayerSums& sums,
                          int chunk, int r, bool first, bool last, ChunkCosts& ch,
                          StageBreakdown& br) {
  const ModelSpec& m = ev.m;
  const ClusterSpec& c = ev.c;
  const int pp = ev.pp;
  const EndParts& ends = ev.ends;
  double chunk_params = sums.params, chunk_experts = sums.expert_params;
  ch.send_forward_s = last ? 0 : ev.sends(r);
  ch.send_backward_s = first ? 0 : ev.sends(r == 0 ? pp - 1 : r - 1);
  br.pp_comm_s += ch.send_forward_s + ch.send_backward_s;
  br.pp_comm_bytes += ((last ? 0 : 1) + (first ? 0 : 1)) * ev.sends.bytes;
  if (chunk == 0) {
    // Once per micro-batch on each stage: the framework's work around the layers.
    ch.forward_s += c.host.microbatch_overhead_s;
    br.compute_s += c.host.microbatch_overhead_s;
    br.overhead_s += c.host.microbatch_overhead_s;
  }
  // The embedding (first virtual stage) and the output layer (last) add their passes.
  if (first) {
    AddEndPart(ends.ef, ends.eb, ends.ew, ends.emb_act, ch, br);
    chunk_params += ends.emb_parameters;
  }
  if (last) {
    AddEndPart(ends.of, ends.ob, ends.ow, ends.out_act, ch, br);
    chunk_params += ends.out_parameters;
  }
  if (last && m.mtp_num_layers > 0) {
    // Multi-token prediction with the loss: per MTP layer a transformer layer of the last
    // layer's kind (not recomputed), its projection, and the LM head and loss again.
    const LayerCost& l = ev.layer(ev.mtp.kind, ev.mtp.fp8, 0);
    for (int i = 0; i < m.mtp_num_layers; ++i) {
      ch.forward_s += l.forward;
      ch.backward_input_s += l.backward_input;
      ch.backward_weight_s += l.backward_weight;
      AddLayerBreakdown(l, ch, br);  // not recomputed: its recompute is 0
      ch.activation_bytes += l.activation_bytes;
      ch.weight_grad_activation_bytes += l.weight_grad_activation_bytes;
      AddEndPart(ends.of, ends.ob, ends.ow, ends.out_act, ch, br);
      chunk_params += ev.mtp.params;
      chunk_experts += ev.mtp.experts;
    }
  }
  if (ev.fsdp.grads && chunk_params > 0) {
    AddFsdpTraffic(ev, fsdp_unit, sums.kinds.total(), first || last, chunk_params, chunk_experts,
                   ch, br);
  }
  if (!ev.options.overlap_p2p_communication) {
    ch.forward_s += ch.send_forward_s;
    ch.backward_input_s += ch.send_backward_s;
    ch.send_forward_s = ch.send_backward_s = 0;
  }
}

// With uniform sends, a virtual stage's costs and what it adds to its stage's breakdown
// depend only on its layers and on whether it is its stage's first chunk, the first or last
// virtual stage, or on the first or last pipeline stage: each such kind is worked out once and
// referred to (a 64-stage pipeline has three; an uneven split a few more). The layer
// compositions are told apart among the first kMaxCompositions met (with uniform chunks there
// is one).
class RepeatedChunks {
 public:
  // Off (outside a search), none is told apart and Key is not called.
  explicit RepeatedChunks(bool on) {
    if (on) at_.fill(-1);
  }
  // The key of virtual stage (chunk, r) of layers `k`; -1: none (not told apart).
  int Key(const ChunkLayers& k, bool uniform, int chunk, bool first, bool last, int r, int pp) {
    int id = 0;
    if (!uniform) {
      while (id < num_compositions_ && !(compositions_[id] == k)) ++id;
      if (id == num_compositions_) {
        if (num_compositions_ < kMaxCompositions) {
          compositions_[num_compositions_++] = k;
        } else {
          id = -1;
        }
      }
    }
    const int position = (chunk == 0) << 4 | first << 3 | last << 2 | (r == 0) << 1 | (r == pp - 1);
    return id >= 0 ? id * kPositions + position : -1;
  }
  // The index into the chunks of the one worked out with `key`; -1: none.
  int Find(int key) const { return key >= 0 ? at_[key] : -1; }
  void Remember(int key, int index) {
    if (key >= 0) at_[key] = index;
  }

 private:
  static constexpr int kMaxCompositions = 4, kPositions = 32;
  std::array<int, kMaxCompositions * kPositions> at_;  // index into out.chunks, or -1
  std::array<ChunkLayers, kMaxCompositions> compositions_;
  int num_compositions_ = 0;
};

// Every virtual stage's costs into out.chunks, each distinct one once (out.chunk_of: whose is
// each virtual stage's), with `breakdowns` what each adds to its stage's breakdown, and where
// the chunks differ each virtual stage's layers (out.kinds). `sums` ends with the last distinct
// chunk's layers (with uniform chunks, every chunk's).
inline void FillChunks(const Evaluation& ev, bool breakdowns, LayerSums& sums, CompactCosts& out) {
  const int pp = ev.pp, v = ev.v, vstages = pp * v;
  const bool uniform = ev.uniform, alike = ev.alike;
  out.chunk_of.reserve(vstages);
  bool have_sums = false;
  // Only in a search (with a cache): a single evaluation works every virtual stage out, and the
  // tests compare the two.
  const bool copy_repeats = ev.sends.same_pairs && ev.prepared.shared != nullptr;
  RepeatedChunks repeats(copy_repeats);
  ChunkLayers own_kinds;
  FsdpUnit fsdp_unit;
  for (int chunk = 0, vs = 0; chunk < v; ++chunk) {
    for (int r = 0; r < pp; ++r, ++vs) {
      if (copy_repeats && alike && r >= 2 && r < pp - 1) {
        // A middle virtual stage of alike stages is its row's second (r = 1) in every respect
        // the key tells apart: refer to that one's costs without forming the key.
        out.chunk_of.push_back(out.chunk_of[vs - (r - 1)]);
        if (!uniform) out.kinds.push_back(out.kinds[vs - (r - 1)]);
        continue;
      }
      const bool first = vs == 0, last = vs == vstages - 1;
      // With uniform chunks every chunk is the first's (no comparison); with middle stages
      // alike, a row's middle chunks are its second rank's.
      if (!have_sums || (!uniform && !(alike && r >= 2 && r < pp - 1))) {
        own_kinds = ev.chunk_kinds(vs);
      }
      const ChunkLayers& k = uniform && have_sums ? sums.kinds : own_kinds;
      if (!uniform) out.kinds.push_back(k);
      const int key = copy_repeats ? repeats.Key(k, uniform, chunk, first, last, r, pp) : -1;
      if (const int at = repeats.Find(key); at >= 0) {
        out.chunk_of.push_back(at);
        continue;
      }
      if (!have_sums || (!uniform && !(k == sums.kinds))) {
        SumLayers(ev, k, sums);
        have_sums = true;
      }
      // The chunk's costs, and what it adds to its stage's breakdown.
      ChunkCosts ch = sums.chunk;
      StageBreakdown br = sums.breakdown;
      AddChunkParts(ev, fsdp_unit, sums, chunk, r, first, last, ch, br);
      const int index = static_cast<int>(out.chunks.size());
      out.chunks.push_back(ch);
      if (breakdowns) out.breakdowns.push_back(br);
      out.chunk_of.push_back(index);
      repeats.Remember(key, index);
    }
  }
}

// What every pipeline stage's costs read: bytes per parameter (dense and experts), the
// optimizer step's HBM bytes per parameter, whether the optimizer state is sharded, the DDP
// bucket's parameters.
struct PerStage {
  BytesPerParameter per_param, expert_per_param;
  double opt_bytes = 0;
  bool shard_optimizer = false;
  double bucket = 0;
};

inline PerStage MakePerStage(const Evaluation& ev) {
  const ModelSpec& m = ev.m;
  const TrainingSpec& training = ev.training;
  const ParallelConfig& p = ev.p;
  PerStage s;
  s.per_param = BytesPerParam(training, p, ev.options);
  s.opt_bytes = OptimizerBytesPerParam(training, ev.options);
  s.shard_optimizer = p.distributed_optimizer || p.fsdp != Fsdp::kNone;
  s.bucket = static_cast<double>(DdpBucketParameters(ev.options, p.dp_cp()));
  s.expert_per_param =
      m.moe() ? BytesPerParam(training, p, ev.options, p.expert_dp()) : BytesPerParameter{};
  return s;
}

// A pipeline stage's parameters: dense ones (reduced over dp x cp) with the embedding, output
// and MTP parts, experts (reduced over the expert data-parallel group), and of them the FP8
// layers' linear weights and experts.
struct StageParams {
  double params = 0, experts = 0, fp8_weights = 0, fp8_experts = 0;
};

// Stage r's: its chunks' layers are `kinds` by virtual stage, or with uniform chunks
// `uniform_kinds`.
inline StageParams StageParameters(const Evaluation& ev, const ChunkLayers& uniform_kinds,
                                   const std::vector<ChunkLayers>& kinds, int r) {
  const ModelSpec& m = ev.m;
  const int pp = ev.pp, v = ev.v;
  // The stage's layers by kind: parameters reduced over dp x cp (dense) and over the expert
  // data-parallel group (experts), and the FP8 layers' linear weights and experts.
  double dense_params = 0, expert_params = 0;
  StageParams s;
  for (int ch = 0; ch < v; ++ch) {
    const ChunkLayers& k = ev.uniform ? uniform_kinds : kinds[ch * pp + r];
    for (int e = 0; e < ev.kind_end; ++e) {
      const int n = k.OfKind(static_cast<LayerKind>(e));
      if (n == 0) continue;
      const LayerParams& lp = ev.params(e);
      const int n_fp8 = k.count[e][1][0] + k.count[e][1][1];
      dense_params += n * lp.dense;
      expert_params += n * lp.experts;
      s.fp8_weights += n_fp8 * lp.linear_weights;
      s.fp8_experts += n_fp8 * lp.experts;
    }
  }
  const double mtp = r == pp - 1 ? m.mtp_num_layers : 0;
  const LayerParams& mtp_layer = mtp > 0 ? ev.params(ev.mtp.kind) : ev.params.Met(0);
  const EndParts& ends = ev.ends;
  s.params = dense_params + (r == 0 ? ends.emb_parameters : 0) +
             (r == pp - 1 ? ends.out_parameters : 0) + mtp * (mtp_layer.dense + ev.mtp.extra);
  s.experts = expert_params + mtp * mtp_layer.experts;
  return s;
}

// A collective of the stage's gradients or parameters over the data-parallel group (dense
// bytes) and the expert data-parallel group (expert bytes), one after the other (Megatron's
// expert buckets are their own): its time, with the bytes and the expert part into `st`.
inline double DataParallelCollective(const Evaluation& ev, const StageParams& sp,
                                     Collective collective, double dense_bytes, double expert_bytes,
                                     StageCosts& st) {
  const LayoutPlacements& placed = ev.prepared.placed;
  const DenseAndExpertTimes t =
      DataParallelTimes(ev, collective, dense_bytes, sp.experts > 0 ? expert_bytes : 0.0);
  st.expert_dp_comm_s += t.expert;
  if (placed.dp.ranks > 1) st.dp_comm_bytes += dense_bytes;
  if (sp.experts > 0 && placed.edp.ranks > 1) {
    st.dp_comm_bytes += expert_bytes;
    st.expert_dp_comm_bytes += expert_bytes;
  }
  return t.total();
}

// The stage's gradient reduction and parameter gather once per step, by its sharding.
inline void DataParallelSync(const Evaluation& ev, const PerStage& k, const StageParams& sp,
                             StageCosts& st) {
  const double params = sp.params, experts = sp.experts, gbytes = ev.gbytes;
  // The step's parameter all-gather moves 16-bit weights, or FP8 ones for the FP8 linears
  // with --fp8-param-gather.
  const double fp8_gathered = ev.training.fp8_param_gather ? 1 : 0;
  const double gather_bytes = params * ev.ebytes - fp8_gathered * (sp.fp8_weights - sp.fp8_experts);
  const double expert_gather_bytes = experts * ev.ebytes - fp8_gathered * sp.fp8_experts;
  const auto both = [&](Collective collective, double dense_bytes, double expert_bytes) {
    return DataParallelCollective(ev, sp, collective, dense_bytes, expert_bytes, st);
  };
  if (ev.fsdp.grads) {
    // Gradients were reduce-scattered in the backward; optim_grads all-gathers the updated
    // parameters after the step, optim_grads_params leaves them sharded (gathered per layer).
    if (!ev.fsdp.params) {
      st.dp_param_gather_s = both(Collective::kAllGather, gather_bytes, expert_gather_bytes);
    }
  } else if (k.shard_optimizer) {
    // Rajbhandari et al. 2020 (ZeRO-1), Megatron's distributed optimizer (and Megatron-FSDP
    // optim): reduce-scatter the gradients, update the 1/dp shard, all-gather the updated
    // 16-bit weights.
    st.dp_grad_sync_s = both(Collective::kReduceScatter, params * gbytes, experts * gbytes);
    st.dp_param_gather_s = both(Collective::kAllGather, gather_bytes, expert_gather_bytes);
  } else {
    st.dp_grad_sync_s = both(Collective::kAllReduce, params * gbytes, experts * gbytes);
  }
}

// Pipeline stage r's costs once per step (the chunks' costs in out.chunks already): its
// data-parallel sync and its overlap, the optimizer step, the embedding sync, static bytes.
inline StageCosts StageCostsOf(const Evaluation& ev, const PerStage& k,
                               const ChunkLayers& uniform_kinds, const CompactCosts& out, int r) {
  const ModelSpec& m = ev.m;
  const ClusterSpec& c = ev.c;
  const ParallelConfig& p = ev.p;
  const CostOptions& options = ev.options;
  const int pp = ev.pp, v = ev.v;
  const StageParams sp = StageParameters(ev, uniform_kinds, out.kinds, r);
  const double params = sp.params, experts = sp.experts;
  StageCosts st;
  DataParallelSync(ev, k, sp, st);
  const double shard = k.shard_optimizer ? static_cast<double>(p.dp_cp()) : 1;
  const double expert_shard = k.shard_optimizer ? static_cast<double>(p.expert_dp()) : 1;
  st.optimizer_s = MemoryTime(c.gpu, (params / shard + experts / expert_shard) * k.opt_bytes);
  if (sp.fp8_weights > 0) {
    // The FP8 weight copies and their transposes, cast once per step (read e, write 1 + 1;
    // current scaling reads the weights once more for their amax).
    const double passes = ev.training.fp8_recipe == Fp8Recipe::kDelayed ? 1 : 2;
    st.optimizer_s += MemoryTime(c.gpu, sp.fp8_weights * (passes * ev.ebytes + 2));
  }
  // The host's time for the step (host.optimizer_step_us: launching the optimizer's kernels,
  // the gradient norm and inf checks, logging) runs beside the kernels it launches, as a pass's
  // launches do (Times): the step takes the longer of the two.
  st.optimizer_s = std::max(st.optimizer_s, c.host.optimizer_step_s);
  st.overlap_grad_sync = options.overlap_grad_reduce && st.dp_grad_sync_s > 0;
  if (st.overlap_grad_sync) {
    st.dp_buckets = std::max(1, static_cast<int>(std::ceil((params + experts) / v / k.bucket)));
  }
  if (options.overlap_param_gather && st.dp_param_gather_s > 0) {
    // Bucket by bucket during the next forward: each bucket is waited for just before its
    // first layer runs, so what the forward of the stage's first micro-batch covers is
    // hidden; the first bucket never is.
    double first_forward = 0;
    for (int ch = 0; ch < v; ++ch) first_forward += out.chunks[out.chunk_of[ch * pp + r]].forward_s;
    const int buckets = std::max(1, static_cast<int>(std::ceil((params + experts) / k.bucket)));
    const double exposed =
        std::max(st.dp_param_gather_s / buckets, st.dp_param_gather_s - first_forward);
    st.dp_param_gather_hidden_s = st.dp_param_gather_s - exposed;
    st.dp_param_gather_s = exposed;
  }
  if (pp > 1 && m.tied_embeddings && (r == 0 || r == pp - 1)) {
    // Megatron's _allreduce_word_embedding_grads over the first and last stage.
    const double vocab_t = static_cast<double>(PaddedVocabSize(m, p.tp)) / p.tp;
    st.embedding_sync_s =
        CollectiveTime(c, Collective::kAllReduce, vocab_t * m.hidden_size * ev.gbytes,
                       ev.prepared.placed.embedding);
    st.embedding_sync_bytes = vocab_t * m.hidden_size * ev.gbytes;
  }
  st.static_bytes = params * k.per_param.total() + experts * k.expert_per_param.total() +
                    static_cast<double>(c.gpu.reserved_bytes);
  return st;
}

// Every pipeline stage's costs into out.stages, each distinct one once (out.stage_of: whose is
// each stage's); with uniform chunks every chunk's layers are `uniform_kinds`.
inline void FillStages(const Evaluation& ev, const ChunkLayers& uniform_kinds, CompactCosts& out) {
  const int pp = ev.pp;
  const PerStage k = MakePerStage(ev);
  // The stages between the first and the last are alike when their layers are (and their
  // sends, which the overlapped parameter gather's share depends on): compute one.
  if (ev.sends.same_pairs && ev.alike && pp > 1) {
    out.stages.push_back(StageCostsOf(ev, k, uniform_kinds, out, 0));
    out.stages.push_back(StageCostsOf(ev, k, uniform_kinds, out, pp - 1));
    if (pp > 2) out.stages.push_back(StageCostsOf(ev, k, uniform_kinds, out, 1));
    out.stage_of.assign(pp, 2);
    out.stage_of[0] = 0, out.stage_of[pp - 1] = 1;
  } else {
    for (int r = 0; r < pp; ++r) {
      out.stages.push_back(StageCostsOf(ev, k, uniform_kinds, out, r)), out.stage_of.push_back(r);
    }
  }
}

// Fills `out` (its previous contents dropped); the breakdowns only when `breakdowns`.
void EstimatePrepared(const ModelSpec& m, const ClusterSpec& c, const TrainingSpec& training,
                      const ParallelConfig& p, const CostOptions& options, const Prepared& prepared,
                      bool breakdowns, CompactCosts& out) {
  LayerCosts layers(m, c, training, p, options, prepared);
  KindParams params(m, p);
  const ChunkKinds chunk_kinds(m, training, p);
  std::vector<double> pair_sends;
  Evaluation ev(m, c, training, p, options, prepared, layers, params, chunk_kinds, pair_sends);
  out.chunks.clear(), out.breakdowns.clear(), out.chunk_of.clear();
  out.stages.clear(), out.stage_of.clear(), out.kinds.clear();
  LayerSums sums;
  FillChunks(ev, breakdowns, sums, out);
  FillStages(ev, sums.kinds, out);
}

// EstimateStep's preparation with a search's cache, then EstimatePrepared into the cache's
// scratch costs.
const CompactCosts& EstimateCached(LayerCostCache::Impl& shared, const ModelSpec& m,
                                   const ClusterSpec& c, const TrainingSpec& training,
                                   const ParallelConfig& p, const CostOptions& options,
                                   bool breakdowns) {
  const auto [at, placed_now] =
      shared.placements.try_emplace({p.tp, p.cp, p.dp, p.pp, p.ep, p.expert_tp()});
  if (placed_now) at->second = PlaceLayout(p, c.gpus_per_node);
  const LayoutPlacements& placed = at->second;
  const KernelTimer& timer = shared.Bind(m, c, training, options);
  const GroupPlacements groups{placed.tp, placed.cp, placed.ep, placed.etp, placed.ep_etp};
  const auto [it, inserted] = shared.ends.try_emplace(KeyOf(p, options, groups, kEndsPart));
  if (inserted) it->second = CostOfEnds(m, c, training, p, options, timer, groups);
  EstimatePrepared(m, c, training, p, options, {placed, groups, timer, it->second, &shared},
                   breakdowns, shared.scratch);
  return shared.scratch;
}

}  // namespace

StepEstimate EstimateStep(const ModelSpec& m, const ClusterSpec& c, const TrainingSpec& training,
                          const ParallelConfig& p, const CostOptions& options,
                          LayerCostCache* cache) {
  PTDP_CHECK(p.tp >= 1 && p.pp >= 1 && p.dp >= 1 && p.cp >= 1 && p.virtual_stages >= 1);
  CompactCosts own;
  const CompactCosts* k = &own;
  if (cache == nullptr) {
    const LayoutPlacements placed = PlaceLayout(p, c.gpus_per_node);
    const KernelTimer timer(c, training.precision, options);
    const GroupPlacements groups{placed.tp, placed.cp, placed.ep, placed.etp, placed.ep_etp};
    const EndParts ends = CostOfEnds(m, c, training, p, options, timer, groups);
    EstimatePrepared(m, c, training, p, options, {placed, groups, timer, ends, nullptr}, true, own);
  } else {
    k = &EstimateCached(cache->impl(), m, c, training, p, options, true);
  }
  // Each virtual stage and pipeline stage its own copy, and the breakdowns summed per stage in
  // the order of the virtual stages.
  const int pp = p.pp, vstages = pp * p.virtual_stages;
  StepEstimate est;
  est.microbatches = NumMicrobatches(training, p);
  est.costs.chunks.reserve(vstages);
  est.stages.assign(pp, StageBreakdown{});
  for (int vs = 0; vs < vstages; ++vs) {
    const int at = k->chunk_of[vs];
    est.costs.chunks.push_back(k->chunks[at]);
    AddBreakdown(k->breakdowns[at], est.stages[vs % pp]);
  }
  est.costs.stages.reserve(pp);
  for (int r = 0; r < pp; ++r) est.costs.stages.push_back(k->stages[k->stage_of[r]]);

  LayerCostCache::Impl* shared = cache != nullptr ? &cache->impl() : nullptr;
  if (shared != nullptr && shared->model_flops < 0) {
    shared->model_flops = ModelFlopsPerStep(m, training, options);
  }
  est.model_flops =
      shared != nullptr ? shared->model_flops : ModelFlopsPerStep(m, training, options);
  est.hardware_flops = est.model_flops + RecomputedFlopsPerStep(m, training, p, options);
  return est;
}

double EstimateStepLowerBound(const ModelSpec& m, const ClusterSpec& c,
                              const TrainingSpec& training, const ParallelConfig& p,
                              const CostOptions& options, LayerCostCache& cache) {
  PTDP_CHECK(p.tp >= 1 && p.pp >= 1 && p.dp >= 1 && p.cp >= 1 && p.virtual_stages >= 1);
  const CompactCosts& k = EstimateCached(cache.impl(), m, c, training, p, options, false);
  return StepTimeLowerBound(p.schedule, p.pp, static_cast<int>(NumMicrobatches(training, p)),
                            p.virtual_stages, k.View());
}

double ClosedFormStepTime(const StepCosts& costs, Schedule kind, int stages, int64_t microbatches,
                          int chunks) {
  PTDP_CHECK(stages >= 1 && chunks >= 1 && microbatches >= 1);
  PTDP_CHECK(static_cast<int>(costs.chunks.size()) == stages * chunks);
  PTDP_CHECK(static_cast<int>(costs.stages.size()) == stages);
  double max_t = 0, sum_t = 0, sum_w = 0, sum_send = 0;
  for (int r = 0; r < stages; ++r) {
    double t = 0, w = 0;
    for (int c = 0; c < chunks; ++c) {
      const ChunkCosts& ch = costs.chunks[c * stages + r];
      t += ch.forward_s + ch.backward_input_s + ch.backward_weight_s;
      w += ch.backward_weight_s;
      sum_send += ch.send_forward_s + ch.send_backward_s;
    }
    max_t = std::max(max_t, t);
    sum_t += t;
    sum_w += w;
  }
  const double p = stages, v = chunks;
  const double zb = kind == Schedule::kZbH1 ? 2 * sum_w / p : 0;
  double step = static_cast<double>(microbatches) * max_t + (p - 1) / v * (sum_t / p - zb) +
                (p - 1) * sum_send / (p * v);
  double after = 0, update = 0;
  for (const StageCosts& st : costs.stages) {
    const double sync =
        st.overlap_grad_sync ? st.dp_grad_sync_s / (chunks * st.dp_buckets) : st.dp_grad_sync_s;
    after = std::max(after, sync + st.embedding_sync_s);
    update = std::max(update, st.optimizer_s + st.dp_param_gather_s);
  }
  return step + after + update;
}

}  // namespace ptdp
