#include "simulator/cost_model.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "simulator/collectives.h"
#include "simulator/flops.h"
#include "simulator/layer_work.h"
#include "simulator/memory_model.h"
#include "simulator/op_time.h"

namespace ptdp {
namespace {

struct PassTimes {
  double compute = 0, comm = 0, overhead = 0;
  double total() const { return compute + comm + overhead; }
  // Each kernel's and each collective's own time, for the async overlap below.
  std::array<double, PassWork::kMaxWork> work_s;
  std::array<double, PassWork::kMaxComm> comm_s;
};

// A pass's kernel and collective times, and what the host adds when it cannot launch them fast
// enough (profile host.kernel_launch_us = h per kernel or collective). The host issues the
// pass's operations in order, one every h, starting with an empty queue; the GPU runs each once
// the one before it is done and it has been issued: end_i = max(end_{i-1}, i h) + t_i. The
// overhead is what that adds to the sum of the t_i: about n h - sum t_i for a pass of short
// kernels, 0 when the kernels outlast their launches. (The empty queue at each pass's start
// fitted the single-node vTrain rows better than a queue carried across passes, whose steady
// state is max(n h, sum t_i): 6.0% against 6.5% mean error.)
PassTimes Times(const GemmTable& table, const ClusterSpec& c, Precision precision,
                const PassWork& pass, const GroupPlacement& tp) {
  PassTimes t;
  for (int i = 0; i < pass.num_work; ++i) {
    const Work& w = pass.work[i];
    t.work_s[i] = w.kind == WorkKind::kGemm ? GemmTime(table, c.gpu, precision, w.gemm, w.bytes)
                                            : MemoryTime(c.gpu, w.bytes);
    t.compute += t.work_s[i];
  }
  for (int i = 0; i < pass.num_comm; ++i) {
    t.comm_s[i] = CollectiveTime(c, pass.comm[i].collective, pass.comm[i].bytes, tp);
    t.comm += t.comm_s[i];
  }
  const double launch = c.host.kernel_launch_s;
  if (launch <= 0) return t;
  double issue = 0, end = 0;
  for (int i = 0, next_comm = 0; i <= pass.num_work; ++i) {
    for (; next_comm < pass.num_comm && pass.comm_position[next_comm] <= i; ++next_comm) {
      issue += launch;
      end = std::max(end, issue) + t.comm_s[next_comm];
    }
    if (i == pass.num_work) break;
    issue += launch;
    end = std::max(end, issue) + t.work_s[i];
  }
  t.overhead = end - t.compute - t.comm;
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

// One pipeline send of the activation (or its gradient) across `pair`, per GPU.
double SendTime(const ClusterSpec& c, const ModelSpec& m, const ParallelConfig& p,
                Precision precision, const CostOptions& options, const GroupPlacement& pair,
                const GroupPlacement& tp) {
  const double act = static_cast<double>(m.seq_length) * p.micro_batch_size * m.hidden_size *
                     BytesPerElement(precision);
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

}  // namespace

StepEstimate EstimateStep(const ModelSpec& m, const ClusterSpec& c, const TrainingSpec& training,
                          const ParallelConfig& p, const CostOptions& options) {
  PTDP_CHECK(p.tp >= 1 && p.pp >= 1 && p.dp >= 1 && p.virtual_stages >= 1);
  PTDP_CHECK(m.num_layers % (p.pp * p.virtual_stages) == 0);
  const Precision precision = training.precision;
  const int pp = p.pp, v = p.virtual_stages, vstages = pp * v;
  const double layers_per_chunk = m.num_layers / vstages;
  const GroupPlacement tp = TensorParallelGroup(p, c.gpus_per_node);
  const GroupPlacement dp = DataParallelGroup(p, c.gpus_per_node);

  const GemmTable gemm(c.gpu);
  const LayerWork layer = TransformerLayerWork(m, p, precision, options);
  const LayerWork emb = EmbeddingWork(m, p, precision, options);
  const LayerWork out = OutputWork(m, p, precision, options);
  const PassTimes lf = Times(gemm, c, precision, layer.forward, tp);
  const PassTimes lb = Times(gemm, c, precision, layer.backward_input, tp);
  const PassTimes lw = Times(gemm, c, precision, layer.backward_weight, tp);
  // Full recomputation redoes exactly the forward: reuse its time.
  const PassTimes lr =
      p.recompute == Recompute::kFull ? lf : Times(gemm, c, precision, layer.recompute, tp);
  const PassTimes ef = Times(gemm, c, precision, emb.forward, tp);
  const PassTimes eb = Times(gemm, c, precision, emb.backward_input, tp);
  const PassTimes ew = Times(gemm, c, precision, emb.backward_weight, tp);
  const PassTimes of = Times(gemm, c, precision, out.forward, tp);
  const PassTimes ob = Times(gemm, c, precision, out.backward_input, tp);
  const PassTimes ow = Times(gemm, c, precision, out.backward_weight, tp);

  const double layer_act = LayerActivationBytes(m, p, precision);
  const double layer_w_act = LayerWeightGradActivationBytes(m, p, precision);
  const double emb_act = EmbeddingActivationBytes(m, p);
  const double out_act = OutputActivationBytes(m, p, precision);

  // Sends from each stage to the next (index r: r -> r + 1 mod p). The pairs r -> r + 1 share
  // one placement when the ranks between stages fill whole nodes (or more); then time it once.
  std::vector<double> send(pp, 0.0);
  if (pp > 1) {
    const int64_t stage_ranks = int64_t{p.tp} * p.dp;
    const bool uniform = stage_ranks % c.gpus_per_node == 0 || stage_ranks >= c.gpus_per_node;
    const double uniform_send =
        uniform ? SendTime(c, m, p, precision, options, PipelinePair(p, 0, c.gpus_per_node), tp)
                : 0;
    for (int r = 0; r < pp - 1; ++r) {
      send[r] =
          uniform ? uniform_send
                  : SendTime(c, m, p, precision, options, PipelinePair(p, r, c.gpus_per_node), tp);
    }
    send[pp - 1] =
        SendTime(c, m, p, precision, options, PipelinePair(p, pp - 1, c.gpus_per_node), tp);
  }

  StepEstimate est;
  est.microbatches = NumMicrobatches(training, p);
  est.costs.chunks.resize(vstages);
  est.stages.assign(pp, StageBreakdown{});
  // What every chunk's layers cost, then the embedding and output parts on the first and last.
  const double L = layers_per_chunk;
  // The async reductions hide behind W only when B and W run as one backward.
  const double async_hidden = p.schedule == Schedule::kZbH1 ? 0 : AsyncOverlapTime(layer, lb, lw);
  const ChunkCosts plain{.forward_s = L * lf.total(),
                         .backward_input_s = L * (lr.total() + lb.total()),
                         .backward_weight_s = L * (lw.total() - async_hidden),
                         .activation_bytes = L * layer_act,
                         .weight_grad_activation_bytes = L * layer_w_act};
  const double plain_overhead = L * (lf.overhead + lr.overhead + lb.overhead + lw.overhead);
  const double plain_compute =
      L * (lf.compute + lr.compute + lb.compute + lw.compute) + plain_overhead;
  const double plain_comm = L * (lf.comm + lr.comm + lb.comm + lw.comm - async_hidden);
  for (int chunk = 0, vs = 0; chunk < v; ++chunk) {
    for (int r = 0; r < pp; ++r, ++vs) {
      const bool first = vs == 0, last = vs == vstages - 1;
      ChunkCosts& ch = est.costs.chunks[vs];
      StageBreakdown& br = est.stages[r];
      ch = plain;
      ch.send_forward_s = last ? 0 : send[r];
      ch.send_backward_s = first ? 0 : send[r == 0 ? pp - 1 : r - 1];
      br.pp_comm_s += ch.send_forward_s + ch.send_backward_s;
      br.compute_s += plain_compute;
      br.overhead_s += plain_overhead;
      br.tp_comm_s += plain_comm;
      if (chunk == 0) {
        // Once per micro-batch on each stage: the framework's work around the layers.
        ch.forward_s += c.host.microbatch_overhead_s;
        br.compute_s += c.host.microbatch_overhead_s;
        br.overhead_s += c.host.microbatch_overhead_s;
      }
      br.recompute_s += L * lr.total();
      // The embedding (first virtual stage) and the output layer (last) add their passes.
      const auto add_part = [&](const PassTimes& pf, const PassTimes& pb, const PassTimes& pw,
                                double act) {
        ch.forward_s += pf.total();
        ch.backward_input_s += pb.total();
        ch.backward_weight_s += pw.total();
        ch.activation_bytes += act;
        br.compute_s +=
            pf.compute + pb.compute + pw.compute + pf.overhead + pb.overhead + pw.overhead;
        br.overhead_s += pf.overhead + pb.overhead + pw.overhead;
        br.tp_comm_s += pf.comm + pb.comm + pw.comm;
      };
      if (first) add_part(ef, eb, ew, emb_act);
      if (last) add_part(of, ob, ow, out_act);
      if (!options.overlap_p2p_communication) {
        ch.forward_s += ch.send_forward_s;
        ch.backward_input_s += ch.send_backward_s;
        ch.send_forward_s = ch.send_backward_s = 0;
      }
    }
  }

  // Per stage, once per step.
  const BytesPerParameter per_param = BytesPerParam(training, p, options);
  const double gbytes = GradientBytes(precision, options);
  const double opt_bytes = OptimizerBytesPerParam(training, options);
  const double layer_params = LayerParameters(m, p.tp);
  const double stage_layers = static_cast<double>(m.num_layers) / pp;
  const auto stage_costs = [&](int r) {
    StageCosts st;
    const double params = stage_layers * layer_params +
                          (r == 0 ? EmbeddingParameters(m, p.tp) : 0) +
                          (r == pp - 1 ? OutputParameters(m, p) : 0);
    if (p.distributed_optimizer) {
      // Rajbhandari et al. 2020 (ZeRO-1), Megatron's distributed optimizer: reduce-scatter the
      // gradients, update the 1/dp shard, all-gather the updated 16-bit weights.
      st.dp_grad_sync_s = CollectiveTime(c, Collective::kReduceScatter, params * gbytes, dp);
      st.dp_param_gather_s =
          CollectiveTime(c, Collective::kAllGather, params * BytesPerElement(precision), dp);
      st.optimizer_s = MemoryTime(c.gpu, params / p.dp * opt_bytes);
    } else {
      st.dp_grad_sync_s = CollectiveTime(c, Collective::kAllReduce, params * gbytes, dp);
      st.optimizer_s = MemoryTime(c.gpu, params * opt_bytes);
    }
    st.overlap_grad_sync = options.overlap_grad_reduce;
    if (pp > 1 && m.tied_embeddings && (r == 0 || r == pp - 1)) {
      // Megatron's _allreduce_word_embedding_grads over the first and last stage.
      const double vocab_t = static_cast<double>(PaddedVocabSize(m, p.tp)) / p.tp;
      st.embedding_sync_s =
          CollectiveTime(c, Collective::kAllReduce, vocab_t * m.hidden_size * gbytes,
                         EmbeddingGroup(p, c.gpus_per_node));
    }
    st.static_bytes = params * per_param.total() + static_cast<double>(c.gpu.reserved_bytes);
    return st;
  };
  // The stages between the first and the last are alike: compute one of them.
  est.costs.stages.assign(pp, pp > 2 ? stage_costs(1) : StageCosts{});
  est.costs.stages[0] = stage_costs(0);
  est.costs.stages[pp - 1] = stage_costs(pp - 1);

  est.model_flops = ModelFlopsPerStep(m, training);
  est.hardware_flops = HardwareFlopsPerStep(m, training, p);
  return est;
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
    const double sync = st.overlap_grad_sync ? st.dp_grad_sync_s / chunks : st.dp_grad_sync_s;
    after = std::max(after, sync + st.embedding_sync_s);
    update = std::max(update, st.optimizer_s + st.dp_param_gather_s);
  }
  return step + after + update;
}

}  // namespace ptdp
