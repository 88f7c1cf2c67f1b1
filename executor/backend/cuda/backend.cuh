// CudaBackend: Backend on one CUDA device (executor/backend/cuda.h is its public face). One
// non-blocking compute stream carries every kernel, copy and cuBLAS call, so the order of calls is
// the order of execution and the caching allocator may reuse a freed block at once. The methods are
// defined by theme: backend.cu (device, memory, copies, reductions to the host, the factory),
// gemm.cu (cuBLASLt / cuBLAS), elementwise.cu, rows.cu (per-row and per-column reductions: norms,
// bias gradients, cross entropy, routing) and attention.cu. Kernels follow
// executor/backend/cpu.cc's arithmetic; where they sum in another order they say so.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "executor/backend/backend.h"
#include "executor/backend/cuda.h"
#include "executor/backend/cuda/allocator.cuh"

namespace ptdp::cuda {

// Kernels that meet an index outside its table skip it and leave this code in the backend's
// device flag; the next call that waits for the stream (Download, Sum, SumSquares,
// Synchronize) throws naming the kernel.
enum IndexError : int { kNoIndexError = 0, kGatherRowsIndex, kScatterAddRowsIndex, kRouterChoice };

// A cuBLASLt plan for one product shape and dtype pair (fp32, or 16-bit a and b with c 16-bit or
// fp32): descriptors, layouts and the heuristic's algorithm.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // false: no algorithm for it; the product goes to cublasSgemm / GemmEx
};
// (trans_a, trans_b, m, n, k, lda, ldb, ldc, alignment of a, b, c in bytes, DType of a and b,
// DType of c), cuBLAS's view.
using LtKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int,
                         int, int, int>;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);  // throws InternalError naming the failing call
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  CudaMemoryFigures figures() const {
    return {allocator_.reserved_bytes(), allocator_.peak_reserved_bytes()};
  }
  // Waits for the stream, then throws if a kernel reported a bad index.
  void Sync();
  // Events on the compute stream around each kernel (executor/backend/kernel_clock.h).
  std::unique_ptr<KernelClock> MakeKernelClock() override;
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

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
  void* DoAllocate(int64_t bytes) override;
  void DoFree(void* data) override;

 private:
  // A temporary device buffer from the caching allocator, outside the per-category accounting
  // (as the CPU backend's std::vector temporaries are); returned to the cache on scope exit,
  // which is safe while later work on the block is queued on the same stream.
  class Scratch {
   public:
    Scratch(CudaBackend& backend, int64_t bytes);
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    void* get() const { return data_; }

   private:
    CudaBackend& backend_;
    void* data_ = nullptr;
  };

  // Row-major strided-batched product (the contract of Gemm, `batch` times, operand i at
  // pointer + i * stride elements) through the cuBLAS legacy API; fp32 or fp64.
  void GemmBatched(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   double alpha, const void* a, int64_t lda, int64_t stride_a, const void* b,
                   int64_t ldb, int64_t stride_b, double beta, void* c, int64_t ldc,
                   int64_t stride_c, int64_t batch);
  // fp32 or 16-bit product through cuBLASLt (a and b of ab_dtype, c of c_dtype, fp32 compute);
  // false when Lt has no algorithm for it (the caller falls back).
  bool LtGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
              int64_t ldc, DType ab_dtype, DType c_dtype);
  LtPlan& LtPlanFor(const LtKey& key);
  void ClearLtPlans();
  // Sums of per-block partials (fp64) of x or of x^2, added on the host in block order.
  double Reduce(Span x, bool squares);
  // Frees the handles, stream and fixed buffers (the constructor's failure path and the
  // destructor); errors are ignored.
  void ReleaseResources();
  // Opts a kernel into `bytes` of dynamic shared memory when that is over the 48 KiB default.
  void AllowSharedMemory(const void* kernel, int64_t bytes);

  int device_ = 0;
  int64_t max_shared_bytes_ = 48 << 10;  // per block, with the opt-in
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_workspace_ = nullptr;
  int* index_error_ = nullptr;  // device int, an IndexError
  double* partials_ = nullptr;  // device, kReducePartials doubles for Sum / SumSquares
  std::map<LtKey, LtPlan> lt_plans_;
  CachingAllocator allocator_;  // frees its blocks after the destructor has synchronised
};

inline constexpr int kReducePartials = 512;  // blocks of the Sum / SumSquares reduction
inline constexpr int64_t kLtWorkspaceBytes = int64_t{32} << 20;

}  // namespace ptdp::cuda
