#include "executor/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ptdp {
namespace {

constexpr double kSgdMomentum = 0.9;  // Megatron's --sgd-momentum default

}  // namespace

TrainingOptimizer::TrainingOptimizer(GptParams& params, Backend& backend, ProcessGroups& groups,
                                     const TrainingSpec& training, bool distributed,
                                     bool sequence_parallel, Recorder& recorder)
    : params_(params),
      backend_(backend),
      groups_(groups),
      training_(training),
      distributed_(distributed && groups.dp_cp->size() > 1),
      sequence_parallel_(sequence_parallel),
      recorder_(recorder) {
  const int64_t total = params.values().numel;
  if (distributed_) {
    const int64_t ranks = groups.dp_cp->size();
    PTDP_CHECK(total % ranks == 0);
    const int64_t shard = total / ranks;
    shard_begin_ = groups.dp_cp->rank() * shard;
    shard_end_ = shard_begin_ + shard;
    grad_shard_ = Tensor(backend, params.dtype(), {shard}, MemCategory::kGradients);
  } else {
    shard_begin_ = 0;
    shard_end_ = total;
  }
  const int64_t n = shard_end_ - shard_begin_;
  m_ = Tensor(backend, params.dtype(), {n}, MemCategory::kOptimizer);
  if (training.optimizer == Optimizer::kAdam) {
    v_ = Tensor(backend, params.dtype(), {n}, MemCategory::kOptimizer);
  }
}

std::vector<Span> TrainingOptimizer::state() const {
  std::vector<Span> out{m_.span()};
  if (!v_.empty()) out.push_back(v_.span());
  return out;
}

void TrainingOptimizer::ReduceGradients() {
  const std::vector<ParamInfo>& infos = params_.infos();
  if (sequence_parallel_ && groups_.tp->size() > 1) {
    // One all-reduce over a packed buffer instead of one per parameter.
    int64_t n = 0;
    for (const ParamInfo& p : infos) n += p.sequence_parallel_grad ? p.numel : 0;
    if (n > 0) {
      Tensor packed(backend_, params_.dtype(), {n}, MemCategory::kCommBuffers);
      int64_t at = 0;
      for (const ParamInfo& p : infos) {
        if (!p.sequence_parallel_grad) continue;
        backend_.Copy(packed.span().Slice(at, p.numel), params_.Ref(p).grad);
        at += p.numel;
      }
      const double t0 = recorder_.Now();
      groups_.tp->AllReduce(packed.span(), ReduceOp::kSum);
      recorder_.Add("sp grad all-reduce", "tp-comm", t0, recorder_.Now());
      at = 0;
      for (const ParamInfo& p : infos) {
        if (!p.sequence_parallel_grad) continue;
        backend_.Copy(params_.Ref(p).grad, packed.span().Slice(at, p.numel));
        at += p.numel;
      }
    }
  }
  if (groups_.embedding != nullptr) {
    const double t0 = recorder_.Now();
    for (const ParamInfo& p : infos) {
      if (p.tied_embedding) groups_.embedding->AllReduce(params_.Ref(p).grad, ReduceOp::kSum);
    }
    recorder_.Add("embedding all-reduce", "dp-comm", t0, recorder_.Now());
  }
  if (groups_.dp_cp->size() > 1) {
    const double t0 = recorder_.Now();
    if (distributed_) {
      groups_.dp_cp->ReduceScatter(params_.grads(), grad_shard_.span());
      recorder_.Add("dp reduce-scatter", "dp-comm", t0, recorder_.Now());
    } else {
      groups_.dp_cp->AllReduce(params_.grads(), ReduceOp::kSum);
      recorder_.Add("dp all-reduce", "dp-comm", t0, recorder_.Now());
    }
  }
}

double TrainingOptimizer::GradNorm(Span grads, int64_t base) {
  // grads holds flat elements [base, base + grads.numel).
  double sum = 0;
  const bool tp_rank0 = groups_.coords.tp == 0;
  for (const ParamInfo& p : params_.infos()) {
    if (p.shared_copy || (p.tp_duplicate && !tp_rank0)) continue;
    const int64_t lo = std::max(p.offset, base);
    const int64_t hi = std::min(p.offset + p.numel, base + grads.numel);
    if (lo < hi) sum += backend_.SumSquares(grads.Slice(lo - base, hi - lo));
  }
  // Without the distributed optimizer every DP (and CP) replica holds the same gradients: the
  // model parallel group covers each parameter once. With it, DP x CP ranks hold disjoint
  // shards.
  Comm& group = distributed_ ? *groups_.world : *groups_.model_parallel;
  return std::sqrt(group.AllReduceHost(sum, ReduceOp::kSum));
}

void TrainingOptimizer::Update(Span grads, int64_t base, int64_t step, double grad_scale) {
  for (const ParamInfo& p : params_.infos()) {
    const int64_t lo = std::max(p.offset, base);
    const int64_t hi = std::min(p.offset + p.numel, base + grads.numel);
    if (lo >= hi) continue;
    const Span value = params_.values().Slice(lo, hi - lo);
    const Span grad = grads.Slice(lo - base, hi - lo);
    const double wd = p.weight_decay ? training_.weight_decay : 0.0;
    const Span m = m_.span().Slice(lo - shard_begin_, hi - lo);
    if (training_.optimizer == Optimizer::kAdam) {
      AdamArgs args;
      args.lr = training_.lr;
      args.beta1 = training_.adam_beta1;
      args.beta2 = training_.adam_beta2;
      args.eps = training_.adam_eps;
      args.weight_decay = wd;
      args.step = step;
      args.grad_scale = grad_scale;
      backend_.AdamStep(value, grad, m, v_.span().Slice(lo - shard_begin_, hi - lo), args);
    } else {
      backend_.SgdStep(value, grad, m, training_.lr, kSgdMomentum, wd, grad_scale);
    }
  }
}

OptimizerStepInfo TrainingOptimizer::Step(int64_t step) {
  ReduceGradients();
  const double t0 = recorder_.Now();
  const Span grads = distributed_ ? grad_shard_.span() : params_.grads();
  OptimizerStepInfo info;
  info.grad_norm = GradNorm(grads, shard_begin_);
  if (training_.clip_grad > 0) {
    const double coeff = training_.clip_grad / (info.grad_norm + 1e-6);
    if (coeff < 1) info.clip_scale = coeff;
  }
  Update(grads, shard_begin_, step, info.clip_scale);
  backend_.Fill(params_.grads(), 0);
  recorder_.Add("optimizer", "optimizer", t0, recorder_.Now());
  if (distributed_) {
    const double t1 = recorder_.Now();
    Tensor mine(backend_, params_.dtype(), {shard_end_ - shard_begin_}, MemCategory::kCommBuffers);
    backend_.Copy(mine.span(), params_.values().Slice(shard_begin_, shard_end_ - shard_begin_));
    groups_.dp_cp->AllGather(mine.span(), params_.values());
    recorder_.Add("dp param all-gather", "dp-comm", t1, recorder_.Now());
  }
  return info;
}

}  // namespace ptdp
