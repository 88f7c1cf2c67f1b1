// The measurement half of `ptdp calibrate --backend cuda` (cuda.h); the profile is
// written by calibrate.cc. Built only with CUDA; nocuda.cc answers without it.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/backend/backend.h"
#include "executor/backend/cuda.h"
#include "executor/calibrate/cuda.h"

namespace ptdp {
namespace {

[[noreturn]] void Fail(const std::string& call, const char* file, int line,
                       const std::string& what) {
  throw std::runtime_error("calibrate --backend cuda: " + call + " failed at " + file + ":" +
                           std::to_string(line) + ": " + what);
}
void CheckCuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) Fail(call, file, line, cudaGetErrorString(e));
}
void CheckLt(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) Fail(call, file, line, cublasGetStatusString(s));
}
#define CAL_CUDA(x) CheckCuda((x), #x, __FILE__, __LINE__)
#define CAL_LT(x) CheckLt((x), #x, __FILE__, __LINE__)
#define CAL_LAUNCHED() CheckCuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Uniform values in [-0.5, 0.5) from a hash of the index: never zeros (the device tool's
// method: zeros can run faster than real data).
template <typename T>
__global__ void FillRandomKernel(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = T(static_cast<float>(x & 0xffffffu) / 16777216.0f - 0.5f);
  }
}

__global__ void EmptyKernel() {}

struct DeviceBuffer {
  void* data = nullptr;
  explicit DeviceBuffer(size_t bytes) { CAL_CUDA(cudaMalloc(&data, bytes)); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <typename T>
void FillRandom(void* p, int64_t n, uint32_t seed, cudaStream_t stream) {
  FillRandomKernel<T><<<1024, 256, 0, stream>>>(static_cast<T*>(p), n, seed);
  CAL_LAUNCHED();
}

// Seconds per call of `op` on `stream`: a warm-up, then `repeats` timings of enough calls to
// last min_s each, by events; the median.
double TimeOnStream(const std::function<void()>& op, cudaStream_t stream, int repeats,
                    double min_s) {
  cudaEvent_t start, stop;
  CAL_CUDA(cudaEventCreate(&start));
  CAL_CUDA(cudaEventCreate(&stop));
  auto timed = [&](int calls) {
    CAL_CUDA(cudaEventRecord(start, stream));
    for (int i = 0; i < calls; ++i) op();
    CAL_CUDA(cudaEventRecord(stop, stream));
    CAL_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CAL_CUDA(cudaEventElapsedTime(&ms, start, stop));
    return 1e-3 * ms / calls;
  };
  op();  // warm-up: module load, heuristics, caches
  const double one = std::max(timed(1), 1e-7);
  const int calls = std::max(1, static_cast<int>(std::ceil(min_s / one)));
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) t.push_back(timed(calls));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(t);
}

// cuBLASLt products C (m, n) = op(A) op(B), row-major as executor/backend/backend.h's Gemm, in one
// dtype with fp32 accumulation (no TF32 for fp32).
class LtGemm {
 public:
  LtGemm(cudaStream_t stream, size_t workspace_bytes)
      : stream_(stream), workspace_(workspace_bytes), workspace_bytes_(workspace_bytes) {
    CAL_LT(cublasLtCreate(&handle_));
  }
  ~LtGemm() { cublasLtDestroy(handle_); }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B's storage is the first
  // operand, A's the second, and the transposes carry over.
  // `out_type`: C's type when it differs from the operands' (FP8 operands, a bf16 result).
  std::function<void()> Prepare(cudaDataType_t type, bool ta, bool tb, int64_t m, int64_t n,
                                int64_t k, void* a, void* b, void* c,
                                std::optional<cudaDataType_t> out_type = std::nullopt) {
    auto plan = std::make_shared<Plan>();
    plan->alpha = 1.0f;
    plan->beta = 0.0f;
    CAL_LT(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CAL_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                          sizeof(op_first)));
    CAL_LT(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                          sizeof(op_second)));
    // Stored shapes (column-major rows x cols, leading dimension = rows).
    const uint64_t first_rows = tb ? k : n, first_cols = tb ? n : k;
    const uint64_t second_rows = ta ? m : k, second_cols = ta ? k : m;
    CAL_LT(cublasLtMatrixLayoutCreate(&plan->first, type, first_rows, first_cols, first_rows));
    CAL_LT(cublasLtMatrixLayoutCreate(&plan->second, type, second_rows, second_cols, second_rows));
    CAL_LT(cublasLtMatrixLayoutCreate(&plan->out, out_type.value_or(type), n, m, n));
    cublasLtMatmulPreference_t pref;
    CAL_LT(cublasLtMatmulPreferenceCreate(&pref));
    CAL_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace_bytes_, sizeof(workspace_bytes_)));
    int found = 0;
    CAL_LT(cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->first, plan->second, plan->out,
                                          plan->out, pref, 1, &plan->heuristic, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
      Fail("cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
           "no algorithm for " + std::to_string(m) + " x " + std::to_string(n) + " x " +
               std::to_string(k));
    }
    return [this, plan, a, b, c] {
      CAL_LT(cublasLtMatmul(handle_, plan->desc, &plan->alpha, b, plan->first, a, plan->second,
                            &plan->beta, c, plan->out, c, plan->out, &plan->heuristic.algo,
                            workspace_.data, workspace_bytes_, stream_));
    };
  }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
    cublasLtMatmulHeuristicResult_t heuristic = {};
    float alpha = 1, beta = 0;
    ~Plan() {
      if (out) cublasLtMatrixLayoutDestroy(out);
      if (second) cublasLtMatrixLayoutDestroy(second);
      if (first) cublasLtMatrixLayoutDestroy(first);
      if (desc) cublasLtMatmulDescDestroy(desc);
    }
  };
  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  size_t workspace_bytes_;
};

