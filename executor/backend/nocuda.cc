// Built when CUDA is absent: the CUDA backend's and the device probe's interface (cuda.h,
// device.h), answering that there is no GPU path. comm/nocuda.cc and calibrate/nocuda.cc do the
// same for NCCL and the CUDA calibration.
#include "executor/backend/cuda.h"
#include "executor/backend/device.h"

namespace ptdp {

CudaStatus QueryCuda() {
  CudaStatus status;
  status.reason = "ptdp was built without CUDA (nvcc or NCCL not found at configure time)";
  return status;
}

bool CudaRoundTrip(size_t, std::string* error) {
  *error = "ptdp was built without CUDA";
  return false;
}

std::unique_ptr<Backend> MakeCudaBackend(int, std::string* error) {
  *error = "ptdp was built without CUDA (nvcc or NCCL not found at configure time)";
  return nullptr;
}

CudaMemoryFigures CudaMemory(const Backend&) { return {}; }

void Synchronize(Backend&) {}

void* CudaComputeStream(Backend&) { return nullptr; }

int CudaDeviceOf(const Backend&) { return -1; }

}  // namespace ptdp
