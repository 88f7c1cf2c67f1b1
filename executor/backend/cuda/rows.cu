// Row and column reductions, all deterministic (no atomics, fixed summation orders):
//  - per-row kernels (norms, row dots, cross entropy, routing): one block of kRowThreads per row,
//    block sums from common.cuh; the norms' statistics in double, as the CPU computes them;
//  - column sums over rows (bias and norm-weight gradients): one block per 32-column tile, 16
//    row lanes each summing every 16th row in order, then the lanes in order;
//  - ordered scatters (embedding and positions backward, ScatterAddRows): one thread per column
//    walking the rows in order, so rows that share a destination add up as on the CPU.
// 16-bit data compute in fp32 (Acc<T>); norm statistics are fp32 beside them, parameter
// gradients fp32 or 16-bit; a 16-bit scatter target accumulates in an fp32 copy so that each
// element is rounded once, as on the CPU.
#include <climits>

#include "executor/backend/cuda/backend.cuh"
#include "executor/backend/cuda/common.cuh"

namespace ptdp::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 16;

unsigned RowGrid(int64_t rows) {
  PTDP_CHECK(rows > 0 && rows <= INT_MAX);
  return static_cast<unsigned>(rows);
}

// out (C) += sum over rows r of term(r, j), the sum taken in the data's computation type A
// (float for fp32 and 16-bit data, as the CPU does); out is P: the data's type, or fp32 beside
// 16-bit data (a parameter gradient into main_grad), rounded once.
template <typename P, typename A, typename Term>
__global__ void ColumnSumKernel(P* out, int64_t rows, int64_t cols, Term term) {
  __shared__ A part[kRowLanes][kColumnTile + 1];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  A acc = 0;
  if (j < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) acc += term(r, j, cols);
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    A sum = 0;
    for (int y = 0; y < kRowLanes; ++y) sum += part[y][threadIdx.x];
    out[j] = Narrow<P>(Wide(out[j]) + sum);
  }
}

// Terms over data T, computed in Acc<T>; the norms' statistics are Acc<T> (fp32 for 16-bit).
template <typename T>
struct BiasTerm {
  const T* dout;
  __device__ Acc<T> operator()(int64_t r, int64_t j, int64_t cols) const {
    return Wide(dout[r * cols + j]);
  }
};
template <typename T>
struct LayerNormWeightTerm {  // dout * xhat
  const T *dout, *x;
  const Acc<T>*mean, *rstd;
  __device__ Acc<T> operator()(int64_t r, int64_t j, int64_t cols) const {
    const Acc<T> xhat = (Wide(x[r * cols + j]) - mean[r]) * rstd[r];
    return Wide(dout[r * cols + j]) * xhat;
  }
};
template <typename T>
struct RmsNormWeightTerm {  // dout * x * rstd
  const T *dout, *x;
  const Acc<T>* rstd;
  __device__ Acc<T> operator()(int64_t r, int64_t j, int64_t cols) const {
    return Wide(dout[r * cols + j]) * Wide(x[r * cols + j]) * rstd[r];
  }
};

template <typename T>
__global__ void LayerNormForwardKernel(T* out, Acc<T>* mean, Acc<T>* rstd, const T* x, const T* w,
                                       const T* b, int64_t cols, double eps) {
  using A = Acc<T>;
  const int64_t i = blockIdx.x;
  const T* xi = x + i * cols;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += Wide(xi[j]);
  const double mu = BlockSum(sum) / static_cast<double>(cols);
  double var = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    var += (Wide(xi[j]) - mu) * (Wide(xi[j]) - mu);
  }
  const double rs = 1.0 / sqrt(BlockSum(var) / static_cast<double>(cols) + eps);
  T* oi = out + i * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    oi[j] = Narrow<T>(static_cast<A>((Wide(xi[j]) - mu) * rs) * Wide(w[j]) + Wide(b[j]));
  }
  if (threadIdx.x == 0) {
    mean[i] = static_cast<A>(mu);
    rstd[i] = static_cast<A>(rs);
  }
}

