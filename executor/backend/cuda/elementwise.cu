// Element-wise kernels: one grid-stride thread per output element, the CPU reference's
// arithmetic in the same precision (nvcc may contract a * b + c into one fused multiply-add, so
// results can differ from the CPU's in the last bit). 16-bit data are loaded as fp32 (Wide),
// computed as the fp32 kernel does, and rounded to nearest even on store (Narrow).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "executor/backend/cuda/backend.cuh"
#include "executor/backend/cuda/common.cuh"

namespace ptdp::cuda {
namespace {

template <typename T>
__global__ void FillKernel(T* x, int64_t n, Acc<T> value) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) x[i] = Narrow<T>(value);
}

template <typename T>
__global__ void ScaleKernel(T* x, int64_t n, Acc<T> alpha) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) x[i] = Narrow<T>(Wide(x[i]) * alpha);
}

template <typename T>
__global__ void AddKernel(T* y, const T* x, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    y[i] = Narrow<T>(Wide(y[i]) + Wide(x[i]));
  }
}

// out (N, C) += bias on every row; n = N * C.
template <typename T>
__global__ void AddBiasKernel(T* out, const T* bias, int64_t n, int64_t cols) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    out[i] = Narrow<T>(Wide(out[i]) + Wide(bias[i % cols]));
  }
}

template <typename T>
__global__ void GeluKernel(T* out, const T* in, int64_t n) {
  using A = Acc<T>;
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const A x = Wide(in[i]);
    out[i] = Narrow<T>(static_cast<A>(0.5) * x * (A(1) + Erf(x * static_cast<A>(M_SQRT1_2))));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(T* din, const T* in, const T* dout, int64_t n) {
  using A = Acc<T>;
  const A inv_sqrt_2pi = static_cast<A>(0.3989422804014327);
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const A x = Wide(in[i]);
    const A cdf = static_cast<A>(0.5) * (A(1) + Erf(x * static_cast<A>(M_SQRT1_2)));
    const A pdf = inv_sqrt_2pi * Exp(static_cast<A>(-0.5) * x * x);
    din[i] = Narrow<T>((cdf + x * pdf) * Wide(dout[i]));
  }
}

// in (N, 2F) rows [gate | up] -> out (N, F); n = N * F.
template <typename T>
__global__ void SwiGluKernel(T* out, const T* in, int64_t n, int64_t cols) {
  using A = Acc<T>;
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    const int64_t i = idx / cols, j = idx % cols;
    const A gate = Wide(in[i * 2 * cols + j]), up = Wide(in[i * 2 * cols + cols + j]);
    out[idx] = Narrow<T>(gate / (A(1) + Exp(-gate)) * up);
  }
}

template <typename T>
__global__ void SwiGluBackwardKernel(T* din, const T* in, const T* dout, int64_t n, int64_t cols) {
  using A = Acc<T>;
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    const int64_t i = idx / cols, j = idx % cols;
    const A gate = Wide(in[i * 2 * cols + j]), up = Wide(in[i * 2 * cols + cols + j]);
    const A sig = A(1) / (A(1) + Exp(-gate));
    const A g = Wide(dout[idx]);
    din[i * 2 * cols + j] = Narrow<T>(g * up * sig * (A(1) + gate * (A(1) - sig)));
    din[i * 2 * cols + cols + j] = Narrow<T>(g * gate * sig);
  }
}

// out (N, C) row i = table row tokens[i] - vocab_begin when inside the shard, else zeros.
template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* tokens, const T* table,
                                       int64_t vocab_begin, int64_t vocab_rows, int64_t n,
                                       int64_t cols) {
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    const int64_t i = idx / cols, j = idx % cols;
    const int64_t r = tokens[i] - vocab_begin;
    out[idx] = (r >= 0 && r < vocab_rows) ? table[r * cols + j] : Narrow<T>(Acc<T>(0));
  }
}

// x (S_loc * B, C) row i * B + j += pos row seq_begin + i; n = S_loc * B * C.
template <typename T>
__global__ void AddPositionsKernel(T* x, const T* pos, int64_t seq_begin, int64_t batch, int64_t n,
                                   int64_t cols) {
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    const int64_t i = idx / (batch * cols), c = idx % cols;
    x[idx] = Narrow<T>(Wide(x[idx]) + Wide(pos[(seq_begin + i) * cols + c]));
  }
}

