// The backend room (executor/backend/): the memory and kernels the executor runs on: this
// interface, the CPU reference (cpu.h), the CUDA backend (cuda.h, cuda/), the kernel clock
// (kernel_clock.h, timed.h), the trace recorder (measure.h) and the device probe (device.h).
//
// Backend: the executor's memory and kernels. Everything above this interface (model, pipeline
// runner, optimizer) is backend-free: it holds Tensors and calls kernels, never dereferences
// tensor memory itself (on a GPU backend that memory lives on the device). The CPU backend
// (cpu.h, OpenBLAS) is the reference every other backend is tested against (llm.c's
// habit: a CPU reference beside the fast path).
//
// Conventions for every kernel:
//  - matrices are row-major; "(N, C)" means N rows of C contiguous elements;
//  - floating-point arguments of one call share one dtype (fp32, or fp64 for gradient checks,
//    or bf16/fp16 for mixed precision below); token ids are int32;
//  - "+=" in a contract means the kernel accumulates into that output, otherwise it overwrites.
//
// Mixed precision (Megatron-LM's --bf16 / --fp16; issue 11). 16-bit (bf16 or fp16) data are
// stored in 16 bits and computed in fp32: a kernel converts each 16-bit input to fp32 on load,
// computes as its fp32 form does (reductions and GEMM accumulation in fp32), and rounds each
// 16-bit output to nearest even on store ("+=" outputs: load, add in fp32, round). So a 16-bit
// call equals the fp32 call on the same (already 16-bit) inputs with its outputs rounded, up to
// the order of fp32 operations (one ulp of the 16-bit result; the CPU backend is exact). When a
// call's data are 16-bit, these spans are fp32 instead, and only these:
//  - Gemm's c may be fp32 (a and b 16-bit): the weight gradient accumulated into the fp32
//    main_grad, the logits the cross entropy reads;
//  - parameter gradients ("+=" into the fp32 main_grad) may be fp32: BiasGrad's dbias,
//    LayerNormBackwardParams' dweight and dbias, RmsNormBackwardParams' dweight,
//    EmbeddingBackward's dtable, PositionsBackward's dpos;
//  - per-row statistics are fp32: LayerNorm's mean and rstd, RMSNorm's rstd (every kernel that
//    takes them), AttentionBlockForward/Backward's lse.
// Every other floating span of a call shares the data's dtype (the MoE router included:
// Megatron's default --moe-router-dtype routes in the model's dtype). The cross-entropy kernels
// and the optimizer steps take fp32 or fp64 only (Megatron casts the logits to float for the
// cross entropy; main weights, main_grad and Adam moments are fp32). Convert, Fill, Copy,
// Copy2D, Scale, Add, Sum, SumSquares and GatherRows take any floating dtype.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ptdp {

// kBF16: bfloat16; kF16: IEEE binary16 (executor/backend/half.h).
enum class DType : uint8_t { kF32, kF64, kI32, kBF16, kF16 };

int64_t SizeOf(DType dtype);
std::string_view Name(DType dtype);  // "fp32", "fp64", "int32", "bf16", "fp16"
inline bool Is16Bit(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }
// The precision of main weights, main_grad and optimizer state for data of `dtype`: fp32 for
// 16-bit data, else the data's own.
inline DType MainDType(DType dtype) { return Is16Bit(dtype) ? DType::kF32 : dtype; }

// What an allocation holds, for the per-category peak-memory report.
enum class MemCategory : uint8_t {
  kWeights,
  kGradients,
  kOptimizer,    // optimizer state (Adam m and v, SGD momentum)
  kActivations,  // tensors saved between a forward and its backward
  kCommBuffers,  // point-to-point buffers and collective outputs that are not saved
  kWorkspace,    // other temporaries inside one operation
};
inline constexpr int kNumMemCategories = 6;
std::string_view Name(MemCategory category);  // "weights", ..., "workspace"

struct MemoryStats {
  std::array<int64_t, kNumMemCategories> current_bytes{};
  std::array<int64_t, kNumMemCategories> peak_bytes{};  // each category's own peak
  int64_t current_total_bytes = 0;
  int64_t peak_total_bytes = 0;  // peak of the sum (not the sum of the peaks)
};

// A non-owning view of `numel` elements of `dtype` in backend memory.
struct Span {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t numel = 0;

  // Elements [offset, offset + count); checks the bounds.
  Span Slice(int64_t offset, int64_t count) const;
  int64_t bytes() const { return numel * SizeOf(dtype); }
};

class Backend;
class KernelClock;