template <typename T>
__global__ void LayerNormBackwardInputKernel(T* dx, const T* dout, const T* x, const Acc<T>* mean,
                                             const Acc<T>* rstd, const T* w, int64_t cols) {
  using A = Acc<T>;
  const int64_t i = blockIdx.x;
  const T* dy = dout + i * cols;
  const T* xi = x + i * cols;
  const A mu = mean[i], rs = rstd[i];
  double a = 0, b = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double xhat = (Wide(xi[j]) - mu) * rs;
    const double dnorm = static_cast<double>(Wide(w[j])) * Wide(dy[j]);
    a += dnorm;
    b += dnorm * xhat;
  }
  const double dnorm_mean = BlockSum(a) / static_cast<double>(cols);
  const double dnorm_xhat_mean = BlockSum(b) / static_cast<double>(cols);
  T* dxi = dx + i * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double xhat = (Wide(xi[j]) - mu) * rs;
    const double dnorm = static_cast<double>(Wide(w[j])) * Wide(dy[j]);
    dxi[j] = Narrow<T>(Wide(dxi[j]) +
                       static_cast<A>((dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * rs));
  }
}

template <typename T>
__global__ void RmsNormForwardKernel(T* out, Acc<T>* rstd, const T* x, const T* w, int64_t cols,
                                     double eps) {
  using A = Acc<T>;
  const int64_t i = blockIdx.x;
  const T* xi = x + i * cols;
  double sq = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    sq += static_cast<double>(Wide(xi[j])) * Wide(xi[j]);
  }
  const double r = 1.0 / sqrt(BlockSum(sq) / static_cast<double>(cols) + eps);
  T* oi = out + i * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    oi[j] = Narrow<T>(static_cast<A>(Wide(xi[j]) * r) * Wide(w[j]));
  }
  if (threadIdx.x == 0) rstd[i] = static_cast<A>(r);
}

template <typename T>
__global__ void RmsNormBackwardInputKernel(T* dx, const T* dout, const T* x, const Acc<T>* rstd,
                                           const T* w, int64_t cols) {
  using A = Acc<T>;
  const int64_t i = blockIdx.x;
  const T* dy = dout + i * cols;
  const T* xi = x + i * cols;
  const A rs = rstd[i];
  double dot = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    dot += static_cast<double>(Wide(w[j])) * Wide(dy[j]) * Wide(xi[j]) * rs;
  }
  dot = BlockSum(dot) / static_cast<double>(cols);
  T* dxi = dx + i * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double xhat = static_cast<double>(Wide(xi[j])) * rs;
    dxi[j] = Narrow<T>(
        Wide(dxi[j]) +
        static_cast<A>(rs * (static_cast<double>(Wide(w[j])) * Wide(dy[j]) - xhat * dot)));
  }
}

template <typename T>
__global__ void RowDotsKernel(T* out, const T* a, const T* b, int64_t cols) {
  const int64_t i = blockIdx.x;
  double dot = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    dot += static_cast<double>(Wide(a[i * cols + j])) * Wide(b[i * cols + j]);
  }
  dot = BlockSum(dot);
  if (threadIdx.x == 0) out[i] = Narrow<T>(static_cast<Acc<T>>(dot));
}

template <typename T>
__global__ void CrossEntropyMaxKernel(T* row_max, const T* logits, int64_t cols,
                                      int64_t valid_cols) {
  const int64_t i = blockIdx.x;
  T m = NegInf<T>();
  for (int64_t j = threadIdx.x; j < valid_cols; j += blockDim.x) m = Max(m, logits[i * cols + j]);
  m = BlockMax(m);
  if (threadIdx.x == 0) row_max[i] = m;
}

