#include "executor/train/optimizer.h"

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

std::vector<GradBucket> GradientBuckets(const std::vector<ParamInfo>& infos, FlatRange range,
                                        bool experts, int64_t bucket_parameters, int64_t multiple) {
  PTDP_CHECK(bucket_parameters >= 1 && multiple >= 1 && range.numel % multiple == 0);
  if (range.numel == 0) return {};
  // Each chunk's part of the range: from its first parameter to the next chunk's (the first
  // from the range's start, the last to its end, padding included).
  struct Part {
    int chunk;
    int64_t begin;
  };
  std::vector<Part> parts;
  for (const ParamInfo& p : infos) {
    if (p.expert != experts || p.numel == 0) continue;
    PTDP_CHECK(p.offset >= range.begin && p.offset + p.numel <= range.begin + range.numel);
    if (parts.empty() || parts.back().chunk != p.chunk) {
      PTDP_CHECK(parts.empty() || parts.back().chunk < p.chunk);
      parts.push_back({p.chunk, parts.empty() ? range.begin : p.offset});
    }
  }
  if (parts.empty()) parts.push_back({0, range.begin});
  const int64_t end = range.begin + range.numel;
  std::vector<int64_t> cuts;  // bucket ends
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t begin = parts[i].begin;
    const int64_t n = (i + 1 < parts.size() ? parts[i + 1].begin : end) - begin;
    const int64_t k = std::max<int64_t>(1, (n + bucket_parameters - 1) / bucket_parameters);
    for (int64_t j = 1; j <= k; ++j) {
      const int64_t at = begin + n * j / k;
      const int64_t rounded = range.begin + (at - range.begin) / multiple * multiple;
      if (rounded > range.begin && (cuts.empty() || rounded > cuts.back())) cuts.push_back(rounded);
    }
  }
  if (cuts.empty() || cuts.back() != end) cuts.push_back(end);
  std::vector<GradBucket> buckets;
  int64_t begin = range.begin;
  for (const int64_t cut : cuts) {
    GradBucket b;
    b.flat = {begin, cut - begin};
    for (const ParamInfo& p : infos) {
      if (p.expert != experts || p.offset >= cut || p.offset + p.numel <= begin) continue;
      b.tied_embedding = b.tied_embedding || p.tied_embedding;
      b.parts.emplace_back(p.chunk, p.part);
    }
    std::sort(b.parts.begin(), b.parts.end());
    b.parts.erase(std::unique(b.parts.begin(), b.parts.end()), b.parts.end());
    if (b.parts.empty()) {  // only the padding after the last parameter
      b.first_chunk = b.last_chunk = buckets.empty() ? 0 : buckets.back().last_chunk;
    } else {
      b.first_chunk = b.parts.front().first;
      b.last_chunk = b.parts.back().first;
    }
    buckets.push_back(b);
    begin = cut;
  }
  return buckets;
}

