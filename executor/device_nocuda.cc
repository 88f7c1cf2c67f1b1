// Built when CUDA is absent: the same interface, answering that there is no GPU path.
#include <stdexcept>

#include "executor/backend_cuda.h"
#include "executor/calibrate_cuda.h"
#include "executor/comm_nccl.h"
#include "executor/device.h"

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

std::unique_ptr<Comm> MakeNcclWorld(Backend&, int, int, const IdExchange&, const NcclOptions&,
                                    std::string* error) {
  *error = "ptdp was built without CUDA (nvcc or NCCL not found at configure time): no NCCL";
  return nullptr;
}

CudaComputeFigures MeasureCudaCompute(const CudaCalibrateOptions&, std::ostream*) {
  throw std::runtime_error(
      "ptdp was built without CUDA (nvcc or NCCL not found at configure time): nothing to "
      "calibrate");
}

}  // namespace ptdp