template <typename T>
__global__ void CrossEntropyExpKernel(T* logits, T* sum_exp, T* target_logit, const T* row_max,
                                      const int32_t* targets, int64_t vocab_begin, int64_t cols,
                                      int64_t valid_cols) {
  const int64_t i = blockIdx.x;
  T* li = logits + i * cols;
  const T mx = row_max[i];
  const int64_t t = targets[i] - vocab_begin;
  const T target = (t >= 0 && t < valid_cols) ? li[t] : T(0);
  __syncthreads();  // every thread has read the target logit before any overwrites it
  T sum = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    if (j < valid_cols) {
      const T e = Exp(li[j] - mx);
      li[j] = e;
      sum += e;
    } else {
      li[j] = 0;
    }
  }
  sum = BlockSum(sum);
  if (threadIdx.x == 0) {
    sum_exp[i] = sum;
    target_logit[i] = target;
  }
}

template <typename T>
__global__ void CrossEntropyFinishKernel(T* logits, T* losses, const T* sum_exp, const T* row_max,
                                         const T* target_logit, int64_t cols) {
  const int64_t i = blockIdx.x;
  const T inv = T(1) / sum_exp[i];
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) logits[i * cols + j] *= inv;
  if (threadIdx.x == 0) losses[i] = Log(sum_exp[i]) + row_max[i] - target_logit[i];
}

// One thread per row: k passes of "the largest logit not yet taken" (strictly greater keeps
// the lower index on ties), then the softmax over the chosen logits (the first is the largest),
// in Acc<T>, each probability rounded once.
template <typename T>
__global__ void RouterTopKKernel(T* probs, int32_t* choice, const T* logits, int64_t rows,
                                 int64_t experts, int64_t topk) {
  using A = Acc<T>;
  for (int64_t i = GlobalThread(); i < rows; i += GridStride()) {
    const T* li = logits + i * experts;
    int32_t* c = choice + i * topk;
    T* p = probs + i * topk;
    for (int64_t j = 0; j < topk; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < experts; ++e) {
        bool taken = false;
        for (int64_t q = 0; q < j; ++q) taken = taken || c[q] == e;
        if (!taken && (best < 0 || Wide(li[e]) > Wide(li[best]))) best = e;
      }
      c[j] = static_cast<int32_t>(best);
    }
    const A mx = Wide(li[c[0]]);
    A sum = 0;
    for (int64_t j = 0; j < topk; ++j) sum += Exp(Wide(li[c[j]]) - mx);
    for (int64_t j = 0; j < topk; ++j) p[j] = Narrow<T>(Exp(Wide(li[c[j]]) - mx) / sum);
  }
}

template <typename T>
__global__ void RouterTopKBackwardKernel(T* dlogits, const T* dprobs, const T* probs,
                                         const int32_t* choice, int64_t rows, int64_t experts,
                                         int64_t topk, int* index_error) {
  using A = Acc<T>;
  for (int64_t i = GlobalThread(); i < rows; i += GridStride()) {
    T* row = dlogits + i * experts;
    for (int64_t e = 0; e < experts; ++e) row[e] = Narrow<T>(A(0));
    const T* p = probs + i * topk;
    const T* dp = dprobs + i * topk;
    A dot = 0;  // softmax backward: dl_j = p_j (dp_j - sum_i p_i dp_i)
    for (int64_t j = 0; j < topk; ++j) dot += Wide(p[j]) * Wide(dp[j]);
    for (int64_t j = 0; j < topk; ++j) {
      const int64_t e = choice[i * topk + j];
      if (e < 0 || e >= experts) {
        *index_error = kRouterChoice;
        continue;
      }
      row[e] = Narrow<T>(Wide(p[j]) * (Wide(dp[j]) - dot));
    }
  }
}

