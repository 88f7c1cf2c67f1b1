// The CUDA backend: device memory through a caching allocator (allocated and reserved bytes
// reported apart, as PyTorch reports them), one compute stream, cuBLAS(Lt) matrix products and
// this project's kernels for the rest, each tested against the CPU reference
// (tests/executor/backend/backend_cuda_test.cc, ctest label `gpu`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "executor/backend/backend.h"

namespace ptdp {

// The CUDA side's own figures beyond Backend::memory() (which counts allocated bytes by
// category, as every backend does).
struct CudaMemoryFigures {
  int64_t reserved_bytes = 0;       // held from cudaMalloc by the caching allocator now
  int64_t peak_reserved_bytes = 0;  // its peak since the backend was made
};

// A backend on CUDA device `device`; nullptr with *error set when ptdp was built without CUDA,
// the device does not exist, or it cannot be initialised.
std::unique_ptr<Backend> MakeCudaBackend(int device, std::string* error);

// Reserved-byte figures of a backend made by MakeCudaBackend (zeros for any other backend).
CudaMemoryFigures CudaMemory(const Backend& backend);

// Waits for the backend's stream (timings on the host need it; kernels are asynchronous).
// No-op for any other backend.
void Synchronize(Backend& backend);

// The backend's compute stream (a cudaStream_t) and its device, for a communicator that orders
// its own stream with it (executor/comm/nccl.h); nullptr and -1 for any other backend.
void* CudaComputeStream(Backend& backend);
int CudaDeviceOf(const Backend& backend);

}  // namespace ptdp