// One thread per rotated pair (x[k], x[k + D/2]) of one q or k head of one token row;
// n = S * B * G * (H/G + 1) * D/2. Angles in double, as the CPU computes them, then rounded to
// the computation type (fp32 for 16-bit data, as the CPU's fp32 call on the widened copy).
template <typename T>
__global__ void RotaryKernel(T* qkv, int64_t n, int64_t batch, int64_t groups, int64_t hpg,
                             int64_t d, double base, int64_t seq_begin, bool inverse) {
  using A = Acc<T>;
  const int64_t half = d / 2, width = groups * (hpg + 2) * d;
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    const int64_t k = idx % half;
    int64_t rest = idx / half;
    const int64_t part = rest % (hpg + 1);  // the group's q heads, then its k
    rest /= hpg + 1;
    const int64_t gi = rest % groups;
    const int64_t row = rest / groups;  // i * B + j
    const int64_t i = row / batch;
    const double angle = static_cast<double>(seq_begin + i) *
                         pow(base, -2.0 * static_cast<double>(k) / static_cast<double>(d));
    const A c = static_cast<A>(cos(angle));
    const A sn = static_cast<A>((inverse ? -1 : 1) * sin(angle));
    T* x = qkv + row * width + gi * (hpg + 2) * d + part * d;
    const A x1 = Wide(x[k]), x2 = Wide(x[k + half]);
    x[k] = Narrow<T>(x1 * c - x2 * sn);
    x[k + half] = Narrow<T>(x2 * c + x1 * sn);
  }
}

template <typename T>
__global__ void ScaleRowsKernel(T* x, const T* scale, int64_t n, int64_t cols) {
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    x[idx] = Narrow<T>(Wide(x[idx]) * Wide(scale[idx / cols]));
  }
}

// dst (rows, C) row r = src row index[r]; W is a same-size stand-in for the element type.
template <typename W>
__global__ void GatherRowsKernel(W* dst, const W* src, const int32_t* index, int64_t src_numel,
                                 int64_t n, int64_t cols, int* index_error) {
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    const int64_t r = idx / cols, j = idx % cols;
    const int64_t at = index[r];
    if (at < 0 || (at + 1) * cols > src_numel) {
      *index_error = kGatherRowsIndex;
      continue;
    }
    dst[idx] = src[at * cols + j];
  }
}

// probs (N, V_loc) <- (probs - onehot(target)) * scale.
template <typename T>
__global__ void CrossEntropyBackwardKernel(T* probs, const int32_t* targets, int64_t vocab_begin,
                                           int64_t n, int64_t cols, T scale) {
  for (int64_t idx = GlobalThread(); idx < n; idx += GridStride()) {
    const int64_t i = idx / cols, j = idx % cols;
    T p = probs[idx];
    if (j == targets[i] - vocab_begin) p -= T(1);
    probs[idx] = p * scale;
  }
}

template <typename T>
struct AdamConstants {
  T b1, b2, c1, c2, lr, eps, wd, gs;
};

template <typename T>
__global__ void AdamKernel(T* p, const T* g, T* m, T* v, int64_t n, AdamConstants<T> a) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const T gi = g[i] * a.gs;
    const T mi = a.b1 * m[i] + (T(1) - a.b1) * gi;
    const T vi = a.b2 * v[i] + (T(1) - a.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const T update = (mi / a.c1) / (Sqrt(vi / a.c2) + a.eps);
    p[i] -= a.lr * (update + a.wd * p[i]);
  }
}

// torch.optim.SGD: coupled weight decay, momentum without dampening (executor/backend/cpu.cc).
template <typename T>
__global__ void SgdKernel(T* p, const T* g, T* buf, int64_t n, T lr, T momentum, T wd, T gs) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const T d = g[i] * gs + wd * p[i];
    const T b = momentum * buf[i] + d;
    buf[i] = b;
    p[i] -= lr * b;
  }
}

// Loads and stores of Convert's four dtypes through fp32 (fp64 kept whole where both are fp64):
// an fp64 source is rounded to fp32 first, a 16-bit value widened exactly, 16-bit stores round
// to nearest even (__float2bfloat16_rn, __float2half_rn), as executor/backend/half.h does on
// the host.
__device__ inline double LoadWide(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case 0:
      return static_cast<const float*>(p)[i];
    case 1:
      return static_cast<const double*>(p)[i];
    case 2:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return __half2float(static_cast<const __half*>(p)[i]);
  }
}