struct DTypeCase {
  const char* name;
  cudaDataType_t type;
  size_t bytes;
};

void Say(std::ostream* progress, const std::string& line) {
  if (progress != nullptr) *progress << "calibrate: " << line << "\n" << std::flush;
}

// Makes `device` current, or throws saying why it cannot be used.
void UseDevice(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw std::runtime_error("calibrate --backend cuda: no usable CUDA device");
  }
  if (device < 0 || device >= count) {
    throw std::runtime_error("calibrate --backend cuda: device " + std::to_string(device) +
                             " does not exist (" + std::to_string(count) + " devices)");
  }
  CAL_CUDA(cudaSetDevice(device));
}

// The device's name, compute capability, multiprocessors and driver version into `f`.
cudaDeviceProp DescribeDevice(int device, CudaComputeFigures* f) {
  cudaDeviceProp prop;
  CAL_CUDA(cudaGetDeviceProperties(&prop, device));
  f->device_name = prop.name;
  f->compute_capability = prop.major * 10 + prop.minor;
  f->multiprocessors = prop.multiProcessorCount;
  int driver = 0;
  CAL_CUDA(cudaDriverGetVersion(&driver));
  f->driver = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  return prop;
}

// What the GEMM measurements share: products issued on `stream` through `lt`, operands in three
// device buffers of `elements` values of up to 4 bytes each.
struct GemmBench {
  LtGemm& lt;
  cudaStream_t stream;
  void* a;
  void* b;
  void* c;
  size_t elements;
};

// bf16, fp16 and fp32: each dtype's peak on square products of o.peak_size and its grid, timed as
// the executor's three kinds of linear-layer products.
void MeasureGemms(const GemmBench& g, const CudaCalibrateOptions& o, std::ostream* progress,
                  CudaComputeFigures* f) {
  const DTypeCase dtypes[3] = {
      {"bf16", CUDA_R_16BF, 2}, {"fp16", CUDA_R_16F, 2}, {"fp32", CUDA_R_32F, 4}};
  struct Kind {
    bool ta, tb;
  };
  const Kind kinds[3] = {{false, true}, {false, false}, {true, false}};  // X W^T, dY W, dY^T X
  for (const DTypeCase& dt : dtypes) {
    const int64_t n_el = static_cast<int64_t>(g.elements);
    if (dt.type == CUDA_R_16BF) {
      FillRandom<__nv_bfloat16>(g.a, n_el, 1, g.stream);
      FillRandom<__nv_bfloat16>(g.b, n_el, 2, g.stream);
    } else if (dt.type == CUDA_R_16F) {
      FillRandom<__half>(g.a, n_el, 1, g.stream);
      FillRandom<__half>(g.b, n_el, 2, g.stream);
    } else {
      FillRandom<float>(g.a, n_el, 1, g.stream);
      FillRandom<float>(g.b, n_el, 2, g.stream);
    }
    auto rate = [&](int64_t m, int64_t n, int64_t k, bool all_kinds) {
      double total = 0;
      const int used = all_kinds ? 3 : 1;
      for (int i = 0; i < used; ++i) {
        const Kind kind = all_kinds ? kinds[i] : Kind{false, false};
        total += TimeOnStream(g.lt.Prepare(dt.type, kind.ta, kind.tb, m, n, k, g.a, g.b, g.c),
                              g.stream, o.repeats, o.min_timing_s);
      }
      return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
             (total / used);
    };
    const double peak = rate(o.peak_size, o.peak_size, o.peak_size, false);
    std::vector<CudaGemmFigure> grid;
    for (const int64_t m : o.gemm_axis) {
      for (const int64_t n : o.gemm_axis) {
        for (const int64_t k : o.gemm_axis) grid.push_back({m, n, k, rate(m, n, k, true)});
      }
    }
    Say(progress, std::string(dt.name) + ": " + std::to_string(static_cast<int>(peak / 1e12)) +
                      " TFLOP/s at " + std::to_string(o.peak_size) + "^3; " +
                      std::to_string(grid.size()) + " grid points timed");
    if (dt.type == CUDA_R_16BF) f->bf16_flops_per_s = peak, f->gemm_bf16 = std::move(grid);
    if (dt.type == CUDA_R_16F) f->fp16_flops_per_s = peak, f->gemm_fp16 = std::move(grid);
    if (dt.type == CUDA_R_32F) f->fp32_flops_per_s = peak, f->gemm_fp32 = std::move(grid);
  }
}

