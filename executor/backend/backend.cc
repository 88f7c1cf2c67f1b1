#include "executor/backend/backend.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"
#include "executor/backend/kernel_clock.h"

namespace ptdp {

int64_t SizeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
  }
  return 0;
}

std::string_view Name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kF64:
      return "fp64";
    case DType::kI32:
      return "int32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
  }
  return "?";
}

std::string_view Name(MemCategory category) {
  switch (category) {
    case MemCategory::kWeights:
      return "weights";
    case MemCategory::kGradients:
      return "gradients";
    case MemCategory::kOptimizer:
      return "optimizer";
    case MemCategory::kActivations:
      return "activations";
    case MemCategory::kCommBuffers:
      return "comm_buffers";
    case MemCategory::kWorkspace:
      return "workspace";
  }
  return "?";
}

Span Span::Slice(int64_t offset, int64_t count) const {
  PTDP_CHECK(offset >= 0 && count >= 0 && offset + count <= numel);
  return {static_cast<char*>(data) + offset * SizeOf(dtype), dtype, count};
}

Tensor::Tensor(Backend& backend, DType dtype, std::vector<int64_t> shape, MemCategory category)
    : backend_(&backend), dtype_(dtype), shape_(std::move(shape)), category_(category) {
  numel_ = 1;
  for (int64_t d : shape_) {
    PTDP_CHECK(d >= 0);
    numel_ *= d;
  }
  if (numel_ > 0) data_ = backend.Allocate(numel_ * SizeOf(dtype_), category_);
}

Tensor::~Tensor() { Release(); }

Tensor::Tensor(Tensor&& other) noexcept { *this = std::move(other); }

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    Release();
    backend_ = other.backend_;
    data_ = other.data_;
    dtype_ = other.dtype_;
    numel_ = other.numel_;
    shape_ = std::move(other.shape_);
    category_ = other.category_;
    other.data_ = nullptr;
    other.numel_ = 0;
    other.shape_.clear();
  }
  return *this;
}

void Tensor::Release() {
  if (data_ != nullptr) backend_->Free(data_, numel_ * SizeOf(dtype_), category_);
  data_ = nullptr;
}

std::string_view Name(KernelClass kernel_class) {
  switch (kernel_class) {
    case KernelClass::kGemm:
      return "gemm";
    case KernelClass::kAttention:
      return "attention";
    case KernelClass::kMemory:
      return "memory-bound";
    case KernelClass::kOptimizer:
      return "optimizer";
  }
  return "?";
}

namespace {

// Kernels that return when done: the wall clock between Begin and End.
class HostKernelClock final : public KernelClock {
 public:
  void Begin() override { start_ = std::chrono::steady_clock::now(); }
  void End(KernelClass c) override {
    totals_[static_cast<size_t>(c)] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  KernelSeconds Totals() override { return totals_; }

 private:
  std::chrono::steady_clock::time_point start_;
  KernelSeconds totals_{};
};

}  // namespace

std::unique_ptr<KernelClock> Backend::MakeKernelClock() {
  return std::make_unique<HostKernelClock>();
}

void* Backend::Allocate(int64_t bytes, MemCategory category) {
  if (Backend& owner = Underlying(); &owner != this) return owner.Allocate(bytes, category);
  PTDP_CHECK(bytes > 0);
  void* data = DoAllocate(bytes);
  const auto c = static_cast<size_t>(category);
  memory_.current_bytes[c] += bytes;
  memory_.peak_bytes[c] = std::max(memory_.peak_bytes[c], memory_.current_bytes[c]);
  memory_.current_total_bytes += bytes;
  memory_.peak_total_bytes = std::max(memory_.peak_total_bytes, memory_.current_total_bytes);
  return data;
}

void Backend::Free(void* data, int64_t bytes, MemCategory category) {
  if (Backend& owner = Underlying(); &owner != this) return owner.Free(data, bytes, category);
  DoFree(data);
  memory_.current_bytes[static_cast<size_t>(category)] -= bytes;
  memory_.current_total_bytes -= bytes;
}

void Backend::ResetPeaks() {
  if (Backend& owner = Underlying(); &owner != this) return owner.ResetPeaks();
  memory_.peak_bytes = memory_.current_bytes;
  memory_.peak_total_bytes = memory_.current_total_bytes;
}

}  // namespace ptdp