__global__ void ConvertKernel(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const double wide = LoadWide(src, src_dtype, i);
    if (dst_dtype == 1) {
      static_cast<double*>(dst)[i] = wide;
      continue;
    }
    const float narrow = static_cast<float>(wide);
    if (dst_dtype == 0) {
      static_cast<float*>(dst)[i] = narrow;
    } else if (dst_dtype == 2) {
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(narrow);
    } else {
      static_cast<__half*>(dst)[i] = __float2half_rn(narrow);
    }
  }
}

// Convert's dtype code: 0 fp32, 1 fp64, 2 bf16, 3 fp16.
int ConvertCode(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 0;
    case DType::kF64:
      return 1;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 3;
    case DType::kI32:
      break;
  }
  throw InternalError("cuda backend: Convert of int32");
}

}  // namespace

void CudaBackend::Convert(Span dst, Span src) {
  PTDP_CHECK(dst.numel == src.numel);
  if (dst.numel == 0) return;
  if (dst.dtype == src.dtype) return Copy(dst, src);
  const int to = ConvertCode(dst.dtype), from = ConvertCode(src.dtype);
  PTDP_CUDA_LAUNCH(ConvertKernel, Blocks(dst.numel), kThreads, 0, stream_, dst.data, to, src.data,
                   from, dst.numel);
}

void CudaBackend::Fill(Span x, double value) {
  DispatchData(x, "Fill", [&](auto zero) {
    using T = decltype(zero);
    if (x.numel == 0) return;
    PTDP_CUDA_LAUNCH(FillKernel<T>, Blocks(x.numel), kThreads, 0, stream_, Ptr<T>(x), x.numel,
                     static_cast<Acc<T>>(value));
  });
}

void CudaBackend::Scale(Span x, double alpha) {
  DispatchData(x, "Scale", [&](auto zero) {
    using T = decltype(zero);
    if (x.numel == 0) return;
    PTDP_CUDA_LAUNCH(ScaleKernel<T>, Blocks(x.numel), kThreads, 0, stream_, Ptr<T>(x), x.numel,
                     static_cast<Acc<T>>(alpha));
  });
}

void CudaBackend::Add(Span y, Span x) {
  PTDP_CHECK(y.numel == x.numel);
  CheckSpan("Add", "x", y.dtype, x, SpanRule::kData);
  DispatchData(y, "Add", [&](auto zero) {
    using T = decltype(zero);
    if (y.numel == 0) return;
    PTDP_CUDA_LAUNCH(AddKernel<T>, Blocks(y.numel), kThreads, 0, stream_, Ptr<T>(y), Ptr<T>(x),
                     y.numel);
  });
}

void CudaBackend::AddBias(Span out, Span bias, int64_t rows, int64_t cols) {
  PTDP_CHECK(out.numel == rows * cols && bias.numel == cols);
  CheckSpan("AddBias", "bias", out.dtype, bias, SpanRule::kData);
  DispatchData(out, "AddBias", [&](auto zero) {
    using T = decltype(zero);
    if (out.numel == 0) return;
    PTDP_CUDA_LAUNCH(AddBiasKernel<T>, Blocks(out.numel), kThreads, 0, stream_, Ptr<T>(out),
                     Ptr<T>(bias), out.numel, cols);
  });
}

void CudaBackend::Gelu(Span out, Span in) {
  PTDP_CHECK(out.numel == in.numel);
  CheckSpan("Gelu", "in", out.dtype, in, SpanRule::kData);
  DispatchData(out, "Gelu", [&](auto zero) {
    using T = decltype(zero);
    if (out.numel == 0) return;
    PTDP_CUDA_LAUNCH(GeluKernel<T>, Blocks(out.numel), kThreads, 0, stream_, Ptr<T>(out),
                     Ptr<T>(in), out.numel);
  });
}

void CudaBackend::GeluBackward(Span din, Span in, Span dout) {
  PTDP_CHECK(din.numel == in.numel && dout.numel == in.numel);
  CheckSpan("GeluBackward", "in", din.dtype, in, SpanRule::kData);
  CheckSpan("GeluBackward", "dout", din.dtype, dout, SpanRule::kData);
  DispatchData(din, "GeluBackward", [&](auto zero) {
    using T = decltype(zero);
    if (din.numel == 0) return;
    PTDP_CUDA_LAUNCH(GeluBackwardKernel<T>, Blocks(din.numel), kThreads, 0, stream_, Ptr<T>(din),
                     Ptr<T>(in), Ptr<T>(dout), din.numel);
  });
}