// FP8: E4M3 operands, bf16 result, the TN order (row-major X W^T) its kernels require.
void MeasureFp8(const GemmBench& g, const CudaCalibrateOptions& o, std::ostream* progress,
                CudaComputeFigures* f) {
  if (f->compute_capability < 89) {
    f->fp8_skipped = "compute capability below 8.9: no FP8 units";
  } else {
    const int64_t n_el = static_cast<int64_t>(g.elements);
    FillRandom<__nv_fp8_e4m3>(g.a, n_el, 1, g.stream);
    FillRandom<__nv_fp8_e4m3>(g.b, n_el, 2, g.stream);
    auto rate = [&](int64_t m, int64_t n, int64_t k) {
      const double t = TimeOnStream(
          g.lt.Prepare(CUDA_R_8F_E4M3, false, true, m, n, k, g.a, g.b, g.c, CUDA_R_16BF), g.stream,
          o.repeats, o.min_timing_s);
      return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / t;
    };
    try {
      f->fp8_flops_per_s = rate(o.peak_size, o.peak_size, o.peak_size);
      for (const int64_t m : o.gemm_axis) {
        for (const int64_t n : o.gemm_axis) {
          for (const int64_t k : o.gemm_axis) f->gemm_fp8.push_back({m, n, k, rate(m, n, k)});
        }
      }
      Say(progress, "fp8: " + std::to_string(static_cast<int>(f->fp8_flops_per_s / 1e12)) +
                        " TFLOP/s at " + std::to_string(o.peak_size) + "^3; " +
                        std::to_string(f->gemm_fp8.size()) + " grid points timed");
    } catch (const std::exception& e) {
      // cuBLASLt without an FP8 algorithm for these shapes: the profile keeps the base's table.
      f->fp8_flops_per_s = 0;
      f->gemm_fp8.clear();
      f->fp8_skipped = e.what();
      Say(progress, std::string("fp8: skipped: ") + e.what());
    }
  }
}

// Copy bandwidth: reads + writes of a device-to-device copy.
void MeasureCopy(cudaStream_t stream, const CudaCalibrateOptions& o, std::ostream* progress,
                 CudaComputeFigures* f) {
  DeviceBuffer src(static_cast<size_t>(o.copy_bytes)), dst(static_cast<size_t>(o.copy_bytes));
  FillRandom<float>(src.data, o.copy_bytes / 4, 3, stream);
  const double t = TimeOnStream(
      [&] {
        CAL_CUDA(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(o.copy_bytes),
                                 cudaMemcpyDeviceToDevice, stream));
      },
      stream, o.repeats, o.min_timing_s);
  f->copy_bytes = o.copy_bytes;
  f->copy_bytes_per_s = 2.0 * static_cast<double>(o.copy_bytes) / t;
  Say(progress, "copy: " + std::to_string(static_cast<int>(f->copy_bytes_per_s / 1e9)) + " GB/s");
}

// Launch cost: empty kernels back to back, host clock from the first launch to the end of
// the last one's execution (the rate at which a C++ host issues small kernels).
void MeasureLaunch(cudaStream_t stream, const CudaCalibrateOptions& o, std::ostream* progress,
                   CudaComputeFigures* f) {
  EmptyKernel<<<1, 1, 0, stream>>>();
  CAL_LAUNCHED();
  CAL_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> t;
  for (int r = 0; r < o.repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.launch_count; ++i) EmptyKernel<<<1, 1, 0, stream>>>();
    CAL_LAUNCHED();
    CAL_CUDA(cudaStreamSynchronize(stream));
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                o.launch_count);
  }
  f->launch_s = Median(t);
  Say(progress, "launch: " + std::to_string(f->launch_s * 1e6) + " us per kernel");
}

