#include "executor/backend/timed.h"

#include <type_traits>

#include "core/error.h"

namespace ptdp {

TimedBackend::TimedBackend(Backend& inner) : inner_(inner), clock_(inner.MakeKernelClock()) {}

template <typename Call>
auto TimedBackend::Timed(KernelClass by_method, Call&& call) {
  if (phase_ == Phase::kUntimed) return call();
  const KernelClass c = phase_ == Phase::kOptimizer ? KernelClass::kOptimizer : by_method;
  clock_->Begin();
  if constexpr (std::is_void_v<decltype(call())>) {
    call();
    clock_->End(c);
  } else {
    auto result = call();
    clock_->End(c);
    return result;
  }
}

KernelSeconds TimedBackend::Lap() {
  const KernelSeconds now = clock_->Totals();
  KernelSeconds since{};
  for (size_t c = 0; c < since.size(); ++c) since[c] = now[c] - lap_[c];
  lap_ = now;
  return since;
}

void* TimedBackend::DoAllocate(int64_t) {
  PTDP_CHECK(false && "TimedBackend allocates through Underlying()");
  return nullptr;
}

void TimedBackend::DoFree(void*) { PTDP_CHECK(false && "TimedBackend frees through Underlying()"); }

void TimedBackend::Upload(Span dst, const void* host) { inner_.Upload(dst, host); }

void TimedBackend::Download(Span src, void* host) { inner_.Download(src, host); }

void TimedBackend::Fill(Span x, double value) {
  Timed(KernelClass::kMemory, [&] { return inner_.Fill(x, value); });
}

void TimedBackend::Copy(Span dst, Span src) {
  Timed(KernelClass::kMemory, [&] { return inner_.Copy(dst, src); });
}

void TimedBackend::Convert(Span dst, Span src) {
  Timed(KernelClass::kMemory, [&] { return inner_.Convert(dst, src); });
}

void TimedBackend::Copy2D(Span dst, int64_t ld_dst, Span src, int64_t ld_src, int64_t rows,
                          int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.Copy2D(dst, ld_dst, src, ld_src, rows, cols); });
}

void TimedBackend::Scale(Span x, double alpha) {
  Timed(KernelClass::kMemory, [&] { return inner_.Scale(x, alpha); });
}

void TimedBackend::Add(Span y, Span x) {
  Timed(KernelClass::kMemory, [&] { return inner_.Add(y, x); });
}

double TimedBackend::SumSquares(Span x) {
  return Timed(KernelClass::kMemory, [&] { return inner_.SumSquares(x); });
}

double TimedBackend::Sum(Span x) {
  return Timed(KernelClass::kMemory, [&] { return inner_.Sum(x); });
}

void TimedBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                        Span a, int64_t lda, Span b, int64_t ldb, double beta, Span c,
                        int64_t ldc) {
  Timed(KernelClass::kGemm, [&] {
    return inner_.Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  });
}

void TimedBackend::AddBias(Span out, Span bias, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.AddBias(out, bias, rows, cols); });
}

void TimedBackend::BiasGrad(Span dbias, Span dout, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.BiasGrad(dbias, dout, rows, cols); });
}

void TimedBackend::LayerNormForward(Span out, Span mean, Span rstd, Span x, Span weight, Span bias,
                                    int64_t rows, int64_t cols, double eps) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.LayerNormForward(out, mean, rstd, x, weight, bias, rows, cols, eps); });
}

void TimedBackend::LayerNormBackwardInput(Span dx, Span dout, Span x, Span mean, Span rstd,
                                          Span weight, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.LayerNormBackwardInput(dx, dout, x, mean, rstd, weight, rows, cols); });
}

void TimedBackend::LayerNormBackwardParams(Span dweight, Span dbias, Span dout, Span x, Span mean,
                                           Span rstd, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] {
    return inner_.LayerNormBackwardParams(dweight, dbias, dout, x, mean, rstd, rows, cols);
  });
}

void TimedBackend::RmsNormForward(Span out, Span rstd, Span x, Span weight, int64_t rows,
                                  int64_t cols, double eps) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.RmsNormForward(out, rstd, x, weight, rows, cols, eps); });
}

void TimedBackend::RmsNormBackwardInput(Span dx, Span dout, Span x, Span rstd, Span weight,
                                        int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.RmsNormBackwardInput(dx, dout, x, rstd, weight, rows, cols); });
}

void TimedBackend::RmsNormBackwardParams(Span dweight, Span dout, Span x, Span rstd, int64_t rows,
                                         int64_t cols) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.RmsNormBackwardParams(dweight, dout, x, rstd, rows, cols); });
}

void TimedBackend::SwiGlu(Span out, Span in, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.SwiGlu(out, in, rows, cols); });
}

void TimedBackend::SwiGluBackward(Span din, Span in, Span dout, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.SwiGluBackward(din, in, dout, rows, cols); });
}

void TimedBackend::Gelu(Span out, Span in) {
  Timed(KernelClass::kMemory, [&] { return inner_.Gelu(out, in); });
}

void TimedBackend::GeluBackward(Span din, Span in, Span dout) {
  Timed(KernelClass::kMemory, [&] { return inner_.GeluBackward(din, in, dout); });
}

void TimedBackend::EmbeddingForward(Span out, Span tokens, Span table, int64_t vocab_begin,
                                    int64_t vocab_rows, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] {
    return inner_.EmbeddingForward(out, tokens, table, vocab_begin, vocab_rows, rows, cols);
  });
}

void TimedBackend::EmbeddingBackward(Span dtable, Span tokens, Span dout, int64_t vocab_begin,
                                     int64_t vocab_rows, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] {
    return inner_.EmbeddingBackward(dtable, tokens, dout, vocab_begin, vocab_rows, rows, cols);
  });
}