// dtable row tokens[i] - vocab_begin += dout row i, for i in order; one thread per column.
// dtable is P: the data's T or fp32 (a 16-bit dtable goes through an fp32 copy, so that each
// element is rounded once, as on the CPU).
template <typename P, typename T>
__global__ void EmbeddingBackwardKernel(P* dtable, const int32_t* tokens, const T* dout,
                                        int64_t vocab_begin, int64_t vocab_rows, int64_t rows,
                                        int64_t cols) {
  for (int64_t j = GlobalThread(); j < cols; j += GridStride()) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = tokens[i] - vocab_begin;
      if (r < 0 || r >= vocab_rows) continue;
      dtable[r * cols + j] = Narrow<P>(Wide(dtable[r * cols + j]) + Wide(dout[i * cols + j]));
    }
  }
}

// dst row index[r] += src row r, for r in order; one thread per column. dst is P as above.
template <typename P, typename T>
__global__ void ScatterAddRowsKernel(P* dst, const T* src, const int32_t* index, int64_t dst_numel,
                                     int64_t rows, int64_t cols, int* index_error) {
  for (int64_t j = GlobalThread(); j < cols; j += GridStride()) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t at = index[r];
      if (at < 0 || (at + 1) * cols > dst_numel) {
        *index_error = kScatterAddRowsIndex;
        continue;
      }
      dst[at * cols + j] = Narrow<P>(Wide(dst[at * cols + j]) + Wide(src[r * cols + j]));
    }
  }
}

// dpos row seq_begin + i += dx rows i * B + j for j in order; one thread per (i, column); the
// sum in Acc<T>, dpos (P: T or fp32) rounded once.
template <typename P, typename T>
__global__ void PositionsBackwardKernel(P* dpos, const T* dx, int64_t seq_begin, int64_t seq_rows,
                                        int64_t batch, int64_t cols) {
  for (int64_t idx = GlobalThread(); idx < seq_rows * cols; idx += GridStride()) {
    const int64_t i = idx / cols, c = idx % cols;
    Acc<T> acc = Wide(dpos[(seq_begin + i) * cols + c]);
    for (int64_t j = 0; j < batch; ++j) acc += Wide(dx[(i * batch + j) * cols + c]);
    dpos[(seq_begin + i) * cols + c] = Narrow<P>(acc);
  }
}

}  // namespace

// Launches ColumnSumKernel over (rows, cols) into out (P*), summing Term's values in A.
#define PTDP_COLUMN_SUM(P, A, out, rows, cols, term)                              \
  PTDP_CUDA_LAUNCH((ColumnSumKernel<P, A, std::remove_cv_t<decltype(term)>>),     \
                   static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile), \
                   dim3(kColumnTile, kRowLanes), 0, stream_, out, rows, cols, term)

// Calls f(P{}) with the storage type of a parameter gradient `param` beside data T: T itself,
// or float when T is 16-bit and param is fp32 (checked by CheckSpan before).
template <typename T, typename F>
void DispatchParam(Span param, F&& f) {
  if constexpr (!std::is_same_v<T, Acc<T>>) {
    if (param.dtype == DType::kF32) return f(float{});
  }
  f(T{});
}

void CudaBackend::BiasGrad(Span dbias, Span dout, int64_t rows, int64_t cols) {
  PTDP_CHECK(dout.numel == rows * cols && dbias.numel == cols);
  CheckSpan("BiasGrad", "dbias", dout.dtype, dbias, SpanRule::kF32OrData);
  DispatchData(dout, "BiasGrad", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    const BiasTerm<T> term{Ptr<T>(dout)};
    DispatchParam<T>(dbias, [&](auto pzero) {
      using P = decltype(pzero);
      PTDP_COLUMN_SUM(P, Acc<T>, Ptr<P>(dbias), rows, cols, term);
    });
  });
}