// The executor's attention kernel through its backend (fp32 today).
void MeasureAttention(const CudaCalibrateOptions& o, std::ostream* progress,
                      CudaComputeFigures* f) {
  std::string error;
  const std::unique_ptr<Backend> backend = MakeCudaBackend(o.device, &error);
  if (backend == nullptr) throw std::runtime_error("calibrate --backend cuda: " + error);
  const int64_t h = o.attention_heads, d = o.attention_head_dim, batch = 1;
  f->attention_heads = h;
  f->attention_head_dim = d;
  for (const int64_t s : o.attention_seq) {
    const int64_t rows = s * batch;
    Tensor qkv(*backend, DType::kF32, {rows, 3 * h * d}, MemCategory::kActivations);
    Tensor kv(*backend, DType::kF32, {rows, 2 * h * d}, MemCategory::kActivations);
    Tensor ctx(*backend, DType::kF32, {rows, h * d}, MemCategory::kActivations);
    Tensor lse(*backend, DType::kF32, {rows, h}, MemCategory::kActivations);
    Tensor dqkv(*backend, DType::kF32, {rows, 3 * h * d}, MemCategory::kWorkspace);
    Tensor dkv(*backend, DType::kF32, {rows, 2 * h * d}, MemCategory::kWorkspace);
    Tensor dctx(*backend, DType::kF32, {rows, h * d}, MemCategory::kWorkspace);
    {
      std::vector<float> host(static_cast<size_t>(qkv.numel()));
      uint32_t x = 12345;
      for (float& v : host) {
        x = x * 1664525u + 1013904223u;
        v = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
      }
      backend->Upload(qkv.span(), host.data());
      backend->Upload(kv.span(), host.data());
      backend->Upload(dctx.span(), host.data());
    }
    auto forward = [&] {
      backend->Fill(ctx.span(), 0);
      backend->Fill(lse.span(), -std::numeric_limits<double>::infinity());
      backend->AttentionBlockForward(ctx.span(), lse.span(), qkv.span(), kv.span(), s, s, batch, h,
                                     h, d, true);
    };
    auto backward = [&] {
      backend->AttentionBlockBackward(dqkv.span(), dkv.span(), dctx.span(), ctx.span(), lse.span(),
                                      qkv.span(), kv.span(), s, s, batch, h, h, d, true);
    };
    auto host_timed = [&](const std::function<void()>& op) {
      op();
      Synchronize(*backend);
      std::vector<double> t;
      for (int r = 0; r < o.repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        op();
        Synchronize(*backend);
        t.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      return Median(t);
    };
    forward();
    const double flops = 2.0 * static_cast<double>(s) * static_cast<double>(s) *
                         static_cast<double>(d) * static_cast<double>(h * batch);
    const double tf = host_timed(forward), tb = host_timed(backward);
    f->attention.push_back({s, flops / tf, 2.5 * flops / tb});
    Say(progress, "attention (the executor's " + f->attention_dtype + " kernel) at " +
                      std::to_string(s) + ": forward " + std::to_string(flops / tf / 1e12) +
                      " TFLOP/s, backward " + std::to_string(2.5 * flops / tb / 1e12) + " TFLOP/s");
  }
}

}  // namespace

CudaComputeFigures MeasureCudaCompute(const CudaCalibrateOptions& o, std::ostream* progress) {
  UseDevice(o.device);
  CudaComputeFigures f;
  const cudaDeviceProp prop = DescribeDevice(o.device, &f);

  cudaStream_t stream;
  CAL_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> stream_owner(
      stream, [](cudaStream_t s) { cudaStreamDestroy(s); });
  LtGemm lt(stream, size_t{32} << 20);
  {
    size_t free_bytes = 0, total_bytes = 0;
    CAL_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    f.memory_bytes = static_cast<int64_t>(total_bytes);
    f.used_at_start_bytes = static_cast<int64_t>(total_bytes - free_bytes);
  }
  Say(progress, f.device_name + " (compute capability " + std::to_string(prop.major) + "." +
                    std::to_string(prop.minor) + ", " + std::to_string(f.multiprocessors) +
                    " multiprocessors, " + std::to_string(f.memory_bytes >> 20) + " MiB)");

  // GEMMs: one set of buffers large enough for the largest product of any dtype (held to the
  // end, as the other measurements run).
  int64_t largest = o.peak_size;
  for (const int64_t v : o.gemm_axis) largest = std::max(largest, v);
  const size_t elements = static_cast<size_t>(largest) * static_cast<size_t>(largest);
  DeviceBuffer a(elements * 4), b(elements * 4), c(elements * 4);
  const GemmBench gemm{lt, stream, a.data, b.data, c.data, elements};
  MeasureGemms(gemm, o, progress, &f);
  MeasureFp8(gemm, o, progress, &f);
  MeasureCopy(stream, o, progress, &f);
  MeasureLaunch(stream, o, progress, &f);
  MeasureAttention(o, progress, &f);
  return f;
}

}  // namespace ptdp
