// The CUDA backend's caching allocator: cudaMalloc'd blocks are kept after a free, in exact-size
// buckets (sizes rounded up to 512 B below 1 MiB, to 2 MiB above), and handed out again for a
// request of the same rounded size. Reuse is safe without events because the backend runs every
// kernel on one stream: work queued on a freed block precedes, in stream order, whatever the
// next owner queues. "Reserved" is what cudaMalloc holds (live plus cached blocks, plus any
// outside buffer registered with AddExternal), as PyTorch reports it beside allocated bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

namespace ptdp::cuda {

class CachingAllocator {
 public:
  CachingAllocator() = default;
  ~CachingAllocator();  // frees every block (errors ignored: the context may be gone)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (> 0) bytes, zero-filled on `stream` when `zero`. On a failed
  // cudaMalloc the cache is emptied and the call retried once; then it throws InternalError
  // naming the request, the reserved bytes and `allocated_bytes` (the caller's accounting).
  void* Allocate(int64_t bytes, bool zero, cudaStream_t stream, int64_t allocated_bytes);
  // Returns a block from Allocate to its bucket; throws InternalError for any other pointer.
  void Free(void* data);
  // cudaFree of every cached (free) block.
  void EmptyCache();
  // Counts a buffer cudaMalloc'd elsewhere (the cuBLASLt workspace) in the reserved bytes.
  void AddExternal(int64_t bytes);

  int64_t reserved_bytes() const { return reserved_bytes_; }
  int64_t peak_reserved_bytes() const { return peak_reserved_bytes_; }

  // The size a request is rounded up to (its bucket).
  static int64_t RoundedSize(int64_t bytes);

 private:
  std::unordered_map<void*, int64_t> live_;       // pointer -> rounded size
  std::map<int64_t, std::vector<void*>> cached_;  // rounded size -> free blocks
  int64_t reserved_bytes_ = 0;
  int64_t peak_reserved_bytes_ = 0;
};

}  // namespace ptdp::cuda
