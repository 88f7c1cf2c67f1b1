// Built when nvcc is found. Asks the runtime, so a machine with the toolkit but no driver or no
// device (this project's build machines) answers "not usable" with the runtime's reason.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "executor/backend/device.h"

namespace ptdp {

CudaStatus QueryCuda() {
  CudaStatus status;
  status.built = true;
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL_VERSION_CODE is major * 10000 + minor * 100 + patch for NCCL >= 2.9.
    status.nccl_version = std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) +
                          "." + std::to_string(nccl % 100);
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Without a driver the runtime says "CUDA driver version is insufficient", which reads as
    // "update the driver"; cudaDriverGetVersion gives 0 when no driver is installed.
    int driver = 0;
    const bool no_driver = err == cudaErrorInsufficientDriver &&
                           cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0;
    status.no_device = no_driver || err == cudaErrorNoDevice;
    status.reason = no_driver ? "no CUDA device: this machine has no NVIDIA driver"
                              : std::string("no CUDA device: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return status;
  }
  if (count == 0) {
    status.no_device = true;
    status.reason = "no CUDA device: the runtime reports 0 devices";
    return status;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    status.device_name = prop.name;
    status.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  }
  status.usable = true;
  status.device_count = count;
  return status;
}

bool CudaRoundTrip(size_t bytes, std::string* error) {
  std::vector<uint8_t> host(bytes), back(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  void* device = nullptr;
  cudaError_t err = cudaMalloc(&device, bytes);
  if (err == cudaSuccess) err = cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(back.data(), device, bytes, cudaMemcpyDeviceToHost);
  if (device != nullptr) cudaFree(device);
  if (err != cudaSuccess) {
    *error = cudaGetErrorString(err);
    return false;
  }
  if (std::memcmp(host.data(), back.data(), bytes) != 0) {
    *error = "data changed on the round trip";
    return false;
  }
  return true;
}

}  // namespace ptdp