TrainingOptimizer::TrainingOptimizer(GptParams& params, Backend& backend, ProcessGroups& groups,
                                     const TrainingSpec& training, bool distributed,
                                     bool sequence_parallel, Recorder& recorder,
                                     const LossScalerOptions& loss_scaler,
                                     const DataParallelOverlap& overlap)
    : params_(params),
      backend_(backend),
      groups_(groups),
      training_(training),
      sequence_parallel_(sequence_parallel),
      recorder_(recorder),
      overlap_(overlap),
      scaler_options_(loss_scaler) {
  const DType main = MainDType(params.dtype());
  overlap_.param_gather = overlap_.param_gather && distributed;
  chunk_grads_done_.assign(static_cast<size_t>(params.num_chunks()), false);
  int64_t state = 0;
  for (const bool experts : {false, true}) {
    const FlatRange flat = experts ? params.expert_range() : params.dense_range();
    Comm* group = experts ? groups.edp.get() : groups.dp_cp.get();
    const bool sharded = distributed && group->size() > 1;
    std::vector<GradBucket> buckets{{flat, 0, params.num_chunks() - 1, false}};
    if (overlap_.grad_reduce && group->size() > 1) {
      PTDP_CHECK(!sharded || flat.numel % group->size() == 0);
      buckets = GradientBuckets(params.infos(), flat, experts, overlap_.bucket_parameters,
                                sharded ? group->size() : 1);
    }
    for (const GradBucket& bucket : buckets) {
      Range r;
      r.bucket = bucket;
      r.experts = experts;
      r.group = group;
      r.distributed = sharded;
      const FlatRange& in = bucket.flat;
      r.shard = in;
      if (r.distributed) {
        PTDP_CHECK(in.numel % r.group->size() == 0);
        const int64_t shard = in.numel / r.group->size();
        r.shard = {in.begin + r.group->rank() * shard, shard};
        r.grad_shard = Tensor(backend, main, {shard}, MemCategory::kGradients);
      }
      r.state_offset = state;
      state += r.shard.numel;
      ranges_.push_back(std::move(r));
    }
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

void TrainingOptimizer::SequenceParallelAllReduce(bool reduced) {
  if (!sequence_parallel_ || groups_.tp->size() == 1) return;
  // One all-reduce over a packed buffer instead of one per parameter: each sequence-parallel
  // parameter's part of the gradients summed (the buffer's, or each range's reduced ones).
  std::vector<std::pair<Span, Span>> parts;  // (gradients, their place in the packed buffer)
  int64_t n = 0;
  for (const ParamInfo& p : params_.infos()) {
    if (!p.sequence_parallel_grad) continue;
    if (!reduced) {
      parts.push_back({params_.Ref(p).grad, {}});
      n += p.numel;
      continue;
    }
    for (const Range& r : ranges_) {
      const int64_t lo = std::max(p.offset, r.shard.begin);
      const int64_t hi = std::min(p.offset + p.numel, r.shard.begin + r.shard.numel);
      if (lo >= hi) continue;
      parts.push_back({r.grads(params_).Slice(lo - r.shard.begin, hi - lo), {}});
      n += hi - lo;
    }
  }
  if (n == 0) return;
  Tensor packed(backend_, params_.grads().dtype, {n}, MemCategory::kCommBuffers);
  int64_t at = 0;
  for (auto& [grads, place] : parts) {
    place = packed.span().Slice(at, grads.numel);
    backend_.Copy(place, grads);
    at += grads.numel;
  }
  const double t0 = recorder_.Now();
  groups_.tp->AllReduce(packed.span(), ReduceOp::kSum);
  recorder_.Add("sp grad all-reduce", "tp-comm", t0, recorder_.Now());
  for (const auto& [grads, place] : parts) backend_.Copy(grads, place);
}

void TrainingOptimizer::EmbeddingAllReduce() {
  if (groups_.embedding == nullptr) return;
  const double t0 = recorder_.Now();
  for (const ParamInfo& p : params_.infos()) {
    if (p.tied_embedding) groups_.embedding->AllReduce(params_.Ref(p).grad, ReduceOp::kSum);
  }
  recorder_.Add("embedding all-reduce", "dp-comm", t0, recorder_.Now());
}

void TrainingOptimizer::ReduceGradients() {
  if (overlap_.grad_reduce) return ReduceOverlapped();
  SequenceParallelAllReduce(/*reduced=*/false);
  EmbeddingAllReduce();
  for (Range& r : ranges_) {
    if (r.group->size() == 1 || r.bucket.flat.numel == 0) continue;
    const Span grads = params_.grads().Slice(r.bucket.flat.begin, r.bucket.flat.numel);
    const double t0 = recorder_.Now();
    if (r.distributed) {
      r.group->ReduceScatter(grads, r.grad_shard.span());
    } else {
      r.group->AllReduce(grads, ReduceOp::kSum);
    }
    recorder_.Add(ReductionName(r), "dp-comm", t0, recorder_.Now());
  }
}

void TrainingOptimizer::StartReduction(Range& r) {
  r.reduction_started = true;
  if (r.group->size() == 1 || r.bucket.flat.numel == 0) return;
  const Span grads = params_.grads().Slice(r.bucket.flat.begin, r.bucket.flat.numel);
  r.reduction_start_s = recorder_.Now();
  r.reduction = r.distributed ? r.group->StartReduceScatter(grads, r.grad_shard.span())
                              : r.group->StartAllReduce(grads);
}

const char* TrainingOptimizer::ReductionName(const Range& r) {
  if (r.distributed) return r.experts ? "edp reduce-scatter" : "dp reduce-scatter";
  return r.experts ? "edp all-reduce" : "dp all-reduce";
}

void TrainingOptimizer::Finished(Range& r, bool gather) {
  if (gather) {
    recorder_.Add(r.experts ? "edp param all-gather" : "dp param all-gather", "dp-comm",
                  r.gather_start_s, recorder_.Now());
    r.gather.reset();
    r.gather_in = Tensor();
  } else {
    recorder_.Add(ReductionName(r), "dp-comm", r.reduction_start_s, recorder_.Now());
    r.reduction.reset();
  }
}

void TrainingOptimizer::PartDone(int chunk, int part) {
  if (!overlap_.grad_reduce) return;
  parts_done_.emplace(chunk, part);
  StartReadyReductions();
  Progress();  // MPI progresses its collectives only inside MPI calls
}

void TrainingOptimizer::GradientsDone(int chunk) {
  if (!overlap_.grad_reduce) return;
  chunk_grads_done_.at(static_cast<size_t>(chunk)) = true;
  StartReadyReductions();
}

void TrainingOptimizer::StartReadyReductions() {
  // Megatron starts the buckets in the order they fill: the backward runs the layers in
  // reverse, so the last bucket first.
  for (auto it = ranges_.rbegin(); it != ranges_.rend(); ++it) {
    Range& r = *it;
    if (r.reduction_started || (r.bucket.tied_embedding && groups_.embedding != nullptr)) {
      continue;
    }
    const bool ready =
        std::all_of(r.bucket.parts.begin(), r.bucket.parts.end(), [&](const auto& part) {
          return chunk_grads_done_[static_cast<size_t>(part.first)] || parts_done_.count(part) > 0;
        });
    if (ready) StartReduction(r);
  }
}

void TrainingOptimizer::Progress() {
  for (Range& r : ranges_) {
    if (r.reduction != nullptr && r.reduction->Test()) Finished(r, false);
    if (r.gather != nullptr && r.gather->Test()) Finished(r, true);
  }
}

void TrainingOptimizer::ReduceOverlapped() {
  // What the backward's hooks did not start: the bucket waiting for the embedding's sum (and
  // every bucket when no pipeline reported, as in a unit test).
  EmbeddingAllReduce();
  for (auto it = ranges_.rbegin(); it != ranges_.rend(); ++it) {
    if (!it->reduction_started) StartReduction(*it);
  }
  for (Range& r : ranges_) {
    if (r.reduction != nullptr) {
      r.reduction->Wait();
      Finished(r, false);
    }
    r.reduction_started = false;
  }
  chunk_grads_done_.assign(chunk_grads_done_.size(), false);
  parts_done_.clear();
  SequenceParallelAllReduce(/*reduced=*/true);
}

void TrainingOptimizer::WaitGather(Range& r) {
  if (r.gather == nullptr) return;
  const double t0 = recorder_.Now();
  r.gather->Wait();
  recorder_.Add(kParamGatherWait, "dp-comm", t0, recorder_.Now());
  Finished(r, true);
}

void TrainingOptimizer::BeforeFirstForward(int chunk) {
  for (Range& r : ranges_) {
    if (r.bucket.first_chunk <= chunk && chunk <= r.bucket.last_chunk) WaitGather(r);
  }
}

void TrainingOptimizer::FinishParamGather() {
  for (Range& r : ranges_) WaitGather(r);
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
  FinishParamGather();  // the last step's, when no forward waited for it
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
  for (Range& r : ranges_) {
    if (!r.distributed || r.bucket.flat.numel == 0) continue;
    r.gather_start_s = recorder_.Now();
    r.gather_in = Tensor(backend_, params_.dtype(), {r.shard.numel}, MemCategory::kCommBuffers);
    backend_.Copy(r.gather_in.span(), params_.values().Slice(r.shard.begin, r.shard.numel));
    const Span out = params_.values().Slice(r.bucket.flat.begin, r.bucket.flat.numel);
    if (overlap_.param_gather) {
      r.gather = r.group->StartAllGather(r.gather_in.span(), out);
    } else {
      r.group->AllGather(r.gather_in.span(), out);
      Finished(r, true);
    }
  }
  return info;
}

}  // namespace ptdp