void TimedBackend::AddPositions(Span x, Span pos, int64_t seq_begin, int64_t seq_rows,
                                int64_t batch, int64_t cols) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.AddPositions(x, pos, seq_begin, seq_rows, batch, cols); });
}

void TimedBackend::PositionsBackward(Span dpos, Span dx, int64_t seq_begin, int64_t seq_rows,
                                     int64_t batch, int64_t cols) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.PositionsBackward(dpos, dx, seq_begin, seq_rows, batch, cols); });
}

void TimedBackend::AttentionForward(Span ctx, Span probs, Span qkv, int64_t seq, int64_t batch,
                                    int64_t heads, int64_t groups, int64_t head_dim) {
  Timed(KernelClass::kAttention, [&] {
    return inner_.AttentionForward(ctx, probs, qkv, seq, batch, heads, groups, head_dim);
  });
}

void TimedBackend::AttentionBackward(Span dqkv, Span dctx, Span qkv, Span probs, int64_t seq,
                                     int64_t batch, int64_t heads, int64_t groups,
                                     int64_t head_dim) {
  Timed(KernelClass::kAttention, [&] {
    return inner_.AttentionBackward(dqkv, dctx, qkv, probs, seq, batch, heads, groups, head_dim);
  });
}

void TimedBackend::AttentionBlockForward(Span ctx, Span lse, Span q, Span kv, int64_t seq_q,
                                         int64_t seq_k, int64_t batch, int64_t heads,
                                         int64_t groups, int64_t head_dim, bool causal) {
  Timed(KernelClass::kAttention, [&] {
    return inner_.AttentionBlockForward(ctx, lse, q, kv, seq_q, seq_k, batch, heads, groups,
                                        head_dim, causal);
  });
}

void TimedBackend::AttentionBlockBackward(Span dq, Span dkv, Span dctx, Span ctx, Span lse, Span q,
                                          Span kv, int64_t seq_q, int64_t seq_k, int64_t batch,
                                          int64_t heads, int64_t groups, int64_t head_dim,
                                          bool causal) {
  Timed(KernelClass::kAttention, [&] {
    return inner_.AttentionBlockBackward(dq, dkv, dctx, ctx, lse, q, kv, seq_q, seq_k, batch, heads,
                                         groups, head_dim, causal);
  });
}

void TimedBackend::Rotary(Span qkv, int64_t seq, int64_t batch, int64_t heads, int64_t groups,
                          int64_t head_dim, double base, int64_t seq_begin, bool inverse) {
  Timed(KernelClass::kMemory, [&] {
    return inner_.Rotary(qkv, seq, batch, heads, groups, head_dim, base, seq_begin, inverse);
  });
}

void TimedBackend::RouterTopK(Span probs, Span choice, Span logits, int64_t rows, int64_t experts,
                              int64_t topk) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.RouterTopK(probs, choice, logits, rows, experts, topk); });
}

void TimedBackend::RouterTopKBackward(Span dlogits, Span dprobs, Span probs, Span choice,
                                      int64_t rows, int64_t experts, int64_t topk) {
  Timed(KernelClass::kMemory, [&] {
    return inner_.RouterTopKBackward(dlogits, dprobs, probs, choice, rows, experts, topk);
  });
}

void TimedBackend::GatherRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.GatherRows(dst, src, index, rows, cols); });
}

void TimedBackend::ScatterAddRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.ScatterAddRows(dst, src, index, rows, cols); });
}

void TimedBackend::ScaleRows(Span x, Span scale, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.ScaleRows(x, scale, rows, cols); });
}

void TimedBackend::RowDots(Span out, Span a, Span b, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] { return inner_.RowDots(out, a, b, rows, cols); });
}

void TimedBackend::CrossEntropyMax(Span row_max, Span logits, int64_t rows, int64_t cols,
                                   int64_t valid_cols) {
  Timed(KernelClass::kMemory,
        [&] { return inner_.CrossEntropyMax(row_max, logits, rows, cols, valid_cols); });
}

void TimedBackend::CrossEntropyExp(Span logits, Span sum_exp, Span target_logit, Span row_max,
                                   Span targets, int64_t vocab_begin, int64_t rows, int64_t cols,
                                   int64_t valid_cols) {
  Timed(KernelClass::kMemory, [&] {
    return inner_.CrossEntropyExp(logits, sum_exp, target_logit, row_max, targets, vocab_begin,
                                  rows, cols, valid_cols);
  });
}

void TimedBackend::CrossEntropyFinish(Span logits, Span losses, Span sum_exp, Span row_max,
                                      Span target_logit, int64_t rows, int64_t cols) {
  Timed(KernelClass::kMemory, [&] {
    return inner_.CrossEntropyFinish(logits, losses, sum_exp, row_max, target_logit, rows, cols);
  });
}

void TimedBackend::CrossEntropyBackward(Span probs, Span targets, int64_t vocab_begin, int64_t rows,
                                        int64_t cols, double scale) {
  Timed(KernelClass::kMemory, [&] {
    return inner_.CrossEntropyBackward(probs, targets, vocab_begin, rows, cols, scale);
  });
}

void TimedBackend::AdamStep(Span param, Span grad, Span m, Span v, const AdamArgs& args) {
  Timed(KernelClass::kOptimizer, [&] { return inner_.AdamStep(param, grad, m, v, args); });
}

void TimedBackend::SgdStep(Span param, Span grad, Span momentum_buf, double lr, double momentum,
                           double weight_decay, double grad_scale) {
  Timed(KernelClass::kOptimizer, [&] {
    return inner_.SgdStep(param, grad, momentum_buf, lr, momentum, weight_decay, grad_scale);
  });
}

}  // namespace ptdp