// An owning, zero-initialised tensor in backend memory, freed on destruction. Movable, not
// copyable (copies go through Backend::Copy so that they are visible and accounted).
class Tensor {
 public:
  Tensor() = default;
  Tensor(Backend& backend, DType dtype, std::vector<int64_t> shape, MemCategory category);
  ~Tensor();
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  bool empty() const { return data_ == nullptr; }
  Span span() const { return {data_, dtype_, numel_}; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  MemCategory category() const { return category_; }

 private:
  void Release();

  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  int64_t numel_ = 0;
  std::vector<int64_t> shape_;
  MemCategory category_ = MemCategory::kWorkspace;
};

// Adam with decoupled weight decay (AdamW, as Megatron-LM's fused Adam runs it) and bias
// correction; `grad_scale` multiplies the gradient first (the clipping coefficient).
struct AdamArgs {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  int64_t step = 1;  // 1-based, for the bias correction
  double grad_scale = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // The backend that owns the memory and the stream: this one, or the one a decorator
  // (timed.h) forwards to. Memory is allocated and accounted there whichever of the two
  // a Tensor names, so the accounting stays one.
  virtual Backend& Underlying() { return *this; }
  const Backend& Underlying() const { return const_cast<Backend*>(this)->Underlying(); }

  // A clock for this backend's kernels (kernel_clock.h); the default times them on the host,
  // right for backends whose kernels return when done.
  virtual std::unique_ptr<KernelClock> MakeKernelClock();

  // --- memory (accounted by category, on Underlying()) ---
  void* Allocate(int64_t bytes, MemCategory category);  // zero-filled
  void Free(void* data, int64_t bytes, MemCategory category);
  const MemoryStats& memory() const { return Underlying().memory_; }
  void ResetPeaks();  // peaks restart from the current use

  // Host <-> backend copies of span.numel elements.
  virtual void Upload(Span dst, const void* host) = 0;
  virtual void Download(Span src, void* host) = 0;

  // --- element-wise ---
  virtual void Fill(Span x, double value) = 0;
  virtual void Copy(Span dst, Span src) = 0;  // same numel and dtype
  // dst = src converted (same numel; each fp32, fp64, bf16 or fp16; the same dtype copies):
  // rounding to nearest even, as half.h does (an fp64 source is rounded to fp32 first), a
  // 16-bit source widened exactly. Mixed precision's casts: the fp32 main weights into the
  // 16-bit model weights after each step, the fp32 logits' gradient into the 16-bit backward.
  // Added with mixed precision (issue 11): every backend implements it.
  virtual void Convert(Span dst, Span src) = 0;
  // dst (rows, cols) = src (rows, cols), each starting at its span's first element with its
  // leading dimension (cudaMemcpy2D's shape): a block of columns out of or into a wider matrix.
  virtual void Copy2D(Span dst, int64_t ld_dst, Span src, int64_t ld_src, int64_t rows,
                      int64_t cols) = 0;
  virtual void Scale(Span x, double alpha) = 0;
  virtual void Add(Span y, Span x) = 0;  // y += x
  virtual double SumSquares(Span x) = 0;
  virtual double Sum(Span x) = 0;

  // C (m, n) = alpha * op(A) op(B) + beta * C, op(A) (m, k), op(B) (k, n); each operand starts at
  // its span's first element with the given leading dimension (row stride). a and b share a
  // dtype; c is theirs, or fp32 when they are 16-bit; products accumulate in fp32 (fp64 for fp64).
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    Span a, int64_t lda, Span b, int64_t ldb, double beta, Span c, int64_t ldc) = 0;

  // out (N, C) += bias (C) on every row.
  virtual void AddBias(Span out, Span bias, int64_t rows, int64_t cols) = 0;
  // dbias (C) += column sums of dout (N, C).
  virtual void BiasGrad(Span dbias, Span dout, int64_t rows, int64_t cols) = 0;

  // LayerNorm over the last dimension: out (N, C) = (x - mean) * rstd * weight + bias; mean and
  // rstd (N) are saved for the backward.
  virtual void LayerNormForward(Span out, Span mean, Span rstd, Span x, Span weight, Span bias,
                                int64_t rows, int64_t cols, double eps) = 0;
  // dx (N, C) += input gradient of the LayerNorm.
  virtual void LayerNormBackwardInput(Span dx, Span dout, Span x, Span mean, Span rstd, Span weight,
                                      int64_t rows, int64_t cols) = 0;
  // dweight (C) += sum over rows of dout * xhat; dbias (C) += sum over rows of dout.
  virtual void LayerNormBackwardParams(Span dweight, Span dbias, Span dout, Span x, Span mean,
                                       Span rstd, int64_t rows, int64_t cols) = 0;

