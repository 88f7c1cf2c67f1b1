// What the CUDA backend's sources share: error checks that name the call, file:line, host and
// the runtime's message; dtype dispatch; launch sizes; device math overloads for float and
// double; deterministic warp and block reductions. CUDA-only: included by .cu files alone.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "executor/backend/backend.h"

namespace ptdp::cuda {

// Throws InternalError "<call> failed at <file>:<line> on <host>[, rank <r>]: <name>: <message>"
// (the rank when a launcher started the process: executor/launch/env.h).
[[noreturn]] void Fail(const char* call, const char* file, int line, const std::string& what);

inline void Check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) {
    Fail(call, file, line, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err));
  }
}
inline void Check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    Fail(call, file, line,
         "cuBLAS status " + std::to_string(static_cast<int>(status)) + ": " +
             cublasGetStatusString(status));
  }
}

}  // namespace ptdp::cuda

// Every CUDA runtime and cuBLAS call goes through one of these.
#define PTDP_CUDA_CHECK(call) ::ptdp::cuda::Check((call), #call, __FILE__, __LINE__)
// After every kernel launch: a bad launch configuration shows here, not at the next sync.
#define PTDP_CUDA_LAUNCH_CHECK(kernel) \
  ::ptdp::cuda::Check(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)

// kernel<<<grid, block, shared_bytes, stream>>>(args...), then the launch check.
#define PTDP_CUDA_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  do {                                                                   \
    kernel<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__);  \
    PTDP_CUDA_LAUNCH_CHECK(#kernel);                                     \
  } while (0)

namespace ptdp::cuda {

inline constexpr int kThreads = 256;  // threads per block of the element-wise kernels

// Blocks for a grid-stride loop over n elements (n > 0); the loop covers what the cap leaves.
inline unsigned Blocks(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, 1 << 20));
}

// Storage types: float, double, __nv_bfloat16, __half (and int32_t for token ids). A kernel on
// storage T computes in Acc<T>: the storage type for fp32 and fp64, float for 16-bit
// (executor/backend/backend.h's mixed precision: load -> fp32, compute as the fp32 kernel does,
// round to nearest even on store).
template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<__nv_bfloat16> {
  using type = float;
};
template <>
struct AccOf<__half> {
  using type = float;
};
template <typename T>
using Acc = typename AccOf<T>::type;

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) {
    return DType::kF32;
  } else if constexpr (std::is_same_v<T, double>) {
    return DType::kF64;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return DType::kBF16;
  } else if constexpr (std::is_same_v<T, __half>) {
    return DType::kF16;
  } else {
    static_assert(std::is_same_v<T, int32_t>, "a storage type of the CUDA backend");
    return DType::kI32;
  }
}

// The typed device pointer of a span, checking its dtype.
template <typename T>
T* Ptr(Span s) {
  PTDP_CHECK(s.dtype == DTypeOf<T>());
  return static_cast<T*>(s.data);
}

// A stored value widened to its computation type (exact).
__host__ __device__ inline float Wide(float v) { return v; }
__host__ __device__ inline double Wide(double v) { return v; }
__device__ inline float Wide(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float Wide(__half v) { return __half2float(v); }

// A computed value stored as T: 16-bit rounds to nearest even (from float; a double is rounded
// to float first, as the CPU's fp32 copy would hold it), fp32 and fp64 as static_cast.
template <typename T, typename A>
__device__ inline T Narrow(A v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

[[noreturn]] inline void RefuseDType(const char* kernel, DType dtype, const char* takes) {
  throw InternalError(std::string("cuda backend: ") + kernel + " called on " +
                      std::string(Name(dtype)) + " data; it takes " + takes + " (backend.h)");
}

// Calls f(T{}) with T = float, double, __nv_bfloat16 or __half after the span's dtype (the
// kernels that take any floating dtype); throws for int32.
template <typename F>
void DispatchData(Span s, const char* kernel, F&& f) {
  switch (s.dtype) {
    case DType::kF32:
      f(float{});
      return;
    case DType::kF64:
      f(double{});
      return;
    case DType::kBF16:
      f(__nv_bfloat16{});
      return;
    case DType::kF16:
      f(__half{});
      return;
    case DType::kI32:
      break;
  }
  RefuseDType(kernel, s.dtype, "a floating dtype");
}

// DispatchData for the kernels that take fp32 or fp64 only (cross entropy and the optimizer
// steps): throws for 16-bit data too.
template <typename F>
void DispatchFloat(Span s, const char* kernel, F&& f) {
  DispatchData(s, kernel, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      f(zero);
    } else {
      RefuseDType(kernel, s.dtype, "fp32 or fp64 only");
    }
  });
}

// Which dtype a span may have in a call on `data` (executor/backend/backend.h's mixed precision, as
// the CPU's Widened checks it): kData the data's; kF32OrData fp32 or the data's when the data are
// 16-bit (Gemm's c, parameter gradients); kStats fp32 when the data are 16-bit (per-row
// statistics). With fp32 or fp64 data every span has the data's dtype.
enum class SpanRule { kData, kF32OrData, kStats };
inline void CheckSpan(const char* kernel, const char* span, DType data, Span s, SpanRule rule) {
  if (s.data == nullptr && s.numel == 0) return;  // an absent optional argument (as the CPU)
  bool ok = s.dtype == data;
  if (Is16Bit(data)) {
    if (rule == SpanRule::kF32OrData) ok = ok || s.dtype == DType::kF32;
    if (rule == SpanRule::kStats) ok = s.dtype == DType::kF32;
  }
  if (!ok) {
    throw InternalError(std::string("cuda backend: ") + kernel + ": " + span + " is " +
                        std::string(Name(s.dtype)) + " in a call on " + std::string(Name(data)) +
                        " data (backend.h lists the spans that may differ)");
  }
}

// Grid-stride loop index helpers (64-bit throughout).
__device__ inline int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Device math in the argument's own precision (no fast-math: nvcc's default).
__device__ inline float Exp(float x) { return expf(x); }
__device__ inline double Exp(double x) { return exp(x); }
__device__ inline float Log(float x) { return logf(x); }
__device__ inline double Log(double x) { return log(x); }
__device__ inline float Sqrt(float x) { return sqrtf(x); }
__device__ inline double Sqrt(double x) { return sqrt(x); }
__device__ inline float Erf(float x) { return erff(x); }
__device__ inline double Erf(double x) { return erf(x); }
template <typename T>
__device__ inline T Max(T a, T b) {
  return a < b ? b : a;  // std::max's rule: the first unless the second is greater
}
template <typename T>
__device__ inline T NegInf() {
  return static_cast<T>(-INFINITY);  // (numeric_limits is host code to nvcc)
}

// Butterfly sum over a full warp: every lane ends with the same bits (each level adds the same
// two values, in either order), so the result is deterministic and already broadcast.
template <typename A>
__device__ inline A WarpSum(A v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <typename A>
__device__ inline A WarpMax(A v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = Max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// Deterministic: warp butterflies, then every thread adds the warp totals in warp order. Every
// thread of the block must call it (it synchronises).
template <typename A>
__device__ A BlockSum(A v) {
  __shared__ A partial[32];
  v = WarpSum(v);
  __syncthreads();  // an earlier call's readers are done with `partial`
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  A total = 0;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) total += partial[w];
  return total;
}
template <typename A>
__device__ A BlockMax(A v) {
  __shared__ A partial[32];
  v = WarpMax(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  A total = partial[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) total = Max(total, partial[w]);
  return total;
}

}  // namespace ptdp::cuda
