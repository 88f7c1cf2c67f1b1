// The CUDA backend's device, stream, memory, copies and host-returning reductions, and the
// public factory (executor/backend/cuda.h). Kernels live in the themed .cu files (backend.cuh).
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/backend/cuda.h"
#include "executor/backend/cuda/backend.cuh"
#include "executor/backend/cuda/common.cuh"
#include "executor/backend/device.h"
#include "executor/backend/kernel_clock.h"
#include "executor/launch/env.h"

namespace ptdp {
namespace cuda {

void Fail(const char* call, const char* file, int line, const std::string& what) {
  char host[256] = "?";
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  host[sizeof(host) - 1] = '\0';
  // The rank, when a launcher started this process (a job of several GPUs).
  std::string rank;
  try {
    const LaunchEnv env = ReadLaunchEnv(ProcessEnv());
    if (env.launcher != Launcher::kNone) rank = ", rank " + std::to_string(env.rank);
  } catch (const std::exception&) {
    // A malformed launcher variable is reported where it is read; not here.
  }
  throw InternalError(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                      " on " + host + rank + ": " + what);
}

namespace {

// Per-block fp64 partial sums of x (or x^2), grid-stride; partial[blockIdx.x] gets the block's.
// 16-bit values are widened exactly, as the CPU sums its fp32 copy in double.
template <typename T>
__global__ void ReduceKernel(double* partial, const T* x, int64_t n, bool squares) {
  double sum = 0;
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const double v = static_cast<double>(Wide(x[i]));
    sum += squares ? v * v : v;
  }
  sum = BlockSum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

const char* IndexErrorKernel(int code) {
  switch (code) {
    case kGatherRowsIndex:
      return "GatherRows: an index outside the source's rows";
    case kScatterAddRowsIndex:
      return "ScatterAddRows: an index outside the destination's rows";
    case kRouterChoice:
      return "RouterTopKBackward: a choice outside [0, experts)";
    default:
      return "an unknown index error";
  }
}

bool Overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

CudaBackend::CudaBackend(int device) : device_(device) {
  try {
    PTDP_CUDA_CHECK(cudaSetDevice(device));
    int optin = 0;
    PTDP_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    max_shared_bytes_ = optin;
    PTDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PTDP_CUDA_CHECK(cublasCreate(&blas_));
    PTDP_CUDA_CHECK(cublasSetStream(blas_, stream_));
    // The default math mode keeps fp32 products in fp32 (TF32 only with
    // CUBLAS_TF32_TENSOR_OP_MATH); 16-bit products with fp32 compute reduce in fp32 too (no
    // split-K sums in the 16-bit output type), so their results are rounded once.
    PTDP_CUDA_CHECK(cublasSetMathMode(
        blas_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                         CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    PTDP_CUDA_CHECK(cublasLtCreate(&lt_));
    PTDP_CUDA_CHECK(cudaMalloc(&index_error_, sizeof(int)));
    PTDP_CUDA_CHECK(cudaMalloc(&partials_, kReducePartials * sizeof(double)));
    allocator_.AddExternal(sizeof(int) + kReducePartials * sizeof(double));
    PTDP_CUDA_CHECK(cudaMemsetAsync(index_error_, 0, sizeof(int), stream_));
    PTDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  } catch (...) {
    ReleaseResources();
    throw;
  }
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);  // errors ignored: nothing to report to
  ReleaseResources();
}

void CudaBackend::ReleaseResources() {
  ClearLtPlans();
  if (lt_workspace_ != nullptr) cudaFree(lt_workspace_);
  if (index_error_ != nullptr) cudaFree(index_error_);
  if (partials_ != nullptr) cudaFree(partials_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  lt_workspace_ = nullptr;
  index_error_ = nullptr;
  partials_ = nullptr;
  lt_ = nullptr;
  blas_ = nullptr;
  stream_ = nullptr;
}

void CudaBackend::Sync() {
  PTDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  int code = 0;
  PTDP_CUDA_CHECK(
      cudaMemcpyAsync(&code, index_error_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  PTDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (code != kNoIndexError) {
    PTDP_CUDA_CHECK(cudaMemsetAsync(index_error_, 0, sizeof(int), stream_));
    PTDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    throw InternalError(std::string("cuda backend: a kernel skipped a bad index: ") +
                        IndexErrorKernel(code));
  }
}

namespace {

// Kernel times from pairs of events recorded on the stream around each kernel: device time,
// without the gaps in which the device waits for the host. Events are pooled; Totals() waits
// for the last one and folds the pending pairs into the totals.
class CudaKernelClock final : public KernelClock {
 public:
  explicit CudaKernelClock(cudaStream_t stream) : stream_(stream) {}
  ~CudaKernelClock() override {
    for (const Pending& p : pending_) free_.insert(free_.end(), {p.start, p.end});
    for (cudaEvent_t e : free_) cudaEventDestroy(e);  // errors ignored: nothing to report to
  }
  CudaKernelClock(const CudaKernelClock&) = delete;
  CudaKernelClock& operator=(const CudaKernelClock&) = delete;

  void Begin() override {
    start_ = Take();
    PTDP_CUDA_CHECK(cudaEventRecord(start_, stream_));
  }
  void End(KernelClass c) override {
    const cudaEvent_t end = Take();
    PTDP_CUDA_CHECK(cudaEventRecord(end, stream_));
    pending_.push_back({start_, end, c});
  }
  KernelSeconds Totals() override {
    if (!pending_.empty()) PTDP_CUDA_CHECK(cudaEventSynchronize(pending_.back().end));
    for (const Pending& p : pending_) {
      float ms = 0;
      PTDP_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.end));
      totals_[static_cast<size_t>(p.kernel_class)] += 1e-3 * ms;
      free_.insert(free_.end(), {p.start, p.end});
    }
    pending_.clear();
    return totals_;
  }

 private:
  struct Pending {
    cudaEvent_t start, end;
    KernelClass kernel_class;
  };
  cudaEvent_t Take() {
    if (free_.empty()) {
      cudaEvent_t e = nullptr;
      PTDP_CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    const cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }

  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  KernelSeconds totals_{};
};

}  // namespace

std::unique_ptr<KernelClock> CudaBackend::MakeKernelClock() {
  return std::make_unique<CudaKernelClock>(stream_);
}

void CudaBackend::AllowSharedMemory(const void* kernel, int64_t bytes) {
  if (bytes <= (48 << 10)) return;
  if (bytes > max_shared_bytes_) {
    throw InternalError("cuda backend: a kernel needs " + std::to_string(bytes) +
                        " bytes of shared memory per block; the device allows " +
                        std::to_string(max_shared_bytes_));
  }
  PTDP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
}

CudaBackend::Scratch::Scratch(CudaBackend& backend, int64_t bytes) : backend_(backend) {
  data_ = backend_.allocator_.Allocate(std::max<int64_t>(bytes, 1), /*zero=*/false,
                                       backend_.stream_, backend_.memory().current_total_bytes);
}

CudaBackend::Scratch::~Scratch() { backend_.allocator_.Free(data_); }

void* CudaBackend::DoAllocate(int64_t bytes) {
  return allocator_.Allocate(bytes, /*zero=*/true, stream_, memory().current_total_bytes);
}

void CudaBackend::DoFree(void* data) { allocator_.Free(data); }

void CudaBackend::Upload(Span dst, const void* host) {
  if (dst.bytes() == 0) return;
  PTDP_CUDA_CHECK(cudaMemcpyAsync(dst.data, host, static_cast<size_t>(dst.bytes()),
                                  cudaMemcpyHostToDevice, stream_));
  // The caller may reuse its host buffer on return.
  PTDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::Download(Span src, void* host) {
  if (src.bytes() == 0) return;
  PTDP_CUDA_CHECK(cudaMemcpyAsync(host, src.data, static_cast<size_t>(src.bytes()),
                                  cudaMemcpyDeviceToHost, stream_));
  Sync();
}

void CudaBackend::Copy(Span dst, Span src) {
  PTDP_CHECK(dst.numel == src.numel && dst.dtype == src.dtype);
  const int64_t bytes = dst.bytes();
  if (bytes == 0 || dst.data == src.data) return;
  if (Overlap(dst.data, bytes, src.data, bytes)) {  // memmove's contract, through a scratch copy
    Scratch tmp(*this, bytes);
    PTDP_CUDA_CHECK(cudaMemcpyAsync(tmp.get(), src.data, static_cast<size_t>(bytes),
                                    cudaMemcpyDeviceToDevice, stream_));
    PTDP_CUDA_CHECK(cudaMemcpyAsync(dst.data, tmp.get(), static_cast<size_t>(bytes),
                                    cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  PTDP_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(bytes),
                                  cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::Copy2D(Span dst, int64_t ld_dst, Span src, int64_t ld_src, int64_t rows,
                         int64_t cols) {
  PTDP_CHECK(dst.dtype == src.dtype && rows >= 0 && cols >= 0);
  if (rows == 0 || cols == 0) return;
  PTDP_CHECK(dst.numel >= ld_dst * (rows - 1) + cols && src.numel >= ld_src * (rows - 1) + cols);
  // cudaMemcpy2D wants pitch >= width; with one row the pitch is never used.
  if (rows == 1) ld_dst = ld_src = cols;
  PTDP_CHECK(ld_dst >= cols && ld_src >= cols);
  const int64_t size = SizeOf(dst.dtype);
  const int64_t dst_extent = (ld_dst * (rows - 1) + cols) * size;
  const int64_t src_extent = (ld_src * (rows - 1) + cols) * size;
  if (dst.data == src.data && ld_dst == ld_src) return;
  auto copy = [&](void* to, int64_t ld_to, const void* from, int64_t ld_from) {
    PTDP_CUDA_CHECK(cudaMemcpy2DAsync(to, static_cast<size_t>(ld_to * size), from,
                                      static_cast<size_t>(ld_from * size),
                                      static_cast<size_t>(cols * size), static_cast<size_t>(rows),
                                      cudaMemcpyDeviceToDevice, stream_));
  };
  if (Overlap(dst.data, dst_extent, src.data, src_extent)) {
    Scratch tmp(*this, rows * cols * size);  // packed rows, then into place
    copy(tmp.get(), cols, src.data, ld_src);
    copy(dst.data, ld_dst, tmp.get(), cols);
    return;
  }
  copy(dst.data, ld_dst, src.data, ld_src);
}

double CudaBackend::Reduce(Span x, bool squares) {
  if (x.numel == 0) return 0;
  const unsigned blocks = std::min<unsigned>(kReducePartials, Blocks(x.numel));
  DispatchData(x, squares ? "SumSquares" : "Sum", [&](auto zero) {
    using T = decltype(zero);
    PTDP_CUDA_LAUNCH(ReduceKernel<T>, blocks, kThreads, 0, stream_, partials_, Ptr<T>(x), x.numel,
                     squares);
  });
  std::vector<double> host(blocks);
  PTDP_CUDA_CHECK(cudaMemcpyAsync(host.data(), partials_, blocks * sizeof(double),
                                  cudaMemcpyDeviceToHost, stream_));
  Sync();
  double sum = 0;
  for (double v : host) sum += v;  // block order: the same bits on every call
  return sum;
}

double CudaBackend::SumSquares(Span x) { return Reduce(x, /*squares=*/true); }
double CudaBackend::Sum(Span x) { return Reduce(x, /*squares=*/false); }

}  // namespace cuda

std::unique_ptr<Backend> MakeCudaBackend(int device, std::string* error) {
  auto fail = [&](const std::string& why) -> std::unique_ptr<Backend> {
    if (error != nullptr) *error = why;
    return nullptr;
  };
  const CudaStatus status = QueryCuda();
  if (!status.usable) return fail(status.reason);
  if (device < 0 || device >= status.device_count) {
    return fail("no CUDA device " + std::to_string(device) + ": the runtime reports " +
                std::to_string(status.device_count));
  }
  try {
    return std::make_unique<cuda::CudaBackend>(device);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

CudaMemoryFigures CudaMemory(const Backend& backend) {
  const auto* cuda = dynamic_cast<const cuda::CudaBackend*>(&backend.Underlying());
  return cuda != nullptr ? cuda->figures() : CudaMemoryFigures{};
}

void Synchronize(Backend& backend) {
  if (auto* cuda = dynamic_cast<cuda::CudaBackend*>(&backend.Underlying())) cuda->Sync();
}

void* CudaComputeStream(Backend& backend) {
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(&backend.Underlying());
  return cuda != nullptr ? static_cast<void*>(cuda->stream()) : nullptr;
}

int CudaDeviceOf(const Backend& backend) {
  const auto* cuda = dynamic_cast<const cuda::CudaBackend*>(&backend.Underlying());
  return cuda != nullptr ? cuda->device() : -1;
}

}  // namespace ptdp