void CudaBackend::LayerNormForward(Span out, Span mean, Span rstd, Span x, Span weight, Span bias,
                                   int64_t rows, int64_t cols, double eps) {
  PTDP_CHECK(out.numel == rows * cols && x.numel == rows * cols && mean.numel == rows);
  PTDP_CHECK(rstd.numel == rows && weight.numel == cols && bias.numel == cols);
  const char* k = "LayerNormForward";
  CheckSpan(k, "out", x.dtype, out, SpanRule::kData);
  CheckSpan(k, "mean", x.dtype, mean, SpanRule::kStats);
  CheckSpan(k, "rstd", x.dtype, rstd, SpanRule::kStats);
  CheckSpan(k, "weight", x.dtype, weight, SpanRule::kData);
  CheckSpan(k, "bias", x.dtype, bias, SpanRule::kData);
  DispatchData(x, k, [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    PTDP_CUDA_LAUNCH(LayerNormForwardKernel<T>, RowGrid(rows), kRowThreads, 0, stream_, Ptr<T>(out),
                     Ptr<Acc<T>>(mean), Ptr<Acc<T>>(rstd), Ptr<T>(x), Ptr<T>(weight), Ptr<T>(bias),
                     cols, eps);
  });
}

void CudaBackend::LayerNormBackwardInput(Span dx, Span dout, Span x, Span mean, Span rstd,
                                         Span weight, int64_t rows, int64_t cols) {
  PTDP_CHECK(dx.numel == rows * cols && dout.numel == rows * cols && x.numel == rows * cols);
  PTDP_CHECK(mean.numel == rows && rstd.numel == rows && weight.numel == cols);
  const char* k = "LayerNormBackwardInput";
  CheckSpan(k, "dout", dx.dtype, dout, SpanRule::kData);
  CheckSpan(k, "x", dx.dtype, x, SpanRule::kData);
  CheckSpan(k, "mean", dx.dtype, mean, SpanRule::kStats);
  CheckSpan(k, "rstd", dx.dtype, rstd, SpanRule::kStats);
  CheckSpan(k, "weight", dx.dtype, weight, SpanRule::kData);
  DispatchData(dx, k, [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    PTDP_CUDA_LAUNCH(LayerNormBackwardInputKernel<T>, RowGrid(rows), kRowThreads, 0, stream_,
                     Ptr<T>(dx), Ptr<T>(dout), Ptr<T>(x), Ptr<Acc<T>>(mean), Ptr<Acc<T>>(rstd),
                     Ptr<T>(weight), cols);
  });
}

void CudaBackend::LayerNormBackwardParams(Span dweight, Span dbias, Span dout, Span x, Span mean,
                                          Span rstd, int64_t rows, int64_t cols) {
  PTDP_CHECK(dweight.numel == cols && dbias.numel == cols && dout.numel == rows * cols);
  PTDP_CHECK(x.numel == rows * cols && mean.numel == rows && rstd.numel == rows);
  const char* k = "LayerNormBackwardParams";
  CheckSpan(k, "dweight", dout.dtype, dweight, SpanRule::kF32OrData);
  CheckSpan(k, "dbias", dout.dtype, dbias, SpanRule::kF32OrData);
  CheckSpan(k, "x", dout.dtype, x, SpanRule::kData);
  CheckSpan(k, "mean", dout.dtype, mean, SpanRule::kStats);
  CheckSpan(k, "rstd", dout.dtype, rstd, SpanRule::kStats);
  DispatchData(dout, k, [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    const LayerNormWeightTerm<T> wterm{Ptr<T>(dout), Ptr<T>(x), Ptr<Acc<T>>(mean),
                                       Ptr<Acc<T>>(rstd)};
    const BiasTerm<T> bterm{Ptr<T>(dout)};
    DispatchParam<T>(dweight, [&](auto pzero) {
      using P = decltype(pzero);
      PTDP_COLUMN_SUM(P, Acc<T>, Ptr<P>(dweight), rows, cols, wterm);
    });
    DispatchParam<T>(dbias, [&](auto pzero) {
      using P = decltype(pzero);
      PTDP_COLUMN_SUM(P, Acc<T>, Ptr<P>(dbias), rows, cols, bterm);
    });
  });
}

