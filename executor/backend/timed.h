// TimedBackend: a Backend that forwards every call to another and times its kernels by class
// (kernel_clock.h), for `ptdp validate`'s rows per operation class. Memory stays with the
// wrapped backend (Backend::Underlying), so tensors, accounting and the CUDA figures are the
// same whichever of the two a caller holds.
//
// Each kernel is timed in the class of its method (Gemm: gemm; Attention*: attention; the
// optimizer steps: optimizer; the rest: memory-bound) unless a phase says otherwise: during the
// optimizer's step every kernel counts as optimizer, and untimed phases (evaluation,
// checkpoints) count nowhere. Host transfers (Upload, Download) are never timed: they are the
// data loader's and the checkpoint's, which the simulator does not model.
#pragma once

#include <memory>

#include "executor/backend/backend.h"
#include "executor/backend/kernel_clock.h"

namespace ptdp {

class TimedBackend final : public Backend {
 public:
  enum class Phase : uint8_t { kByMethod, kOptimizer, kUntimed };

  explicit TimedBackend(Backend& inner);

  void set_phase(Phase phase) { phase_ = phase; }
  Phase phase() const { return phase_; }
  // Seconds per class since construction (waits for the kernels timed so far), and since the
  // previous Lap() (or construction).
  KernelSeconds Totals() { return clock_->Totals(); }
  KernelSeconds Lap();

  std::string_view name() const override { return inner_.name(); }
  Backend& Underlying() override { return inner_.Underlying(); }
  std::unique_ptr<KernelClock> MakeKernelClock() override { return inner_.MakeKernelClock(); }

  void Upload(Span dst, const void* host) override;
  void Download(Span src, void* host) override;
  void Fill(Span x, double value) override;
  void Copy(Span dst, Span src) override;
  void Convert(Span dst, Span src) override;
  void Copy2D(Span dst, int64_t ld_dst, Span src, int64_t ld_src, int64_t rows,
              int64_t cols) override;
  void Scale(Span x, double alpha) override;
  void Add(Span y, Span x) override;
  double SumSquares(Span x) override;
  double Sum(Span x) override;
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, Span a,
            int64_t lda, Span b, int64_t ldb, double beta, Span c, int64_t ldc) override;
  void AddBias(Span out, Span bias, int64_t rows, int64_t cols) override;
  void BiasGrad(Span dbias, Span dout, int64_t rows, int64_t cols) override;
  void LayerNormForward(Span out, Span mean, Span rstd, Span x, Span weight, Span bias,
                        int64_t rows, int64_t cols, double eps) override;
  void LayerNormBackwardInput(Span dx, Span dout, Span x, Span mean, Span rstd, Span weight,
                              int64_t rows, int64_t cols) override;
  void LayerNormBackwardParams(Span dweight, Span dbias, Span dout, Span x, Span mean, Span rstd,
                               int64_t rows, int64_t cols) override;
  void RmsNormForward(Span out, Span rstd, Span x, Span weight, int64_t rows, int64_t cols,
                      double eps) override;
  void RmsNormBackwardInput(Span dx, Span dout, Span x, Span rstd, Span weight, int64_t rows,
                            int64_t cols) override;
  void RmsNormBackwardParams(Span dweight, Span dout, Span x, Span rstd, int64_t rows,
                             int64_t cols) override;
  void SwiGlu(Span out, Span in, int64_t rows, int64_t cols) override;
  void SwiGluBackward(Span din, Span in, Span dout, int64_t rows, int64_t cols) override;
  void Gelu(Span out, Span in) override;
  void GeluBackward(Span din, Span in, Span dout) override;
  void EmbeddingForward(Span out, Span tokens, Span table, int64_t vocab_begin, int64_t vocab_rows,
                        int64_t rows, int64_t cols) override;
  void EmbeddingBackward(Span dtable, Span tokens, Span dout, int64_t vocab_begin,
                         int64_t vocab_rows, int64_t rows, int64_t cols) override;
  void AddPositions(Span x, Span pos, int64_t seq_begin, int64_t seq_rows, int64_t batch,
                    int64_t cols) override;
  void PositionsBackward(Span dpos, Span dx, int64_t seq_begin, int64_t seq_rows, int64_t batch,
                         int64_t cols) override;
  void AttentionForward(Span ctx, Span probs, Span qkv, int64_t seq, int64_t batch, int64_t heads,
                        int64_t groups, int64_t head_dim) override;
  void AttentionBackward(Span dqkv, Span dctx, Span qkv, Span probs, int64_t seq, int64_t batch,
                         int64_t heads, int64_t groups, int64_t head_dim) override;
  void AttentionBlockForward(Span ctx, Span lse, Span q, Span kv, int64_t seq_q, int64_t seq_k,
                             int64_t batch, int64_t heads, int64_t groups, int64_t head_dim,
                             bool causal) override;
  void AttentionBlockBackward(Span dq, Span dkv, Span dctx, Span ctx, Span lse, Span q, Span kv,
                              int64_t seq_q, int64_t seq_k, int64_t batch, int64_t heads,
                              int64_t groups, int64_t head_dim, bool causal) override;
  void Rotary(Span qkv, int64_t seq, int64_t batch, int64_t heads, int64_t groups, int64_t head_dim,
              double base, int64_t seq_begin, bool inverse) override;
  void RouterTopK(Span probs, Span choice, Span logits, int64_t rows, int64_t experts,
                  int64_t topk) override;
  void RouterTopKBackward(Span dlogits, Span dprobs, Span probs, Span choice, int64_t rows,
                          int64_t experts, int64_t topk) override;
  void GatherRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) override;
  void ScatterAddRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) override;
  void ScaleRows(Span x, Span scale, int64_t rows, int64_t cols) override;
  void RowDots(Span out, Span a, Span b, int64_t rows, int64_t cols) override;
  void CrossEntropyMax(Span row_max, Span logits, int64_t rows, int64_t cols,
                       int64_t valid_cols) override;
  void CrossEntropyExp(Span logits, Span sum_exp, Span target_logit, Span row_max, Span targets,
                       int64_t vocab_begin, int64_t rows, int64_t cols,
                       int64_t valid_cols) override;
  void CrossEntropyFinish(Span logits, Span losses, Span sum_exp, Span row_max, Span target_logit,
                          int64_t rows, int64_t cols) override;
  void CrossEntropyBackward(Span probs, Span targets, int64_t vocab_begin, int64_t rows,
                            int64_t cols, double scale) override;
  void AdamStep(Span param, Span grad, Span m, Span v, const AdamArgs& args) override;
  void SgdStep(Span param, Span grad, Span momentum_buf, double lr, double momentum,
               double weight_decay, double grad_scale) override;

 protected:
  // Never reached: Allocate and Free go to Underlying().
  void* DoAllocate(int64_t bytes) override;
  void DoFree(void* data) override;

 private:
  // Times `call()` (a kernel of `by_method`'s class) as the phase says.
  template <typename Call>
  auto Timed(KernelClass by_method, Call&& call);

  Backend& inner_;
  std::unique_ptr<KernelClock> clock_;
  Phase phase_ = Phase::kByMethod;
  KernelSeconds lap_{};
};

}  // namespace ptdp
