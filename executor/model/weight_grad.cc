#include "executor/model/weight_grad.h"

namespace ptdp {

void WeightGradQueue::Run(Backend& b) {
  using Kind = WeightGradTask::Kind;
  for (WeightGradTask& t : tasks_) {
    switch (t.kind) {
      case Kind::kLinear:
        // dW (n_out, n_in) += dy^T (n_out, T) @ x (T, n_in); db (n_out) += column sums of dy.
        b.Gemm(true, false, t.out_cols, t.in_cols, t.rows, 1.0, t.dy, t.out_cols, t.x, t.in_cols,
               1.0, t.dw, t.in_cols);
        if (t.db.data != nullptr) b.BiasGrad(t.db, t.dy, t.rows, t.out_cols);
        break;
      case Kind::kBias:
        b.BiasGrad(t.db, t.dy, t.rows, t.out_cols);
        break;
      case Kind::kLayerNorm:
        b.LayerNormBackwardParams(t.dw, t.db, t.dy, t.x, t.mean, t.rstd, t.rows, t.out_cols);
        break;
      case Kind::kRmsNorm:
        b.RmsNormBackwardParams(t.dw, t.dy, t.x, t.rstd, t.rows, t.out_cols);
        break;
      case Kind::kEmbedding:
        b.EmbeddingBackward(t.dw, t.tokens, t.dy, t.vocab_begin, t.vocab_rows, t.rows, t.out_cols);
        break;
      case Kind::kPositions:
        b.PositionsBackward(t.dw, t.dy, t.seq_begin, t.seq_rows, t.batch, t.out_cols);
        break;
    }
  }
  tasks_.clear();
}

WeightGradTask LinearGradTask(std::vector<std::shared_ptr<Tensor>> keep, Span x, Span dy, Span dw,
                              Span db, int64_t rows, int64_t in_cols, int64_t out_cols) {
  WeightGradTask t;
  t.kind = WeightGradTask::Kind::kLinear;
  t.x = x;
  t.dy = dy;
  t.dw = dw;
  t.db = db;
  t.rows = rows, t.in_cols = in_cols, t.out_cols = out_cols;
  t.keep = std::move(keep);
  return t;
}

}  // namespace ptdp
