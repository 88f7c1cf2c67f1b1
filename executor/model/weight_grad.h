// Weight-gradient work of the backward (dW = dY^T X and friends), queued so that it can run at
// once or later: the zero-bubble split (Qi et al. 2023) runs it as the W operation.
#pragma once

#include <memory>
#include <vector>

#include "executor/backend/backend.h"

namespace ptdp {

struct WeightGradTask {
  enum class Kind { kLinear, kBias, kLayerNorm, kRmsNorm, kEmbedding, kPositions };
  Kind kind = Kind::kLinear;
  std::vector<std::shared_ptr<Tensor>> keep;  // the tensors the views below point into
  Span x, dy, mean, rstd, tokens;
  Span dw, db;  // parameter gradients, accumulated into
  int64_t rows = 0, in_cols = 0, out_cols = 0;
  int64_t vocab_begin = 0, vocab_rows = 0;         // kEmbedding
  int64_t seq_begin = 0, seq_rows = 0, batch = 0;  // kPositions
};

class WeightGradQueue {
 public:
  void Push(WeightGradTask task) { tasks_.push_back(std::move(task)); }
  bool empty() const { return tasks_.empty(); }
  void Run(Backend& backend);  // runs and releases every task, in push order

 private:
  std::vector<WeightGradTask> tasks_;
};

// dW (out_cols, in_cols) += dY^T X for X (rows, in_cols) and dY (rows, out_cols), views into
// the kept tensors; db (out_cols) += the column sums of dY when `db` is given (a column-parallel
// linear's bias, on the same rows).
WeightGradTask LinearGradTask(std::vector<std::shared_ptr<Tensor>> keep, Span x, Span dy, Span dw,
                              Span db, int64_t rows, int64_t in_cols, int64_t out_cols);

}  // namespace ptdp