void CudaBackend::SwiGlu(Span out, Span in, int64_t rows, int64_t cols) {
  PTDP_CHECK(out.numel == rows * cols && in.numel == 2 * rows * cols);
  CheckSpan("SwiGlu", "in", out.dtype, in, SpanRule::kData);
  DispatchData(out, "SwiGlu", [&](auto zero) {
    using T = decltype(zero);
    if (out.numel == 0) return;
    PTDP_CUDA_LAUNCH(SwiGluKernel<T>, Blocks(out.numel), kThreads, 0, stream_, Ptr<T>(out),
                     Ptr<T>(in), out.numel, cols);
  });
}

void CudaBackend::SwiGluBackward(Span din, Span in, Span dout, int64_t rows, int64_t cols) {
  PTDP_CHECK(din.numel == 2 * rows * cols && in.numel == din.numel && dout.numel == rows * cols);
  CheckSpan("SwiGluBackward", "in", din.dtype, in, SpanRule::kData);
  CheckSpan("SwiGluBackward", "dout", din.dtype, dout, SpanRule::kData);
  DispatchData(din, "SwiGluBackward", [&](auto zero) {
    using T = decltype(zero);
    if (dout.numel == 0) return;
    PTDP_CUDA_LAUNCH(SwiGluBackwardKernel<T>, Blocks(dout.numel), kThreads, 0, stream_, Ptr<T>(din),
                     Ptr<T>(in), Ptr<T>(dout), dout.numel, cols);
  });
}

void CudaBackend::EmbeddingForward(Span out, Span tokens, Span table, int64_t vocab_begin,
                                   int64_t vocab_rows, int64_t rows, int64_t cols) {
  PTDP_CHECK(out.numel == rows * cols && tokens.numel == rows && table.numel == vocab_rows * cols);
  CheckSpan("EmbeddingForward", "table", out.dtype, table, SpanRule::kData);
  DispatchData(out, "EmbeddingForward", [&](auto zero) {
    using T = decltype(zero);
    if (out.numel == 0) return;
    PTDP_CUDA_LAUNCH(EmbeddingForwardKernel<T>, Blocks(out.numel), kThreads, 0, stream_,
                     Ptr<T>(out), Ptr<int32_t>(tokens), Ptr<T>(table), vocab_begin, vocab_rows,
                     out.numel, cols);
  });
}

void CudaBackend::AddPositions(Span x, Span pos, int64_t seq_begin, int64_t seq_rows, int64_t batch,
                               int64_t cols) {
  PTDP_CHECK(x.numel == seq_rows * batch * cols && pos.numel >= (seq_begin + seq_rows) * cols);
  PTDP_CHECK(seq_begin >= 0);
  CheckSpan("AddPositions", "pos", x.dtype, pos, SpanRule::kData);
  DispatchData(x, "AddPositions", [&](auto zero) {
    using T = decltype(zero);
    if (x.numel == 0) return;
    PTDP_CUDA_LAUNCH(AddPositionsKernel<T>, Blocks(x.numel), kThreads, 0, stream_, Ptr<T>(x),
                     Ptr<T>(pos), seq_begin, batch, x.numel, cols);
  });
}

void CudaBackend::Rotary(Span qkv, int64_t seq, int64_t batch, int64_t heads, int64_t groups,
                         int64_t head_dim, double base, int64_t seq_begin, bool inverse) {
  PTDP_CHECK(groups > 0 && heads % groups == 0 && head_dim % 2 == 0 && seq_begin >= 0);
  PTDP_CHECK(qkv.numel == seq * batch * (heads + 2 * groups) * head_dim);
  const int64_t hpg = heads / groups;
  const int64_t n = seq * batch * groups * (hpg + 1) * (head_dim / 2);
  DispatchData(qkv, "Rotary", [&](auto zero) {
    using T = decltype(zero);
    if (n == 0) return;
    PTDP_CUDA_LAUNCH(RotaryKernel<T>, Blocks(n), kThreads, 0, stream_, Ptr<T>(qkv), n, batch,
                     groups, hpg, head_dim, base, seq_begin, inverse);
  });
}

void CudaBackend::ScaleRows(Span x, Span scale, int64_t rows, int64_t cols) {
  PTDP_CHECK(x.numel == rows * cols && scale.numel == rows);
  CheckSpan("ScaleRows", "scale", x.dtype, scale, SpanRule::kData);
  DispatchData(x, "ScaleRows", [&](auto zero) {
    using T = decltype(zero);
    if (x.numel == 0) return;
    PTDP_CUDA_LAUNCH(ScaleRowsKernel<T>, Blocks(x.numel), kThreads, 0, stream_, Ptr<T>(x),
                     Ptr<T>(scale), x.numel, cols);
  });
}

