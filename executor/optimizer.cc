#include "executor/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"

namespace ptdp {
namespace {

constexpr double kSgdMomentum = 0.9;  // Megatron's --sgd-momentum default

// The loss scaler's state as the 4 values of its tensor.
std::array<double, 4> Pack(const LossScalerState& s) {
  return {s.scale, static_cast<double>(s.growth_tracker), static_cast<double>(s.hysteresis_tracker),
          static_cast<double>(s.skipped_steps)};
}

}  // namespace

TrainingOptimizer::TrainingOptimizer(GptParams& params, Backend& backend, ProcessGroups& groups,
                                     const TrainingSpec& training, bool distributed,
                                     bool sequence_parallel, Recorder& recorder,
                                     const LossScalerOptions& loss_scaler)
    : params_(params),
      backend_(backend),
      groups_(groups),
      training_(training),
      sequence_parallel_(sequence_parallel),
      recorder_(recorder),
      scaler_options_(loss_scaler) {
  const DType main = MainDType(params.dtype());
  int64_t state = 0;
  for (const bool experts : {false, true}) {
    Range r;
    r.flat = experts ? params.expert_range() : params.dense_range();
    r.group = experts ? groups.edp.get() : groups.dp_cp.get();
    r.distributed = distributed && r.group->size() > 1;
    r.shard = r.flat;
    if (r.distributed) {
      PTDP_CHECK(r.flat.numel % r.group->size() == 0);
      const int64_t shard = r.flat.numel / r.group->size();
      r.shard = {r.flat.begin + r.group->rank() * shard, shard};
      r.grad_shard = Tensor(backend, main, {shard}, MemCategory::kGradients);
    }
    r.state_offset = state;
    state += r.shard.numel;
    ranges_.push_back(std::move(r));
  }
  m_ = Tensor(backend, main, {state}, MemCategory::kOptimizer);
  if (training.optimizer == Optimizer::kAdam) {
    v_ = Tensor(backend, main, {state}, MemCategory::kOptimizer);
  }
  if (Is16Bit(params.dtype())) {
    main_ = Tensor(backend, main, {state}, MemCategory::kOptimizer);
    for (const Range& r : ranges_) {
      if (r.shard.numel == 0) continue;
      backend.Convert(main_.span().Slice(r.state_offset, r.shard.numel),
                      params.values().Slice(r.shard.begin, r.shard.numel));
    }
  }
  if (params.dtype() == DType::kF16) {
    scaler_ = Tensor(backend, DType::kF64, {4}, MemCategory::kOptimizer);
    backend.Upload(scaler_.span(), Pack(InitialLossScaler(loss_scaler)).data());
  }
}

LossScalerState TrainingOptimizer::ReadScaler() const {
  std::array<double, 4> v{};
  backend_.Download(scaler_.span(), v.data());
  return {v[0], static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2]), static_cast<int64_t>(v[3])};
}

double TrainingOptimizer::loss_scale() const { return scaler_.empty() ? 1.0 : ReadScaler().scale; }

Span TrainingOptimizer::Range::grads(const GptParams& params) const {
  return distributed ? grad_shard.span() : params.grads().Slice(shard.begin, shard.numel);
}

std::vector<Span> TrainingOptimizer::state() const {
  std::vector<Span> out{m_.span()};
  if (!v_.empty()) out.push_back(v_.span());
  if (!main_.empty()) out.push_back(main_.span());
  if (!scaler_.empty()) out.push_back(scaler_.span());
  return out;
}