  // RMSNorm (Zhang and Sennrich 2019): out (N, C) = x * rstd * weight, rstd = 1 / sqrt(mean(x^2)
  // + eps) saved (N).
  virtual void RmsNormForward(Span out, Span rstd, Span x, Span weight, int64_t rows, int64_t cols,
                              double eps) = 0;
  virtual void RmsNormBackwardInput(Span dx, Span dout, Span x, Span rstd, Span weight,
                                    int64_t rows, int64_t cols) = 0;  // dx +=
  virtual void RmsNormBackwardParams(Span dweight, Span dout, Span x, Span rstd, int64_t rows,
                                     int64_t cols) = 0;  // dweight +=

  // SwiGLU (Shazeer 2020; Megatron's gated linear unit with SiLU): in (N, 2F) rows [gate | up]
  // -> out (N, F) = silu(gate) * up. Backward: din (N, 2F) from dout (N, F); overwrites.
  virtual void SwiGlu(Span out, Span in, int64_t rows, int64_t cols) = 0;
  virtual void SwiGluBackward(Span din, Span in, Span dout, int64_t rows, int64_t cols) = 0;

  // GeLU with the exact erf form (torch.nn.functional.gelu, Megatron's default).
  virtual void Gelu(Span out, Span in) = 0;
  virtual void GeluBackward(Span din, Span in, Span dout) = 0;  // din = gelu'(in) * dout

  // Vocab-parallel embedding lookup: out (N, C) row i = table[tokens[i] - vocab_begin] when the
  // token falls in this shard's [vocab_begin, vocab_begin + vocab_rows), else zeros.
  virtual void EmbeddingForward(Span out, Span tokens, Span table, int64_t vocab_begin,
                                int64_t vocab_rows, int64_t rows, int64_t cols) = 0;
  // dtable (vocab_rows, C) += dout rows scattered by token (tokens outside the shard skipped).
  virtual void EmbeddingBackward(Span dtable, Span tokens, Span dout, int64_t vocab_begin,
                                 int64_t vocab_rows, int64_t rows, int64_t cols) = 0;
  // x (S_loc * B, C), rows in (sequence, batch) order: x[i * B + j] += pos[seq_begin + i].
  virtual void AddPositions(Span x, Span pos, int64_t seq_begin, int64_t seq_rows, int64_t batch,
                            int64_t cols) = 0;
  // dpos[seq_begin + i] += sum over j of dx[i * B + j].
  virtual void PositionsBackward(Span dpos, Span dx, int64_t seq_begin, int64_t seq_rows,
                                 int64_t batch, int64_t cols) = 0;

  // Causal self-attention of H query heads in G groups (grouped-query attention; G == H is
  // plain multi-head attention) of size D, for B sequences of S tokens.
  // qkv (S * B, (H + 2 G) * D): rows in (sequence, batch) order; per group g, Megatron's
  // layout [q of its H / G heads | k | v]. Query head i uses the k and v of group i / (H / G).
  // ctx (S * B, H * D) = softmax(q k^T / sqrt(D), causal) v per head, heads in order.
  // probs (B, H, S, S): the softmax, saved for the backward (entries above the diagonal 0).
  virtual void AttentionForward(Span ctx, Span probs, Span qkv, int64_t seq, int64_t batch,
                                int64_t heads, int64_t groups, int64_t head_dim) = 0;
  // dqkv (S * B, (H + 2 G) * D) = gradient of qkv given dctx (S * B, H * D); overwrites.
  virtual void AttentionBackward(Span dqkv, Span dctx, Span qkv, Span probs, int64_t seq,
                                 int64_t batch, int64_t heads, int64_t groups,
                                 int64_t head_dim) = 0;
  // Context parallelism's attention of one block (FlashAttention's forward with the
  // log-sum-exp, Dao et al. 2022, as Transformer Engine's context-parallel attention runs it
  // once per key/value block): the queries of q (Sq * B rows in the qkv layout above; only
  // their q columns are read) against kv (Sk * B rows of G groups of [k | v], 2 G D wide),
  // merged into the running result ctx (Sq * B, H * D) and lse (Sq * B, H), the log of each
  // query's softmax denominator so far (start from 0 and -inf): with the block's own output o
  // and log-sum-exp l, lse' = log(e^lse + e^l) and ctx' = ctx e^(lse - lse') + o e^(l - lse').
  // causal: query i attends keys j <= i + Sk - Sq (the mask aligned to the bottom right, so
  // that Sq == Sk is the usual causal mask); else every key.
  virtual void AttentionBlockForward(Span ctx, Span lse, Span q, Span kv, int64_t seq_q,
                                     int64_t seq_k, int64_t batch, int64_t heads, int64_t groups,
                                     int64_t head_dim, bool causal) = 0;
  // Its backward, with the softmax recomputed from the final ctx and lse of the queries' whole
  // attention: dq (the q columns of Sq * B rows in the qkv layout) += and dkv (Sk * B, 2 G D)
  // += this block's share of the gradients given dctx (Sq * B, H * D).
  virtual void AttentionBlockBackward(Span dq, Span dkv, Span dctx, Span ctx, Span lse, Span q,
                                      Span kv, int64_t seq_q, int64_t seq_k, int64_t batch,
                                      int64_t heads, int64_t groups, int64_t head_dim,
                                      bool causal) = 0;
  // Rotary position embedding (Su et al. 2021, RoFormer; Megatron's default rotate-half form
  // over the whole head, base 10000) applied in place to the q and k of qkv (layout as above),
  // token row i * B + j at position seq_begin + i: x <- x cos + rotate_half(x) sin with
  // rotate_half([x1 | x2]) = [-x2 | x1] and angle p * base^(-2k / D) for k < D / 2. `inverse`
  // applies the transpose (the backward of the rotation, for gradients).
  virtual void Rotary(Span qkv, int64_t seq, int64_t batch, int64_t heads, int64_t groups,
                      int64_t head_dim, double base, int64_t seq_begin, bool inverse) = 0;