void CudaBackend::RmsNormForward(Span out, Span rstd, Span x, Span weight, int64_t rows,
                                 int64_t cols, double eps) {
  PTDP_CHECK(out.numel == rows * cols && x.numel == rows * cols && rstd.numel == rows);
  PTDP_CHECK(weight.numel == cols);
  const char* k = "RmsNormForward";
  CheckSpan(k, "out", x.dtype, out, SpanRule::kData);
  CheckSpan(k, "rstd", x.dtype, rstd, SpanRule::kStats);
  CheckSpan(k, "weight", x.dtype, weight, SpanRule::kData);
  DispatchData(x, k, [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    PTDP_CUDA_LAUNCH(RmsNormForwardKernel<T>, RowGrid(rows), kRowThreads, 0, stream_, Ptr<T>(out),
                     Ptr<Acc<T>>(rstd), Ptr<T>(x), Ptr<T>(weight), cols, eps);
  });
}

void CudaBackend::RmsNormBackwardInput(Span dx, Span dout, Span x, Span rstd, Span weight,
                                       int64_t rows, int64_t cols) {
  PTDP_CHECK(dx.numel == rows * cols && dout.numel == rows * cols && x.numel == rows * cols);
  PTDP_CHECK(rstd.numel == rows && weight.numel == cols);
  const char* k = "RmsNormBackwardInput";
  CheckSpan(k, "dout", dx.dtype, dout, SpanRule::kData);
  CheckSpan(k, "x", dx.dtype, x, SpanRule::kData);
  CheckSpan(k, "rstd", dx.dtype, rstd, SpanRule::kStats);
  CheckSpan(k, "weight", dx.dtype, weight, SpanRule::kData);
  DispatchData(dx, k, [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    PTDP_CUDA_LAUNCH(RmsNormBackwardInputKernel<T>, RowGrid(rows), kRowThreads, 0, stream_,
                     Ptr<T>(dx), Ptr<T>(dout), Ptr<T>(x), Ptr<Acc<T>>(rstd), Ptr<T>(weight), cols);
  });
}

void CudaBackend::RmsNormBackwardParams(Span dweight, Span dout, Span x, Span rstd, int64_t rows,
                                        int64_t cols) {
  PTDP_CHECK(dweight.numel == cols && dout.numel == rows * cols && x.numel == rows * cols);
  PTDP_CHECK(rstd.numel == rows);
  const char* k = "RmsNormBackwardParams";
  CheckSpan(k, "dweight", dout.dtype, dweight, SpanRule::kF32OrData);
  CheckSpan(k, "x", dout.dtype, x, SpanRule::kData);
  CheckSpan(k, "rstd", dout.dtype, rstd, SpanRule::kStats);
  DispatchData(dout, k, [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    const RmsNormWeightTerm<T> term{Ptr<T>(dout), Ptr<T>(x), Ptr<Acc<T>>(rstd)};
    DispatchParam<T>(dweight, [&](auto pzero) {
      using P = decltype(pzero);
      PTDP_COLUMN_SUM(P, Acc<T>, Ptr<P>(dweight), rows, cols, term);
    });
  });
}

void CudaBackend::RowDots(Span out, Span a, Span b, int64_t rows, int64_t cols) {
  PTDP_CHECK(out.numel == rows && a.numel == rows * cols && b.numel == rows * cols);
  CheckSpan("RowDots", "out", a.dtype, out, SpanRule::kData);
  CheckSpan("RowDots", "b", a.dtype, b, SpanRule::kData);
  DispatchData(a, "RowDots", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0) return;
    PTDP_CUDA_LAUNCH(RowDotsKernel<T>, RowGrid(rows), kRowThreads, 0, stream_, Ptr<T>(out),
                     Ptr<T>(a), Ptr<T>(b), cols);
  });
}