void CudaBackend::GatherRows(Span dst, Span src, Span index, int64_t rows, int64_t cols) {
  PTDP_CHECK(dst.numel == rows * cols && index.numel == rows && src.dtype == dst.dtype);
  const int32_t* at = Ptr<int32_t>(index);
  if (dst.numel == 0) return;
  // Any dtype: the rows move as 2-, 4- or 8-byte words.
  if (SizeOf(dst.dtype) == 2) {
    PTDP_CUDA_LAUNCH(GatherRowsKernel<uint16_t>, Blocks(dst.numel), kThreads, 0, stream_,
                     static_cast<uint16_t*>(dst.data), static_cast<const uint16_t*>(src.data), at,
                     src.numel, dst.numel, cols, index_error_);
  } else if (SizeOf(dst.dtype) == 8) {
    PTDP_CUDA_LAUNCH(GatherRowsKernel<uint64_t>, Blocks(dst.numel), kThreads, 0, stream_,
                     static_cast<uint64_t*>(dst.data), static_cast<const uint64_t*>(src.data), at,
                     src.numel, dst.numel, cols, index_error_);
  } else {
    PTDP_CHECK(SizeOf(dst.dtype) == 4);
    PTDP_CUDA_LAUNCH(GatherRowsKernel<uint32_t>, Blocks(dst.numel), kThreads, 0, stream_,
                     static_cast<uint32_t*>(dst.data), static_cast<const uint32_t*>(src.data), at,
                     src.numel, dst.numel, cols, index_error_);
  }
}

void CudaBackend::CrossEntropyBackward(Span probs, Span targets, int64_t vocab_begin, int64_t rows,
                                       int64_t cols, double scale) {
  PTDP_CHECK(probs.numel == rows * cols && targets.numel == rows);
  DispatchFloat(probs, "CrossEntropyBackward", [&](auto zero) {
    using T = decltype(zero);
    if (probs.numel == 0) return;
    PTDP_CUDA_LAUNCH(CrossEntropyBackwardKernel<T>, Blocks(probs.numel), kThreads, 0, stream_,
                     Ptr<T>(probs), Ptr<int32_t>(targets), vocab_begin, probs.numel, cols,
                     static_cast<T>(scale));
  });
}

void CudaBackend::AdamStep(Span param, Span grad, Span m, Span v, const AdamArgs& a) {
  PTDP_CHECK(grad.numel == param.numel && m.numel == param.numel && v.numel == param.numel);
  DispatchFloat(param, "AdamStep", [&](auto zero) {
    using T = decltype(zero);
    if (param.numel == 0) return;
    // The constants exactly as executor/backend/cpu.cc rounds them.
    AdamConstants<T> c;
    c.b1 = static_cast<T>(a.beta1);
    c.b2 = static_cast<T>(a.beta2);
    c.c1 = static_cast<T>(1 - std::pow(a.beta1, static_cast<double>(a.step)));
    c.c2 = static_cast<T>(1 - std::pow(a.beta2, static_cast<double>(a.step)));
    c.lr = static_cast<T>(a.lr);
    c.eps = static_cast<T>(a.eps);
    c.wd = static_cast<T>(a.weight_decay);
    c.gs = static_cast<T>(a.grad_scale);
    PTDP_CUDA_LAUNCH(AdamKernel<T>, Blocks(param.numel), kThreads, 0, stream_, Ptr<T>(param),
                     Ptr<T>(grad), Ptr<T>(m), Ptr<T>(v), param.numel, c);
  });
}

void CudaBackend::SgdStep(Span param, Span grad, Span momentum_buf, double lr, double momentum,
                          double weight_decay, double grad_scale) {
  PTDP_CHECK(grad.numel == param.numel && momentum_buf.numel == param.numel);
  DispatchFloat(param, "SgdStep", [&](auto zero) {
    using T = decltype(zero);
    if (param.numel == 0) return;
    PTDP_CUDA_LAUNCH(SgdKernel<T>, Blocks(param.numel), kThreads, 0, stream_, Ptr<T>(param),
                     Ptr<T>(grad), Ptr<T>(momentum_buf), param.numel, static_cast<T>(lr),
                     static_cast<T>(momentum), static_cast<T>(weight_decay),
                     static_cast<T>(grad_scale));
  });
}

}  // namespace ptdp::cuda
