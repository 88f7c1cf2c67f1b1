#include <algorithm>
#include <string>

#include "core/error.h"
#include "executor/backend/cuda/allocator.cuh"
#include "executor/backend/cuda/common.cuh"

namespace ptdp::cuda {

namespace {
constexpr int64_t kSmallGranularity = 512;
constexpr int64_t kLargeThreshold = int64_t{1} << 20;
constexpr int64_t kLargeGranularity = int64_t{2} << 20;
}  // namespace

int64_t CachingAllocator::RoundedSize(int64_t bytes) {
  const int64_t unit = bytes <= kLargeThreshold ? kSmallGranularity : kLargeGranularity;
  return (bytes + unit - 1) / unit * unit;
}

CachingAllocator::~CachingAllocator() {
  for (auto& [size, blocks] : cached_) {
    for (void* p : blocks) cudaFree(p);
  }
  for (auto& [p, size] : live_) cudaFree(p);
}

void* CachingAllocator::Allocate(int64_t bytes, bool zero, cudaStream_t stream,
                                 int64_t allocated_bytes) {
  PTDP_CHECK(bytes > 0);
  const int64_t size = RoundedSize(bytes);
  void* p = nullptr;
  auto bucket = cached_.find(size);
  if (bucket != cached_.end() && !bucket->second.empty()) {
    p = bucket->second.back();
    bucket->second.pop_back();
  } else {
    cudaError_t err = cudaMalloc(&p, static_cast<size_t>(size));
    if (err != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky; clear it before retrying
      EmptyCache();
      err = cudaMalloc(&p, static_cast<size_t>(size));
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw InternalError("cuda backend: cudaMalloc of " + std::to_string(size) +
                          " bytes (request " + std::to_string(bytes) +
                          ") failed after emptying "
                          "the cache: " +
                          cudaGetErrorString(err) + "; reserved " +
                          std::to_string(reserved_bytes_) + " bytes, allocated " +
                          std::to_string(allocated_bytes) + " bytes");
    }
    reserved_bytes_ += size;
    peak_reserved_bytes_ = std::max(peak_reserved_bytes_, reserved_bytes_);
  }
  live_[p] = size;
  if (zero) PTDP_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream));
  return p;
}

void CachingAllocator::Free(void* data) {
  auto it = live_.find(data);
  PTDP_CHECK(it != live_.end());
  cached_[it->second].push_back(data);
  live_.erase(it);
}

void CachingAllocator::EmptyCache() {
  for (auto& [size, blocks] : cached_) {
    while (!blocks.empty()) {
      void* p = blocks.back();
      blocks.pop_back();  // out of the cache even if cudaFree fails, so it is not freed twice
      // cudaFree waits for the device, so work still queued on the block finishes first.
      PTDP_CUDA_CHECK(cudaFree(p));
      reserved_bytes_ -= size;
    }
  }
  cached_.clear();
}

void CachingAllocator::AddExternal(int64_t bytes) {
  reserved_bytes_ += bytes;
  peak_reserved_bytes_ = std::max(peak_reserved_bytes_, reserved_bytes_);
}

}  // namespace ptdp::cuda