void CudaBackend::CrossEntropyMax(Span row_max, Span logits, int64_t rows, int64_t cols,
                                  int64_t valid_cols) {
  PTDP_CHECK(logits.numel == rows * cols && row_max.numel == rows && valid_cols <= cols);
  DispatchFloat(row_max, "CrossEntropyMax", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0) return;
    PTDP_CUDA_LAUNCH(CrossEntropyMaxKernel<T>, RowGrid(rows), kRowThreads, 0, stream_,
                     Ptr<T>(row_max), Ptr<T>(logits), cols, valid_cols);
  });
}

void CudaBackend::CrossEntropyExp(Span logits, Span sum_exp, Span target_logit, Span row_max,
                                  Span targets, int64_t vocab_begin, int64_t rows, int64_t cols,
                                  int64_t valid_cols) {
  PTDP_CHECK(logits.numel == rows * cols && targets.numel == rows && valid_cols <= cols);
  PTDP_CHECK(sum_exp.numel == rows && target_logit.numel == rows && row_max.numel == rows);
  DispatchFloat(logits, "CrossEntropyExp", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0) return;
    PTDP_CUDA_LAUNCH(CrossEntropyExpKernel<T>, RowGrid(rows), kRowThreads, 0, stream_,
                     Ptr<T>(logits), Ptr<T>(sum_exp), Ptr<T>(target_logit), Ptr<T>(row_max),
                     Ptr<int32_t>(targets), vocab_begin, cols, valid_cols);
  });
}

void CudaBackend::CrossEntropyFinish(Span logits, Span losses, Span sum_exp, Span row_max,
                                     Span target_logit, int64_t rows, int64_t cols) {
  PTDP_CHECK(logits.numel == rows * cols && losses.numel == rows);
  PTDP_CHECK(sum_exp.numel == rows && row_max.numel == rows && target_logit.numel == rows);
  DispatchFloat(logits, "CrossEntropyFinish", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0) return;
    PTDP_CUDA_LAUNCH(CrossEntropyFinishKernel<T>, RowGrid(rows), kRowThreads, 0, stream_,
                     Ptr<T>(logits), Ptr<T>(losses), Ptr<T>(sum_exp), Ptr<T>(row_max),
                     Ptr<T>(target_logit), cols);
  });
}

void CudaBackend::RouterTopK(Span probs, Span choice, Span logits, int64_t rows, int64_t experts,
                             int64_t topk) {
  PTDP_CHECK(logits.numel == rows * experts && probs.numel == rows * topk);
  PTDP_CHECK(choice.dtype == DType::kI32 && choice.numel == rows * topk && topk <= experts);
  CheckSpan("RouterTopK", "probs", logits.dtype, probs, SpanRule::kData);
  DispatchData(logits, "RouterTopK", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || topk == 0) return;
    PTDP_CUDA_LAUNCH(RouterTopKKernel<T>, Blocks(rows), kThreads, 0, stream_, Ptr<T>(probs),
                     Ptr<int32_t>(choice), Ptr<T>(logits), rows, experts, topk);
  });
}

void CudaBackend::RouterTopKBackward(Span dlogits, Span dprobs, Span probs, Span choice,
                                     int64_t rows, int64_t experts, int64_t topk) {
  PTDP_CHECK(dlogits.numel == rows * experts && dprobs.numel == rows * topk);
  PTDP_CHECK(probs.numel == rows * topk && choice.numel == rows * topk);
  CheckSpan("RouterTopKBackward", "dprobs", dlogits.dtype, dprobs, SpanRule::kData);
  CheckSpan("RouterTopKBackward", "probs", dlogits.dtype, probs, SpanRule::kData);
  DispatchData(dlogits, "RouterTopKBackward", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0) return;
    PTDP_CUDA_LAUNCH(RouterTopKBackwardKernel<T>, Blocks(rows), kThreads, 0, stream_,
                     Ptr<T>(dlogits), Ptr<T>(dprobs), Ptr<T>(probs), Ptr<int32_t>(choice), rows,
                     experts, topk, index_error_);
  });
}