  // --- mixture of experts (Megatron-Core's TopKRouter and token permutation) ---
  // Top-k routing with Megatron's default score function (moe_utils.py
  // topk_routing_with_score_function, softmax without moe_router_pre_softmax): for each row of
  // logits (N, E), the k largest logits in descending order (ties: the lower expert index first),
  // whose experts go to choice (N, k) int32, and the softmax over those k logits to probs (N, k).
  virtual void RouterTopK(Span probs, Span choice, Span logits, int64_t rows, int64_t experts,
                          int64_t topk) = 0;
  // Its backward: dlogits (N, E) = the softmax's input gradient from dprobs (N, k) at the chosen
  // experts, 0 at the others (top-k passes no gradient to what it drops); overwrites.
  virtual void RouterTopKBackward(Span dlogits, Span dprobs, Span probs, Span choice, int64_t rows,
                                  int64_t experts, int64_t topk) = 0;
  // dst (n, C) row r = src row index[r] (int32 index (n) into src's rows): a permutation or a
  // selection of rows.
  virtual void GatherRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) = 0;
  // dst row index[r] += src (n, C) row r, for r = 0, 1, ... in order (rows sharing an index are
  // summed in that order).
  virtual void ScatterAddRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) = 0;
  // x (N, C) row r *= scale[r] (scale (N)).
  virtual void ScaleRows(Span x, Span scale, int64_t rows, int64_t cols) = 0;
  // out (N)[r] = dot(a row r, b row r) for a, b (N, C).
  virtual void RowDots(Span out, Span a, Span b, int64_t rows, int64_t cols) = 0;

  // Vocab-parallel cross entropy (Megatron's _VocabParallelCrossEntropy), in steps around the
  // tensor-parallel all-reduces. logits (N, V_loc) hold vocabulary entries [vocab_begin,
  // vocab_begin + V_loc); only the first `valid_cols` local columns are real tokens (the rest
  // is padding, left out of the softmax).
  // 1. row_max (N) = max over the valid local columns (-inf when there are none).
  virtual void CrossEntropyMax(Span row_max, Span logits, int64_t rows, int64_t cols,
                               int64_t valid_cols) = 0;
  // 2. With the global max: logits <- exp(logits - max) (0 on padding); sum_exp (N) = local sum;
  //    target_logit (N) = logit of the target before exponentiation when the target is local,
  //    else 0.
  virtual void CrossEntropyExp(Span logits, Span sum_exp, Span target_logit, Span row_max,
                               Span targets, int64_t vocab_begin, int64_t rows, int64_t cols,
                               int64_t valid_cols) = 0;
  // 3. With the global sums: logits <- probabilities (exp / sum_exp); losses (N) =
  //    log(sum_exp) + max - target_logit.
  virtual void CrossEntropyFinish(Span logits, Span losses, Span sum_exp, Span row_max,
                                  Span target_logit, int64_t rows, int64_t cols) = 0;
  // Backward, in place: probs (N, V_loc) <- (probs - onehot(target)) * scale.
  virtual void CrossEntropyBackward(Span probs, Span targets, int64_t vocab_begin, int64_t rows,
                                    int64_t cols, double scale) = 0;

  // --- optimizers, element-wise over one parameter range ---
  virtual void AdamStep(Span param, Span grad, Span m, Span v, const AdamArgs& args) = 0;
  // SGD with momentum (Megatron's --sgd-momentum) and decoupled weight decay.
  virtual void SgdStep(Span param, Span grad, Span momentum_buf, double lr, double momentum,
                       double weight_decay, double grad_scale) = 0;

 protected:
  virtual void* DoAllocate(int64_t bytes) = 0;  // zero-filled
  virtual void DoFree(void* data) = 0;

 private:
  MemoryStats memory_;
};

}  // namespace ptdp
