#include "executor/model/gpt.h"

#include "core/error.h"

namespace ptdp {
namespace {

constexpr double kRotaryBase = 10000;  // Megatron's --rotary-base default

// out (T, n_out) = x (T, n_in) @ w^T, w (n_out, n_in) (torch.nn.Linear's layout).
void LinearForward(Backend& b, Span out, Span x, Span w, int64_t rows, int64_t n_in,
                   int64_t n_out) {
  b.Gemm(false, true, rows, n_out, n_in, 1.0, x, n_in, w, n_in, 0.0, out, n_out);
}

// dx (T, n_in) = dy (T, n_out) @ w (n_out, n_in).
void LinearBackwardInput(Backend& b, Span dx, Span dy, Span w, int64_t rows, int64_t n_in,
                         int64_t n_out) {
  b.Gemm(false, false, rows, n_in, n_out, 1.0, dy, n_out, w, n_in, 0.0, dx, n_in);
}

}  // namespace

GptModel::GptModel(GptParams& params, Backend& backend, ProcessGroups& groups, GptOptions options,
                   Recorder& recorder)
    : params_(params),
      backend_(backend),
      tp_(*groups.tp),
      options_(options),
      recorder_(recorder),
      d_(params.dims()),
      dtype_(params.dtype()),
      seq_(params.dims().seq / groups.cp->size()),
      sp_div_(options.sequence_parallel ? groups.tp->size() : 1),
      shard_{params.dims().seq, groups.cp->size(), groups.cp->rank()} {
  Comm& cp = *groups.cp;
  PTDP_CHECK(tp_.size() == d_.tp);
  // Megatron's rules: seq_length a multiple of 2 cp, and each CP rank's tokens of tp under SP.
  PTDP_CHECK(cp.size() == 1 || d_.seq % (2 * int64_t{cp.size()}) == 0);
  PTDP_CHECK(seq_ % sp_div_ == 0);
  if (cp.size() > 1) {
    context_ = std::make_unique<ContextAttention>(backend, cp, options.cp_comm, d_.seq, recorder);
  }
  if (d_.experts > 0) {
    // Each TP rank routes its own rows: without SP every TP rank would route the same tokens.
    PTDP_CHECK(d_.tp == 1 || options.sequence_parallel);
    moe_ = std::make_unique<MoeLayer>(d_, dtype_, backend, *groups.ep, *groups.etp, recorder);
  }
}

AttentionShape GptModel::attention_shape() const {
  return {seq_, batch_, d_.heads_local, d_.groups_local, d_.head_dim};
}

void GptModel::RotaryAtPositions(Span qkv, bool inverse) {
  const int64_t row = batch_ * d_.qkv_local();  // elements of one sequence index
  for (const PositionRun& run : PositionRuns(shard_, 0, seq_)) {
    backend_.Rotary(qkv.Slice(run.local_begin * row, run.length * row), run.length, batch_,
                    d_.heads_local, d_.groups_local, d_.head_dim, kRotaryBase, run.position_begin,
                    inverse);
  }
}

Tensor GptModel::New(std::vector<int64_t> shape, MemCategory category) {
  return Tensor(backend_, dtype_, std::move(shape), category);
}

std::shared_ptr<Tensor> GptModel::Shared(std::vector<int64_t> shape, MemCategory category) {
  return std::make_shared<Tensor>(backend_, dtype_, std::move(shape), category);
}

Tensor GptModel::NewF32(std::vector<int64_t> shape, MemCategory category) {
  return Tensor(backend_, MainDType(dtype_), std::move(shape), category);
}

std::shared_ptr<Tensor> GptModel::SharedF32(std::vector<int64_t> shape, MemCategory category) {
  return std::make_shared<Tensor>(backend_, MainDType(dtype_), std::move(shape), category);
}

void GptModel::TpAllReduce(Span data, ReduceOp op, const char* what) {
  if (tp_.size() == 1) return;
  const double t0 = recorder_.Now();
  tp_.AllReduce(data, op);
  recorder_.Add(what, "tp-comm", t0, recorder_.Now());
}

Tensor GptModel::ToFull(const Tensor& local, MemCategory category) {
  // local (T_loc, C) -> (T, C).
  const int64_t cols = local.numel() / local_rows();
  Tensor full = New({rows(), cols}, category);
  if (sp_div_ == 1) {
    backend_.Copy(full.span(), local.span());
    return full;
  }
  const double t0 = recorder_.Now();
  tp_.AllGather(local.span(), full.span());
  recorder_.Add("tp all-gather", "tp-comm", t0, recorder_.Now());
  return full;
}

Tensor GptModel::FromPartial(Tensor partial) {
  // partial (T, C), this rank's summand -> (T_loc, C), the sum.
  if (sp_div_ == 1) {
    TpAllReduce(partial.span(), ReduceOp::kSum, "tp all-reduce");
    return partial;
  }
  const int64_t cols = partial.numel() / rows();
  Tensor out = New({local_rows(), cols}, MemCategory::kActivations);
  const double t0 = recorder_.Now();
  tp_.ReduceScatter(partial.span(), out.span());
  recorder_.Add("tp reduce-scatter", "tp-comm", t0, recorder_.Now());
  return out;
}

Tensor GptModel::ReduceInputGrad(Tensor partial, WeightGradQueue& queue, WeightGradTask wgrad) {
  if (!options_.async_input_grad || weight_grads_deferred_ || tp_.size() == 1) {
    Tensor out = FromPartial(std::move(partial));
    queue.Push(std::move(wgrad));
    return out;
  }
  queue.Run(backend_);  // what the layer queued before this linear runs in its place
  const int64_t cols = partial.numel() / rows();
  Tensor out;
  const double t0 = recorder_.Now();
  std::unique_ptr<CommRequest> request;
  if (sp_div_ == 1) {
    request = tp_.StartAllReduce(partial.span());
  } else {
    out = New({local_rows(), cols}, MemCategory::kActivations);
    request = tp_.StartReduceScatter(partial.span(), out.span());
  }
  queue.Push(std::move(wgrad));
  queue.Run(backend_);
  request->Wait();
  recorder_.Add(sp_div_ == 1 ? "tp all-reduce (beside wgrad)" : "tp reduce-scatter (beside wgrad)",
                "tp-comm", t0, recorder_.Now());
  return sp_div_ == 1 ? std::move(partial) : std::move(out);
}

void GptModel::NormForward(Span out, Span mean, Span rstd, Span x, const ParamRef& w,
                           const ParamRef& b, int64_t rows) {
  if (d_.rmsnorm) {
    backend_.RmsNormForward(out, rstd, x, w.value, rows, d_.hidden, options_.layernorm_eps);
  } else {
    backend_.LayerNormForward(out, mean, rstd, x, w.value, b.value, rows, d_.hidden,
                              options_.layernorm_eps);
  }
}

void GptModel::NormBackwardInput(Span dx, Span dout, Span x, Span mean, Span rstd,
                                 const ParamRef& w, int64_t rows) {
  if (d_.rmsnorm) {
    backend_.RmsNormBackwardInput(dx, dout, x, rstd, w.value, rows, d_.hidden);
  } else {
    backend_.LayerNormBackwardInput(dx, dout, x, mean, rstd, w.value, rows, d_.hidden);
  }
}

namespace {

// LinearGradTask over the whole of x (rows, in_cols) and dy (rows, out_cols).
WeightGradTask LinearGradTask(std::shared_ptr<Tensor> x, std::shared_ptr<Tensor> dy, Span dw,
                              Span db, int64_t rows, int64_t in_cols, int64_t out_cols) {
  const Span xs = x->span(), dys = dy->span();
  return LinearGradTask({std::move(x), std::move(dy)}, xs, dys, dw, db, rows, in_cols, out_cols);
}

// db += the column sums of dY (rows, out_cols): a row-parallel linear's bias, whose gradient
// lives on the sequence-parallel rows.
WeightGradTask BiasGradTask(std::shared_ptr<Tensor> dy, Span db, int64_t rows, int64_t out_cols) {
  WeightGradTask t;
  t.kind = WeightGradTask::Kind::kBias;
  t.dy = dy->span();
  t.db = db;
  t.rows = rows, t.out_cols = out_cols;
  t.keep = {std::move(dy)};
  return t;
}

}  // namespace

WeightGradTask GptModel::NormTask(std::shared_ptr<Tensor> x, std::shared_ptr<Tensor> mean,
                                  std::shared_ptr<Tensor> rstd, std::shared_ptr<Tensor> dy,
                                  const ParamRef& w, const ParamRef& b, int64_t rows) {
  WeightGradTask t;
  t.kind = d_.rmsnorm ? WeightGradTask::Kind::kRmsNorm : WeightGradTask::Kind::kLayerNorm;
  t.x = x->span();
  t.mean = mean->span();
  t.rstd = rstd->span();
  t.dy = dy->span();
  t.dw = w.grad;
  t.db = b.grad;
  t.rows = rows;
  t.out_cols = d_.hidden;
  t.keep = {std::move(x), std::move(mean), std::move(rstd), std::move(dy)};
  return t;
}

void GptModel::AddBias(Span out, const ParamRef& bias, int64_t rows, int64_t cols) {
  if (bias.value.data != nullptr) backend_.AddBias(out, bias.value, rows, cols);
}

// --- embedding (virtual stage 0) ---

Tensor GptModel::Embed(const ChunkParams& cp, const MicroBatch& mb) {
  // tokens (T) -> x (T_loc, h): vocab-parallel lookup (zeros outside this rank's vocabulary
  // shard), summed over TP, plus the learned positions of this rank's sequence rows (at their
  // positions in the full sequence).
  const int64_t h = d_.hidden, T = rows();
  Tensor partial = New({T, h}, MemCategory::kActivations);
  backend_.EmbeddingForward(partial.span(), mb.inputs->span(), cp.word.value, d_.vocab_begin,
                            d_.vocab_local, T, h);
  Tensor x = FromPartial(std::move(partial));
  const int64_t seq_rows = seq_ / sp_div_;
  const int64_t seq_begin = sp_div_ == 1 ? 0 : tp_.rank() * seq_rows;
  if (cp.position.value.data != nullptr) {
    const int64_t row = batch_ * h;
    for (const PositionRun& run : PositionRuns(shard_, seq_begin, seq_rows)) {
      backend_.AddPositions(x.span().Slice((run.local_begin - seq_begin) * row, run.length * row),
                            cp.position.value, run.position_begin, run.length, batch_, h);
    }
  }
  return x;
}

void GptModel::EmbedBackward(const ChunkParams& cp, Tensor dx, const MicroBatch& mb,
                             WeightGradQueue& queue) {
  // dx (T_loc, h): position gradients from the local rows; word-embedding gradients from the
  // full rows (the lookup's backward is the all-reduce's: identity, or all-gather under SP).
  const int64_t h = d_.hidden;
  const int64_t seq_rows = seq_ / sp_div_;
  auto local = std::make_shared<Tensor>(std::move(dx));
  auto full =
      sp_div_ == 1 ? local : std::make_shared<Tensor>(ToFull(*local, MemCategory::kActivations));
  const int64_t seq_begin = sp_div_ == 1 ? 0 : tp_.rank() * seq_rows;
  if (cp.position.value.data != nullptr) {
    for (const PositionRun& run : PositionRuns(shard_, seq_begin, seq_rows)) {
      WeightGradTask pos;
      pos.kind = WeightGradTask::Kind::kPositions;
      pos.keep = {local};
      pos.dy =
          local->span().Slice((run.local_begin - seq_begin) * batch_ * h, run.length * batch_ * h);
      pos.dw = cp.position.grad;
      pos.seq_begin = run.position_begin;
      pos.seq_rows = run.length;
      pos.batch = batch_;
      pos.out_cols = h;
      queue.Push(std::move(pos));
    }
  }
  WeightGradTask word;
  word.kind = WeightGradTask::Kind::kEmbedding;
  word.keep = {full, mb.inputs};
  word.dy = full->span();
  word.tokens = mb.inputs->span();
  word.dw = cp.word.grad;
  word.rows = rows();
  word.out_cols = h;
  word.vocab_begin = d_.vocab_begin;
  word.vocab_rows = d_.vocab_local;
  queue.Push(std::move(word));
}

// --- transformer layer ---

Tensor GptModel::LayerForward(const LayerParams& p, const Tensor& x, LayerActs* acts) {
  // x (T_loc, h) -> (T_loc, h). Shapes: T = S B rows, H = local heads, d = head size,
  // f = local FFN size.
  const int64_t h = d_.hidden, T = rows(), Tl = local_rows();
  const int64_t H = d_.heads_local, G = d_.groups_local, hd = d_.head_dim;
  const int64_t qkv_cols = d_.qkv_local();
  const MemCategory act = MemCategory::kActivations;

  // Attention block.
  auto ln1_mean = SharedF32({Tl}, act), ln1_rstd = SharedF32({Tl}, act);
  Tensor ln1 = New({Tl, h}, act);
  NormForward(ln1.span(), ln1_mean->span(), ln1_rstd->span(), x.span(), p.ln1_w, p.ln1_b, Tl);
  auto ln1_full = sp_div_ == 1 ? std::make_shared<Tensor>(std::move(ln1))
                               : std::make_shared<Tensor>(ToFull(ln1, act));
  auto qkv = Shared({T, qkv_cols}, act);
  LinearForward(backend_, qkv->span(), ln1_full->span(), p.qkv_w.value, T, h, qkv_cols);
  AddBias(qkv->span(), p.qkv_b, T, qkv_cols);
  if (d_.rotary) RotaryAtPositions(qkv->span(), false);
  auto ctx = Shared({T, H * hd}, act);
  std::shared_ptr<Tensor> probs, lse;
  if (context_ == nullptr && !options_.flash_attention) {
    probs = Shared({batch_, H, seq_, seq_}, act);
    backend_.AttentionForward(ctx->span(), probs->span(), qkv->span(), seq_, batch_, H, G, hd);
  } else if (context_ == nullptr) {
    lse = SharedF32({T, H}, act);
    FlashAttentionForward(backend_, ctx->span(), lse->span(), qkv->span(), attention_shape());
  } else {
    const AttentionShape shape = attention_shape();
    lse = SharedF32({context_->lse_rows(shape), context_->lse_cols(shape)}, act);
    context_->Forward(ctx->span(), lse->span(), qkv->span(), shape);
  }
  if (options_.recompute == Recompute::kSelective) probs.reset(), lse.reset();
  Tensor proj = New({T, h}, MemCategory::kWorkspace);
  LinearForward(backend_, proj.span(), ctx->span(), p.proj_w.value, T, H * hd, h);
  auto mid = std::make_shared<Tensor>(FromPartial(std::move(proj)));
  AddBias(mid->span(), p.proj_b, Tl, h);
  backend_.Add(mid->span(), x.span());

  // MLP block: the MLP, or the routed experts plus the shared experts (moe_layer.py
  // postprocess: output + shared_expert_output), then the residual.
  LayerActs a{ln1_mean, ln1_rstd, ln1_full, qkv, probs, lse, ctx, mid};
  a.ln2_mean = SharedF32({Tl}, act), a.ln2_rstd = SharedF32({Tl}, act);
  auto ln2 = Shared({Tl, h}, act);
  NormForward(ln2->span(), a.ln2_mean->span(), a.ln2_rstd->span(), mid->span(), p.ln2_w, p.ln2_b,
              Tl);
  Tensor out;
  if (!p.moe) {
    out = MlpForward(p, d_.ffn_local, ln2, a);
  } else {
    out = moe_->Forward(p, ln2, &a.moe);
    if (d_.shared_ffn > 0)
      backend_.Add(out.span(), MlpForward(p, d_.shared_ffn_local, ln2, a).span());
  }
  backend_.Add(out.span(), mid->span());
  if (acts != nullptr) *acts = std::move(a);
  return out;
}

Tensor GptModel::MlpForward(const LayerParams& p, int64_t f, const std::shared_ptr<Tensor>& ln,
                            LayerActs& a) {
  // ln (T_loc, h) -> (T_loc, h): fc2(act(fc1(ln))) summed over TP, with fc2's bias.
  const int64_t h = d_.hidden, T = rows(), Tl = local_rows(), fc1_cols = (d_.swiglu ? 2 : 1) * f;
  const MemCategory act = MemCategory::kActivations;
  a.ln2_full = sp_div_ == 1 ? ln : std::make_shared<Tensor>(ToFull(*ln, act));
  a.fc1 = Shared({T, fc1_cols}, act);
  LinearForward(backend_, a.fc1->span(), a.ln2_full->span(), p.fc1_w.value, T, h, fc1_cols);
  AddBias(a.fc1->span(), p.fc1_b, T, fc1_cols);
  a.gelu = Shared({T, f}, act);
  if (d_.swiglu) {
    backend_.SwiGlu(a.gelu->span(), a.fc1->span(), T, f);
  } else {
    backend_.Gelu(a.gelu->span(), a.fc1->span());
  }
  Tensor fc2 = New({T, h}, MemCategory::kWorkspace);
  LinearForward(backend_, fc2.span(), a.gelu->span(), p.fc2_w.value, T, f, h);
  Tensor out = FromPartial(std::move(fc2));
  AddBias(out.span(), p.fc2_b, Tl, h);
  return out;
}

std::shared_ptr<Tensor> GptModel::MlpBackward(const LayerParams& p, int64_t f, LayerActs& a,
                                              const std::shared_ptr<Tensor>& dout,
                                              WeightGradQueue& queue) {
  // out = RowParallel(fc2, act(ColumnParallel(fc1, ln))): dout (T_loc, h) -> dln (T_loc, h).
  const int64_t h = d_.hidden, T = rows(), Tl = local_rows(), fc1_cols = (d_.swiglu ? 2 : 1) * f;
  auto dfc2 =
      sp_div_ == 1 ? dout : std::make_shared<Tensor>(ToFull(*dout, MemCategory::kActivations));
  Tensor dgelu = New({T, f}, MemCategory::kWorkspace);
  LinearBackwardInput(backend_, dgelu.span(), dfc2->span(), p.fc2_w.value, T, f, h);
  auto dfc1 = Shared({T, fc1_cols}, MemCategory::kActivations);
  if (d_.swiglu) {
    backend_.SwiGluBackward(dfc1->span(), a.fc1->span(), dgelu.span(), T, f);
  } else {
    backend_.GeluBackward(dfc1->span(), a.fc1->span(), dgelu.span());
  }
  dgelu = Tensor();
  Tensor dln_full = New({T, h}, MemCategory::kWorkspace);
  LinearBackwardInput(backend_, dln_full.span(), dfc1->span(), p.fc1_w.value, T, h, fc1_cols);
  queue.Push(LinearGradTask(a.gelu, dfc2, p.fc2_w.grad, Span(), T, f, h));
  if (p.fc2_b.value.data != nullptr) queue.Push(BiasGradTask(dout, p.fc2_b.grad, Tl, h));
  auto dln = std::make_shared<Tensor>(ReduceInputGrad(
      std::move(dln_full), queue,
      LinearGradTask(a.ln2_full, dfc1, p.fc1_w.grad, p.fc1_b.grad, T, h, fc1_cols)));
  a.fc1.reset();
  return dln;
}

Tensor GptModel::LayerBackward(const LayerParams& p, LayerActs& a, std::shared_ptr<Tensor> x,
                               Tensor dout_in, WeightGradQueue& queue) {
  // dout (T_loc, h) -> dx (T_loc, h); weight gradients queued.
  const int64_t h = d_.hidden, T = rows(), Tl = local_rows();
  const int64_t H = d_.heads_local, G = d_.groups_local, hd = d_.head_dim;
  const int64_t qkv_cols = d_.qkv_local();
  auto dout = std::make_shared<Tensor>(std::move(dout_in));

  // MLP block: out = mid + MLP(N2(mid)), the MLP dense, or routed plus shared experts.
  std::shared_ptr<Tensor> dln2;
  if (!p.moe) {
    dln2 = MlpBackward(p, d_.ffn_local, a, dout, queue);
  } else {
    dln2 = std::make_shared<Tensor>(moe_->Backward(p, a.moe, *dout, queue));
    if (d_.shared_ffn > 0) {
      backend_.Add(dln2->span(), MlpBackward(p, d_.shared_ffn_local, a, dout, queue)->span());
    }
  }
  Tensor dmid = New({Tl, h}, MemCategory::kActivations);
  backend_.Copy(dmid.span(), dout->span());
  NormBackwardInput(dmid.span(), dln2->span(), a.mid->span(), a.ln2_mean->span(),
                    a.ln2_rstd->span(), p.ln2_w, Tl);
  queue.Push(NormTask(a.mid, a.ln2_mean, a.ln2_rstd, dln2, p.ln2_w, p.ln2_b, Tl));

  // Attention block: mid = x + RowParallel(proj, attn(ColumnParallel(qkv, LN1(x)))).
  auto dmid_shared = std::make_shared<Tensor>(std::move(dmid));
  auto dproj = sp_div_ == 1
                   ? dmid_shared
                   : std::make_shared<Tensor>(ToFull(*dmid_shared, MemCategory::kActivations));
  Tensor dctx = New({T, H * hd}, MemCategory::kWorkspace);
  LinearBackwardInput(backend_, dctx.span(), dproj->span(), p.proj_w.value, T, H * hd, h);
  auto dqkv = Shared({T, qkv_cols}, MemCategory::kActivations);
  if (context_ == nullptr && !options_.flash_attention) {
    if (a.probs == nullptr) {  // selective recompute: re-run core attention for the softmax
      a.probs = Shared({batch_, H, seq_, seq_}, MemCategory::kActivations);
      Tensor ctx = New({T, H * hd}, MemCategory::kWorkspace);
      backend_.AttentionForward(ctx.span(), a.probs->span(), a.qkv->span(), seq_, batch_, H, G, hd);
    }
    backend_.AttentionBackward(dqkv->span(), dctx.span(), a.qkv->span(), a.probs->span(), seq_,
                               batch_, H, G, hd);
  } else if (context_ == nullptr) {
    const AttentionShape shape = attention_shape();
    if (a.lse == nullptr) {  // selective recompute: re-run core attention for the statistics
      a.lse = SharedF32({T, H}, MemCategory::kActivations);
      Tensor ctx = New({T, H * hd}, MemCategory::kWorkspace);
      FlashAttentionForward(backend_, ctx.span(), a.lse->span(), a.qkv->span(), shape);
    }
    FlashAttentionBackward(backend_, dqkv->span(), dctx.span(), a.ctx->span(), a.lse->span(),
                           a.qkv->span(), shape);
  } else {
    const AttentionShape shape = attention_shape();
    if (a.lse == nullptr) {  // selective recompute: re-run the exchange and core attention
      a.lse = SharedF32({context_->lse_rows(shape), context_->lse_cols(shape)},
                        MemCategory::kActivations);
      Tensor ctx = New({T, H * hd}, MemCategory::kWorkspace);
      context_->Forward(ctx.span(), a.lse->span(), a.qkv->span(), shape);
    }
    context_->Backward(dqkv->span(), dctx.span(), a.ctx->span(), a.lse->span(), a.qkv->span(),
                       shape);
  }
  if (d_.rotary) RotaryAtPositions(dqkv->span(), true);
  dctx = Tensor();
  a.probs.reset();
  a.lse.reset();
  a.qkv.reset();
  Tensor dln1_full = New({T, h}, MemCategory::kWorkspace);
  LinearBackwardInput(backend_, dln1_full.span(), dqkv->span(), p.qkv_w.value, T, h, qkv_cols);
  queue.Push(LinearGradTask(a.ctx, dproj, p.proj_w.grad, Span(), T, H * hd, h));
  if (p.proj_b.value.data != nullptr) queue.Push(BiasGradTask(dmid_shared, p.proj_b.grad, Tl, h));
  auto dln1 = std::make_shared<Tensor>(ReduceInputGrad(
      std::move(dln1_full), queue,
      LinearGradTask(a.ln1_full, dqkv, p.qkv_w.grad, p.qkv_b.grad, T, h, qkv_cols)));
  Tensor dx = New({Tl, h}, MemCategory::kActivations);
  backend_.Copy(dx.span(), dmid_shared->span());
  NormBackwardInput(dx.span(), dln1->span(), x->span(), a.ln1_mean->span(), a.ln1_rstd->span(),
                    p.ln1_w, Tl);
  queue.Push(NormTask(x, a.ln1_mean, a.ln1_rstd, dln1, p.ln1_w, p.ln1_b, Tl));
  a = LayerActs{};
  return dx;
}

// --- head (last virtual stage): final norm, LM head (the word embedding when tied), loss ---

void GptModel::HeadForward(const ChunkParams& cp, std::shared_ptr<Tensor> x, const MicroBatch& mb,
                           ChunkActs& acts, double* loss_sum) {
  // x (T_loc, h) -> per-token losses (T), summed into *loss_sum.
  const int64_t h = d_.hidden, T = rows(), Tl = local_rows(), V = d_.vocab_local;
  const MemCategory act = MemCategory::kActivations;
  auto mean = SharedF32({Tl}, act), rstd = SharedF32({Tl}, act);
  Tensor ln = New({Tl, h}, act);
  NormForward(ln.span(), mean->span(), rstd->span(), x->span(), cp.final_ln_w, cp.final_ln_b, Tl);
  auto ln_full = sp_div_ == 1 ? std::make_shared<Tensor>(std::move(ln))
                              : std::make_shared<Tensor>(ToFull(ln, act));
  // logits (T, V_loc) = ln_full @ word^T: the column-parallel output layer, with fp32 logits
  // under mixed precision (Megatron casts them to float for the cross entropy).
  auto logits = SharedF32({T, V}, act);
  LinearForward(backend_, logits->span(), ln_full->span(), cp.output.value, T, h, V);
  // Vocab-parallel cross entropy: global max, then global sums of exp and of target logits.
  Tensor row_max = NewF32({T}, MemCategory::kWorkspace);
  Tensor sum_exp = NewF32({T}, MemCategory::kWorkspace);
  Tensor target_logit = NewF32({T}, MemCategory::kWorkspace);
  Tensor losses = NewF32({T}, MemCategory::kWorkspace);
  backend_.CrossEntropyMax(row_max.span(), logits->span(), T, V, d_.vocab_valid_local);
  TpAllReduce(row_max.span(), ReduceOp::kMax, "tp all-reduce max");
  backend_.CrossEntropyExp(logits->span(), sum_exp.span(), target_logit.span(), row_max.span(),
                           mb.targets->span(), d_.vocab_begin, T, V, d_.vocab_valid_local);
  TpAllReduce(target_logit.span(), ReduceOp::kSum, "tp all-reduce target");
  TpAllReduce(sum_exp.span(), ReduceOp::kSum, "tp all-reduce sum-exp");
  backend_.CrossEntropyFinish(logits->span(), losses.span(), sum_exp.span(), row_max.span(),
                              target_logit.span(), T, V);
  *loss_sum = backend_.Sum(losses.span());
  acts.head_x = std::move(x);
  acts.head_mean = mean;
  acts.head_rstd = rstd;
  acts.head_ln_full = ln_full;
  acts.head_probs = logits;
}

Tensor GptModel::HeadBackward(const ChunkParams& cp, ChunkActs& acts, const MicroBatch& mb,
                              double loss_scale, WeightGradQueue& queue) {
  // -> dx (T_loc, h), the gradient of loss_scale * (sum of per-token losses).
  const int64_t h = d_.hidden, T = rows(), Tl = local_rows(), V = d_.vocab_local;
  auto dlogits = std::move(acts.head_probs);  // (T, V_loc), becomes the gradient in place
  backend_.CrossEntropyBackward(dlogits->span(), mb.targets->span(), d_.vocab_begin, T, V,
                                loss_scale);
  if (dlogits->dtype() != dtype_) {
    // Mixed precision: the fp32 logits' gradient back to the model's dtype (the backward of
    // Megatron's logits.float()), for the output layer's GEMMs.
    auto narrow = Shared({T, V}, MemCategory::kActivations);
    backend_.Convert(narrow->span(), dlogits->span());
    dlogits = std::move(narrow);
  }
  Tensor dln_full = New({T, h}, MemCategory::kWorkspace);
  LinearBackwardInput(backend_, dln_full.span(), dlogits->span(), cp.output.value, T, h, V);
  // The output layer's input is copied to the TP region (identity forward, all-reduce backward)
  // or gathered under SP (reduce-scatter backward).
  auto dln = std::make_shared<Tensor>(FromPartial(std::move(dln_full)));
  Tensor dx = New({Tl, h}, MemCategory::kActivations);
  NormBackwardInput(dx.span(), dln->span(), acts.head_x->span(), acts.head_mean->span(),
                    acts.head_rstd->span(), cp.final_ln_w, Tl);
  queue.Push(LinearGradTask(acts.head_ln_full, dlogits, cp.output.grad, Span(), T, h, V));
  queue.Push(
      NormTask(acts.head_x, acts.head_mean, acts.head_rstd, dln, cp.final_ln_w, cp.final_ln_b, Tl));
  acts.head_x.reset();
  acts.head_mean.reset();
  acts.head_rstd.reset();
  acts.head_ln_full.reset();
  return dx;
}

// --- chunk ---

bool GptModel::Recomputes(size_t layer) const {
  return options_.recompute == Recompute::kFull &&
         (options_.recompute_num_layers <= 0 ||
          layer < static_cast<size_t>(options_.recompute_num_layers));
}

Tensor GptModel::Forward(int chunk, Tensor input, const MicroBatch& mb, ChunkActs* acts,
                         double* loss_sum) {
  const ChunkParams& cp = params_.chunk(chunk);
  PTDP_CHECK(acts != nullptr);
  Tensor x = cp.has_embedding ? Embed(cp, mb) : std::move(input);
  PTDP_CHECK(x.numel() == local_rows() * d_.hidden);
  acts->layer_inputs.clear();
  acts->layers.assign(cp.layers.size(), LayerActs{});
  for (size_t l = 0; l < cp.layers.size(); ++l) {
    auto in = std::make_shared<Tensor>(std::move(x));
    x = LayerForward(cp.layers[l], *in, Recomputes(l) ? nullptr : &acts->layers[l]);
    acts->layer_inputs.push_back(std::move(in));
  }
  if (cp.has_head) {
    HeadForward(cp, std::make_shared<Tensor>(std::move(x)), mb, *acts, loss_sum);
    return Tensor();
  }
  return x;
}

Tensor GptModel::Backward(int chunk, ChunkActs& acts, Tensor grad_output, const MicroBatch& mb,
                          double loss_scale, WeightGradQueue& queue, bool defer,
                          const std::function<void(int part)>& part_done) {
  const ChunkParams& cp = params_.chunk(chunk);
  weight_grads_deferred_ = defer;
  auto flush = [&](int part) {
    if (defer) return;
    queue.Run(backend_);
    if (part_done) part_done(part);
  };
  Tensor g = cp.has_head ? HeadBackward(cp, acts, mb, loss_scale, queue) : std::move(grad_output);
  if (cp.has_head) flush(kHeadPart);
  PTDP_CHECK(g.numel() == local_rows() * d_.hidden);
  for (size_t l = cp.layers.size(); l-- > 0;) {
    LayerActs recomputed;
    LayerActs& a = Recomputes(l) ? recomputed : acts.layers[l];
    if (Recomputes(l)) LayerForward(cp.layers[l], *acts.layer_inputs[l], &a);
    g = LayerBackward(cp.layers[l], a, std::move(acts.layer_inputs[l]), std::move(g), queue);
    flush(cp.first_layer + static_cast<int>(l));
  }
  acts = ChunkActs{};
  if (cp.has_embedding) {
    EmbedBackward(cp, std::move(g), mb, queue);
    flush(kEmbeddingPart);
    return Tensor();
  }
  return g;
}

}  // namespace ptdp