void TrainingOptimizer::ReduceGradients() {
  const std::vector<ParamInfo>& infos = params_.infos();
  if (sequence_parallel_ && groups_.tp->size() > 1) {
    // One all-reduce over a packed buffer instead of one per parameter.
    int64_t n = 0;
    for (const ParamInfo& p : infos) n += p.sequence_parallel_grad ? p.numel : 0;
    if (n > 0) {
      Tensor packed(backend_, params_.grads().dtype, {n}, MemCategory::kCommBuffers);
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
  for (Range& r : ranges_) {
    if (r.group->size() == 1 || r.flat.numel == 0) continue;
    const bool experts = &r != &ranges_.front();
    const Span grads = params_.grads().Slice(r.flat.begin, r.flat.numel);
    const double t0 = recorder_.Now();
    if (r.distributed) {
      r.group->ReduceScatter(grads, r.grad_shard.span());
      recorder_.Add(experts ? "edp reduce-scatter" : "dp reduce-scatter", "dp-comm", t0,
                    recorder_.Now());
    } else {
      r.group->AllReduce(grads, ReduceOp::kSum);
      recorder_.Add(experts ? "edp all-reduce" : "dp all-reduce", "dp-comm", t0, recorder_.Now());
    }
  }
}

bool TrainingOptimizer::UnscaleAndCheck(double scale) {
  // Megatron's _unscale_main_grads_and_check_for_nan: found_inf is all-reduced (here over the
  // world, which covers its model-parallel and, for the distributed optimizer, data-parallel
  // groups) so that every rank skips together.
  bool found_inf = false;
  for (const Range& r : ranges_) {
    const Span grads = r.grads(params_);
    if (grads.numel == 0) continue;
    // A finite fp32 value squares to at most 1.2e77: a non-finite sum means an inf or NaN.
    if (!std::isfinite(backend_.SumSquares(grads))) found_inf = true;
    backend_.Scale(grads, 1.0 / scale);
  }
  return groups_.world->AllReduceHost(found_inf ? 1.0 : 0.0, ReduceOp::kMax) > 0;
}

double TrainingOptimizer::GradNorm() {
  double sum = 0;
  const bool tp_rank0 = groups_.coords.tp == 0;
  for (const Range& r : ranges_) {
    // Every replica of a range holds the same gradients: the first counts them. Shards of a
    // distributed range are disjoint: each counts its own.
    if (!r.distributed && r.group->rank() != 0) continue;
    const Span grads = r.grads(params_);
    const int64_t base = r.shard.begin;
    for (const ParamInfo& p : params_.infos()) {
      if (p.shared_copy || (p.tp_duplicate && !tp_rank0)) continue;
      const int64_t lo = std::max(p.offset, base);
      const int64_t hi = std::min(p.offset + p.numel, base + grads.numel);
      if (lo < hi) sum += backend_.SumSquares(grads.Slice(lo - base, hi - lo));
    }
  }
  return std::sqrt(groups_.world->AllReduceHost(sum, ReduceOp::kSum));
}

void TrainingOptimizer::Update(const Range& r, int64_t step, double grad_scale) {
  const Span grads = r.grads(params_);
  const int64_t base = r.shard.begin;
  for (const ParamInfo& p : params_.infos()) {
    const int64_t lo = std::max(p.offset, base);
    const int64_t hi = std::min(p.offset + p.numel, base + grads.numel);
    if (lo >= hi) continue;
    const Span grad = grads.Slice(lo - base, hi - lo);
    const double wd = p.weight_decay ? training_.weight_decay : 0.0;
    const int64_t state_at = r.state_offset + lo - base;
    const Span value =
        main_.empty() ? params_.values().Slice(lo, hi - lo) : main_.span().Slice(state_at, hi - lo);
    const Span m = m_.span().Slice(state_at, hi - lo);
    if (training_.optimizer == Optimizer::kAdam) {
      AdamArgs args;
      args.lr = training_.lr;
      args.beta1 = training_.adam_beta1;
      args.beta2 = training_.adam_beta2;
      args.eps = training_.adam_eps;
      args.weight_decay = wd;
      args.step = step;
      args.grad_scale = grad_scale;
      backend_.AdamStep(value, grad, m, v_.span().Slice(state_at, hi - lo), args);
    } else {
      backend_.SgdStep(value, grad, m, training_.lr, kSgdMomentum, wd, grad_scale);
    }
  }
}

OptimizerStepInfo TrainingOptimizer::Step(int64_t step) {
  ReduceGradients();
  const double t0 = recorder_.Now();
  OptimizerStepInfo info;
  if (!scaler_.empty()) {
    LossScalerState scaler = ReadScaler();
    info.loss_scale = scaler.scale;
    info.skipped = UnscaleAndCheck(scaler.scale);
    scaler = UpdateLossScaler(scaler, info.skipped, scaler_options_);
    backend_.Upload(scaler_.span(), Pack(scaler).data());
    if (info.skipped) {
      backend_.Fill(params_.grads(), 0);
      recorder_.Add("optimizer (skipped)", "optimizer", t0, recorder_.Now());
      return info;
    }
    // Adam's bias correction counts the updates made (torch.optim's step count): skipped
    // steps are not among them.
    step -= scaler.skipped_steps;
  }
  info.grad_norm = GradNorm();
  if (training_.clip_grad > 0) {
    const double coeff = training_.clip_grad / (info.grad_norm + 1e-6);
    if (coeff < 1) info.clip_scale = coeff;
  }
  for (const Range& r : ranges_) Update(r, step, info.clip_scale);
  if (!main_.empty()) {  // the updated main weights into the model's 16-bit weights
    for (const Range& r : ranges_) {
      if (r.shard.numel == 0) continue;
      backend_.Convert(params_.values().Slice(r.shard.begin, r.shard.numel),
                       main_.span().Slice(r.state_offset, r.shard.numel));
    }
  }
  backend_.Fill(params_.grads(), 0);
  recorder_.Add("optimizer", "optimizer", t0, recorder_.Now());
  for (const Range& r : ranges_) {
    if (!r.distributed || r.flat.numel == 0) continue;
    const double t1 = recorder_.Now();
    Tensor mine(backend_, params_.dtype(), {r.shard.numel}, MemCategory::kCommBuffers);
    backend_.Copy(mine.span(), params_.values().Slice(r.shard.begin, r.shard.numel));
    r.group->AllGather(mine.span(), params_.values().Slice(r.flat.begin, r.flat.numel));
    recorder_.Add(&r == &ranges_.front() ? "dp param all-gather" : "edp param all-gather",
                  "dp-comm", t1, recorder_.Now());
  }
  return info;
}

}  // namespace ptdp