void CudaBackend::EmbeddingBackward(Span dtable, Span tokens, Span dout, int64_t vocab_begin,
                                    int64_t vocab_rows, int64_t rows, int64_t cols) {
  PTDP_CHECK(dout.numel == rows * cols && tokens.numel == rows &&
             dtable.numel == vocab_rows * cols);
  CheckSpan("EmbeddingBackward", "dtable", dout.dtype, dtable, SpanRule::kF32OrData);
  DispatchData(dout, "EmbeddingBackward", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    auto launch = [&](auto* table) {
      using P = std::remove_pointer_t<decltype(table)>;
      PTDP_CUDA_LAUNCH((EmbeddingBackwardKernel<P, T>), Blocks(cols, 128), 128, 0, stream_, table,
                       Ptr<int32_t>(tokens), Ptr<T>(dout), vocab_begin, vocab_rows, rows, cols);
    };
    if constexpr (std::is_same_v<T, Acc<T>>) {
      launch(Ptr<T>(dtable));
    } else if (dtable.dtype == DType::kF32) {  // main_grad
      launch(Ptr<float>(dtable));
    } else {  // a 16-bit dtable: accumulate in an fp32 copy, round each element once
      Scratch wide(*this, dtable.numel * 4);
      const Span w{wide.get(), DType::kF32, dtable.numel};
      Convert(w, dtable);
      launch(Ptr<float>(w));
      Convert(dtable, w);
    }
  });
}

void CudaBackend::ScatterAddRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) {
  PTDP_CHECK(src.numel == rows * cols && index.numel == rows);
  CheckSpan("ScatterAddRows", "src", dst.dtype, src, SpanRule::kData);
  DispatchData(dst, "ScatterAddRows", [&](auto zero) {
    using T = decltype(zero);
    if (rows == 0 || cols == 0) return;
    auto launch = [&](auto* to) {
      using P = std::remove_pointer_t<decltype(to)>;
      PTDP_CUDA_LAUNCH((ScatterAddRowsKernel<P, T>), Blocks(cols, 128), 128, 0, stream_, to,
                       Ptr<T>(src), Ptr<int32_t>(index), dst.numel, rows, cols, index_error_);
    };
    if constexpr (std::is_same_v<T, Acc<T>>) {
      launch(Ptr<T>(dst));
    } else {  // 16-bit: accumulate in an fp32 copy, round each element once (as the CPU does)
      Scratch wide(*this, dst.numel * 4);
      const Span w{wide.get(), DType::kF32, dst.numel};
      Convert(w, dst);
      launch(Ptr<float>(w));
      Convert(dst, w);
    }
  });
}

void CudaBackend::PositionsBackward(Span dpos, Span dx, int64_t seq_begin, int64_t seq_rows,
                                    int64_t batch, int64_t cols) {
  PTDP_CHECK(dx.numel == seq_rows * batch * cols && dpos.numel >= (seq_begin + seq_rows) * cols);
  PTDP_CHECK(seq_begin >= 0);
  CheckSpan("PositionsBackward", "dpos", dx.dtype, dpos, SpanRule::kF32OrData);
  DispatchData(dx, "PositionsBackward", [&](auto zero) {
    using T = decltype(zero);
    if (seq_rows == 0 || cols == 0) return;
    DispatchParam<T>(dpos, [&](auto pzero) {
      using P = decltype(pzero);
      PTDP_CUDA_LAUNCH((PositionsBackwardKernel<P, T>), Blocks(seq_rows * cols), kThreads, 0,
                       stream_, Ptr<P>(dpos), Ptr<T>(dx), seq_begin, seq_rows, batch, cols);
    });
  });
}

}  // namespace ptdp::cuda
